"""Thresholds for few labels: cross-validated shrinkage toward a prior, and bootstrap intervals for every draw.

With a few dozen labels, thresholds drawn on one split swing with the split. So the labelled draw is pulled toward a
prior (the label-free draw on pseudo-questions, or the packaged thresholds) by a weight chosen by cross-validation
over the labels: each fold's thresholds are drawn on the other folds, blended with the prior, and judged on the fold
by the truthfulness they would give, an answer counted right when its best-graded passage is evidence; the labels
move the thresholds only when that gain over the prior holds in 90% of bootstrap resamples. Each threshold
comes with its bootstrap interval (questions resampled with their views, the draw redone).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fastcrag.fitting.calibrate import Observation, declines
from fastcrag.fitting.measure import BOOTSTRAP_ROUNDS, KEEP_CONFIDENCE, Thresholds

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""The labels' share tried in the blend with the prior (0: the prior alone; 1: the labels alone)."""
FOLDS = 5
INTERVAL_ROUNDS = 200
INTERVAL = (5.0, 95.0)
"""The percentiles of a threshold's bootstrap interval."""

Draw = Callable[[Sequence[Observation]], tuple[Thresholds, str]]
"""A threshold rule: the thresholds drawn on observations, and how (`fastcrag.fitting.measure.calibrate_on`)."""


@dataclass
class Drawn:
    """Thresholds, how they were drawn, and each one's bootstrap interval."""

    thresholds: Thresholds
    objective: str
    intervals: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    cv: dict[str, float] = field(default_factory=dict)
    weight: float | None = None
    draws: list[Thresholds] = field(default_factory=list)
    """The bootstrap draws the intervals were read from."""


def utility(obs: Sequence[Observation], t: Thresholds) -> float:
    """Mean truthfulness at `t`, an answer counted right when it comes from evidence.

    +1 for a view to answer that is answered from its best-graded candidate when that is evidence (or not known), -1
    when it is not (the answer would rest on the wrong passage), -1 for a view to decline that is answered, 0 for a
    declined one.
    """
    if not obs:
        return 0.0
    return sum(
        (1 if o.kind == "answerable" and o.top_evidence is not False else -1)
        for o in obs
        if not declines(o, t.lower, t.reader)
    ) / len(obs)


def blend(labelled: Thresholds, prior: Thresholds, weight: float) -> Thresholds:
    """`weight` of the labelled thresholds and the rest of the prior's.

    A reader floor the labels could not draw (None: too few of their questions are answered by a span) is the
    prior's; one only the labels have is theirs when they weigh at least half.
    """

    def mix(a: float, b: float) -> float:
        return weight * a + (1 - weight) * b

    if labelled.reader is not None and prior.reader is not None:
        reader: float | None = mix(labelled.reader, prior.reader)
    else:
        reader = labelled.reader if labelled.reader is not None and weight >= 0.5 else prior.reader
    lower = mix(labelled.lower, prior.lower)
    return Thresholds(lower, max(lower, mix(labelled.upper, prior.upper)), reader)


def _questions(obs: Sequence[Observation]) -> dict[str, list[Observation]]:
    grouped: dict[str, list[Observation]] = {}
    for o in obs:
        grouped.setdefault(o.question, []).append(o)
    return grouped


def _both_kinds(obs: Sequence[Observation]) -> bool:
    return any(o.kind == "answerable" for o in obs) and any(o.kind != "answerable" for o in obs)


def intervals(obs: Sequence[Observation], draw: Draw, seed: int, rounds: int = INTERVAL_ROUNDS) -> list[Thresholds]:
    """The draw redone on `rounds` bootstrap resamples of the questions (each with all its views)."""
    groups = list(_questions(obs).values())
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        sample = [o for i in rng.integers(0, len(groups), len(groups)) for o in groups[i]]
        if _both_kinds(sample):
            out.append(draw(sample)[0])
    return out


def percentile_intervals(draws: Sequence[Thresholds]) -> dict[str, tuple[float, float] | None]:
    """Each threshold's `INTERVAL` over bootstrap draws (None for a reader floor some draws lack)."""

    def span(values: Sequence[float | None]) -> tuple[float, float] | None:
        if not values or any(v is None for v in values):
            return None
        lo, hi = np.percentile(np.asarray(values, dtype=float), INTERVAL)
        return round(float(lo), 4), round(float(hi), 4)

    return {
        "reranker_threshold": span([d.lower for d in draws]),
        "crag_upper": span([d.upper for d in draws]),
        "reader_threshold": span([d.reader for d in draws]),
    }


