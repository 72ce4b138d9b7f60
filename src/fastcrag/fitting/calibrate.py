"""Calibration rules: thresholds drawn from the scores of labelled questions (for `fastcrag fit` and the lab)."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from fastcrag.datasets import LabelledQuestion
from fastcrag.generation.extractive import is_documentation, reader_declines
from fastcrag.grading.conditions import conditioned, named_conditions
from fastcrag.grading.reader import is_reader
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.measures import auc
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.indexing import chunk_document
from fastcrag.retrieval.store import FaissStore
from fastcrag.retrieval.text import split_sentences


@dataclass(frozen=True)
class Observation:
    """What retrieval and refinement did for one labelled question."""

    kind: str
    top_score: float
    top_chunk: str
    strip_chunk: str  # chunk holding the best-scoring sentence strip among the refined candidates
    span_score: float | None = None  # the reader's best span score over the top `read_k` chunks
    question: str = ""  # the question observed (a question's views are resampled together)
    top_evidence: bool | None = None  # whether the best-graded candidate is evidence (None: not known)


FACTORS = (1.0, 0.75, 0.5, 0.25, 0.0)
"""`condition_factor` values tried: 1 leaves scores as they are; 0 grades a chunk lacking a named condition 0."""

ConditionView = tuple[str, str, list[str], list[float]]
"""(class, question, candidate texts, their raw grader scores): one view for choosing `condition_factor`."""


def build_corpus_store(docs: list[Any], chunk_tokens: int, chunk_overlap: int) -> FaissStore:
    """An in-memory FAISS store over `docs`, chunked as `fastcrag index` chunks."""
    embeddings = default_embeddings()
    texts, metas, ids = [], [], []
    for doc in docs:
        chunked = chunk_document(doc, chunk_tokens, chunk_overlap)
        for i, (chunk, meta) in enumerate(zip(chunked.texts, chunked.metadatas, strict=True)):
            texts.append(chunk)
            metas.append(meta)
            ids.append(f"{doc.source}-{i}")
    store = FaissStore(embeddings)
    store.add_vectors(texts, embeddings.encode(texts, show_progress_bar=False), metas, ids=ids)
    return store


def best_strip_chunk(reranker: Reranker, question: str, ranked: Sequence[tuple[str, str]]) -> str | None:
    """The chunk holding the best-scoring sentence strip of `ranked` ((chunk id, text) pairs), as refine would see it.

    None when the chunks hold no sentence.
    """
    strips = [(s, chunk_id) for chunk_id, text in ranked for s in split_sentences(text)]
    if not strips:
        return None
    scores = checked_scores(reranker, question, [s for s, _ in strips])
    return strips[int(np.argmax(scores))][1]


@dataclass(frozen=True)
class RefineFloor:
    """The reader's floor for AMBIGUOUS evidence: questions graded below `upper` (crag_upper) are held to `floor`."""

    upper: float
    floor: float | None


def declines(
    o: Observation, threshold: float, reader_threshold: float | None = None, refine: RefineFloor | None = None
) -> bool:
    """Whether the graph declines this question.

    It does when its best grade is below `threshold`, or (a reader) no answer span of the passages it would answer
    from reaches `reader_threshold` (`refine.floor` when set, for a question graded below `refine.upper`).
    """
    if o.top_score < threshold:
        return True
    floor = reader_threshold
    if refine is not None and refine.floor is not None and o.top_score < refine.upper:
        floor = refine.floor
    return floor is not None and o.span_score is not None and o.span_score < floor


def abstention_rates(
    obs: Sequence[Observation],
    threshold: float,
    undefined: float = 0.0,
    reader_threshold: float | None = None,
    refine: RefineFloor | None = None,
) -> tuple[float, float]:
    """Abstention precision and recall at the thresholds (an abstention is right when the question is not answerable).

    `undefined` stands where a rate has nothing to count (no abstention, or no question to decline).
    """
    declined = [declines(o, threshold, reader_threshold, refine) for o in obs]
    abstained = [o for o, d in zip(obs, declined, strict=True) if d]
    should = [d for o, d in zip(obs, declined, strict=True) if o.kind != "answerable"]
    precision = sum(o.kind != "answerable" for o in abstained) / len(abstained) if abstained else undefined
    recall = sum(should) / len(should) if should else undefined
    return precision, recall


