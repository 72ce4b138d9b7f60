"""The streaming indexing loop: bounded batches of whole documents, upserts by hash, pruning; store helpers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from fastcrag.config.settings import redact_message
from fastcrag.retrieval.indexing import build_index, chunk_document, document_digest, stream_index
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.pgstore import PgStoreError, check_collection_name
from fastcrag.retrieval.store import FaissStore
from fastcrag.retrieval.writing import ChunkBatch, DocumentEntry

from fakes import HashEmbeddings


class RecordingSink:
    """An in-memory `StoreWriter` that records each write."""

    def __init__(self) -> None:
        self.hashes: dict[str, str] = {}
        self.writes: list[tuple[list[str], int]] = []
        self.lookups: list[int] = []
        self.finished: bool | None = None

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        self.lookups.append(len(sources))
        return {s: self.hashes[s] for s in sources if s in self.hashes}

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        assert batch.vectors.shape == (len(batch.texts), HashEmbeddings.dimension)
        assert sum(len(d.chunk_ids) for d in documents) == len(batch.ids)
        assert [m["source"] for m in batch.metadatas] == [d.source for d in documents for _ in d.chunk_ids]
        for d in documents:
            self.hashes[d.source] = d.digest
        self.writes.append(([d.source for d in documents], len(batch.texts)))

    def prune(self) -> int:
        return 0

    def finish(self, changed: bool) -> int:
        self.finished = changed
        return sum(n for _, n in self.writes)


def _docs(n: int, sentences: int = 1, tag: str = "") -> list[SourceDocument]:
    return [
        SourceDocument(f"doc-{i}", "t", " ".join(f"Sentence {j} of document {i} {tag}." for j in range(sentences)))
        for i in range(n)
    ]


def _stream(docs: list[SourceDocument], sink: RecordingSink, batch_size: int = 8) -> object:
    return stream_index(
        docs, sink, HashEmbeddings(), chunk_tokens=16, chunk_overlap=0, batch_size=batch_size, progress=False
    )


def test_batches_are_bounded_and_hold_whole_documents() -> None:
    sink = RecordingSink()
    report = _stream([*_docs(40), SourceDocument("long", "t", "A long sentence about things. " * 60)], sink)
    sizes = [n for _, n in sink.writes]
    long_chunks = next(n for sources, n in sink.writes if "long" in sources)
    assert max(sizes) <= 8 + long_chunks  # a batch flushes once it holds batch_size chunks
    assert all(n >= 8 for n in sizes[:-1]) and len(sink.writes) > 3
    assert max(sink.lookups) <= 8  # sources are looked up in groups, not all at once
    assert report.documents_added == 41 and sink.finished  # type: ignore[attr-defined]


def test_rerun_skips_unchanged_and_replaces_changed() -> None:
    sink = RecordingSink()
    _stream(_docs(10), sink)
    sink.writes.clear()
    again = _stream(_docs(10), sink)
    assert sink.writes == [] and again.documents_unchanged == 10 and sink.finished is False  # type: ignore[attr-defined]
    changed = _stream([*_docs(9), SourceDocument("doc-9", "t", "New text.")], sink)
    assert (changed.documents_changed, changed.documents_unchanged) == (1, 9)  # type: ignore[attr-defined]
    assert sink.writes == [(["doc-9"], 1)]


def test_a_source_twice_in_one_batch_is_written_in_order() -> None:
    sink = RecordingSink()
    _stream([SourceDocument("x", "t", "First text."), SourceDocument("x", "t", "Second text.")], sink)
    assert [sources for sources, _ in sink.writes] == [["x"], ["x"]]


def test_faiss_prune_removes_unseen_documents(tmp_path: Path) -> None:
    docs = _docs(5)
    build_index(docs, tmp_path, HashEmbeddings(), chunk_tokens=16, chunk_overlap=0, progress=False)
    report = build_index(
        docs[:3], tmp_path, HashEmbeddings(), chunk_tokens=16, chunk_overlap=0, progress=False, prune=True
    )
    assert (report.documents_removed, report.documents_unchanged) == (2, 3)
    store = FaissStore.load(tmp_path, HashEmbeddings())
    assert sorted(store.documents) == ["doc-0", "doc-1", "doc-2"]
    assert {c["metadata"]["source"] for c in store.chunks} == {"doc-0", "doc-1", "doc-2"}
    assert store._index.ntotal == len(store.chunks) == report.chunks_total


def test_errors_never_show_the_password() -> None:
    url = "postgresql://app:hunter2@db.example:5432/rag"
    assert "hunter2" not in redact_message(f"connection to {url} failed: password hunter2 rejected", url)
    for dsn in ("host=db password=hunter2 dbname=rag", "host=db password='hunter2' dbname=rag"):
        assert "hunter2" not in redact_message(f"{dsn}: password hunter2 rejected", dsn)
    encoded = "postgresql://app:p%40ss@db/rag"
    assert redact_message(f"auth failed for p@ss and p%40ss at {encoded}", encoded).count("***") == 3
    with pytest.raises(PgStoreError, match="collection name"):
        check_collection_name("bad name; drop table")
    assert check_collection_name("docs_v2.en-1") == "docs_v2.en-1"


def test_default_index_folder_is_per_embedder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from fastcrag.retrieval.indexing import default_index_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("FASTRAG_EMBEDDER", raising=False)
    default = default_index_dir()
    assert default.name.endswith("-per-text")  # not the folder of the int8 embedder that batched its texts
    base = default.with_name(default.name.removesuffix("-per-text"))
    monkeypatch.setenv("FASTRAG_EMBEDDER", "onnx-int8")
    assert default_index_dir() == default  # the default, named
    monkeypatch.setenv("FASTRAG_EMBEDDER", "sentence-transformers")
    assert default_index_dir() == base.with_name(base.name + "-sentence-transformers")
    monkeypatch.setenv("FASTRAG_EMBEDDER", "/models/my embedder/")
    assert default_index_dir() == base.with_name(base.name + "-models-my-embedder")


def test_chunking_is_a_pure_function_the_build_writes_as_it_is(tmp_path: Path) -> None:
    doc = SourceDocument("doc", "T", " ".join(f"Sentence {j} about the same subject." for j in range(30)))
    chunked = chunk_document(doc, 16, 0)
    assert chunk_document(doc, 16, 0) == chunked and len(chunked.texts) > 1
    assert chunked.entry.digest == document_digest(doc.text, 16, 0) != document_digest(doc.text, 16, 4)
    assert chunked.entry.chunk_ids == tuple(f"{chunked.entry.digest[:16]}-{i}" for i in range(len(chunked.texts)))
    build_index([doc], tmp_path, HashEmbeddings(), chunk_tokens=16, chunk_overlap=0, progress=False)
    store = FaissStore.load(tmp_path, HashEmbeddings())
    assert [(c["id"], c["text"]) for c in store.chunks] == list(
        zip(chunked.entry.chunk_ids, chunked.texts, strict=True)
    )
    assert store.documents == {"doc": {"hash": chunked.entry.digest, "ids": list(chunked.entry.chunk_ids)}}