def draw_alone(obs: Sequence[Observation], draw: Draw, seed: int, what: str) -> Drawn:
    """The thresholds drawn on `obs`, with their bootstrap intervals; the objective names the rule and `what`."""
    draws = intervals(obs, draw, seed)
    thresholds, rule = draw(obs)
    return Drawn(thresholds, f"{rule}; {what}", percentile_intervals(draws), draws=draws)


def with_reader(drawn: Drawn, reader: float, why: str) -> Drawn:
    """`drawn` with its reader floor set to `reader`, in every bootstrap draw too; the objective adds `why`."""
    draws = [d._replace(reader=reader) for d in drawn.draws]
    return Drawn(
        drawn.thresholds._replace(reader=reader), f"{drawn.objective}; {why}", percentile_intervals(draws), draws=draws
    )


def _ahead(a: Sequence[float], b: Sequence[float], seed: int) -> float:
    """The share of `BOOTSTRAP_ROUNDS` resamples of the questions in which `a`'s total beats `b`'s (paired)."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if not len(diff):
        return 0.0
    rng = np.random.default_rng(seed)
    totals = diff[rng.integers(0, len(diff), (BOOTSTRAP_ROUNDS, len(diff)))].sum(axis=1)
    return float((totals > 0).mean())


def _fold_of(question: str, groups: dict[str, str], folds: int, seed: int) -> int:
    key = groups.get(question, question)
    return int(hashlib.sha1(f"{seed}:{key}".encode()).hexdigest(), 16) % folds


def shrink(
    labelled: Sequence[Observation],
    prior: Thresholds,
    prior_draws: Sequence[Thresholds],
    draw: Draw,
    groups: dict[str, str],
    seed: int,
    prior_name: str,
) -> Drawn:
    """The labelled draw blended with `prior`, the labels' weight chosen by `FOLDS`-fold cross-validation.

    Folds hold whole groups (a source document's questions). Labels must show that they do better than the prior on
    questions they were not drawn on, beyond chance, by the fine-tune's keep-rule: the weight with the best held-out
    truthfulness is taken only when it beats the prior alone (weight 0) in at least `KEEP_CONFIDENCE` of
    `BOOTSTRAP_ROUNDS` bootstrap resamples of the held-out questions; else the prior stands. `prior_draws` are the
    prior's bootstrap draws (empty for a fixed prior), blended with the labelled draw's own for the intervals.
    """
    folds = min(FOLDS, len({groups.get(q, q) for q in _questions(labelled)}))
    scores: dict[float, list[float]] = {w: [] for w in WEIGHTS}  # per held-out question, its views' utility summed
    judged = 0
    for k in range(folds):
        test = [o for o in labelled if _fold_of(o.question, groups, folds, seed) == k]
        train = [o for o in labelled if _fold_of(o.question, groups, folds, seed) != k]
        if not test or not _both_kinds(train):
            continue
        drawn = draw(train)[0]
        judged += len(test)
        for w in WEIGHTS:
            t = blend(drawn, prior, w)
            scores[w] += [utility(views, t) * len(views) for views in _questions(test).values()]
    cv = {f"{w:g}": round(sum(v) / judged, 4) for w, v in scores.items()} if judged else {}
    best = max(WEIGHTS, key=lambda w: (round(sum(scores[w]), 9), -w)) if judged else 1.0
    ahead = _ahead(scores[best], scores[0.0], seed) if judged and best else None
    weight = best if ahead is None or ahead >= KEEP_CONFIDENCE else 0.0
    why = (
        f"; the best weight ({best:g}) beat the prior alone in {ahead:.0%} of {BOOTSTRAP_ROUNDS} resamples of the "
        f"held-out questions ({KEEP_CONFIDENCE:.0%} needed)"
        if ahead is not None
        else ""
    )
    own, rule = draw(labelled)
    own_draws = intervals(labelled, draw, seed)
    prior_draws = list(prior_draws) or [prior]
    blended = [blend(d, prior_draws[i % len(prior_draws)], weight) for i, d in enumerate(own_draws)]
    return Drawn(
        blend(own, prior, weight),
        f"{rule}; the labelled draw blended with {prior_name} at the labels' weight {weight:g}, chosen by {folds}-fold "
        f"cross-validation over the labels (folds by source) among {', '.join(f'{w:g}' for w in WEIGHTS)}: mean "
        f"truthfulness on the held-out folds (an answer right when its best-graded passage is evidence) {cv}{why}",
        percentile_intervals(blended),
        cv,
        weight,
        blended,
    )
