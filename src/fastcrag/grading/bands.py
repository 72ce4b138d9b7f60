"""The grader's rule: where a score falls among the two calibrated thresholds."""

from __future__ import annotations

from typing import Literal

Band = Literal["CORRECT", "AMBIGUOUS", "INCORRECT"]
UNGRADED = "UNGRADED"
"""A candidate's verdict when grading stopped before it (`FASTRAG_GRADE_BATCH`): it never reaches the generator."""


def band_of(score: float, reranker_threshold: float, crag_upper: float) -> Band:
    """The band of one grader score: CORRECT at or above `crag_upper`, INCORRECT below `reranker_threshold`."""
    if score >= crag_upper:
        return "CORRECT"
    if score >= reranker_threshold:
        return "AMBIGUOUS"
    return "INCORRECT"
