"""Measure and record `meaning_weight`: how much a sentence's meaning weighs beside its grade when an answer chooses.

The extractive answer chooses among the sentences the grader grades best by grade + `meaning_weight` x the
embedder's cosine with the question (`generation.extractive`, `MEANT` sentences). The weight is chosen end to end
on documentation sets (`fastcrag eval docs`, as `rerank_weight` is, lab/RESULTS.md); this script checks each weight
on answer-sentence selection in data nobody evaluates on: SQuAD 1.1 training questions (120 articles, seed 0, as
`lab.scripts.answer_floor`) and SelQA's questions of the training pool's dev split (articles `fitting.mix` holds
out; half of them reworded by their annotators), graded and embedded as the generator does. Reported: the share of
questions whose answer sentence is chosen first. `--write FILE --weight W` records W, the embedder's name, the
objective and the figures in a calibration file (atomically):

    FASTRAG_DATA=../shared/data python -m lab.scripts.meaning_weight [--write src/fastcrag/config/calibration.json
        --weight 0.25]
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fastcrag.components import Components
from fastcrag.config.calibration import load_calibration
from fastcrag.config.settings import Settings
from fastcrag.datasets import read_squad
from fastcrag.fileio import write_json_atomic
from fastcrag.fitting.mix import is_dev_group
from fastcrag.generation.extractive import MEANT
from fastcrag.grading.relevance import cosines
from fastcrag.grading.reranker import checked_scores
from fastcrag.retrieval.embeddings import default_embeddings, embedder_name
from fastcrag.retrieval.text import TITLE_JOINER, split_sentences, titled
from lab.data import SHARED_DATA
from lab.scripts.answer_floor import objective_with

WEIGHTS = (0.0, 0.25, 0.5, 1.0)
DEV_PERCENT = 5.0
"""The packaged mix's dev split (`fitting.mix.MixConfig.dev_percent`): SelQA articles the grader never trained on."""

Item = tuple[str, str, list[str], int]
"""A question, its sentences' title, the sentences, the index of the one holding the answer."""


def squad_items(path: Path, articles: int = 120, seed: int = 0) -> Iterator[Item]:
    """SQuAD questions (two per paragraph, three paragraphs per article) with their paragraph's sentences."""
    for article in random.Random(seed).sample(read_squad(path)["data"], articles):
        for paragraph in article["paragraphs"][:3]:
            context, spans, pos = paragraph["context"], [], 0
            for sentence in split_sentences(context):
                start = context.find(sentence, pos)
                if start >= 0:
                    spans.append((start, start + len(sentence), sentence))
                    pos = start + len(sentence)
            for qa in paragraph["qas"][:2]:
                at = qa["answers"][0]["answer_start"]
                hits = [k for k, (a, b, _) in enumerate(spans) if a <= at < b]
                if len(spans) > 1 and len(hits) == 1:
                    yield qa["question"], "", [s for _, _, s in spans], hits[0]


def selqa_items(folder: Path) -> Iterator[Item]:
    """SelQA questions of held-out articles with one answer sentence, under their article's and section's title."""
    for part in ("dev", "test"):
        for row in json.loads((folder / f"selqa-ass-{part}.json").read_text(encoding="utf-8")):
            if is_dev_group(f"selqa:{row.get('article', '')}", DEV_PERCENT) and len(row["answers"]) == 1:
                title = TITLE_JOINER.join([row["article"], row["section"]])
                yield row["question"], title, row["candidates"], row["answers"][0]


def chosen_first(items: list[Item]) -> dict[float, int]:
    """For each weight, how many questions' answer sentence the generator's choice puts first."""
    grader, embedder = Components(Settings()).reranker(), default_embeddings()
    hits = dict.fromkeys(WEIGHTS, 0)
    for question, title, sentences, answer in items:
        grades = np.asarray(checked_scores(grader, question, [titled(title, s) for s in sentences]))
        top = np.argsort(-grades, kind="stable")[:MEANT]
        near = np.zeros(len(sentences))
        near[top] = cosines(embedder, question, [sentences[i] for i in top])
        for w in WEIGHTS:
            hits[w] += int(np.argmax(grades + w * near) == answer)
    return hits


def main() -> int:
    """Report each weight's answer sentences chosen first; record a weight where asked."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", type=Path, help="calibration.json to record the weight in")
    ap.add_argument("--weight", type=float, help="the weight to record (chosen end to end on documentation sets)")
    args = ap.parse_args()
    sets = {
        "squad11-train": list(squad_items(SHARED_DATA / "train" / "squad11-train")),
        "selqa (dev split)": list(selqa_items(SHARED_DATA / "train" / "selqa")),
    }
    figures = {}
    for name, items in sets.items():
        hits = chosen_first(items)
        figures[name] = {"questions": len(items), **{f"{w:g}": round(h / len(items), 4) for w, h in hits.items()}}
        print(f"{name}: {len(items)} questions; answer sentence chosen first at weight", figures[name])
    if args.write and args.weight is not None:
        cal = load_calibration(args.write)
        name = embedder_name(default_embeddings())
        if cal.answer_embedder not in (None, name):
            raise SystemExit(f"{args.write} holds an answer_floor drawn with {cal.answer_embedder}, not {name}")
        said = ", ".join(f"{k} {v[f'{args.weight:g}']} against {v['0']} at 0" for k, v in figures.items())
        objective = objective_with(
            cal.objective,
            "meaning_weight",
            f"{args.weight:g} (the grade plus it times the cosine ({name}) of each of the {MEANT} best graded "
            "sentences with the question chooses an extractive answer's sentences), chosen end to end on the "
            f"documentation development sets (lab/RESULTS.md); answer sentence chosen first: {said} "
            "(`python -m lab.scripts.meaning_weight`)",
        )
        metrics = cal.metrics | {"meaning_weight_chosen_first": figures}
        update = {"meaning_weight": args.weight, "answer_embedder": name, "objective": objective, "metrics": metrics}
        write_json_atomic(args.write, cal.model_copy(update=update).model_dump())
        print(f"{args.write}: meaning_weight {args.weight:g} ({name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
