"""What `fastcrag fit` measures on the held-out part: grading as the graph sees it, AUCs, thresholds, figures."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from tqdm import tqdm

from fastcrag.fitting.calibrate import (
    ConditionView,
    Observation,
    abstention_rates,
    best_strip_chunk,
    choose_pair,
    choose_threshold,
    choose_upper,
    declines,
    read_score,
)
from fastcrag.fitting.labels import Labelled
from fastcrag.grading.bands import band_of
from fastcrag.grading.conditions import with_conditions_changed
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.measures import auc, ndcg
from fastcrag.retrieval.hybrid import fused_order

REFINE_K = 6
"""Chunks split into strips to place `crag_upper` (as `python -m lab calibrate` does)."""
TOLERANCE = 0.1
"""`crag_upper`: the lowest score above which refinement moves the best evidence for at most this share."""
WEIGHTS = tuple(i / 10 for i in range(11))
"""`rerank_weight` values tried: the grader's share of the candidate order, from the first pass's (0) to its own (1)."""
ORDER_GAIN = 0.01
"""The first pass is mixed into the order only when that raises held-out nDCG@10 by at least this much."""
ORDER_DEPTH = 10


@dataclass
class GraderFigures:
    """One grader's (and one calibration's) figures on the held-out part."""

    name: str
    auc_gold_removed: float
    auc_unanswerable: float | None
    thresholds: dict[str, float | None] = field(default_factory=dict)
    at_threshold: dict[str, float] = field(default_factory=dict)

    def aucs(self) -> list[float]:
        """The AUCs measured (answerable vs gold removed, and vs unanswerable when there are any)."""
        return [a for a in (self.auc_gold_removed, self.auc_unanswerable) if a is not None and not np.isnan(a)]


def observe(
    grader: Reranker,
    items: Sequence[Labelled],
    top_k: int,
    strips: bool,
    progress: bool,
    desc: str,
    condition_factor: float = 1.0,
) -> list[Observation]:
    """Per held-out question, what grading sees: answerable and its gold-removed twin, or unanswerable.

    Chunk scores are conditioned as the graph conditions them (`condition_factor`); strips are not. With `strips`,
    the best sentence strip of the top `REFINE_K` chunks too (for `crag_upper`); a grader that reads also reads its
    top chunks (for `reader_threshold`). A question's two views share most candidates: pass a
    `CachingReranker` so that each pair is scored once.
    """
    out: list[Observation] = []
    for item in tqdm(items, desc=desc, unit="q", file=sys.stderr, disable=not progress):
        q = item.question
        views = (
            [("answerable", item.answerable_view(top_k)), ("gold_removed", item.gold_removed_view(top_k))]
            if q.answerable
            else [("unanswerable", item.answerable_view(top_k))]
        )
        for kind, view in views:
            if not view:
                continue
            scores = checked_scores(grader, q.question, [c.text for c in view], condition_factor)
            ranked = sorted(zip(scores, view, strict=True), key=lambda t: t[0], reverse=True)
            top_chunk = ranked[0][1].chunk_id
            strip_chunk = (
                best_strip_chunk(grader, q.question, [(c.chunk_id, c.text) for _, c in ranked[:REFINE_K]])
                if strips
                else None
            )
            span_score = read_score(grader, q.question, [c.text for _, c in ranked], source=ranked[0][1].source)
            top = ranked[0][1]
            out.append(
                Observation(
                    kind, ranked[0][0], top_chunk, strip_chunk or top_chunk, span_score, q.question, top.evidence
                )
            )
    return out


def _scores_of(obs: Sequence[Observation], kind: str) -> list[float]:
    return [o.top_score for o in obs if o.kind == kind]


def held_out_aucs(obs: Sequence[Observation]) -> tuple[float, float | None]:
    """AUC answerable vs gold removed, and vs unanswerable (None when the held-out part has none)."""
    unanswerable = _scores_of(obs, "unanswerable")
    return (
        auc(_scores_of(obs, "answerable"), _scores_of(obs, "gold_removed")),
        auc(_scores_of(obs, "answerable"), unanswerable) if unanswerable else None,
    )


class Thresholds(NamedTuple):
    """What a calibration draws: the band edges, and the reader's floor for a grader that reads."""

    lower: float
    upper: float
    reader: float | None = None


