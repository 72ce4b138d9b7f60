"""An answer's relevance: how near its meaning is to the question's, by the embedder's cosine.

The grader passes evidence on the question's words; a question whose one content word stands in a manual in another
sense ("What is None?" of a matrix library) gets an answer about something else. An answer relevance check in the
manner of RAGAS' answer relevancy reads meaning instead: the cosine of the question's and the answer's vectors, the
better of the message and its ask (`asks.ask_of`), as the grader grades both. Its floor (`answer_floor`) is drawn by
`python -m lab.scripts.answer_floor` on questions and the sentences that answer them.
"""

from __future__ import annotations

from fastcrag.grading.asks import ask_of
from fastcrag.retrieval.embeddings import Embedder


def answer_cosine(embedder: Embedder, question: str, answer: str) -> float:
    """The cosine of `answer` with `question`, or with the question's ask where that is nearer."""
    asked = [question] + ([ask] if (ask := ask_of(question)) else [])
    vectors = embedder.encode([answer, *asked])  # unit vectors
    return float((vectors[1:] @ vectors[0]).max())
