"""The candidate orders the order trial compares (lab/scripts/order_trial.py)."""

from __future__ import annotations

from lab.scripts import order_trial as ot


def test_a_rank_prior_lets_a_large_grade_margin_override_the_first_pass() -> None:
    assert ot.prior_order([0.2, 0.9, 0.5], 0.0) == [1, 2, 0]  # no prior: the grader's order
    assert ot.prior_order([0.2, 0.9, 0.5], 1.0)[0] == 1  # 0.9 against 0.2: the margin wins
    assert ot.prior_order([0.60, 0.62], 1.0) == [0, 1]  # a small margin keeps the first pass's order
    assert set(ot.ORDERS) >= {"rrf_0.25", "prior_1"} and ot.ORDERS["rrf_1"]([0.1, 0.8]) == [1, 0]
