"""A page's other graded chunks in the candidate order: measured, not kept (lab/RESULTS.md, 2026-12-07, session 9).

Each candidate's grade plus a share of the grades of the other candidates from its page (MaxP with part of SumP),
then fused with the first pass as the graph fuses (`fused_order`, `rerank_weight`): how often a right page comes
first among the graded candidates, per question set, at each share. The end-to-end patch is
`page-evidence-order.diff` beside this file (a `page_weight` in calibration.json).

    python lab/experiments/page_evidence_order.py --set SET:INDEX [--set ...] [--depth 10]

INDEX `-` is the embedded Python index.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.evaluation.docs_answers import load_questions, on_topic
from fastcrag.retrieval.hybrid import fused_order

SHARES = (0.0, 0.25, 0.5, 1.0)
WEIGHTS = (1.0, 0.5, 0.25)
POOL = 50


def with_page(scores: Sequence[float], sources: Sequence[str], share: float) -> list[float]:
    """Each grade plus `share` of the grades of the other candidates from the same source."""
    totals: dict[str, float] = {}
    for score, source in zip(scores, sources, strict=True):
        totals[source] = totals.get(source, 0.0) + score
    return [s + share * (totals[src] - s) for s, src in zip(scores, sources, strict=True)]


def _row(firsts: dict[tuple[float, float], int]) -> str:
    return ", ".join(f"w {w:g} share {a:g}: {n}" for (w, a), n in firsts.items())


def main() -> int:
    """Print, per set and in all, the questions with a right page first at each (rerank_weight, share)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, help="SET:INDEX (a `fastcrag eval docs` set)")
    ap.add_argument("--depth", type=int, default=10, help="candidates graded (the packaged top_k)")
    args = ap.parse_args()
    total: dict[tuple[float, float], int] = {}
    for spec in args.set:
        path, index = spec.rsplit(":", 1)
        parts = Components(Settings(index_dir=Path(index)) if index != "-" else Settings())
        retriever, grader = parts.retriever(), parts.reranker()
        firsts = dict.fromkeys(((w, a) for w in WEIGHTS for a in SHARES), 0)
        questions = load_questions(Path(path))
        for q in questions:
            docs = retriever.search(q.question, k=POOL)[0][: args.depth]
            sources = [str(d.metadata.get("source", "")) for d in docs]
            right = [on_topic(s, q) for s in sources]
            scores = grader.score(q.question, [d.page_content for d in docs])
            for w, a in firsts:
                firsts[w, a] += bool(right and right[fused_order(with_page(scores, sources, a), w)[0]])
        print(f"{Path(path).stem} ({len(questions)}): " + _row(firsts))
        for key, n in firsts.items():
            total[key] = total.get(key, 0) + n
    print("all: " + _row(total))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
