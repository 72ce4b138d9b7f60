"""The reader head's contract: the best answer span of a passage, decoded from start/end logits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

#: Longest answer span considered, in word pieces.
MAX_SPAN_TOKENS = 30


@dataclass(frozen=True)
class Span:
    """The best answer span of one passage.

    Attributes:
        text: The answer phrase, verbatim from the passage.
        start: Character offset of the phrase in the passage.
        end: Character offset just past the phrase.
        score: Confidence in [0, 1] that the passage states this answer (sigmoid of span minus no-answer logit).
    """

    text: str
    start: int
    end: int
    score: float


@runtime_checkable
class Reader(Protocol):
    """A grader that also reads: the answer span of each passage, from the same forward pass as its score."""

    name: str

    def read(self, query: str, texts: Sequence[str]) -> list[Span | None]:
        """The best span of each text (None when the text has no span at all, e.g. it is empty)."""
        ...


def is_reader(obj: object) -> bool:
    """Whether `obj` can read spans (an ONNX grader exported with the reader head)."""
    return isinstance(obj, Reader) and bool(getattr(obj, "has_reader", True))


def best_span(start: Any, end: Any, passage_mask: Any, max_tokens: int = MAX_SPAN_TOKENS) -> tuple[int, int, float]:
    """The (start, end) token pair maximising start + end logits with start <= end < start + max_tokens.

    Args:
        start: Start logits of one sequence (1-D).
        end: End logits of one sequence (1-D).
        passage_mask: True at the passage's tokens (the only places a span may start or end).
        max_tokens: Longest span in tokens.

    Returns:
        (start index, end index, span logit); (-1, -1, -inf) when the passage has no token.
    """
    s = np.where(passage_mask, np.asarray(start, dtype=np.float64), -np.inf)
    e = np.where(passage_mask, np.asarray(end, dtype=np.float64), -np.inf)
    n = len(s)
    if not np.isfinite(s).any():
        return -1, -1, float("-inf")
    # scores[i, k] = s[i] + e[i + k] for spans of length k + 1
    width = min(max_tokens, n)
    padded = np.concatenate([e, np.full(width, -np.inf)])
    windows = np.stack([padded[k : k + n] for k in range(width)], axis=1)
    scores = s[:, None] + windows
    flat = int(np.argmax(scores))
    i, k = divmod(flat, width)
    return i, i + k, float(scores[i, k])


def span_margins(starts: Any, ends: Any, masks: Any) -> list[tuple[int, int, float]]:
    """Best span and its margin over the no-answer logit (position 0, [CLS]) for each sequence of a batch.

    Args:
        starts: Start logits, one row per sequence (an array or a sequence of rows).
        ends: End logits, likewise.
        masks: Passage-token masks, likewise.
    """
    out = []
    for s, e, m in zip(starts, ends, masks, strict=True):
        i, j, logit = best_span(s, e, m)
        out.append((i, j, logit - float(s[0]) - float(e[0])))
    return out
