"""A few-label trial of `fastcrag fit`, end to end through the graph (written under runs/, never committed).

The protocol: label a few questions of a corpus, fit, then ask other questions of the same corpus, half of them
with their answer taken out of the index (only near misses left: the other snippets of the same article, or the same
paper without the sentences that state the answer). A fit is worth having when the graph then declines those while
it still answers the rest.

    python -m lab.scripts.fit_trial squad-snippets --out runs/trial-squad     # SQuAD 2.0 dev as 1-2 sentence snippets
    python -m lab.scripts.fit_trial squad-numbers --out runs/trial-numbers    # near misses state another number
    python -m lab.scripts.fit_trial covidqa --out runs/trial-covidqa          # COVID-QA papers in 128-token chunks
    python -m lab.scripts.fit_trial squad-snippets --out runs/trial-squad --minutes 5   # also a fit that fine-tunes
    python -m lab.scripts.fit_trial squad-numbers --out runs/trial-numbers --naming     # also labels naming conditions

Steps: pick the questions (seeded; `--fit` to fit on, `--test` to ask, half of which lose their answer sentences),
write the corpus as text files and index it with `fastcrag index`, run `fastcrag fit --no-train` (and `--minutes M`
when given) on the fit questions, then ask every test question through the graph with the packaged calibration and
with each fit. Prints and writes (`trial.md`, `trial.json`) the share of near-miss questions declined, answerable
ones answered, and answerable ones answered right (a gold answer in the answer).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))  # the project's own code, installed or not

from fastcrag.config.settings import SHARED_DATA  # noqa: E402
from fastcrag.grading.conditions import named_conditions  # noqa: E402
from fastcrag.retrieval.text import split_sentences  # noqa: E402


@dataclass
class Question:
    """A question of the trial corpus with its answers and the document that answers it."""

    question: str
    answers: tuple[str, ...]
    doc: str


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def squad_snippets(data: Path) -> tuple[dict[str, str], list[Question]]:
    """SQuAD 2.0 dev paragraphs cut into snippets of two sentences, each a document; answerable questions only."""
    docs: dict[str, str] = {}
    questions: list[Question] = []
    for file in sorted((data / "squad2-dev").glob("*.json")):
        for article in json.loads(file.read_text(encoding="utf-8"))["data"]:
            title = re.sub(r"[^A-Za-z0-9]+", "-", article["title"])[:40]
            for p, para in enumerate(article["paragraphs"]):
                sents = split_sentences(para["context"])
                snippets = [" ".join(sents[i : i + 2]) for i in range(0, len(sents), 2)]
                names = [f"{title}-{p:03d}-{k}" for k in range(len(snippets))]
                docs.update(zip(names, snippets, strict=True))
                for qa in para["qas"]:
                    answers = tuple(
                        dict.fromkeys(a["text"].strip() for a in qa.get("answers", []) if a["text"].strip())
                    )
                    home = [
                        n for n, s in zip(names, snippets, strict=True) if any(_norm(a) in _norm(s) for a in answers)
                    ]
                    if answers and not qa.get("is_impossible") and len(home) == 1:
                        questions.append(Question(qa["question"].strip(), answers, home[0]))
    return docs, questions


def covidqa(data: Path) -> tuple[dict[str, str], list[Question]]:
    """COVID-QA papers as documents (indexed in chunks), with their questions."""
    raw = json.loads((data / "train" / "covidqa" / "200423_covidQA.json").read_text(encoding="utf-8"))["data"]
    docs: dict[str, str] = {}
    questions: list[Question] = []
    for i, article in enumerate(raw):
        for para in article["paragraphs"]:
            name = f"{i:03d}-" + re.sub(r"[^A-Za-z0-9]+", "-", str(article.get("title") or "paper"))[:40]
            docs[name] = para["context"]
            for qa in para["qas"]:
                answers = tuple(dict.fromkeys(a["text"].strip() for a in qa["answers"] if a["text"].strip()))
                if answers:
                    questions.append(Question(qa["question"].strip(), answers, name))
    return docs, questions


def perturbed(text: str, question: str, seed: int) -> str | None:
    """`text` with a number the question names changed (another year, quarter or edition); None when it has none.

    The near miss is about the same thing, under another condition: it answers another question.
    """
    asked = [n for n in re.findall(r"\b\d+\b", question) if re.search(rf"\b{n}\b", text)]
    if not asked:
        return None
    value = asked[0]
    other = str(int(value) + random.Random(f"{seed}:{question}").choice([-3, -2, -1, 1, 2, 3]))
    return re.sub(rf"\b{value}\b", other, text)


def without_answers(text: str, answers: Sequence[str]) -> str:
    """The document without the sentences that hold one of `answers` (the near miss left in the index)."""
    keep = [s for s in split_sentences(text) if not any(_norm(a) in _norm(s) for a in answers)]
    return "\n\n".join(keep)


def pick(
    docs: dict[str, str],
    questions: list[Question],
    n_fit: int,
    n_test: int,
    seed: int,
    whole: bool = False,
    numbers: bool = False,
) -> tuple[dict[str, str], list[Question], list[Question], list[Question]]:
    """The trial corpus and its fit, answerable-test and near-miss-test questions.

    A near-miss question's answer occurs in no other document; its own document loses the sentences holding it, or
    (`whole`, for a corpus of snippets) goes, or (`numbers`) stays with the number the question names changed
    (another year, quarter or edition: the snippet now answers another question). Fit and answerable questions keep
    their evidence in the trimmed corpus.
    """
    rng = random.Random(seed)
    pool = list(questions)
    rng.shuffle(pool)
    where: dict[str, int] = {}
    for q in pool:
        key = _norm(q.answers[0])
        if key not in where:
            where[key] = sum(key in _norm(t) for t in docs.values())
    near = [q for q in pool if where[_norm(q.answers[0])] == 1 and len(q.answers[0]) >= 3]
    if numbers:  # near misses under another condition: questions naming a number their snippet states
        near = [q for q in near if perturbed(docs[q.doc], q.question, seed) is not None]
    near = near[: n_test // 2]
    corpus = dict(docs)
    for q in near:
        if numbers:
            corpus[q.doc] = perturbed(corpus[q.doc], q.question, seed) or corpus[q.doc]
        else:
            corpus[q.doc] = "" if whole else without_answers(corpus[q.doc], q.answers)
    near_ids = {id(q) for q in near}
    rest = [
        q
        for q in pool
        if id(q) not in near_ids
        and q.doc not in {n.doc for n in near}
        and any(_norm(a) in _norm(corpus[q.doc]) for a in q.answers)
    ]
    used_docs: set[str] = set()
    fit: list[Question] = []
    for q in rest:  # fit questions: one per document, so that the test questions ask about other documents too
        if len(fit) < n_fit and q.doc not in used_docs:
            fit.append(q)
            used_docs.add(q.doc)
    answerable = [q for q in rest if q not in fit][: n_test - len(near)]
    return corpus, fit, answerable, near


def write_questions(path: Path, questions: Sequence[Question]) -> None:
    """A `fastcrag fit` questions file (`answers` labels)."""
    with path.open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"question": q.question, "answers": list(q.answers)}) + "\n" for q in questions)


def _run(cmd: list[str], log: Path) -> None:
    print("$ " + " ".join(cmd), flush=True)
    with log.open("a", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}; see {log}")


def ask_all(index: Path, reranker: str, calibration: Path | None, tests: list[tuple[str, Question]]) -> dict[str, Any]:
    """Ask every test question through the graph; the shares declined, answered and answered right per kind."""
    from fastcrag.config.settings import Settings
    from fastcrag.evaluation.scoring import is_abstention, normalize_answer
    from fastcrag.graph.builder import build_graph

    settings = Settings()  # FASTRAG_RERANKER / FASTRAG_CALIBRATION name the base grader and its calibration
    settings = settings.model_copy(
        update={
            "index_dir": index,
            "reranker": reranker or settings.reranker,
            "calibration": calibration or settings.calibration,
            "llm": "extractive",
        }
    )
    graph = build_graph(settings=settings)
    out: dict[str, list[dict[str, Any]]] = {"answerable": [], "near_miss": []}
    for kind, q in tests:
        result = graph.invoke({"question": q.question})
        crag = result.get("crag") or {}
        answer = str(result.get("answer") or "")
        declined = is_abstention(answer, crag.get("action"), settings.abstain_message)
        right = not declined and any(normalize_answer(a) in normalize_answer(answer) for a in q.answers)
        out[kind].append(
            {
                "question": q.question,
                "declined": declined,
                "right": right,
                "band": crag.get("band"),
                "action": crag.get("action"),
                "top_score": crag.get("top_score"),
            }
        )
    ans, near = out["answerable"], out["near_miss"]
    return {
        "near_miss_declined": round(sum(r["declined"] for r in near) / max(1, len(near)), 3),
        "answerable_answered": round(sum(not r["declined"] for r in ans) / max(1, len(ans)), 3),
        "answerable_right": round(sum(r["right"] for r in ans) / max(1, len(ans)), 3),
        "records": out,
    }


def main() -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", choices=["squad-snippets", "squad-numbers", "covidqa"])
    p.add_argument("--data", type=Path, default=SHARED_DATA)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--fit", type=int, default=40, help="labelled questions to fit on")
    p.add_argument("--test", type=int, default=60, help="questions asked after the fit (half of them near misses)")
    p.add_argument("--minutes", type=float, default=0.0, help="also fit with a fine-tune of this many minutes")
    p.add_argument(
        "--naming",
        action="store_true",
        help="also fit on labels naming a year, ordinal, quarter or month: every such answerable question of the "
        "corpus whose evidence stays in it and that is not asked, topped up to --fit with the fit questions",
    )
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    docs, questions = (covidqa if a.corpus == "covidqa" else squad_snippets)(a.data)
    corpus, fit_qs, answerable, near = pick(
        docs, questions, a.fit, a.test, a.seed, whole=a.corpus == "squad-snippets", numbers=a.corpus == "squad-numbers"
    )
    out = a.out.resolve()
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    for name, text in corpus.items():
        if text.strip():
            (out / "corpus" / f"{name}.txt").write_text(text, encoding="utf-8")
    write_questions(out / "fit-questions.jsonl", fit_qs)
    print(
        f"{len(corpus)} documents; {len(fit_qs)} to fit; {len(answerable)} answerable and {len(near)} near-miss asked"
    )
    log = out / "trial.log"
    fastcrag = str(Path(sys.executable).with_name("fastcrag"))
    if not (out / "index").is_dir():
        _run([fastcrag, "index", str(out / "corpus"), "--index", str(out / "index")], log)
    fits: dict[str, Path | None] = {"base calibration (FASTRAG_CALIBRATION or packaged)": None}
    labels = out / "fit-questions.jsonl"
    runs = [("fit --no-train", out / "fit-notrain", ["--no-train"], labels)]
    if a.minutes:
        runs.append((f"fit --minutes {a.minutes:g}", out / "fit-train", ["--minutes", str(a.minutes)], labels))
    if a.naming:
        asked = {q.question for q in [*answerable, *near]}
        naming = [
            q
            for q in questions
            if named_conditions(q.question)
            and q.question not in asked
            and any(_norm(x) in _norm(corpus.get(q.doc, "")) for x in q.answers)
        ]
        write_questions(out / "fit-naming.jsonl", [*naming, *fit_qs[: max(0, a.fit - len(naming))]])
        runs.append(
            (
                f"fit --no-train, {len(naming)} labels naming a condition",
                out / "fit-naming",
                ["--no-train"],
                out / "fit-naming.jsonl",
            )
        )
    for label, folder, extra, labels in runs:
        if not (folder / "calibration.json").is_file():
            _run(
                [
                    fastcrag,
                    "fit",
                    "--questions",
                    str(labels),
                    "--index",
                    str(out / "index"),
                    "--out",
                    str(folder),
                    "--quiet",
                    *extra,
                ],
                log,
            )
        fits[label] = folder
    tests = [("answerable", q) for q in answerable] + [("near_miss", q) for q in near]
    results: dict[str, Any] = {}
    for label, folder in fits.items():
        grader = str(folder / "grader") if folder is not None and (folder / "grader").is_dir() else ""
        calibration = folder / "calibration.json" if folder is not None else None
        results[label] = ask_all(out / "index", grader, calibration, tests)
        results[label]["thresholds"] = (
            {
                k: json.loads(calibration.read_text())[k]
                for k in ("reranker_threshold", "crag_upper", "reader_threshold")
            }
            if calibration
            else None
        )
    lines = [
        f"{a.corpus}: fit on {len(fit_qs)} questions, asked {len(answerable)} answerable and {len(near)} near-miss",
        "",
        "| calibration | near misses declined | answerable answered | answerable answered right |",
        "|---|---|---|---|",
        *(
            f"| {k} | {v['near_miss_declined']:.2f} | {v['answerable_answered']:.2f} | {v['answerable_right']:.2f} |"
            for k, v in results.items()
        ),
    ]
    (out / "trial.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (out / "trial.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
