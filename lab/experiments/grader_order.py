"""How often each grader's order puts a right page first among the graph's candidates (lab/RESULTS.md).

For each question of a `fastcrag eval docs` set, the first pass's top 10 (as the graph retrieves them) are graded by
each grader, and a right page's place is read in the grader's own order and in the packaged order (the grades fused
with the first pass at the packaged `rerank_weight`). Used to ask whether the int8 export's activation quantisation
costs order against the same network with float activations (`python -m lab.scripts.static_grader build --rule
float`).

    python -m lab.experiments.grader_order --grader DIR [--grader ...] --set SET:INDEX [--set ...]

INDEX `-` is the embedded Python index.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.evaluation.docs_answers import load_questions, source_matches
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.retrieval.hybrid import fused_order

DEPTH = 10


def main() -> int:
    """Print, per set and in all, the questions with a right page first in each grader's order and the fused one."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grader", action="append", required=True, help="an ONNX grader folder")
    ap.add_argument("--set", action="append", required=True, help="SET:INDEX (a `fastcrag eval docs` set)")
    args = ap.parse_args()
    graders = {g: OnnxCrossEncoderReranker(g) for g in args.grader}
    total = {(g, w): 0 for g in graders for w in ("grader", "fused")}
    for spec in args.set:
        path, index = spec.rsplit(":", 1)
        parts = Components(Settings(index_dir=Path(index)) if index != "-" else Settings())
        retriever, weight = parts.retriever(), parts.calibration().rerank_weight
        firsts = dict.fromkeys(total, 0)
        questions = load_questions(Path(path))
        for q in questions:
            docs = retriever.search(q.question, k=DEPTH)[0]
            right = [any(source_matches(str(d.metadata.get("source", "")), w) for w in q.sources) for d in docs]
            if not right:
                continue
            for name, grader in graders.items():
                scores = grader.score(q.question, [d.page_content for d in docs])
                firsts[name, "grader"] += right[fused_order(scores, 1.0)[0]]
                firsts[name, "fused"] += right[fused_order(scores, weight)[0]]
        print(f"{Path(path).stem} ({len(questions)}): {', '.join(f'{g} {w} {n}' for (g, w), n in firsts.items())}")
        for key, n in firsts.items():
            total[key] += n
    print(f"all: {', '.join(f'{g} {w} {n}' for (g, w), n in total.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
