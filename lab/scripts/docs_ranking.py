"""Where a documentation set's right page stands before the answer stage (lab/RESULTS.md, "Answers from docs").

How often a right page is among the first pass's top 50 (`in_pool`) and top 10 (`in_top`, the candidates graded),
and first among the top 10 by the first pass, by the grader's own order, and by the order fused at each
`rerank_weight`. The "before" figures: `--index` an index built at the earlier commit (its chunker).
With `--near-miss`, also each question as a near miss (its right pages taken out of the candidates, the next ones
graded in their place): the median best grade of the candidates with and without them. With `--run`, a `fastcrag
eval docs` run of the same set: the questions whose right page the packaged order (`rerank_weight`) puts first but
whose answer does not cite first, by what the run did (abstained, or answered from another page).

    python -m lab.scripts.docs_ranking --questions tests/data/docs_devset_python.jsonl [--index IDX] [--near-miss] [-v]
        [--run OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the project's own code, installed or not

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.evaluation.docs_answers import load_questions, on_topic
from fastcrag.retrieval.hybrid import HybridRetriever, fused_order

DEPTH, POOL = 10, 50
"""The candidates graded (the packaged top_k), out of the first pass's fused top `POOL`."""
WEIGHTS = (1.0, 0.75, 0.5, 0.25)


def main(argv: list[str] | None = None) -> int:
    """Print, as JSON, how many questions have a right page first under each order."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=Path, required=True, help="a `fastcrag eval docs` question set (JSONL)")
    ap.add_argument("--index", type=Path, help="index folder (default: the embedded Python reference)")
    ap.add_argument("--near-miss", action="store_true", help="also grade each question without its right pages")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per question")
    ap.add_argument("--run", type=Path, help="a `fastcrag eval docs` output folder of the same questions")
    args = ap.parse_args(argv)
    parts = Components(Settings(index_dir=args.index) if args.index else Settings())
    retriever, grader = parts.retriever(), parts.reranker()
    assert isinstance(retriever, HybridRetriever)
    counts: dict[str, float] = {"questions": 0, "in_pool": 0, "in_top": 0, "first_pass": 0}
    counts |= {f"order_{w:g}": 0 for w in WEIGHTS}
    grades: dict[str, list[float]] = {"with": [], "without": []}
    lines = (args.run / "results.jsonl").read_text().splitlines()[1:] if args.run else []  # after its config line
    ran = {r["id"]: r for r in map(json.loads, lines)}
    weight = parts.calibration().rerank_weight
    lost: dict[str, list[str]] = {"abstained": [], "another page": []}
    for q in load_questions(args.questions):
        pool = retriever.search(q.question, k=POOL)[0]
        docs = pool[:DEPTH]
        pool_sources = [str(d.metadata.get("source", "")) for d in pool]
        matches = [on_topic(s, q) for s in pool_sources]
        sources, right = pool_sources[:DEPTH], matches[:DEPTH]
        scores = grader.score(q.question, [d.page_content for d in docs])
        if args.near_miss:
            rest = [d for d, match in zip(pool, matches, strict=True) if not match]
            grades["with"].append(max(scores, default=0.0))
            grades["without"].append(max(grader.score(q.question, [d.page_content for d in rest[:DEPTH]]), default=0.0))
        counts["questions"] += 1
        counts["in_pool"] += any(matches)
        counts["in_top"] += any(right)
        counts["first_pass"] += bool(right and right[0])
        for w in WEIGHTS:
            counts[f"order_{w:g}"] += bool(right and right[fused_order(scores, w)[0]])
        r = ran.get(q.id)
        if r and right and right[fused_order(scores, weight)[0]] and not r["topic_first"]:
            lost["abstained" if r["abstained"] else "another page"].append(q.id)
        if args.verbose:
            best = max(range(len(scores)), key=scores.__getitem__, default=0)
            print(f"{q.id}: first pass {sources[:1]}, grader {sources[best : best + 1]} | {q.question}")
    if args.near_miss:
        counts |= {f"median_best_grade_{k}_right_pages": round(float(median(v)), 3) for k, v in grades.items() if v}
    if args.run:
        counts |= {f"first_in_order_{weight:g}_lost_{k}": v for k, v in lost.items()}  # type: ignore[misc]
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
