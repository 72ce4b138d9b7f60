"""How a documentation set's real questions grade against a label-free fit's pseudo-questions, in logits.

Reads a `fastcrag eval docs` run (`results.jsonl`: the real questions whose right page comes first) and a `fastcrag
fit` run of the same index without labels (`observations.jsonl`, whose pseudo-question grades are stored moved by the
packaged `pseudo_shift`, which this takes back off). Prints the median top grade of each, the gap that `lab calibrate`
measures as `pseudo_shift` (`fastcrag.fitting.pseudo.measure_shift`), and the twins' median (lab/RESULTS.md, "The
label-free fit on documentation").

    python -m lab.scripts.fit_gap EVAL_OUT/results.jsonl FIT_OUT/observations.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))  # the project's own code, installed or not

from fastcrag.config.calibration import load_calibration
from fastcrag.fitting.pseudo import logit, measure_shift
from fastcrag.grading.onnx_grader import sigmoid


def main() -> None:
    """Print the medians and the gap."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a `fastcrag eval docs` run's results.jsonl")
    parser.add_argument("observations", type=Path, help="a label-free `fastcrag fit` run's observations.jsonl")
    args = parser.parse_args()
    records = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    real = [r["top_score"] for r in records if r.get("topic_first") and r.get("top_score") is not None]
    shift = load_calibration().pseudo_shift or 0.0
    raw: dict[str, list[float]] = {"answerable": [], "gold_removed": []}
    for line in args.observations.read_text().splitlines():
        if line.strip() and (o := json.loads(line))["kind"] in raw:
            raw[o["kind"]].append(sigmoid(logit(o["top_score"]) - shift))
    pseudo, twins = raw["answerable"], raw["gold_removed"]
    if not real or not pseudo:
        sys.exit("fit_gap: no real question with its right page first, or no answerable pseudo-question")
    print(f"real questions (right page first): n={len(real)}, median logit {median(map(logit, real)):.2f}")
    print(f"pseudo-questions (before the shift): n={len(pseudo)}, median logit {median(map(logit, pseudo)):.2f}")
    if twins:
        print(f"twins (before the shift): n={len(twins)}, median logit {median(map(logit, twins)):.2f}")
    print(f"gap real - pseudo: {measure_shift(real, pseudo):.2f} (packaged pseudo_shift {shift:g})")


if __name__ == "__main__":
    main()
