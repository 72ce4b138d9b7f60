"""The lexical index, hybrid fusion, their persistence beside FAISS, and the keyword rewrite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document

from fastcrag import build_graph
from fastcrag.config.settings import Settings
from fastcrag.generation.rewriters import expansion_terms, keyword_rewrite, keywords
from fastcrag.retrieval.hybrid import HybridRetriever, fuse, fused_order, rrf
from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.lexical import FILE, LexicalIndex, LexicalIndexError, terms
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.store import FORMAT_VERSION, FaissStore, IndexFormatError

from fakes import CALIBRATION, FakeChat, HashEmbeddings, ScriptedReranker

TEXTS = [
    "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
    "Bananas are yellow fruit grown in the tropics.",
    "Paris is the capital of France; its museums include the Louvre.",
    "Photosynthesis converts light into chemical energy in plant cells.",
]
DOCS = [SourceDocument(f"d{i}", f"D{i}", t) for i, t in enumerate(TEXTS)]


def build(folder: Path, docs: list[SourceDocument] = DOCS) -> FaissStore:
    build_index(docs, folder, embeddings=HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, progress=False)
    return FaissStore.load(folder, HashEmbeddings())


def current(folder: Path) -> Path:
    return folder / (folder / "CURRENT").read_text().strip()


def test_bm25_ranks_by_rare_shared_terms_and_stems() -> None:
    index = LexicalIndex.build(TEXTS)
    assert index.search("When was the Eiffel tower completed?", 4)[0][0] == 0
    assert [r for r, _ in index.search("plant cell", 4)] == [3]  # stemmed: "cells" matches "cell"
    assert index.search("the of and", 4) == []  # stop words only: nothing to match
    assert terms("Running studies") == ["run", "studi"]
    scores = index.scores("paris")
    assert scores[0] > 0 and scores[2] > 0 and scores[1] == scores[3] == 0
    assert index.idf("banana") > index.idf("paris") > 0 == index.idf("zebra")


def test_lexical_roundtrip_and_refusals(tmp_path: Path) -> None:
    index = LexicalIndex.build(TEXTS)
    path = tmp_path / FILE
    index.save(path)
    again = LexicalIndex.load(path, rows=len(TEXTS))
    assert np.array_equal(again.scores("Paris museums"), index.scores("Paris museums"))
    with pytest.raises(LexicalIndexError, match=f"{FILE}.*out of step: it indexes 4 chunks, the chunk store holds 5"):
        LexicalIndex.load(path, rows=5)
    with pytest.raises(LexicalIndexError, match=f"{FILE} is missing"):
        LexicalIndex.load(tmp_path / "nope" / FILE, rows=4)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(LexicalIndexError, match=f"{FILE} is damaged"):
        LexicalIndex.load(path, rows=4)


def test_rrf_and_fuse_deduplicate() -> None:
    assert rrf([["a", "b"], ["b", "c"]], k=1) == pytest.approx({"a": 1 / 2, "b": 1 / 3 + 1 / 2, "c": 1 / 3})

    def d(cid: str) -> Document:
        return Document(page_content=cid, metadata={"chunk_id": cid})

    fused = fuse([d("a"), d("b")], [d("b"), d("c")], k=2)
    assert [x.metadata["chunk_id"] for x in fused] == ["b", "a"] and fused[0].metadata["rrf"] > 0


def test_fused_order_moves_from_the_grader_to_the_first_pass() -> None:
    scores = [0.2, 0.9, 0.5, 0.1]  # candidates in first-pass order
    assert fused_order(scores, 1.0) == [1, 2, 0, 3]  # the grader's order
    assert fused_order(scores, 0.0) == [0, 1, 2, 3]  # the first pass's
    mixed = fused_order(scores, 0.5, k=1)  # halves of 0: 1/4 + 1/2, 1: 1/2 + 1/3, 2: 1/3 + 1/4, 3: 1/5 + 1/5
    assert mixed == [1, 0, 2, 3]
    assert fused_order([0.5, 0.5, 0.5], 0.3) == [0, 1, 2] and fused_order([], 0.5) == []


def test_store_saves_lexical_index_beside_faiss(tmp_path: Path) -> None:
    store = build(tmp_path)
    assert (current(tmp_path) / FILE).is_file() and store.lexical_error is None
    manifest = json.loads((current(tmp_path) / "manifest.json").read_text())
    assert manifest["format"] == FORMAT_VERSION
    retriever = HybridRetriever(store=store, k=3)
    docs, route = retriever.search("Eiffel Tower completed 1889")
    assert route == "hybrid" and docs[0].metadata["source"] == "d0" and "rrf" in docs[0].metadata
    docs, route = retriever.search("Eiffel Tower completed 1889", "lexical")
    assert route == "lexical" and docs[0].metadata["lexical_score"] > 0
    assert retriever.search("x", "dense")[1] == "dense"
    # an incremental re-run keeps FAISS and BM25 in step
    build(tmp_path, [*DOCS, SourceDocument("d9", "D9", "Zebras have black and white stripes.")])
    store = FaissStore.load(tmp_path, HashEmbeddings())
    assert len(store.lexical()) == len(store) and store.lexical_search_with_score("zebra stripes", 1)


@pytest.mark.parametrize("damage", ["missing", "truncated", "out-of-step"])
def test_unusable_lexical_index_falls_back_to_dense_and_says_so(tmp_path: Path, damage: str) -> None:
    build(tmp_path)
    path = current(tmp_path) / FILE
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    else:
        LexicalIndex.build(TEXTS[:2]).save(path)
    store = FaissStore.load(tmp_path, HashEmbeddings())
    retriever = HybridRetriever(store=store, k=2)
    docs, route = retriever.search("Eiffel")
    assert route.startswith("dense (fallback: lexical index") and str(path) in route and docs
    with pytest.raises(LexicalIndexError, match=str(path)):
        retriever.search("Eiffel", "lexical")
    graph = build_graph(
        retriever=store, reranker=ScriptedReranker({"Eiffel": 0.9}), llm=FakeChat(), calibration=CALIBRATION
    )
    crag = graph.invoke({"question": "Where is the Eiffel Tower?"})["crag"]
    assert crag["action"] == "generate" and crag["retrieval"].startswith("dense (fallback: lexical index")
    # re-indexing repairs it from the chunk store
    build(tmp_path)
    assert FaissStore.load(tmp_path, HashEmbeddings()).lexical_error is None


def test_index_of_another_format_is_refused_then_rebuilt(tmp_path: Path) -> None:
    build(tmp_path)
    manifest_path = current(tmp_path) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps(manifest | {"format": 1}))
    with pytest.raises(IndexFormatError, match="format 1"):
        FaissStore.load(tmp_path, HashEmbeddings())
    report = build_index(DOCS, tmp_path, embeddings=HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, progress=False)
    assert report.documents_added == len(DOCS)
    assert FaissStore.load(tmp_path, HashEmbeddings()).lexical_error is None


def test_keywords_keep_entities_numbers_and_quoted_phrases() -> None:
    assert keywords('How does the "with statement" work in Python 3.12?') == [
        '"with statement"',
        "work",
        "Python",
        "3.12",
    ]
    assert keywords("What is it?") == []
    assert keywords('":"') == [] and keywords('What does ":" mean in a "slice"?') == ['"slice"']
    assert keyword_rewrite("Who founded Acme Corp in 1999?") == "founded Acme Corp 1999"


def test_expansion_terms_come_from_several_feedback_passages() -> None:
    feedback = ["The context manager protocol uses enter.", "A context manager defines exit.", "Only here: zebra."]
    assert expansion_terms(feedback, ["with statement"]) == ["context", "manager"]
    assert expansion_terms(feedback, ["context"], idf=lambda w: 0.0) == []
    assert keyword_rewrite("How does the with statement work?", feedback) == "statement work context manager"


ANY_TEXT = st.text(alphabet=st.characters(codec=None, blacklist_categories=()), max_size=400)  # as test_faults


@settings(max_examples=200, deadline=None)
@given(ANY_TEXT, st.lists(ANY_TEXT, max_size=4))
def test_keyword_rewrite_never_crashes_and_stays_bounded(question: str, feedback: list[str]) -> None:
    query = keyword_rewrite(question, feedback)
    assert isinstance(query, str) and query == query.strip()
    if not any(ch.isalnum() for ch in question):
        assert query == ""  # nothing to search: the node abstains
    LexicalIndex.build(feedback or ["x"]).search(query, 3)


@pytest.fixture(scope="module")
def hybrid_graph(tmp_path_factory: pytest.TempPathFactory) -> object:
    store = build(tmp_path_factory.mktemp("index"))
    chat = FakeChat(rewrite=RuntimeError("no model"))  # every rewrite falls to the keyword rewrite
    return build_graph(retriever=store, reranker=ScriptedReranker({}), llm=chat, calibration=CALIBRATION)


@settings(max_examples=60, deadline=None)
@given(ANY_TEXT)
def test_any_question_through_hybrid_and_keyword_rewrite_abstains_cleanly(hybrid_graph: Any, question: str) -> None:
    out = hybrid_graph.invoke({"question": question})
    assert out["answer"] == "I don't know." and out["crag"]["action"] == "abstain"
    assert out["crag"]["rewriter"] in (None, "keyword")


def test_embedded_index_is_rebuilt_when_its_format_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastcrag.retrieval import indexing

    folder = tmp_path / "embedded"
    monkeypatch.setattr(indexing, "default_index_dir", lambda embedder=None: folder)
    monkeypatch.setattr(indexing, "default_embeddings", lambda spec=None: HashEmbeddings())
    monkeypatch.setattr(indexing, "python_reference", lambda: iter(DOCS))
    assert indexing.ensure_default_index(32, 8, progress=False) == folder
    first = current(folder)
    assert indexing.ensure_default_index(32, 8, progress=False) == folder and current(folder) == first  # reused
    manifest = json.loads((first / "manifest.json").read_text())
    (first / "manifest.json").write_text(json.dumps(manifest | {"format": FORMAT_VERSION - 1}))
    indexing.ensure_default_index(32, 8, progress=False)
    assert current(folder) != first and FaissStore.load(folder, HashEmbeddings()).lexical_error is None


def test_retry_grades_only_passages_the_first_pass_did_not(tmp_path: Path) -> None:
    """The rewrite's retrieval reaches past the first pass's candidates; their scores are kept, not recomputed."""
    store = build(tmp_path)
    reranker = ScriptedReranker({"Photosynthesis": 0.9})
    chat = FakeChat(rewrite={"query": "plant light energy"})
    settings_ = Settings(top_k=2)
    graph = build_graph(retriever=store, reranker=reranker, llm=chat, calibration=CALIBRATION, settings=settings_)
    out = graph.invoke({"question": "Where is the Eiffel Tower?"})
    first, retry = (set(texts) for _, texts in reranker.calls)
    assert len(reranker.calls) == 2 and len(first) == 2 and retry and not first & retry
    assert len(out["crag"]["verdicts"]) == len(first | retry)  # both passes' candidates stay graded
    assert out["crag"]["action"] == "rewrite" and out["crag"]["band"] == "CORRECT"
