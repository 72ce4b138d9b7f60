"""Does the first pass's own agreement vouch for a low-graded question? Measured, not kept (lab/RESULTS.md, 2026-12-06).

For each `fastcrag eval docs` run named (`LABEL` in: the set asked of its own manual; wrong: of another one), whether
lexical and dense search put the same page first, and how many questions a rule "graded INCORRECT at LOW or above,
and the two searches agree" would answer beside the packaged threshold:

    python lab/experiments/first_pass_agreement.py --run in:SET:INDEX:EVAL_OUT --run wrong:SET:OTHER_INDEX:EVAL_OUT ...

INDEX `-` is the embedded Python index; EVAL_OUT a run of `fastcrag eval docs --questions SET [--index INDEX]`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastcrag.components import Components
from fastcrag.config.calibration import load_calibration
from fastcrag.config.settings import Settings
from fastcrag.evaluation.docs_answers import load_questions


def main() -> int:
    """Print the agreement per label and the rule's trade at three floors."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", required=True, help="LABEL:SET:INDEX:EVAL_OUT (LABEL in or wrong)")
    args = ap.parse_args()
    settings = Settings()
    threshold = load_calibration(None).reranker_threshold
    rows: list[tuple[str, bool, dict]] = []
    for spec in args.run:
        label, questions, index, out = spec.split(":", 3)
        parts = Components(settings.model_copy(update={"index_dir": None if index == "-" else Path(index)}))
        retriever = parts.retriever()
        results = [json.loads(line) for line in Path(out, "results.jsonl").open()][1:]
        by_id = {r["id"]: r for r in results}
        for q in load_questions(Path(questions)):
            tops = [retriever.search(q.question, mode=m, k=10)[0] for m in ("lexical", "dense")]
            pages = [docs[0].metadata.get("source") if docs else None for docs in tops]
            rows.append((label, pages[0] is not None and pages[0] == pages[1], by_id[q.id]))
    for label in ("in", "wrong"):
        sel = [agree for lab, agree, _ in rows if lab == label]
        print(f"{label}: {len(sel)} questions, lexical and dense agree on the first page for {sum(sel) / len(sel):.3f}")
    for low in (0.2, 0.25, 0.3):
        counts = {"in": 0, "wrong": 0}
        for label, agree, r in rows:
            if agree and r["band"] == "INCORRECT" and low <= (r["top_score"] or 0.0) < threshold:
                counts[label] += 1
        print(f"floor {low}: in-corpus INCORRECT answered {counts['in']}, wrong-manual answered {counts['wrong']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
