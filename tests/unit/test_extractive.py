"""The extractive generator: a few sentences for how/why/what-is questions, one for a fact, never a pointer line."""

from __future__ import annotations

import pytest

from fastcrag.generation.generators import (
    EXPLAIN_SENTENCES,
    ExtractiveGenerator,
    asks_for_explanation,
    is_reference_line,
)

from fakes import ScriptedReranker

WITH = (
    "See also: PEP 343 - The with statement and its background. "
    "The with statement wraps the execution of a block with methods defined by a context manager. "
    "Bananas are yellow. "
    "The context manager's __enter__() method is invoked before the block runs. "
    "Its __exit__() method is invoked when the block is left, even by an exception."
)


@pytest.mark.parametrize(
    ("question", "explain"),
    [
        ("How does the with statement work?", True),
        ("Why is the sky blue?", True),
        ("What is a context manager?", True),
        ("Explain decorators", True),
        ("How many children were infected?", False),
        ("How long is the river?", False),
        ("What is the capital of France?", False),
        ("Who won the 2018 World Cup?", False),
        ("When did it end?", False),
    ],
)
def test_question_kinds(question: str, explain: bool) -> None:
    assert asks_for_explanation(question) is explain


def test_reference_lines() -> None:
    assert is_reference_line("See also: PEP 343 - The with statement")
    assert is_reference_line("Compound statements")  # a bare heading
    assert is_reference_line("Links: http://a.example http://b.example")
    assert not is_reference_line("Note that the lock is released when the block ends.")
    assert not is_reference_line("The with statement wraps a block.")


def test_a_how_question_gets_the_best_sentences_in_passage_order() -> None:
    grader = ScriptedReranker({"See also": 0.99, "wraps": 0.9, "__enter__": 0.8, "__exit__": 0.7, "Bananas": 0.1})
    passages = [{"text": WITH, "source": "pydoc:with", "score": 0.9}, {"text": "Unrelated text here.", "score": 0.2}]
    answer = ExtractiveGenerator(grader).generate("How does the with statement work?", passages)
    assert answer.used == [0]
    assert "See also" not in answer.text and "Bananas" not in answer.text
    assert answer.text.index("wraps") < answer.text.index("__enter__") < answer.text.index("__exit__")
    assert answer.text.count(". ") + 1 <= EXPLAIN_SENTENCES


def test_a_factoid_question_gets_one_sentence_never_a_reference_line() -> None:
    grader = ScriptedReranker({"See also": 0.99, "__enter__": 0.8})
    answer = ExtractiveGenerator(grader).generate("When is __enter__ called?", [{"text": WITH, "score": 0.9}])
    assert answer.text == "The context manager's __enter__() method is invoked before the block runs."


def test_only_reference_lines_leave_nothing_to_answer_with() -> None:
    with pytest.raises(ValueError, match="no passage text"):
        ExtractiveGenerator(ScriptedReranker({})).generate("How?", [{"text": "See also: PEP 343.", "score": 0.9}])
