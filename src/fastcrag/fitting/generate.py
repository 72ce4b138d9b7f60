"""Fit questions written by a chat model from the user's own chunks, and a chat-model judge of passages."""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field
from tqdm import tqdm

from fastcrag.fileio import write_text_atomic
from fastcrag.fitting.questions import FitQuestion
from fastcrag.generation import prompts
from fastcrag.generation.generators import structured_call
from fastcrag.retrieval.text import normalise

MAX_CHUNK_CHARS = 1500
"""Chunk text shown to the chat model; longer chunks are cut at a word boundary."""
MIN_CHUNK_WORDS = 8
"""Shorter chunks (headings, stray lines) hold too little to ask two questions about; they are not picked."""
MIN_ANSWER_CHARS = 2
"""A shorter answer (one letter or digit) would mark nearly every chunk of the index as evidence."""
QUESTION_MARKS = ("?", "\uff1f", "\u061f")
"""A question ends with one of these (Latin, full-width, Arabic); other output is not a question."""
TIMEOUT_S = 120.0
"""Default limit for one chat-model call."""


class GeneratedQuestions(BaseModel):
    """The generation's JSON schema: one answerable question with its verbatim answer, and one near miss."""

    question: str = Field(min_length=1, max_length=200, description="A question that the text answers.")
    answer: str = Field(
        min_length=1, max_length=200, description="The answer: a short phrase copied exactly from the text."
    )
    near_miss: str = Field(
        min_length=1,
        max_length=200,
        description="A question about the same subject that the text does not answer.",
    )


class PassageVerdict(BaseModel):
    """The judge's JSON schema."""

    answers: bool = Field(description="True when the passage states the answer to the question.")