def read_score(
    reranker: Reranker, question: str, ranked: Sequence[str], read_k: int = 3, source: str = ""
) -> float | None:
    """A reader's best answer-span score over the first `read_k` of `ranked` passages (the first from `source`).

    It is what the extractive generator compares with `reader_threshold`; None where it compares nothing: the
    grader does not read, or no span below it declines (`reader_declines`: a question asking how, why or what
    something is; over documentation, the first passage a documentation section, any question).
    """
    if not is_reader(reranker) or not ranked or not reader_declines(question, is_documentation(ranked[0], source)):
        return None
    spans = reranker.read(question, list(ranked[:read_k]))  # type: ignore[attr-defined]
    return max((sp.score for sp in spans if sp is not None), default=0.0)


def choose_reader_threshold(
    obs: Sequence[Observation], threshold: float, target_precision: float, upper: float | None = None
) -> tuple[float | None, str]:
    """A reader's floor, set on the questions it will be asked to answer.

    Without `upper`, `reader_threshold`: the highest floor with abstention precision >= `target_precision` among the
    questions that pass grading (the CORRECT ones are most of them: a floor that declines little, and rightly).
    With `upper` (crag_upper), `refine_reader_threshold`: Youden's J among the questions graded AMBIGUOUS alone.
    There grading was unsure, so the reader's floor weighs both errors alike: a wrong answer declined against a
    right one lost. None (and no objective) when the grader does not read or those questions lack one of the kinds.
    """
    ceiling = math.inf if upper is None else upper
    passing = [o for o in obs if o.span_score is not None and threshold <= o.top_score < ceiling]
    if not (any(o.kind == "answerable" for o in passing) and any(o.kind != "answerable" for o in passing)):
        return None, ""
    if upper is None:
        value, objective = choose_threshold(passing, target_precision, "span_score", "reader_threshold")
        return value, f"; {objective} (questions that pass grading, top 3 chunks read)"
    scores = np.asarray([float(o.span_score or 0.0) for o in passing])
    should_abstain = np.asarray([o.kind != "answerable" for o in passing])
    value = youden_threshold(scores, should_abstain)
    return value, "; refine_reader_threshold: Youden's J maximum (questions graded AMBIGUOUS, top 3 chunks read)"


def observe(
    retrieved: Mapping[str, list[Any]],
    reranker: Reranker,
    questions: list[LabelledQuestion],
    refine_k: int,
    read_k: int = 3,
) -> list[Observation]:
    """Rerank and strip-score each question's retrieved chunks; a reader also reads the top `read_k` chunks."""
    out = []
    for q in tqdm(questions, desc="scoring", unit="q", file=sys.stderr):
        docs = retrieved[q.question]
        scores = checked_scores(reranker, q.question, [d.page_content for d in docs])
        ranked = sorted(zip(scores, docs, strict=True), key=lambda t: t[0], reverse=True)
        strip_chunk = best_strip_chunk(
            reranker, q.question, [(d.metadata["chunk_id"], d.page_content) for _, d in ranked[:refine_k]]
        )
        top_chunk = ranked[0][1].metadata["chunk_id"] if ranked else ""
        source = str(ranked[0][1].metadata.get("source", "")) if ranked else ""
        span_score = read_score(reranker, q.question, [d.page_content for _, d in ranked], read_k, source)
        out.append(
            Observation(q.kind, ranked[0][0] if ranked else 0.0, top_chunk, strip_chunk or top_chunk, span_score)
        )
    return out


