"""Draw `answer_floor`: the cosine of question and answer below which an answer is not the question's (lab/RESULTS.md).

The floor is a property of the embedder, so it is drawn on data nobody evaluates on: SQuAD 1.1 training questions
and the sentence of their paragraph that holds their answer (a one-fact answer is given with that sentence), the
cosine as the graph takes it (`grading.relevance.answer_cosine`), at a low quantile: the floor keeps that share of
right answer sentences below it out. With `--docs NAME=DIR`, also the newcomers' questions written for a training
manual's sections (`lab/questions/reworded/docs-NAME.jsonl`; no evaluation set uses these manuals) with their
section's lead, the answer a documentation question is given first; the floor is then the lower of the two kinds'
quantiles, so that neither kind loses more than that share of its right answers. `--write` puts the floor, the
embedder's name, the objective and the figures into a calibration file (atomically); `--run` reports what each of a
few quantiles would decline of `fastcrag eval docs` runs: of questions asked of their own manual (answered with the
substance, or not) and of another manual (`wrong`: no right answer exists there):

    FASTRAG_DATA=../shared/data python -m lab.scripts.answer_floor [--write src/fastcrag/config/calibration.json]
        [--docs NAME=DIR ...] [--run in:EVAL_OUT ... --run wrong:EVAL_OUT ...]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastcrag.config.calibration import load_calibration
from fastcrag.datasets import read_squad
from fastcrag.fileio import write_json_atomic
from fastcrag.grading.relevance import answer_cosine
from fastcrag.retrieval.embeddings import default_embeddings, embedder_name
from fastcrag.retrieval.text import split_sentences
from lab.data import SHARED_DATA

QUANTILE = 0.05
"""The share of right answer sentences the floor declines: the conventional 5% of a one-sided check."""
REPORTED = (0.01, 0.02, 0.05, 0.10)
SQUAD, DOCS = "SQuAD questions with their answer sentence", "newcomers' questions with their section's lead"


def cosines(questions: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """Each question's cosine with its text, as the graph takes it."""
    embedder = default_embeddings()
    return np.asarray([answer_cosine(embedder, q, t) for q, t in zip(questions, texts, strict=True)])


def squad_answer_sentences(path: Path, articles: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """SQuAD questions (two per paragraph, three paragraphs per article) and the sentence holding their answer."""
    data = read_squad(path)["data"]
    questions, sentences = [], []
    for article in random.Random(seed).sample(data, min(articles, len(data))):
        for paragraph in article["paragraphs"][:3]:
            context = paragraph["context"]
            spans, pos = [], 0
            for sentence in split_sentences(context):
                start = context.find(sentence, pos)
                if start < 0:
                    continue
                spans.append((start, start + len(sentence), sentence))
                pos = start + len(sentence)
            for qa in paragraph["qas"][:2]:
                answer_start = qa["answers"][0]["answer_start"]
                hit = next((s for a, b, s in spans if a <= answer_start < b), None)
                if hit:
                    questions.append(qa["question"])
                    sentences.append(hit)
    return questions, sentences


def docs_leads(manuals: Sequence[str]) -> tuple[list[str], list[str]]:
    """The written newcomers' questions of each manual (`NAME=DIR`) and their section's lead."""
    from lab.experiments.reworded_pairs import written_topics
    from lab.scripts.docs_pairs import collect

    questions, leads = [], []
    for spec in manuals:
        name, _, folder = spec.partition("=")
        for question, topic in written_topics(name, collect(Path(folder))):
            questions.append(question)
            leads.append(topic.lead)
    return questions, leads


def answered(run: Path) -> list[dict[str, object]]:
    """The answered records of one `fastcrag eval docs` run."""
    lines = (json.loads(line) for line in (run / "results.jsonl").read_text(encoding="utf-8").splitlines())
    return [r for r in lines if "id" in r and not r["abstained"]]


def report(runs: Sequence[str], floors: dict[float, float]) -> None:
    """Print what each floor would decline of the runs named (`in:EVAL_OUT` or `wrong:EVAL_OUT`)."""
    groups: dict[str, list[float]] = {"substance": [], "in, no substance": [], "wrong manual": []}
    for spec in runs:
        label, _, folder = spec.partition(":")
        records = answered(Path(folder))
        if not records:
            continue
        values = cosines([str(r["question"]) for r in records], [str(r["answer"]) for r in records])
        for record, value in zip(records, values, strict=True):
            key = "wrong manual" if label == "wrong" else ("substance" if record["substance"] else "in, no substance")
            groups[key].append(float(value))
    for key, group in groups.items():
        if group:
            declined = ", ".join(f"q{q:g}: {sum(v < f for v in group)}" for q, f in floors.items())
            print(f"{key}: {len(group)} answered, median cosine {np.median(group):.3f}; declined at {declined}")


def main() -> int:
    """Draw the floor; write it and report on runs where asked."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--squad", type=Path, default=SHARED_DATA / "train" / "squad11-train")
    ap.add_argument("--articles", type=int, default=120, help="articles sampled (seed 0)")
    ap.add_argument("--quantile", type=float, default=QUANTILE)
    ap.add_argument("--write", type=Path, help="calibration.json to write the floor into")
    ap.add_argument("--docs", action="append", default=[], help="NAME=DIR: a training manual's written questions")
    ap.add_argument("--run", action="append", default=[], help="in:EVAL_OUT or wrong:EVAL_OUT")
    args = ap.parse_args()
    kinds = {SQUAD: squad_answer_sentences(args.squad, args.articles)}
    if args.docs:
        kinds[DOCS] = docs_leads(args.docs)
    floors: dict[float, float] = {}
    cosines_of: dict[str, np.ndarray] = {}
    for kind, (questions, texts) in kinds.items():
        values = cosines_of[kind] = cosines(questions, texts)
        own = {q: float(np.quantile(values, q)) for q in sorted({*REPORTED, args.quantile})}
        floors = {q: min(f, floors.get(q, f)) for q, f in own.items()}
        print(f"{len(values)} {kind}: median cosine {np.median(values):.3f}; ", end="")
        print(", ".join(f"q{q:g} {f:.3f}" for q, f in own.items()))
    floor = round(floors[args.quantile], 4)
    print(f"-> answer_floor {floor}")
    if args.write:
        cal = load_calibration(args.write)
        start = cal.objective.find("; answer_floor:")
        kept = cal.objective[:start] if start >= 0 else cal.objective
        name = embedder_name(default_embeddings())
        drawn = f"{len(kinds[SQUAD][0])} questions of {args.squad.name} ({args.articles} articles, seed 0) with the "
        drawn += "sentence holding their answer"
        if args.docs:
            manuals = ", ".join(d.partition("=")[0] for d in args.docs)
            drawn += f", and of {len(kinds[DOCS][0])} newcomers' questions of {manuals} with their section's lead "
            drawn += "(lab/questions/reworded/), the lower of the two"
        objective = (
            f"{kept}; answer_floor: the {args.quantile:g} quantile of the cosine ({name}) of {drawn} "
            "(`python -m lab.scripts.answer_floor`; a property of the embedder, kept by a fit)"
        )
        metrics = cal.metrics | {
            "answer_floor_pairs": sum(len(q) for q, _ in kinds.values()),
            "answer_floor_median": round(float(np.median(cosines_of[SQUAD])), 4),
        }
        update = {"answer_floor": floor, "answer_embedder": name, "objective": objective, "metrics": metrics}
        write_json_atomic(args.write, cal.model_copy(update=update).model_dump())
        print(f"{args.write}: answer_floor {floor} ({name})")
    report(args.run, floors)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
