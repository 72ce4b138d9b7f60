"""Candidate orders tried against the packaged one (lab/RESULTS.md, "Headings that never end a chunk ...").

Each order ranks the graded candidates from their grades and first-pass ranks: reciprocal rank fusion at a
`rerank_weight` (the packaged rule, `fused_order`), or a rank prior (the grade's logit minus `a` times the log of
the first-pass rank: a large grade margin overrides the first pass, a small one does not).

    python -m lab.scripts.order_trial docs --questions SET.jsonl [--index IDX] [--reranker DIR]
    python -m lab.scripts.order_trial retrieval --run OUT/results.jsonl   # a `fastcrag eval retrieval` run

`docs`: how many questions have a right page first among the graph's candidates (the first pass's `top_k`).
`retrieval`: nDCG@10 of the recorded run (its hybrid first pass and the grades it records) under each order.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the project's own code, installed or not

from fastcrag.fitting.pseudo import logit
from fastcrag.retrieval.hybrid import fused_order


def prior_order(scores: Sequence[float], a: float) -> list[int]:
    """Candidates given in first-pass order, by the grade's logit minus `a` * log(first-pass rank)."""
    return sorted(range(len(scores)), key=lambda i: logit(scores[i]) - a * math.log(i + 1), reverse=True)


def _rrf(weight: float) -> Callable[[Sequence[float]], list[int]]:
    return lambda scores: fused_order(scores, weight)


def _prior(a: float) -> Callable[[Sequence[float]], list[int]]:
    return lambda scores: prior_order(scores, a)


ORDERS: dict[str, Callable[[Sequence[float]], list[int]]] = {
    **{f"rrf_{w:g}": _rrf(w) for w in (0.0, 0.25, 0.5, 1.0)},
    **{f"prior_{a:g}": _prior(a) for a in (0.5, 1.0, 1.5)},
}


def docs(questions: Path, index: Path | None, reranker: str | None = None) -> dict[str, int]:
    """Right page first under each order, over the graph's candidates for each question of a docs set.

    `reranker`: a grader folder to grade with (default: the packaged grader).
    """
    from fastcrag.components import Components
    from fastcrag.config.settings import Settings
    from fastcrag.evaluation.docs_answers import load_questions, on_topic
    from fastcrag.retrieval.hybrid import HybridRetriever

    overrides: dict[str, Any] = {k: v for k, v in (("index_dir", index), ("reranker", reranker)) if v}
    parts = Components(Settings(**overrides))
    retriever, grader = parts.retriever(), parts.reranker()
    assert isinstance(retriever, HybridRetriever)
    counts = {"questions": 0, **dict.fromkeys(ORDERS, 0)}
    for q in load_questions(questions):
        found = retriever.search(q.question)[0]
        right = [on_topic(str(d.metadata.get("source", "")), q) for d in found]
        scores = grader.score(q.question, [d.page_content for d in found])
        counts["questions"] += 1
        for name, order in ORDERS.items():
            counts[name] += bool(right and right[order(scores)[0]])
    return counts


def retrieval(run: Path) -> dict[str, float]:
    """nDCG@10 of a recorded `fastcrag eval retrieval` run under each order."""
    import ir_measures

    from fastcrag.datasets import read_qrels

    lines = [json.loads(line) for line in run.read_text(encoding="utf-8").splitlines() if line.strip()]
    beir = Path(lines[0]["config"]["beir"])
    qrels = read_qrels(next((beir / "qrels").glob(f"{lines[0]['config']['split']}.tsv*")))
    records = [r for r in lines[1:] if "hybrid" in r]
    measure = ir_measures.parse_measure("nDCG@10")
    out: dict[str, float] = {"queries": len(records)}
    for name, order in ORDERS.items():
        ranked: dict[str, dict[str, float]] = {}
        for r in records:
            top = [d for d in r["hybrid"] if r["rr"].get(d, 0.0) >= 2.0]  # graded documents, first-pass order
            grades = [r["rr"][d] - 2.0 for d in top]
            ordered = [top[i] for i in order(grades)]
            ranked[r["key"]] = {d: 2.0 + (len(ordered) - k) / len(ordered) for k, d in enumerate(ordered)}
            for d, s in r["hybrid"].items():
                ranked[r["key"]].setdefault(d, s)
        sub = {q: dict(qrels[q]) for q in ranked}
        out[name] = round(float(ir_measures.calc_aggregate([measure], sub, ranked)[measure]), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print, as JSON, each order's figure."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    d = sub.add_parser("docs", help="right page first on a `fastcrag eval docs` question set")
    d.add_argument("--questions", type=Path, required=True)
    d.add_argument("--index", type=Path, help="index folder (default: the embedded Python reference)")
    d.add_argument("--reranker", help="grader folder to grade with (default: the packaged grader)")
    r = sub.add_parser("retrieval", help="nDCG@10 of a recorded `fastcrag eval retrieval` run")
    r.add_argument("--run", type=Path, required=True, help="the run's results.jsonl")
    args = ap.parse_args(argv)
    print(json.dumps(docs(args.questions, args.index, args.reranker) if args.what == "docs" else retrieval(args.run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
