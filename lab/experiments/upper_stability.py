"""How steady is `crag_upper` as drawn? The rule's sampling spread, measured by the bootstrap (lab/RESULTS.md).

`python -m lab calibrate` draws `crag_upper` on SQuAD's 600 observations (`fastcrag.fitting.calibrate.choose_upper`:
the lowest top grade above which the best sentence strip lies in another chunk than the best chunk for at most 10% of
the questions). Every grader since v5 moved it (1.0, 0.870, 0.922, 0.916; 0.883 with each pair graded alone, 0.910
with fixed activation scales), and with it the share of questions that go through `refine`. This script observes the
same 600 questions as `lab calibrate` (same sample, corpus, retrieval and `observe`) with each grader, then redraws
`crag_upper` on bootstrap resamples of the questions, with `reranker_threshold` as given (the grader's calibration).

    python -m lab.experiments.upper_stability --grader DIR:CALIBRATION [--grader ...] [--resamples 1000] [--halves 100]
        [--per-class 200] [--tolerances 0.05 0.15 ...]

With `--halves N`, the questions are also split at random into two halves N times, and the rule drawn on each half
alone, as drawn now and as the median of the rule over 100 bootstrap resamples of that half (a bagged rule): the
median difference between the halves says how far a sample of 300 questions moves each.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fastcrag.config.calibration import load_calibration
from fastcrag.fitting.calibrate import Observation, choose_upper, observe
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from lab.calibrate import squad_sample
from lab.data import CHUNK_OVERLAP, CHUNK_TOKENS, OFF_CORPUS, PER_CLASS, REFINE_K, SEED, SQUAD, TOLERANCE, TOP_K


def main() -> int:
    """Print, per grader, crag_upper on the sample and its bootstrap spread, and the tail's changed share."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grader", action="append", required=True, help="DIR:CALIBRATION")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--halves", type=int, default=0)
    ap.add_argument("--per-class", type=int, default=PER_CLASS, help="questions per class (`lab calibrate`: 200)")
    ap.add_argument("--tolerances", type=float, nargs="*", default=[], help="also the rule's spread at these")
    args = ap.parse_args()
    *_, chosen, store = squad_sample(SQUAD, OFF_CORPUS, args.per_class, SEED, CHUNK_TOKENS, CHUNK_OVERLAP)
    retrieved = {q.question: store.similarity_search(q.question, k=TOP_K) for q in chosen}
    rng = np.random.default_rng(SEED)
    draws = [rng.integers(0, len(chosen), len(chosen)) for _ in range(args.resamples)]
    for spec in args.grader:
        folder, cal_file = spec.rsplit(":", 1)
        threshold = load_calibration(Path(cal_file)).reranker_threshold
        obs = observe(retrieved, OnnxCrossEncoderReranker(folder), chosen, REFINE_K)
        support = max(10, len(obs) // 20)
        drawn = choose_upper(obs, threshold, TOLERANCE, support)
        boot = np.array([choose_upper([obs[i] for i in d], threshold, TOLERANCE, support) for d in draws])
        above = sorted((o for o in obs if o.top_score >= threshold), key=lambda o: o.top_score)
        changed = np.array([o.strip_chunk != o.top_chunk for o in above], dtype=float)
        tail = {f"{q:.2f}": round(float(changed[int(q * len(above)) :].mean()), 3) for q in (0.0, 0.25, 0.5, 0.75, 0.9)}
        print(
            f"{folder}: reranker_threshold {threshold:.4f}; crag_upper {drawn:.4f}; bootstrap median "
            f"{np.median(boot):.4f}, 5-95% {np.percentile(boot, 5):.4f}-{np.percentile(boot, 95):.4f}, at 1.0 "
            f"{np.mean(boot >= 1.0):.1%}; {len(above)} questions at or above the threshold, the changed share of "
            f"those above each quantile of their grades {tail}",
            flush=True,
        )
        for tolerance in args.tolerances:
            at = np.array([choose_upper([obs[i] for i in d], threshold, tolerance, support) for d in draws])
            print(
                f"  tolerance {tolerance:g}: crag_upper {choose_upper(obs, threshold, tolerance, support):.4f}, "
                f"bootstrap 5-95% {np.percentile(at, 5):.4f}-{np.percentile(at, 95):.4f}",
                flush=True,
            )
        if args.halves:
            print(f"  split halves ({args.halves}): {halves(obs, threshold, args.halves, rng)}", flush=True)
    return 0


def bagged(obs: list[Observation], threshold: float, rng: np.random.Generator, rounds: int = 100) -> float:
    """The median of the rule over `rounds` bootstrap resamples of `obs`."""
    support = max(10, len(obs) // 20)
    draws = [rng.integers(0, len(obs), len(obs)) for _ in range(rounds)]
    return float(np.median([choose_upper([obs[i] for i in d], threshold, TOLERANCE, support) for d in draws]))


def halves(obs: list[Observation], threshold: float, splits: int, rng: np.random.Generator) -> str:
    """Median and 90th percentile of |half A - half B| for the rule as drawn and bagged, over random splits."""
    gaps: dict[str, list[float]] = {"as drawn": [], "bagged": []}
    for _ in range(splits):
        order = rng.permutation(len(obs))
        a, b = ([obs[i] for i in part] for part in np.array_split(order, 2))
        support = max(10, len(a) // 20)
        gaps["as drawn"].append(
            abs(choose_upper(a, threshold, TOLERANCE, support) - choose_upper(b, threshold, TOLERANCE, support))
        )
        gaps["bagged"].append(abs(bagged(a, threshold, rng) - bagged(b, threshold, rng)))
    return "; ".join(
        f"{rule}: median {np.median(g):.4f}, 90th percentile {np.percentile(g, 90):.4f}" for rule, g in gaps.items()
    )


if __name__ == "__main__":
    raise SystemExit(main())