MIN_RECALL = 0.5
"""`fit`'s default: an abstention-precision target counts only where it declines at least half of the questions to
decline (unanswerable, or on topic without their evidence); declining a handful is no calibration."""
KEEP_CONFIDENCE = 0.9
"""A fitted grader is kept when its mean held-out AUC beats the base's in at least this share of bootstrap resamples."""
KEEP_MARGIN = 0.005
"""... and no held-out AUC of the fitted grader is lower than the base's by more than this."""
BOOTSTRAP_ROUNDS = 1000


def keep_fitted(base: Sequence[Observation], fitted: Sequence[Observation], seed: int) -> tuple[bool, float]:
    """Whether the fitted grader beats the base on the held-out part, beyond what a small sample shows by chance.

    The held-out questions (each with its views) are resampled with replacement `BOOTSTRAP_ROUNDS` times; the
    fitted grader is kept when its mean AUC (answerable vs gold removed, and vs unanswerable) is higher in at least
    `KEEP_CONFIDENCE` of the resamples, and no AUC is lower by more than `KEEP_MARGIN` on the whole part. With a
    few dozen questions a real gain is needed; a gain of noise is not kept.

    Returns:
        The decision, and the share of resamples in which the fitted grader was ahead.
    """
    before, after = held_out_aucs(base), held_out_aucs(fitted)
    pairs = [(b, a) for b, a in zip(before, after, strict=True) if b is not None and a is not None]
    if not pairs or any(a < b - KEEP_MARGIN for b, a in pairs):
        return False, 0.0
    by_question: dict[str, list[tuple[Observation, Observation]]] = {}
    for b, a in zip(base, fitted, strict=True):
        by_question.setdefault(b.question, []).append((b, a))
    groups = list(by_question.values())
    rng = np.random.default_rng(seed)
    ahead = 0
    for _ in range(BOOTSTRAP_ROUNDS):
        sample = [o for i in rng.integers(0, len(groups), len(groups)) for o in groups[i]]
        b_aucs = [x for x in held_out_aucs([b for b, _ in sample]) if x is not None and not np.isnan(x)]
        a_aucs = [x for x in held_out_aucs([a for _, a in sample]) if x is not None and not np.isnan(x)]
        ahead += bool(b_aucs) and len(a_aucs) == len(b_aucs) and float(np.mean(a_aucs)) > float(np.mean(b_aucs))
    share = ahead / BOOTSTRAP_ROUNDS
    return share >= KEEP_CONFIDENCE, share


def at_threshold(obs: Sequence[Observation], t: Thresholds) -> dict[str, float]:
    """Abstention precision and recall, answer rate and band mix on held-out observations at the thresholds.

    A question is declined below `lower`, or (a reader) when no span of its top chunks reaches `reader`.
    """
    precision, recall = abstention_rates(obs, t.lower, reader_threshold=t.reader)
    answerable = [o for o in obs if o.kind == "answerable"]
    bands = [band_of(o.top_score, t.lower, t.upper) for o in obs]
    return {
        "abstention_precision": round(precision, 4),
        "abstention_recall": round(recall, 4),
        "answerable_answered": round(
            sum(not declines(o, t.lower, t.reader) for o in answerable) / max(1, len(answerable)), 4
        ),
        "correct_share": round(bands.count("CORRECT") / max(1, len(bands)), 4),
        "ambiguous_share": round(bands.count("AMBIGUOUS") / max(1, len(bands)), 4),
        "incorrect_share": round(bands.count("INCORRECT") / max(1, len(bands)), 4),
    }


