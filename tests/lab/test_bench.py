"""`python -m lab bench` pieces: stage latencies, the judge's cost, and its options (no models)."""

from __future__ import annotations

import pytest

from lab.benchmarks.bench import judge_cost, latency_table, retrieval_total, stage_values
from lab.cli import parser


def test_latency_table_and_totals() -> None:
    records = [
        {"timings": {"retrieve_ms": 10.0, "rerank_ms": 20.0, "crag_ms": c, "generate_ms": 5.0}}
        for c in (0.0, 0.0, 0.0, 300.0)
    ]
    vals = stage_values(records)
    assert vals["retrieval_total_ms"] == [30.0, 30.0, 30.0, 330.0]
    assert retrieval_total({"retrieve_ms": 1, "rerank_ms": 2, "crag_ms": 3}) == 6.0
    text = latency_table({"off": vals})
    assert "| crag_ms | off | 4 | 0.0 | 255.0 | 300.0 |" in text


def test_judge_cost_ratio() -> None:
    judged = [
        {
            "kind": "answerable",
            "judge_ms": [100.0, 100.0],
            "relevant": [True, False],
            "verdicts": ["AMBIGUOUS", "INCORRECT"],
            "gold": [True, False],
        }
    ]
    timed = [
        {"crag": False, "timings": {"rerank_ms": 19.0, "crag_ms": 1.0}},
        {"crag": True, "timings": {"rerank_ms": 19.0, "crag_ms": 50.0}},
    ]
    cost = judge_cost(judged, timed)
    assert cost["cost_ratio"] == pytest.approx(10.0)
    assert cost["cost_ratio_vs_grade_only"] == pytest.approx(200.0)
    assert cost["agreement_with_crag_verdicts"] == 1.0
    assert cost["gold_judged_relevant"] == 1 and cost["gold_passing_crag_grade"] == 1
    assert judge_cost([], timed) == {}


def test_the_bench_command_takes_its_options() -> None:
    args = parser().parse_args(["bench", "--judge-questions", "2"])
    assert args.judge_questions == 2 and args.out == "runs/bench" and callable(args.func)
