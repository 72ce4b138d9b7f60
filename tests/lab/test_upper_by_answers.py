"""`lab.experiments.upper_by_answers`: each question's answer under any crag_upper, from its two routed runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fastcrag.config.calibration import load_calibration
from lab.experiments.upper_by_answers import (
    composed,
    gains,
    lowest_best,
    observed,
    paired_runs,
    route_calibrations,
    summary,
    truthfulness_at,
)


def _pair(key: str, top: float | None, gen: str, ref: str) -> tuple[dict, dict]:
    return (
        {"key": key, "top_score": top, "outcome": gen, "band": top and "CORRECT"},
        {"key": key, "top_score": top, "outcome": ref, "band": top and "AMBIGUOUS"},
    )


ROUTED = [
    _pair("a", 0.95, "correct", "correct"),
    _pair("b", 0.80, "correct", "wrong"),  # refinement costs here
    _pair("c", 0.60, "abstained", "correct"),  # and pays here
    _pair("d", None, "abstained", "abstained"),  # declined before either route
]


def test_composed_takes_generate_at_or_above_upper_and_refine_below() -> None:
    picked = composed(ROUTED, 0.80)
    assert [r["outcome"] for r in picked] == ["correct", "correct", "correct", "abstained"]
    assert [r["band"] for r in picked] == ["CORRECT", "CORRECT", "AMBIGUOUS", None]
    assert truthfulness_at(ROUTED, 0.5) == pytest.approx(2 / 4)  # all passing generate
    assert truthfulness_at(ROUTED, 1.0) == pytest.approx(1 / 4)  # all refine
    assert truthfulness_at(ROUTED, 0.7) == pytest.approx(3 / 4)  # c refined, b generated


def test_lowest_best_is_the_lowest_value_reaching_the_best_truthfulness() -> None:
    assert lowest_best(ROUTED, np.array([0.5, 0.6, 0.7, 0.8, 0.95, 1.0])) == pytest.approx(0.7)
    # a lower value ties the best when the question it moves changes nothing
    even = [*ROUTED[:2], _pair("c", 0.60, "correct", "correct"), ROUTED[3]]  # c: refinement changes nothing
    assert lowest_best(even, np.array([0.5, 0.6, 0.7, 0.8, 1.0])) == pytest.approx(0.5)


def test_gains_per_measure_are_refine_minus_generate() -> None:
    assert [gains(*p) for p in ROUTED] == [{"points": 0}, {"points": -2}, {"points": 1}, {"points": 0}]
    gen = {"substance": False, "topic_first": True}
    assert gains(gen, {"substance": True, "topic_first": False}) == {"substance": 1, "first": -1}


def test_composed_refuses_runs_that_routed_on_different_grades() -> None:
    gen, ref = _pair("a", 0.9, "correct", "correct")
    with pytest.raises(ValueError, match="routing grade"):
        composed([(gen, ref | {"top_score": 0.7})], 0.8)


def test_summary_reads_docs_and_squad_records() -> None:
    docs = [{"substance": True, "topic_first": True, "abstained": False}, {"substance": False, "topic_first": True,
            "abstained": True}]  # fmt: skip
    assert summary(docs) == "substance / first / abstained 1 / 2 / 1"
    assert summary(composed(ROUTED, 1.0)) == "truthfulness +0.2500 (correct / wrong / abstained 2 / 1 / 1)"


def test_runs_pair_by_key_and_observed_records_pair_by_question(tmp_path: Path) -> None:
    for name, side in (("g", 0), ("r", 1)):
        (tmp_path / name).mkdir()
        lines = [json.dumps({"type": "header", "config": {}})] + [json.dumps(p[side]) for p in ROUTED[:3]]
        (tmp_path / name / "results.jsonl").write_text("\n".join(lines) + "\n{cut", encoding="utf-8")
    assert paired_runs(tmp_path / "g", tmp_path / "r") == ROUTED[:3]
    records = [g | {"key": f"answerable|{g['key']}|generate"} for g, _ in ROUTED]
    records += [r | {"key": f"answerable|{r['key']}|refine"} for _, r in ROUTED[:2]]
    assert [g["outcome"] for g, _ in observed(records)] == ["correct", "correct"]


def test_route_calibrations_move_crag_upper_alone(tmp_path: Path) -> None:
    route_calibrations(None, tmp_path)
    packaged = load_calibration()
    generate, refine = (load_calibration(tmp_path / f"{n}.json") for n in ("generate", "refine"))
    assert generate.crag_upper == packaged.reranker_threshold and refine.crag_upper == 1.0
    assert generate.model_copy(update={"crag_upper": packaged.crag_upper}) == packaged