def calibrate_on(obs: Sequence[Observation], precision: float, min_recall: float = 0.0) -> tuple[Thresholds, str]:
    """The thresholds drawn on held-out observations, with the objective that says how.

    `reranker_threshold` at the abstention precision (counted only where it declines `min_recall` of the questions to
    decline; else the lowest threshold that does) and, for a grader that reads, `reader_threshold` drawn together with
    it (`choose_pair`: the graph declines below either); `crag_upper` by the rule `python -m lab calibrate` uses.
    """
    reader: float | None = None
    if any(o.span_score is not None for o in obs):
        threshold, reader, objective = choose_pair(obs, precision, min_recall)
    else:
        threshold, objective = choose_threshold(list(obs), precision, min_recall=min_recall)
    upper = choose_upper(list(obs), threshold, TOLERANCE, min_support=max(5, len(obs) // 20))
    objective += (
        f"; crag_upper: lowest score above which refinement moves the best evidence to another chunk for "
        f"<= {TOLERANCE:.0%} of held-out questions"
    )
    return Thresholds(threshold, upper, reader), objective


def figures_of(name: str, obs: Sequence[Observation], thresholds: Thresholds | None = None) -> GraderFigures:
    """A grader's held-out AUCs and, with `thresholds`, what it does at them."""
    gold, unans = held_out_aucs(obs)
    fig = GraderFigures(name, round(gold, 4), None if unans is None else round(unans, 4))
    if thresholds is not None:
        fig.thresholds = {
            "reranker_threshold": round(thresholds.lower, 6),
            "crag_upper": round(thresholds.upper, 6),
            "reader_threshold": None if thresholds.reader is None else round(thresholds.reader, 6),
        }
        fig.at_threshold = at_threshold(obs, thresholds)
    return fig


def figures_record(fig: GraderFigures) -> dict[str, Any]:
    """The figures as calibration.json's metrics hold them."""
    return {
        "grader": fig.name,
        "auc_answerable_vs_gold_removed": fig.auc_gold_removed,
        "auc_answerable_vs_unanswerable": fig.auc_unanswerable,
        **fig.thresholds,
        **fig.at_threshold,
    }


def _judged(item: Labelled, order: Sequence[int], view: Sequence[Any]) -> list[bool]:
    """The ranked candidates' relevance at the granularity of the question's labels.

    `answers` label chunks; `sources` label documents, so a source counts once, at its best-ranked chunk.
    """
    if not item.question.sources:
        return [view[i].evidence for i in order]
    seen: set[str] = set()
    ranked = []
    for i in order:
        if view[i].source not in seen:
            seen.add(view[i].source)
            ranked.append(view[i].evidence)
    return ranked


def order_curve(
    grader: Reranker, items: Sequence[Labelled], top_k: int, condition_factor: float = 1.0
) -> dict[float, float]:
    """Mean nDCG@10 of the evidence over held-out answerable questions, for each `rerank_weight` in `WEIGHTS`.

    The candidates are the first `top_k` of the first pass, ordered as the graph orders them (`fused_order`), judged
    per chunk (`answers` labels) or per source (`sources` labels). Scores come from `grader`: pass the
    `CachingReranker` that observed the held-out part, so nothing is scored twice.
    """
    lists: list[tuple[Labelled, list[Any], list[float]]] = []
    for item in items:
        view = item.answerable_view(top_k)
        if item.question.answerable and any(c.evidence for c in view):
            texts = [c.text for c in view]
            lists.append((item, view, checked_scores(grader, item.question.question, texts, condition_factor)))
    return {
        w: round(float(np.mean([ndcg(_judged(it, fused_order(sc, w), v), ORDER_DEPTH) for it, v, sc in lists])), 4)
        if lists
        else 0.0
        for w in WEIGHTS
    }


def choose_weight(curve: dict[float, float]) -> tuple[float, str]:
    """`rerank_weight`: the grader's order unless mixing in the first pass gains `ORDER_GAIN` held-out nDCG@10."""
    best = max(curve, key=lambda w: (curve[w], w))  # ties: the larger grader share
    weight = best if curve[best] >= curve[1.0] + ORDER_GAIN else 1.0
    return weight, (
        f"rerank_weight: the grader's share of the candidate order (weighted RRF with the first pass) with the best "
        f"held-out nDCG@{ORDER_DEPTH} of the evidence, when it beats the grader's own order by >= {ORDER_GAIN}"
    )


def condition_views(grader: Reranker, items: Sequence[Labelled], top_k: int) -> list[ConditionView]:
    """The views of labelled questions: answerable, gold removed, unanswerable, and condition changed.

    Condition changed is made without labels: an answerable question naming a year, ordinal, quarter or month, with its
    evidence chunks stating another value (`with_conditions_changed`). Pass a `CachingReranker`.
    """
    views: list[ConditionView] = []
    for item in items:
        q = item.question.question
        if item.question.answerable:
            view = item.answerable_view(top_k)
            texts = [c.text for c in view]
            pairs = [("answerable", texts), ("gold_removed", [c.text for c in item.gold_removed_view(top_k)])]
            changed = with_conditions_changed(q, texts, [c.evidence for c in view])
            pairs += [("condition_changed", changed)] if changed else []
        else:
            pairs = [("unanswerable", [c.text for c in item.answerable_view(top_k)])]
        views += [(kind, q, texts, checked_scores(grader, q, texts)) for kind, texts in pairs if texts]
    return views
