"""A question's ask: the last question a message of several sentences puts, graded beside the whole message.

People ask as they would ask a colleague: "I'm writing Windows paths as raw strings and the ones ending in a
backslash fail; can a raw string literal end with a backslash?". The grader was trained on one-sentence questions and
grades the right passage low against such a message, since most of its words describe the asker, not the answer. A
passage is therefore graded against the whole message and against its ask, and keeps the higher grade. An ask of fewer
than three content words ("why?", "what's usually wrong?", "where did that group settle?") says too little alone: it
is not graded apart, and the message keeps its one grade.
"""

from __future__ import annotations

import re

from fastcrag.retrieval.lexical import words

_BREAK = re.compile(r"(?<=[.?!;])\s+")
# a full stop after a word ("file.", "Apache."), not after an abbreviation ("Mr.", "Inc.", "R.F.C.", "e.g.") or a number
_ENDS_SENTENCE = re.compile(r"(?:^|\s)(?:[a-z_][\w-]+|[A-Z][a-z]{3,})\.$|[?!;]$")
MIN_ASK_WORDS = 3  # content words (of two letters or more) an ask must hold to be graded on its own


def ask_of(question: str) -> str | None:
    """The last question (else sentence) of a message of several sentences, if it says enough alone; else None."""
    sentences: list[str] = []
    for piece in _BREAK.split(question.strip()):
        if sentences and not _ENDS_SENTENCE.search(sentences[-1]):
            sentences[-1] += " " + piece
        else:
            sentences.append(piece)
    if len(sentences) < 2:
        return None
    ask = [s for s in sentences if s.endswith("?")][-1:] or sentences[-1:]
    content = [w for w in words(ask[0]) if len(w) > 1]
    return ask[0] if len(content) >= MIN_ASK_WORDS else None
