"""Measures behind the reported figures: ROC AUC, nDCG@k and percentiles, each defined once."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["auc", "auc_of_labels", "ndcg", "ndcg_at_k", "percentile"]


def auc(positive: ArrayLike, negative: ArrayLike) -> float:
    """ROC AUC: the chance that a positive scores above a negative, ties counted half (Mann-Whitney U / (n+ n-)).

    The count is exact (integers and halves), so the result does not depend on how it is computed: by rank sums or
    by comparing every pair gives the same float.

    Returns:
        The AUC; NaN when either side is empty or holds a NaN.
    """
    pos = np.asarray(positive, dtype=np.float64)
    neg = np.sort(np.asarray(negative, dtype=np.float64))
    if not pos.size or not neg.size or np.isnan(pos).any() or np.isnan(neg).any():
        return float("nan")
    below = np.searchsorted(neg, pos, side="left")
    tied = np.searchsorted(neg, pos, side="right") - below
    return float((below.sum() + 0.5 * tied.sum()) / (pos.size * neg.size))


def auc_of_labels(labels: ArrayLike, scores: ArrayLike) -> float:
    """ROC AUC of `scores`, a label of at least 0.5 marking a positive (soft labels included); NaN for one class."""
    y = np.asarray(labels, dtype=np.float64) >= 0.5
    s = np.asarray(scores, dtype=np.float64)
    return auc(s[y], s[~y])


def ndcg(relevant: Sequence[bool], k: int = 10, n_relevant: int | None = None) -> float:
    """Binary-gain nDCG@k of one ranked list.

    Args:
        relevant: Whether each ranked item is relevant, best first.
        k: The depth.
        n_relevant: Relevant items in all, for the ideal ranking; None: those flagged in `relevant`.

    Returns:
        The nDCG, 0 when nothing is relevant.
    """
    dcg = sum(1.0 / math.log2(i + 2) for i, r in enumerate(relevant[:k]) if r)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, sum(relevant) if n_relevant is None else n_relevant)))
    return dcg / ideal if ideal else 0.0


def ndcg_at_k(ranked: Sequence[str], relevant: Collection[str], k: int = 10) -> float:
    """Binary-relevance nDCG@k of a ranking of ids against the set of relevant ids (all of them count as ideal)."""
    return ndcg([d in relevant for d in ranked[:k]], k, len(relevant))


def percentile(values: Sequence[float], q: float, method: Literal["linear", "nearest"] = "linear") -> float:
    """The q-th percentile (0-100) of `values`; NaN for no values.

    Args:
        values: The sample, in any order.
        q: The percentile, 0 to 100.
        method: `linear` interpolates between the two ranks around (n - 1) q / 100 (numpy's default method, up to
            float rounding); `nearest` takes the value at that rank rounded half to even.
    """
    s = sorted(float(v) for v in values)
    if not s:
        return float("nan")
    if method == "nearest":
        return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]
    pos = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
