"""Documentation questions in the calibration pool: asked of their own manual and of another (`lab.calibrate_docs`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.documents import Document

from lab import calibrate_docs
from lab.calibrate_docs import declined_shares, docs_sample, parse_manual

QUESTIONS = {f"page{i}.html#s": f"How do I do thing {i}?" for i in range(12)}
OWN, OTHER = Path("own-index"), Path("other-index")


class WordGrader:
    """Grades a passage 0.9 when it names the question's thing, else 0.1."""

    name = "word-grader"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        thing = query.rsplit(" ", 1)[-1].rstrip("?")
        return [0.9 if f"thing {thing}" in t else 0.1 for t in texts]


class NearEmbedder:
    """Unit vectors: a question and a passage are near (cosine 1) when the passage says it is, else orthogonal."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [[0.0, 1.0] if t.startswith("How") or "near" in t else [1.0, 0.0] for t in texts]


class Manual:
    """A fake index's retriever: the own manual answers; the other says something else, near thing 11's question."""

    k = 10

    def __init__(self, index: Path) -> None:
        self.index, self.store = index, f"store of {index}"

    def candidates(self, question: str) -> list[Document]:
        thing = question.rsplit(" ", 1)[-1].rstrip("?")
        if self.index == OWN:  # thing 3's own page is not among its candidates
            text, page = f"You do thing {thing} so.", f"page{thing if thing != '3' else 'x'}.html"
        else:
            text, page = ("near words." if thing == "11" else "Other words."), "other.html"
        return [Document(page_content=text, metadata={"chunk_id": f"{self.index}-{thing}", "source": page})]


@pytest.fixture
def manual(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate_docs, "written_questions", lambda name: QUESTIONS)
    monkeypatch.setattr(calibrate_docs, "_retriever", Manual)
    monkeypatch.setattr(calibrate_docs, "_retrieved", lambda r, qs: {q: r.candidates(q) for q in qs})
    monkeypatch.setattr(calibrate_docs, "HybridRetriever", Manual)
    monkeypatch.setattr(calibrate_docs, "default_embeddings", NearEmbedder)


def test_written_questions_are_asked_of_their_own_manual_and_of_another(manual: None) -> None:
    sample = docs_sample([("m", OWN)], [OWN, OTHER], WordGrader(), per_manual=4, seed=1, refine_k=6)
    kinds = [o.kind for o in sample.observations]
    assert kinds.count("answerable") == 4 and kinds.count("off_corpus") >= 1
    answerable = [o for o in sample.observations if o.kind == "answerable"]
    assert all(o.top_score == 0.9 and o.top_chunk.startswith("own-index") for o in answerable)
    off = [o for o in sample.observations if o.kind == "off_corpus"]
    assert all(o.top_score == 0.1 and o.top_chunk.startswith("other-index") for o in off)  # never its own index
    counts = sample.metrics["questions"]["m"]
    assert counts["answerable"] == 4 and counts["off_corpus"] == len(off) <= 4
    assert sample.metrics["auc_answerable_vs_off_corpus"] == 1.0
    assert "m (4 + " in sample.data
    assert sample.pseudo == []  # no pseudo-questions asked for


def test_both_sides_of_the_pseudo_question_gap_are_gathered(manual: None) -> None:
    made: list[tuple[object, int]] = []

    def pseudo_of(store: object, k: int) -> list[float]:
        made.append((store, k))
        return [0.95, 0.97]

    sample = docs_sample([("m", OWN)], [OTHER], WordGrader(), per_manual=12, seed=1, refine_k=6, pseudo_of=pseudo_of)
    assert made == [("store of own-index", 10)]  # the manual's own index, as deep as the graph grades
    assert sample.pseudo == [0.95, 0.97]
    assert sample.real == [0.9] * 11  # thing 3's right page was not among its candidates: its grade is left out


def test_a_question_the_wrong_manual_may_answer_is_left_out(manual: None) -> None:
    sample = docs_sample([("m", OWN)], [OTHER], WordGrader(), per_manual=6, seed=1, refine_k=6)
    counts = sample.metrics["questions"]["m"]
    own = {o.top_chunk.split("-", 1)[1] for o in sample.observations if o.kind == "answerable"}
    other = {o.top_chunk.split("-", 1)[1] for o in sample.observations if o.kind == "off_corpus"}
    assert not own & other  # the two draws are disjoint
    assert "11" not in own | other  # drawn for the wrong manual, whose candidate sits near it (cosine 1 >= CROSS_BELOW)
    assert counts["off_corpus_left_out_near"] == 1 and counts["off_corpus"] == len(other) == 5


def test_declined_shares_and_a_bad_manual_spec() -> None:
    obs = [
        calibrate_docs.Observation(kind, score, "c", "c")
        for kind, score in [("answerable", 0.2), ("answerable", 0.8), ("off_corpus", 0.1), ("off_corpus", 0.6)]
    ]
    assert declined_shares(obs, 0.5) == {"answerable": 0.5, "off_corpus": 0.5}
    assert parse_manual("sqlalchemy=idx") == ("sqlalchemy", Path("idx"))
    with pytest.raises(ValueError, match="NAME=INDEX"):
        parse_manual("idx")
    with pytest.raises(ValueError, match="no written questions"):
        parse_manual("no-such-manual=idx")
    assert declined_shares(obs, 0.0) == {"answerable": 0.0, "off_corpus": 0.0}
