"""What kind of text a sentence is: prose, or a fragment a docs answer must not open with."""

from __future__ import annotations

import pytest

from fastcrag.retrieval.structure import prose, sentence_kind, without_label


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("The with statement wraps a block.", "prose"),
        ('funcdef ::= [decorators] "def" funcname', "grammar"),
        ("+ + + | Operation | Result | Notes |", "table"),
        ("False None True and as assert async await break", "keywords"),
        ("Changed in version 3.10: Support for parentheses.", "note"),
        (">>> import re", "code"),
    ],
)
def test_sentence_kinds(sentence: str, kind: str) -> None:
    assert sentence_kind(sentence) == kind


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        # a title and a grammar block run into the page's first paragraph
        ('The "pass" statement pass_stmt ::= "pass" "pass" is a null operation.', '"pass" is a null operation.'),
        (
            'The "nonlocal" statement nonlocal_stmt ::= "nonlocal" identifier ("," identifier)* '
            'The "nonlocal" statement causes the listed identifiers to refer to bound variables.',
            'The "nonlocal" statement causes the listed identifiers to refer to bound variables.',
        ),
        # a sentence leading into the grammar, its heading said twice
        (
            "Assignment statements Assignment statements are used to (re)bind names to values: "
            'assignment_stmt ::= (target_list "=")+ expression_list',
            "Assignment statements are used to (re)bind names to values:",
        ),
        (
            'The "with" statement The "with" statement is used to wrap a block.',
            'The "with" statement is used to wrap a block.',
        ),
        ("The city of Paris is big.", "The city of Paris is big."),
        ('The "del" statement del_stmt ::= "del" target_list', None),
        ("Note: The statement guarantees a call.", None),
    ],
)
def test_the_prose_of_a_sentence(sentence: str, expected: str | None) -> None:
    assert prose(sentence) == expected


def test_a_note_without_its_label() -> None:
    assert without_label("Note: The statement guarantees a call.") == "The statement guarantees a call."
    assert without_label("Changed in version 3.1: more.") == "Changed in version 3.1: more."
