"""The labelled questions `fastcrag fit` reads: one JSON object a line, checked line by line."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIN_QUESTIONS = 20
"""Fewer labelled questions cannot be split into a part to fit and a part to measure the fit on."""
MIN_HELD_OUT = 6
"""The held-out part needs at least this many questions with retrieved evidence to calibrate on."""


class FitError(ValueError):
    """The questions, the index or the options cannot be fitted on; the message says what to fix."""


@dataclass(frozen=True)
class FitQuestion:
    """One labelled question: answerable (with `answers` or `sources` naming its evidence), or not."""

    line: int
    question: str
    answers: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    @property
    def answerable(self) -> bool:
        """Whether the question has evidence in the corpus."""
        return bool(self.answers or self.sources)


def _strings(value: Any, key: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise FitError(f"{where}: `{key}` must be a non-empty list of non-empty strings")
    return tuple(v.strip() for v in value)


def parse_question(line: str, where: str, number: int) -> FitQuestion:
    """One line of QUESTIONS.jsonl.

    Raises:
        FitError: the line is not a JSON object with a non-empty `question` and exactly one of `answers`,
            `sources` or `"answerable": false`.
    """
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise FitError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise FitError(f"{where}: expected a JSON object, got {type(row).__name__}")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise FitError(f"{where}: `question` is missing or empty")
    unknown = sorted(set(row) - {"question", "answers", "sources", "answerable", "id"})
    if unknown:
        raise FitError(f"{where}: unknown keys {unknown}; expected question and one of answers, sources, answerable")
    given = [k for k in ("answers", "sources") if k in row]
    answerable = row.get("answerable", True)
    if not isinstance(answerable, bool):
        raise FitError(f"{where}: `answerable` must be true or false")
    if answerable is False:
        if given:
            raise FitError(f"{where}: `answerable: false` cannot come with `{given[0]}`")
        return FitQuestion(number, question.strip())
    if len(given) != 1:
        raise FitError(f'{where}: give exactly one of `answers`, `sources` or `"answerable": false`')
    values = _strings(row[given[0]], given[0], where)
    if given[0] == "answers":
        return FitQuestion(number, question.strip(), answers=values)
    return FitQuestion(number, question.strip(), sources=values)


def read_questions(path: Path) -> list[FitQuestion]:
    """Every labelled question of a JSONL file (blank lines skipped).

    Raises:
        FitError: the file is missing or unreadable, or a line is invalid (the error names its number).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FitError(f"questions file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FitError(f"cannot read questions file {path}: {exc}") from None
    questions = [parse_question(line, f"{path}:{n}", n) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(questions) < MIN_QUESTIONS:
        raise FitError(
            f"{path} holds {len(questions)} labelled questions; fitting needs at least {MIN_QUESTIONS} "
            f"(a part to fit and a held-out part to measure and calibrate on); label more, or use --generate"
        )
    return questions


def check_sources(questions: Sequence[FitQuestion], known: set[str], where: Path) -> None:
    """Every source a question names must be in the index.

    Raises:
        FitError: naming the first line whose source the index does not hold.
    """
    for q in questions:
        missing = [s for s in q.sources if s not in known]
        if missing:
            example = next(iter(sorted(known)), "")
            raise FitError(
                f"{where}:{q.line}: source {missing[0]!r} is not in the index (sources are named as "
                f"`fastcrag ask --json` citations name them, e.g. {example!r})"
            )


def split_held_out(groups: Sequence[str], held_out: float, seed: int) -> list[bool]:
    """Which items are held out: whole groups (a source document) at a time, seeded, about `held_out` of items.

    Groups are ordered by a seeded hash, then taken into the held-out part until it holds its share, so that no
    document's questions are on both sides.
    """
    sizes: dict[str, int] = {}
    for g in groups:
        sizes[g] = sizes.get(g, 0) + 1
    order = sorted(sizes, key=lambda g: hashlib.sha1(f"{seed}:{g}".encode()).hexdigest())
    random.Random(seed).shuffle(order)
    target, taken, chosen = held_out * len(groups), 0, set()
    for g in order:
        if taken >= target:
            break
        chosen.add(g)
        taken += sizes[g]
    return [g in chosen for g in groups]
