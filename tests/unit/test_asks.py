"""A message's ask (`fastcrag.grading.asks`) and the grade it lends the message (`checked_scores`)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from fastcrag.grading.asks import ask_of
from fastcrag.grading.reranker import RerankerError, checked_scores

RAW = (
    "I'm writing Windows paths as raw strings and the ones ending in a backslash fail; "
    "can a raw string literal end with a backslash?"
)


@pytest.mark.parametrize(
    ("message", "ask"),
    [
        (RAW, "can a raw string literal end with a backslash?"),
        ("My matrix is symmetric. Which decomposition solves it?", None),  # too little alone
        (
            "I have a C array. Which Eigen class maps an array as a matrix?",
            "Which Eigen class maps an array as a matrix?",
        ),
        (  # the question, not the last sentence
            "How do I map a plain C array as a matrix? I tried a copy loop but it was slow.",
            "How do I map a plain C array as a matrix?",
        ),
        ("Can a raw string literal end with a backslash?", None),  # one sentence: the message is its ask
        ("Apache ignores my .htaccess file. What's usually wrong?", None),  # too little alone
        ("Old tutorials use Order, Allow and Deny. Should I still write those?", None),  # too little alone
        (
            "My parameter is user_name. What will the option be called on the command line?",
            "What will the option be called on the command line?",
        ),
        ("What does {'a': 1, 'b': 2}.get('c') return?", None),  # a colon inside code ends no sentence
        ("Is v1.2.3 compatible with v1.3 servers?", None),  # dots inside a version end no sentence
        ("When was Michigan Network Inc. formed by the public universities?", None),  # nor an abbreviation's
        ("I serve my site with Apache. Which module rewrites requested URLs?", "Which module rewrites requested URLs?"),
        ("", None),
    ],
)
def test_ask_of(message: str, ask: str | None) -> None:
    assert ask_of(message) == ask


class ByQuery:
    """Grades every text by the query alone: `grades[query]`, 0.1 for any other query."""

    name = "by-query"

    def __init__(self, grades: dict[str, float]) -> None:
        self.grades = grades
        self.queries: list[str] = []

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.queries.append(query)
        return [self.grades.get(query, 0.1) for _ in texts]


def test_a_message_keeps_the_higher_of_its_own_and_its_asks_grade() -> None:
    ask = "can a raw string literal end with a backslash?"
    assert checked_scores(ByQuery({ask: 0.9}), RAW, ["a", "b"]) == [0.9, 0.9]
    assert checked_scores(ByQuery({RAW: 0.6, ask: 0.2}), RAW, ["a"]) == [0.6]  # the ask never lowers the grade


def test_a_one_sentence_question_is_graded_once() -> None:
    grader = ByQuery({})
    checked_scores(grader, "Can a raw string literal end with a backslash?", ["a"])
    assert grader.queries == ["Can a raw string literal end with a backslash?"]


def test_a_bad_grade_for_the_ask_is_an_error_too() -> None:
    class BadOnAsk(ByQuery):
        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [float("nan")] if query != RAW else [0.5]

    with pytest.raises(RerankerError, match="NaN or outside"):
        checked_scores(BadOnAsk({}), RAW, ["a"])
