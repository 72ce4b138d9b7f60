"""A message's ask graded beside the whole message (`fastcrag.grading.asks`), measured on the paraphrase probe.

For every probe pair the graph's first-pass candidates are drawn for the rewording from its own corpus (as
`lab.scripts.paraphrase_probe` draws them) and from another corpus's index (off-corpus: nothing there answers).
Each variant grades them with the packaged grader and its calibration:

- `whole`: the message alone (the grade before asks);
- `ask`: the higher of the message's and its ask's grade (`checked_scores`, as the graph grades);
- `ask of 2 words`: the same with asks of two content words graded too (`MIN_ASK_WORDS` 2, not 3).

Printed per variant and per kind of rewording: `kept` (the answering passage at or above `reranker_threshold`),
`first` (it outranks every other candidate) and `off-corpus passed` (the best off-corpus candidate at or above the
threshold: an answer where the graph should decline), over all rewordings and over those with an ask.

    python -m lab.experiments.question_asks --index git=IDX --index flask=IDX
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

from lab.data import SHARED_DATA
from lab.scripts.paraphrase_probe import first_pass, is_same_passage

MEASURES = ("kept", "first", "off")
OTHER = {"python": "git", "git": "flask", "flask": "python", "squad": "git"}  # where a pair is asked off-corpus


def retrievers(indexes: dict[str, str], squad: Path) -> dict[str, Any]:
    """The graph's first pass per corpus: Python's embedded reference, Git and Flask indexes, SQuAD's paragraphs."""
    return {corpus: first_pass(corpus, indexes, squad) for corpus in ("squad", "python", *indexes)}


def texts(retriever: Any, question: str) -> list[str]:
    """The first pass's candidates' texts."""
    return [d.page_content for d in retriever.invoke(question)]


def measure(
    pairs: Sequence[dict[str, Any]],
    cands: dict[str, tuple[list[str], list[str]]],
    grade: Callable[[str, Sequence[str]], list[float]],
    threshold: float,
) -> dict[str, dict[str, float]]:
    """Kept / first / off-corpus passed per kind of rewording, and over those with an ask."""
    from fastcrag.grading.asks import ask_of

    rows: dict[str, list[tuple[bool, bool, bool]]] = defaultdict(list)
    for p in pairs:
        own, off = cands[p["id"]]
        others = [c for c in own if not is_same_passage(c, p["passage"])]
        graded = grade(p["reworded"], [p["passage"], *others])
        passed_off = max(grade(p["reworded"], off), default=0.0) >= threshold
        row = (graded[0] >= threshold, all(graded[0] > s for s in graded[1:]), passed_off)
        for key in ("all", f"how:{p['how']}", *(["with an ask"] if ask_of(p["reworded"]) else [])):
            rows[key].append(row)
    return {
        key: {"n": len(v), **{m: round(sum(r[i] for r in v) / len(v), 3) for i, m in enumerate(MEASURES)}}
        for key, v in sorted(rows.items())
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: print (and write) the figures per variant."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--probe", default="lab/questions/paraphrase_probe.jsonl")
    ap.add_argument("--index", action="append", default=[], help="CORPUS=INDEX (git, flask)")
    ap.add_argument("--squad", default=str(SHARED_DATA / "squad2-dev"))
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    from fastcrag.config.calibration import load_calibration
    from fastcrag.grading import asks
    from fastcrag.grading.reranker import calibration_for, checked_scores, default_reranker_spec, load_reranker

    pairs = [json.loads(line) for line in Path(args.probe).read_text(encoding="utf-8").splitlines() if line.strip()]
    found = retrievers(dict(i.split("=", 1) for i in args.index), Path(args.squad))
    pairs = [p for p in pairs if p["corpus"] in found and OTHER[p["corpus"]] in found]
    cands = {
        p["id"]: (texts(found[p["corpus"]], p["reworded"]), texts(found[OTHER[p["corpus"]]], p["reworded"]))
        for p in pairs
    }
    spec = default_reranker_spec()
    grader = load_reranker(spec)
    threshold = load_calibration(calibration_for(None, spec), expected_model=grader.name).reranker_threshold
    results = {
        "whole": measure(pairs, cands, grader.score, threshold),
        "ask": measure(pairs, cands, lambda q, t: checked_scores(grader, q, t), threshold),
    }
    with mock.patch.object(asks, "MIN_ASK_WORDS", 2):
        results["ask of 2 words"] = measure(pairs, cands, lambda q, t: checked_scores(grader, q, t), threshold)
    for name, res in results.items():
        print(f"\n{name} (reranker_threshold {threshold:.4f})")
        print(f"  {'':18s} {'n':>4s} {'kept':>6s} {'first':>6s} {'off':>6s}")
        for key, r in res.items():
            print(f"  {key:18s} {r['n']:4d} {r['kept']:6.3f} {r['first']:6.3f} {r['off']:6.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