def choose_threshold(
    obs: list[Observation],
    target_precision: float,
    score: str = "top_score",
    name: str = "reranker_threshold",
    min_recall: float = 0.0,
) -> tuple[float, str]:
    """The highest threshold whose abstentions (scores below it) are at least `target_precision` right.

    An abstention is right for an unanswerable or off-corpus question. When no threshold reaches the target,
    the threshold maximising Youden's J (answerable vs the rest) is used, and the objective says so. With
    `min_recall`, a target met only by declining fewer than that share of the questions to decline does not count:
    the threshold is then the lowest that declines `min_recall` of them (the best precision at that recall). `score`
    names the Observation field thresholded.
    """
    scores = np.asarray([float(getattr(o, score)) for o in obs])
    should_abstain = np.asarray([o.kind != "answerable" for o in obs])
    candidates = np.unique(scores)
    best: float | None = None
    for t in candidates:
        abstained = scores < t
        if abstained.sum() < max(5, len(obs) // 100):
            continue
        if should_abstain[abstained].mean() >= target_precision:
            best = float(t)
    if best is not None:
        recall = float(should_abstain[scores < best].sum() / max(1, should_abstain.sum()))
        if recall >= min_recall:
            return best, f"{name}: highest score threshold with abstention precision >= {target_precision}"
    if min_recall > 0 and should_abstain.any():
        declined = np.asarray([should_abstain[scores < t].sum() for t in candidates]) / should_abstain.sum()
        reaching = candidates[declined >= min_recall]
        floor = float(reaching[0]) if len(reaching) else float(np.nextafter(candidates[-1], np.inf))
        return floor, (
            f"{name}: abstention precision {target_precision} unreachable at recall >= {min_recall}; the lowest "
            f"threshold declining {min_recall:.0%} of the questions to decline"
        )
    return youden_threshold(scores, should_abstain), (
        f"{name}: abstention precision {target_precision} unreachable; Youden's J maximum"
    )


def youden_threshold(scores: Any, should_abstain: Any) -> float:
    """The observed score that, as a threshold, maximises Youden's J.

    J is the share of the questions to decline that score below it minus the share of the answerable ones that do.
    """
    candidates = np.unique(scores)
    j = [
        (should_abstain[scores < t].sum() / max(1, should_abstain.sum()))
        - ((~should_abstain)[scores < t].sum() / max(1, (~should_abstain).sum()))
        for t in candidates
    ]
    return float(candidates[int(np.argmax(j))])


MAX_CANDIDATES = 200
"""Threshold values tried per score when two are chosen together (quantiles of the observed scores)."""


def choose_pair(
    obs: Sequence[Observation], target_precision: float, min_recall: float = 0.0
) -> tuple[float, float | None, str]:
    """`reranker_threshold` and a reader's `reader_threshold` chosen together, on what the graph declines with both.

    A question is declined when its best grade is below the first, or no answer span reaches the second. Among the
    pairs that decline at least `min_recall` of the questions to decline, the one with the highest recall at
    abstention precision >= `target_precision`; when none reaches it, the one that declines the fewest answerable
    questions (the best precision at that recall); with `min_recall` 0 and the target unreachable, Youden's J. The
    reader threshold is None when the reader declining nothing is best.
    """
    top = np.asarray([o.top_score for o in obs], dtype=float)
    span = np.asarray([np.inf if o.span_score is None else o.span_score for o in obs], dtype=float)
    negative = np.asarray([o.kind != "answerable" for o in obs])
    n_neg, n_pos = max(1, int(negative.sum())), max(1, int((~negative).sum()))

    def grid(values: np.ndarray) -> np.ndarray:
        unique = np.unique(values[np.isfinite(values)])
        if len(unique) > MAX_CANDIDATES:
            unique = np.unique(np.quantile(unique, np.linspace(0, 1, MAX_CANDIDATES)))
        return np.append(unique, np.nextafter(unique[-1], np.inf)) if len(unique) else unique

    t1s, t2s = grid(top), np.concatenate([[-np.inf], grid(span)])
    rows = []  # (t1, t2, declined, recall, answerable declined)
    for t2 in t2s:
        declined = (top[None, :] < t1s[:, None]) | (span < t2)[None, :]
        count = declined.sum(axis=1)
        neg = (declined & negative[None, :]).sum(axis=1)
        rows += [(t1, t2, int(c), k / n_neg, int(c - k)) for t1, c, k in zip(t1s, count, neg, strict=True)]
    least = max(5, len(obs) // 100)
    reached = [r for r in rows if r[2] >= least and (r[2] - r[4]) / r[2] >= target_precision and r[3] >= min_recall]
    if reached:
        t1, t2, *_ = max(reached, key=lambda r: (r[3], -r[4], -r[1]))
        why = f"highest recall with abstention precision >= {target_precision}"
    elif min_recall > 0 and (floor := [r for r in rows if r[3] >= min_recall]):
        t1, t2, *_ = min(floor, key=lambda r: (r[4], -r[3], r[1]))
        why = (
            f"abstention precision {target_precision} unreachable at recall >= {min_recall}; the pair declining "
            f"{min_recall:.0%} of the questions to decline with the fewest answerable ones declined"
        )
    else:
        t1, t2, *_ = max(rows, key=lambda r: (r[3] - r[4] / n_pos, -r[1]))
        why = f"abstention precision {target_precision} unreachable; Youden's J maximum"
    reader = None if not np.isfinite(t2) else float(t2)
    return float(t1), reader, f"reranker_threshold and reader_threshold together (declined below either): {why}"


def choose_upper(obs: list[Observation], threshold: float, tolerance: float, min_support: int) -> float:
    """The lowest score above which refinement changes the top evidence for at most `tolerance` of questions.

    "Changes" means the best sentence strip lies in another chunk than the top-ranked chunk. At least
    `min_support` questions must lie above the chosen value; failing that, refinement never stops (1.0).
    """
    answered = sorted((o for o in obs if o.top_score >= threshold), key=lambda o: o.top_score)
    changed = np.asarray([o.strip_chunk != o.top_chunk for o in answered], dtype=float)
    for i, o in enumerate(answered):
        above = changed[i:]
        if len(above) < min_support:
            break
        if above.mean() <= tolerance:
            return max(threshold, o.top_score)
    return 1.0


def condition_curve(views: Sequence[ConditionView]) -> dict[float, float]:
    """Mean AUC of the top chunk score, answerable against each class to decline, per `FACTORS` value.

    Only questions that name a condition change with the factor; the rest are the field they are ranked against.
    """
    curve: dict[float, float] = {}
    for f in FACTORS:
        tops: dict[str, list[float]] = {}
        for kind, q, texts, scores in views:
            tops.setdefault(kind, []).append(max(conditioned(q, texts, scores, f)))
        positives = tops.pop("answerable", [])
        aucs = [auc(positives, v) for v in tops.values()] if positives else []
        curve[f] = round(float(np.mean(aucs)), 4) if aucs else 0.0
    return curve


def choose_condition_factor(
    curve: dict[float, float], views: Sequence[ConditionView], default: float
) -> tuple[float, str]:
    """`condition_factor`: the value with the best mean AUC.

    Ties keep `default` (the base calibration's) when it is among the best, else the larger value; with no question
    naming a condition every value ties, so `default` stays.
    """
    top = max(curve.values())
    best = default if curve.get(default) == top else max(f for f, v in curve.items() if v == top)
    changed = sum(kind == "condition_changed" for kind, *_ in views)
    naming = len({q for _, q, *_ in views if named_conditions(q)})
    classes = ", ".join(dict.fromkeys(kind.replace("_", " ") for kind, *_ in views if kind != "answerable"))
    return best, (
        f"condition_factor: the best mean AUC of the top chunk score over {FACTORS}, answerable against each class "
        f"to decline ({classes}; {naming} questions name a year, ordinal, quarter or month, {changed} with their "
        f"evidence changed); ties keep the base calibration's {default:g}"
    )
