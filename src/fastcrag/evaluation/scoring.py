"""Scoring rules: SQuAD answer normalisation, per-question outcomes, truthfulness and abstention metrics."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Outcome = Literal["correct", "wrong", "abstained"]
CLASSES = ("answerable", "unanswerable", "off_corpus")
ACTIONS = ("generate", "refine", "rewrite", "abstain", "disabled", "plain")
TRUTH_POINTS: dict[str, int] = {"correct": 1, "abstained": 0, "wrong": -1}

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The standard SQuAD normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def is_abstention(answer: str, action: str | None, abstain_message: str = "I don't know.") -> bool:
    """Whether a response declines: the graph abstained, or the generator itself said it does not know.

    Args:
        answer: The response text.
        action: The graph's `crag.action`.
        abstain_message: The configured abstention message.
    """
    if action == "abstain":
        return True
    norm = normalize_answer(answer)
    return not norm or norm == normalize_answer(abstain_message) or norm.startswith("i dont know")


def contains_gold(answer: str, gold: Iterable[str]) -> bool:
    """Whether a normalised gold answer appears in the normalised answer, on word boundaries."""
    padded = f" {normalize_answer(answer)} "
    for g in gold:
        norm = normalize_answer(g)
        if norm and f" {norm} " in padded:
            return True
    return False


def outcome_of(answer: str, gold: Sequence[str], abstained: bool) -> Outcome:
    """Score one response: abstained, correct (a gold answer appears in it), or wrong (a hallucination).

    A question without gold answers (unanswerable) can only be abstained on or answered wrongly.
    """
    if abstained:
        return "abstained"
    return "correct" if contains_gold(answer, gold) else "wrong"


def truthfulness(outcomes: Iterable[str]) -> float:
    """Meta CRAG benchmark truthfulness: mean of +1 (correct), 0 (abstained), -1 (wrong); NaN when empty."""
    points = [TRUTH_POINTS[o] for o in outcomes]
    return sum(points) / len(points) if points else float("nan")


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


@dataclass(frozen=True)
class Summary:
    """Aggregate figures over a set of scored questions."""

    n: int
    correct: int
    wrong: int
    abstained: int
    truthfulness: float
    answer_rate: float | None
    accuracy_answered: float | None
    abstention_precision: float | None
    abstention_recall: float | None
    actions: dict[str, int] = field(default_factory=dict)
    rewrites_tried: int = 0
    keyword_rewrites: int = 0
    rescued: int = 0
    rewrite_wrong: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain-dict form for JSON."""
        return asdict(self)


def should_abstain(kind: str) -> bool:
    """Unanswerable and off-corpus questions should be declined: the corpus does not hold their answer."""
    return kind != "answerable"


def summarize(records: Sequence[Mapping[str, Any]]) -> Summary:
    """Summarise records carrying `kind`, `outcome`, `action` (and `rewritten_query` when a rewrite ran).

    Rewrites run only on questions whose first retrieval graded INCORRECT: `rescued` counts the answerable ones
    among them that end correct, `rewrite_wrong` the unanswerable or off-corpus ones that end in a wrong answer.
    Abstention precision: the share of abstentions that fell on questions that should be declined;
    abstention recall: the share of those questions that were declined. Either is None when undefined.
    """
    counts = Counter(str(r["outcome"]) for r in records)
    n = len(records)
    abstained = [r for r in records if r["outcome"] == "abstained"]
    should = [r for r in records if should_abstain(str(r["kind"]))]
    answered = n - counts["abstained"]
    actions = Counter(str(r.get("action")) for r in records)
    rewritten = [r for r in records if r.get("rewritten_query")]
    return Summary(
        n=n,
        correct=counts["correct"],
        wrong=counts["wrong"],
        abstained=counts["abstained"],
        truthfulness=truthfulness(str(r["outcome"]) for r in records),
        answer_rate=_ratio(answered, n),
        accuracy_answered=_ratio(counts["correct"], answered),
        abstention_precision=_ratio(sum(should_abstain(str(r["kind"])) for r in abstained), len(abstained)),
        abstention_recall=_ratio(sum(r["outcome"] == "abstained" for r in should), len(should)),
        actions={a: actions[a] for a in ACTIONS if actions[a]},
        rewrites_tried=len(rewritten),
        keyword_rewrites=sum(r.get("rewriter") == "keyword" for r in rewritten),
        rescued=sum(r["outcome"] == "correct" for r in rewritten),
        rewrite_wrong=sum(r["outcome"] == "wrong" and should_abstain(str(r["kind"])) for r in rewritten),
    )


def precision_coverage(
    scores: Sequence[float], kinds: Sequence[str], thresholds: Sequence[float] | None = None
) -> list[tuple[float, float, float | None, float | None]]:
    """Abstention precision and recall against coverage as the abstention threshold moves.

    A question is answered when its top grader score is >= the threshold, declined otherwise.

    Args:
        scores: Top grader score per question.
        kinds: Question class per question.
        thresholds: Thresholds to evaluate; every distinct score plus the ends when None.

    Returns:
        (threshold, coverage, abstention precision, abstention recall) rows, in threshold order.
    """
    if thresholds is None:
        thresholds = sorted({0.0, *scores, 1.0 + 1e-9})
    should = [should_abstain(k) for k in kinds]
    n_should = sum(should)
    rows = []
    for t in thresholds:
        declined = [s < t for s in scores]
        n_declined = sum(declined)
        right = sum(d and sh for d, sh in zip(declined, should, strict=True))
        coverage = (len(scores) - n_declined) / len(scores) if scores else 0.0
        rows.append((float(t), coverage, _ratio(right, n_declined), _ratio(right, n_should)))
    return rows
