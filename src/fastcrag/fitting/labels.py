"""Labelling the first pass for `fastcrag fit`: which candidates are evidence, and the pairs to fine-tune on."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tqdm import tqdm

from fastcrag.fitting.questions import FitQuestion
from fastcrag.retrieval.hybrid import RoutedSearch, chunk_key
from fastcrag.retrieval.text import normalise

EXTRA_DEPTH = 10
"""Candidates fetched past `top_k`, so that a question with its evidence taken out still has `top_k` of them."""
POSITIVES_PER_QUESTION, NEGATIVES_PER_QUESTION = 2, 3
"""Training pairs per fit question: its best-ranked evidence chunks, and its best-ranked candidates without evidence."""


@dataclass(frozen=True)
class Candidate:
    """One first-pass candidate of a labelled question."""

    chunk_id: str
    source: str
    text: str
    evidence: bool


@dataclass
class Labelled:
    """A labelled question with its first pass (in first-pass order, `top_k + EXTRA_DEPTH` deep)."""

    question: FitQuestion
    candidates: list[Candidate]
    group: str = ""
    held_out: bool = False
    near_miss: list[Candidate] | None = None
    """The gold-removed view when it is not the candidates without evidence (a pseudo-question's: its evidence chunks
    with the sentence that states the answer cut out), in first-pass order."""

    def answerable_view(self, top_k: int) -> list[Candidate]:
        """What the graph grades for this question: the first `top_k` candidates."""
        return self.candidates[:top_k]

    def gold_removed_view(self, top_k: int) -> list[Candidate]:
        """What the graph would grade with the evidence out of the index: the first `top_k` without evidence."""
        if self.near_miss is not None:
            return self.near_miss[:top_k]
        return [c for c in self.candidates if not c.evidence][:top_k]

    def retrieved(self, top_k: int) -> bool:
        """Whether evidence is among the candidates the graph grades."""
        return any(c.evidence for c in self.candidates[:top_k])


def is_evidence(q: FitQuestion, source: str, text: str) -> bool:
    """Whether a chunk is evidence for `q`.

    It is when it holds one of the question's answers (case and whitespace aside), or comes from one of its sources.
    """
    if q.sources:
        return source in q.sources
    return holds_answer(text, q.answers)


def holds_answer(text: str, answers: Sequence[str]) -> bool:
    """Whether `text` holds one of `answers`, case and whitespace aside."""
    body = normalise(text)
    return any(normalise(a) in body for a in answers)


Judge = Callable[[str, Sequence[str]], list[bool | None]]
"""A chat-model judge: whether each passage answers the question (None: no verdict)."""


def first_pass(
    retriever: RoutedSearch,
    questions: Sequence[FitQuestion],
    top_k: int,
    progress: bool,
    judge: Judge | None = None,
) -> list[Labelled]:
    """Retrieve each question as `ask` does (deeper by `EXTRA_DEPTH`) and label every candidate.

    With a `judge`, the candidates the graph grades are labelled by it where it gives a verdict (a question
    labelled by `answers` only: `sources` are exact), and an unanswerable question that one of them answers is
    dropped (a near miss written by a chat model may be answered elsewhere in the corpus).
    """
    out = []
    for q in tqdm(questions, desc="first pass", unit="q", file=sys.stderr, disable=not progress):
        docs, _ = retriever.search(q.question, k=top_k + EXTRA_DEPTH)
        candidates = []
        for d in docs:
            meta = d.metadata or {}
            source, text = str(meta.get("source", "")), str(d.page_content)
            candidates.append(Candidate(chunk_key(text, meta), source, text, is_evidence(q, source, text)))
        if judge is not None and not q.sources:
            verdicts = judge(q.question, [c.text for c in candidates[:top_k]])
            if not q.answerable and any(verdicts):
                continue
            candidates = [
                c if v is None else Candidate(c.chunk_id, c.source, c.text, v)
                for c, v in zip(candidates, [*verdicts, *[None] * len(candidates)], strict=False)
            ]
        first_evidence = next((c.source for c in candidates[:top_k] if c.evidence), None)
        group = q.sources[0] if q.sources else first_evidence or f"question:{q.question}"
        out.append(Labelled(q, candidates, group))
    return out


def answer_span(q: FitQuestion, text: str) -> str:
    """The first of `q`'s answers as it stands in `text` (case and whitespace as the passage has them), or ""."""
    for answer in q.answers:
        pattern = r"\s+".join(re.escape(word) for word in answer.split())
        if found := re.search(pattern, text, flags=re.IGNORECASE):
            return found.group(0)
    return ""


def training_pairs(
    items: Sequence[Labelled], top_k: int, grade: Callable[[str, list[str]], Sequence[float]] | None = None
) -> list[tuple[str, str, float, str]]:
    """(question, passage, label, answer) examples from the fit part.

    Evidence is 1; the candidates without evidence (on topic, no answer) and an unanswerable question's candidates
    are 0: the ones `grade` (the base grader) scores highest, its own mistakes, else the best-ranked. Questions whose
    evidence was not retrieved give no pairs (a retrieval miss is not a negative). `answer` is the answer phrase as
    the evidence states it (`answers` labels; it trains a reader's span head), else "".
    """
    pairs: list[tuple[str, str, float, str]] = []
    for item in items:
        q, view = item.question, item.answerable_view(top_k)
        if q.answerable and not item.retrieved(top_k):
            continue
        pairs += [(q.question, c.text, 1.0, answer_span(q, c.text)) for c in view if c.evidence][
            :POSITIVES_PER_QUESTION
        ]
        negatives = [c for c in view if not c.evidence]
        if grade is not None and negatives:
            scores = grade(q.question, [c.text for c in negatives])
            negatives = [c for _, c in sorted(zip(scores, negatives, strict=True), key=lambda t: -t[0])]
        pairs += [(q.question, c.text, 0.0, "") for c in negatives][:NEGATIVES_PER_QUESTION]
    return pairs
