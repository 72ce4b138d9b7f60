"""Fault matrix rows not covered by the routing tests, and property-based bad input."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcrag import build_graph
from fastcrag.config.settings import Settings
from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.loaders import SourceDocument, load_documents
from fastcrag.retrieval.text import chunk_text, clean_text, split_sentences

from fakes import CALIBRATION, FakeChat, HashEmbeddings, ListRetriever, ScriptedReranker, doc

GOOD = "The Eiffel Tower is in Paris. It was completed in 1889."


class SlowChat(FakeChat):
    delay: float = 5.0

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(self.delay)
        return super()._generate(*args, **kwargs)


def graph_with(**kwargs: Any) -> Any:
    parts: dict[str, Any] = {
        "retriever": ListRetriever(docs=[doc(GOOD, "g1")]),
        "reranker": ScriptedReranker({"Eiffel": 0.9}),
        "llm": FakeChat(),
        "calibration": CALIBRATION,
        "settings": Settings(),
    }
    return build_graph(**{**parts, **kwargs})


@pytest.mark.load
def test_llm_timeout_abstains() -> None:
    delay_s = 3.0
    graph = graph_with(llm=SlowChat(delay=delay_s), settings=Settings(llm_timeout_s=0.2))
    started = time.perf_counter()
    out = graph.invoke({"question": "Where is the Eiffel Tower?"})
    assert time.perf_counter() - started < delay_s  # cut off at the timeout, not after the slow model answered
    assert out["crag"]["action"] == "abstain" and "TimeoutError" in out["crag"]["failure"]


def test_missing_index_abstains_naming_it(tmp_path: Path) -> None:
    graph = graph_with(retriever=None, settings=Settings(index_dir=tmp_path / "nope"))
    out = graph.invoke({"question": "Where is the Eiffel Tower?"})
    assert out["crag"]["action"] == "abstain" and "no index in" in out["crag"]["failure"]


@pytest.mark.parametrize("damage", ["truncate-faiss", "drop-chunk", "garbage-manifest", "dangling-pointer"])
def test_damaged_index_abstains_naming_it(tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build_index(
        [SourceDocument("a", "A", GOOD), SourceDocument("b", "B", "Cats sleep.")],
        tmp_path,
        embeddings=HashEmbeddings(),
        progress=False,
    )
    version = next(tmp_path.glob("v-*"))
    if damage == "truncate-faiss":
        data = (version / "index.faiss").read_bytes()
        (version / "index.faiss").write_bytes(data[:40])
    elif damage == "drop-chunk":
        (version / "chunks.jsonl").write_text((version / "chunks.jsonl").read_text().splitlines()[0] + "\n")
    elif damage == "garbage-manifest":
        (version / "manifest.json").write_text("{")
    else:
        (tmp_path / "CURRENT").write_text("v-gone\n")
    import fastcrag.retrieval.embeddings

    monkeypatch.setattr(
        fastcrag.retrieval.embeddings, "default_embeddings", lambda spec=None: HashEmbeddings()
    )  # no model load
    out = graph_with(retriever=None, settings=Settings(index_dir=tmp_path)).invoke({"question": "Eiffel?"})
    assert out["crag"]["action"] == "abstain"
    assert "IndexLoadError" in out["crag"]["failure"] and str(tmp_path) in out["crag"]["failure"]


@pytest.mark.parametrize(
    "content",
    [
        '{"reranker_model": "scripted", "reranker_threshold": NaN, "crag_upper": 0.5}',
        '{"reranker_model": "scripted", "reranker_threshold": 0.8, "crag_upper": 0.5}',
        '{"reranker_model": "another", "reranker_threshold": 0.2, "crag_upper": 0.5}',
        None,
    ],
    ids=["nan", "inverted", "other-model", "missing"],
)
def test_bad_calibration_abstains_naming_the_file(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "calibration.json"
    if content is not None:
        path.write_text(content)
    out = graph_with(calibration=path).invoke({"question": "Where is the Eiffel Tower?"})
    assert out["crag"]["action"] == "abstain" and str(path) in out["crag"]["failure"]


_graph = graph_with()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.characters(codec=None, blacklist_categories=()), max_size=300))
def test_any_question_gets_an_answer_or_an_abstention(question: str) -> None:
    out = _graph.invoke({"question": question})
    assert out["crag"]["action"] in {"generate", "refine", "rewrite", "abstain"}
    assert isinstance(out["answer"], str) and out["answer"]


def test_lone_surrogates_and_huge_questions() -> None:
    assert _graph.invoke({"question": "Eiffel \ud800 tower?"})["crag"]["action"] == "generate"
    out = _graph.invoke({"question": "Eiffel " * 20_000})
    assert out["crag"]["action"] == "abstain" and "longer than" in out["crag"]["failure"]
    assert out["crag"]["failure_code"] == "question"


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=2000), st.integers(16, 128), st.integers(0, 15))
def test_any_document_text_chunks_within_budget(text: str, size: int, overlap: int) -> None:
    from fastcrag.retrieval.text import count_tokens

    cleaned = clean_text(text)
    chunks = chunk_text(cleaned, size, overlap)
    assert all(c.strip() for c in chunks)
    assert all(n <= size for n in count_tokens(chunks))
    split_sentences(cleaned)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=500), st.sampled_from([".txt", ".md", ".html", ".pdf", ".jsonl"]))
def test_any_file_bytes_load_without_crashing(tmp_path: Path, data: bytes, suffix: str) -> None:
    path = tmp_path / f"f{suffix}"
    path.write_bytes(data)
    for document in load_documents([path]):
        assert document.text.strip()
        document.text.encode("utf-8")  # always valid UTF-8 (no lone surrogates)