@dataclass
class GenerationStats:
    """What one `generate_questions` run asked and kept.

    Attributes:
        asked: Chunks the chat model was asked about (one call each).
        answerable: Answerable questions kept.
        near_miss: Near-miss questions kept (as unanswerable).
        answer_not_in_chunk: Answerable questions dropped because their answer is not in the chunk.
        unusable: Questions dropped for another reason: not a question (no question mark), an answer too short
            or given away by its question, a repeat of an earlier question or of the prompt's example, a near miss
            repeating its question or sharing no word with the chunk.
        failed: Calls that raised, timed out or returned output outside the schema (their chunk is skipped).
        seconds: Wall time of all calls.
    """

    asked: int = 0
    answerable: int = 0
    near_miss: int = 0
    answer_not_in_chunk: int = 0
    unusable: int = 0
    failed: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The figures, for a report."""
        return asdict(self)

    def summary(self) -> str:
        """One line for the log."""
        per_chunk = self.seconds / self.asked if self.asked else 0.0
        return (
            f"asked about {self.asked} chunks: kept {self.answerable} answerable and {self.near_miss} near-miss "
            f"questions; dropped {self.answer_not_in_chunk} whose answer is not in the chunk and {self.unusable} "
            f"unusable; {self.failed} calls failed ({per_chunk:.1f} s a chunk)"
        )


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.casefold()) if len(w) >= 4}


def _is_question(text: str) -> bool:
    return text.endswith(QUESTION_MARKS)


def _cap(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    return cut[:space] if space > limit // 2 else cut


def pick_chunks(chunks: Sequence[tuple[str, str]], n: int, seed: int = 13) -> list[tuple[str, str]]:
    """`n` chunks spread across sources: round-robin over the sources in a seeded order.

    Each source's chunks are shuffled with the same seed; chunks under `MIN_CHUNK_WORDS` words are passed over.
    """
    rng = random.Random(seed)
    by_source: dict[str, list[tuple[str, str]]] = {}
    for source, text in chunks:
        if len(text.split()) >= MIN_CHUNK_WORDS:
            by_source.setdefault(source, []).append((source, text))
    sources = sorted(by_source)
    rng.shuffle(sources)
    for source in sources:
        rng.shuffle(by_source[source])
    picked: list[tuple[str, str]] = []
    depth = 0
    while len(picked) < n and any(depth < len(by_source[s]) for s in sources):
        for source in sources:
            if len(picked) >= n:
                break
            if depth < len(by_source[source]):
                picked.append(by_source[source][depth])
        depth += 1
    return picked


def generate_questions(
    chunks: Sequence[tuple[str, str]],
    llm: BaseChatModel,
    n: int,
    seed: int = 13,
    progress: bool = True,
    timeout: float | None = TIMEOUT_S,
) -> tuple[list[FitQuestion], GenerationStats]:
    """Fit questions for a user without labels: an answerable question and a near miss per picked chunk.

    For each of `n` chunks (see `pick_chunks`), one structured call asks for a question the chunk answers, its
    answer copied from the chunk, and a near miss: a question on the same subject the chunk does not answer. The
    answerable question is kept only when its answer occurs in the chunk (case and whitespace aside); the near miss
    is kept as an unanswerable question. A failed call is counted and its chunk skipped.

    Args:
        chunks: (source, text) pairs of the user's index.
        llm: The chat model; it must support `with_structured_output`.
        n: How many chunks to ask about (up to two questions each).
        seed: Seeds the choice of chunks.
        progress: Show a progress bar on stderr.
        timeout: Seconds after which a call is abandoned and counted as failed (None: no limit).

    Returns:
        The questions, numbered 1, 2, ... in the order they were written, and what was asked and kept.
    """
    stats = GenerationStats()
    questions: list[FitQuestion] = []
    seen = {
        normalise(prompts.QUESTIONS_EXAMPLE_OUTPUT["question"]),
        normalise(prompts.QUESTIONS_EXAMPLE_OUTPUT["near_miss"]),
    }  # a copied example is unusable
    started = time.perf_counter()
    for _source, chunk in tqdm(
        pick_chunks(chunks, n, seed), desc="writing questions", unit="chunk", file=sys.stderr, disable=not progress
    ):
        text = _cap(chunk, MAX_CHUNK_CHARS)
        stats.asked += 1
        try:
            out = structured_call(llm, GeneratedQuestions, prompts.questions_messages(text), timeout)
        except Exception:  # a chat model fails in many ways (network, timeout, schema): each is one skipped chunk
            stats.failed += 1
            continue
        question, answer, near = (" ".join(s.split()) for s in (out.question, out.answer, out.near_miss))
        if normalise(answer) not in normalise(text):
            stats.answer_not_in_chunk += 1
        elif (
            not _is_question(question)
            or normalise(question) in seen
            or len(normalise(answer)) < MIN_ANSWER_CHARS
            or normalise(answer) in normalise(question)
        ):
            stats.unusable += 1
        else:
            seen.add(normalise(question))
            questions.append(FitQuestion(len(questions) + 1, question, answers=(answer,)))
            stats.answerable += 1
        if not _is_question(near) or normalise(near) in seen | {normalise(question)} or not _words(near) & _words(text):
            stats.unusable += 1
        else:
            seen.add(normalise(near))
            questions.append(FitQuestion(len(questions) + 1, near))
            stats.near_miss += 1
    stats.seconds = round(time.perf_counter() - started, 3)
    return questions, stats


def judge(
    llm: BaseChatModel, question: str, passages: Sequence[str], timeout: float | None = TIMEOUT_S
) -> list[bool | None]:
    """Whether each passage answers `question`, by the chat model: one structured call per passage.

    Args:
        llm: The chat model; it must support `with_structured_output`.
        question: The question.
        passages: Passage texts (each cut to `MAX_CHUNK_CHARS`).
        timeout: Seconds after which a call is abandoned (None: no limit).

    Returns:
        One verdict per passage; None where the call failed (the caller keeps its own labelling there).
    """
    verdicts: list[bool | None] = []
    for passage in passages:
        text = _cap(passage, MAX_CHUNK_CHARS).replace("</passage>", "")
        messages = prompts.answers_judge_messages(text, question)
        try:
            verdicts.append(bool(structured_call(llm, PassageVerdict, messages, timeout).answers))
        except Exception:  # counted by the caller as no verdict
            verdicts.append(None)
    return verdicts


def question_row(q: FitQuestion) -> dict[str, Any]:
    """One QUESTIONS.jsonl object for `q` (as `fastcrag.fitting.questions.parse_question` reads it)."""
    if q.answers:
        return {"question": q.question, "answers": list(q.answers)}
    if q.sources:
        return {"question": q.question, "sources": list(q.sources)}
    return {"question": q.question, "answerable": False}


def write_questions_jsonl(path: Path | str, questions: Sequence[FitQuestion]) -> None:
    """Write questions as QUESTIONS.jsonl, atomically, so they can be read, corrected and passed to `fit` again."""
    text = "".join(json.dumps(question_row(q), ensure_ascii=False) + "\n" for q in questions)
    write_text_atomic(Path(path), text)
