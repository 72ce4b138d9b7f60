"""Does a chunk's grade depend on the chunks graded beside it? Measured (lab/RESULTS.md, 2026-12-07, session 9).

The packaged grader is an ONNX model with dynamic int8 quantisation: each MatMul quantises its input activations with
one scale per tensor, drawn from the whole batch (padding included), so the same (question, chunk) pair can grade
differently in another batch. For each question of a set, its graph candidates (the first pass's top 10) are graded
as the graph grades them (one call, batched by length) and one at a time (batch of one, the cache cleared before
each); printed: the largest difference per question, how often the best candidate or the band (packaged thresholds)
differs, and the median time per question of each way (same process, alternated), for the candidates and for the
sentence strips of the first six (as `refine` grades them, under their section's title).

    python -m lab.experiments.grade_batch_dependence --set SET:INDEX [--set ...]

INDEX `-` is the embedded Python index.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.evaluation.docs_answers import load_questions
from fastcrag.grading.bands import band_of
from lab.scripts.static_grader import DEPTH, SIZES, strips_of


def timed(grader: Any, size: int, question: str, texts: list[str], times: list[float]) -> np.ndarray:
    """Grades of `texts`, `size` pairs per call, nothing cached; the time taken appended to `times`."""
    grader.batch_size, start = size, time.perf_counter()
    grader.clear_cache()
    grades = np.array(grader.score(question, texts))
    times.append(time.perf_counter() - start)
    return grades


def main() -> int:
    """Print the figures per set and in all."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", required=True, help="SET:INDEX (a `fastcrag eval docs` set)")
    args = ap.parse_args()
    total = {"questions": 0, "best differs": 0, "band differs": 0}
    diffs: list[float] = []
    signed: list[float] = []  # one at a time minus batched, every candidate
    times: dict[str, list[float]] = {f"{way}{what}": [] for what in ("", ", strips") for way in SIZES}
    for spec in args.set:
        path, index = spec.rsplit(":", 1)
        parts = Components(Settings(index_dir=Path(index)) if index != "-" else Settings())
        retriever, grader, cal = parts.retriever(), parts.reranker(), parts.calibration()
        assert hasattr(grader, "clear_cache") and hasattr(grader, "batch_size"), "an ONNX grader"
        lo, hi = cal.reranker_threshold, cal.crag_upper
        for q in load_questions(Path(path)):
            texts = [d.page_content for d in retriever.search(q.question, k=DEPTH)[0]]
            if not texts:
                continue
            strips = strips_of(texts)
            a, b = (timed(grader, size, q.question, texts, times[way]) for way, size in SIZES.items())
            for way, size in SIZES.items():
                timed(grader, size, q.question, strips, times[f"{way}, strips"])
            diffs.append(float(np.abs(a - b).max()))
            signed += (b - a).tolist()
            total["questions"] += 1
            total["best differs"] += int(np.argmax(a) != np.argmax(b))
            total["band differs"] += int(band_of(float(a.max()), lo, hi) != band_of(float(b.max()), lo, hi))
        print(f"{Path(path).stem}, running totals: {total}", flush=True)
    print(
        f"all: {total}; largest difference per question: median {median(diffs):.4f}, max {max(diffs):.4f}; one at a "
        f"time minus batched, mean {np.mean(signed):+.4f}, median {median(signed):+.4f}; "
        + ", ".join(f"{way} {1000 * median(t):.0f} ms" for way, t in times.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
