"""Index building: one streaming loop (documents -> chunks -> embedded batches -> sink) for FAISS and Postgres.

Re-runs touch only new or changed documents (by content hash); memory holds one batch of chunks at a time.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from langchain_core.embeddings import Embeddings
from platformdirs import user_cache_dir
from tqdm import tqdm

from fastcrag.config.settings import Settings
from fastcrag.retrieval.embeddings import DEFAULT_SPEC, default_embeddings
from fastcrag.retrieval.loaders import SourceDocument, python_reference
from fastcrag.retrieval.store import FaissStore, IndexFormatError, IndexLoadError
from fastcrag.retrieval.text import chunk_text

log = logging.getLogger(__name__)


@dataclass
class BuildReport:
    """What one build did."""

    documents_seen: int = 0
    documents_added: int = 0
    documents_changed: int = 0
    documents_unchanged: int = 0
    documents_removed: int = 0
    chunks_added: int = 0
    chunks_total: int = 0
    seconds: float = 0.0

    @property
    def chunks_per_second(self) -> float:
        """Embedding throughput of this build."""
        return self.chunks_added / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class DocumentEntry:
    """A new or changed document on its way to a sink: its source, content hash and chunk ids."""

    source: str
    digest: str
    chunk_ids: tuple[str, ...]


@dataclass
class ChunkBatch:
    """Chunks with their unit-norm embeddings (`vectors`, float32, one row per chunk)."""

    texts: list[str]
    metadatas: list[dict[str, str]]
    ids: list[str]
    vectors: Any


class IndexSink(Protocol):
    """Where the streaming indexing loop writes: the FAISS folder (`FaissSink`) or Postgres (`PgSink`)."""

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        """The stored content hash of each of these sources the index holds (and note them as seen)."""
        ...

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        """Replace or add whole documents: each document's old chunks go, `batch` (all their chunks) comes in."""
        ...

    def prune(self) -> int:
        """Remove the documents whose source was not seen in this run (when asked to); returns how many."""
        ...

    def finish(self, changed: bool) -> int:
        """Make the build durable and visible; returns the chunks in the index."""
        ...


def encode(embeddings: Embeddings, texts: list[str]) -> Any:
    """Unit-norm float32 embeddings of passages (the embedder's own `encode` when it has one)."""
    fast = getattr(embeddings, "encode", None)
    vectors = fast(texts) if callable(fast) else embeddings.embed_documents(texts)
    return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


def document_digest(text: str, chunk_tokens: int, chunk_overlap: int) -> str:
    """The content hash of a document under these chunk settings (a change of either re-indexes it)."""
    settings = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}
    return hashlib.sha256(f"{settings}\0{text}".encode()).hexdigest()


def stream_index(
    documents: Iterable[SourceDocument],
    sink: IndexSink,
    embeddings: Embeddings,
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    batch_size: int = 256,
    progress: bool = True,
) -> BuildReport:
    """Documents -> chunks -> embedded batches -> sink, holding at most about `batch_size` chunks at a time.

    Sources are looked up in groups of `batch_size` documents; a document whose hash is stored is skipped, a new
    or changed one is chunked into the pending batch, and a pending batch of `batch_size` chunks (or more, when one
    document alone is longer) is embedded and written as a whole, document by document.

    Args:
        documents: The documents; a source seen before with the same text is skipped, with new text replaced.
        sink: Where to write.
        embeddings: The embedder.
        chunk_tokens: Chunk size in embedder tokens.
        chunk_overlap: Overlap between consecutive chunks, in tokens.
        batch_size: Chunks embedded and written per batch.
        progress: Show a progress bar on stderr.
    """
    started = time.perf_counter()
    report = BuildReport()
    batch_size = max(1, batch_size)
    seen: set[bytes] = set()  # 16-byte digests of this run's documents, for duplicates under other sources
    entries: list[DocumentEntry] = []
    pending = ChunkBatch([], [], [], None)
    bar = tqdm(unit="chunk", desc="indexing", disable=not progress, file=sys.stderr)

    def flush() -> None:
        if not entries:
            return
        parts = [
            encode(embeddings, pending.texts[i : i + batch_size]) for i in range(0, len(pending.texts), batch_size)
        ]
        pending.vectors = np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)
        sink.write(list(entries), pending)
        report.chunks_added += len(pending.texts)
        bar.update(len(pending.texts))
        entries.clear()
        pending.texts, pending.metadatas, pending.ids, pending.vectors = [], [], [], None

    def process(group: list[SourceDocument]) -> None:
        known = sink.lookup(list(dict.fromkeys(d.source for d in group)))
        for doc in group:
            digest = document_digest(doc.text, chunk_tokens, chunk_overlap)
            key = bytes.fromhex(digest[:32])
            if key in seen:
                log.info("%s duplicates a document already in this build; skipped", doc.source)
                continue
            seen.add(key)
            previous = known.get(doc.source)
            if previous == digest:
                report.documents_unchanged += 1
                continue
            if previous is not None:
                report.documents_changed += 1
            else:
                report.documents_added += 1
            if any(e.source == doc.source for e in entries):
                flush()  # the same source twice in one batch: write the first before replacing it
            chunks = chunk_text(doc.text, chunk_tokens, chunk_overlap)
            chunk_ids = tuple(f"{digest[:16]}-{i}" for i in range(len(chunks)))
            known[doc.source] = digest
            entries.append(DocumentEntry(doc.source, digest, chunk_ids))
            pending.texts.extend(chunks)
            pending.ids.extend(chunk_ids)
            pending.metadatas.extend({"source": doc.source, "title": doc.title} for _ in chunks)
            if len(pending.texts) >= batch_size:
                flush()

    group: list[SourceDocument] = []
    for doc in documents:
        report.documents_seen += 1
        group.append(doc)
        if len(group) >= batch_size:
            process(group)
            group = []
    process(group)
    flush()
    bar.close()
    report.documents_removed = sink.prune()
    changed = bool(report.chunks_added or report.documents_changed or report.documents_removed)
    report.chunks_total = sink.finish(changed)
    report.seconds = time.perf_counter() - started
    return report


class FaissSink:
    """The FAISS folder as an indexing sink: the store in memory, saved as a new version when the build ends."""

    def __init__(self, folder: Path, embeddings: Embeddings, meta: dict[str, Any], prune: bool = False) -> None:
        """Load the index in `folder` (a new one when there is none or it has an older format).

        Raises:
            IndexLoadError: the folder holds an index that is damaged or was built with another embedder.
        """
        self.folder = folder
        self.meta = meta
        self.prune_unseen = prune
        self.seen: set[str] = set()
        try:
            self.store = FaissStore.load(folder, embeddings)
        except IndexFormatError as exc:
            log.warning("%s: re-indexing every document", exc)
            self.store = FaissStore(embeddings)
        except IndexLoadError:
            if (folder / "CURRENT").exists():
                raise
            self.store = FaissStore(embeddings)

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        """The stored hashes of these sources."""
        if self.prune_unseen:
            self.seen.update(sources)
        docs = self.store.documents
        return {s: str(docs[s]["hash"]) for s in sources if s in docs}

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        """Drop the documents' old chunks and add the new ones (in memory until `finish`)."""
        old = [
            cid for d in documents if d.source in self.store.documents for cid in self.store.documents[d.source]["ids"]
        ]
        self.store.delete(old)
        for d in documents:
            self.store.documents[d.source] = {"hash": d.digest, "ids": list(d.chunk_ids)}
        self.store.add_vectors(batch.texts, batch.vectors, batch.metadatas, ids=batch.ids)

    def prune(self) -> int:
        """Drop the documents not seen in this run (when pruning)."""
        if not self.prune_unseen:
            return 0
        gone = [s for s in self.store.documents if s not in self.seen]
        self.store.delete([cid for s in gone for cid in self.store.documents[s]["ids"]])
        for s in gone:
            del self.store.documents[s]
        return len(gone)

    def finish(self, changed: bool) -> int:
        """Save a new version when anything changed (or the lexical index needs repair, or there is none yet)."""
        if changed or self.store.lexical_error or not (self.folder / "CURRENT").exists():
            self.store.save(self.folder, meta=self.meta)
        return len(self.store)


def build_index(
    documents: Iterable[SourceDocument],
    folder: Path,
    embeddings: Embeddings | None = None,
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    batch_size: int = 256,
    progress: bool = True,
    prune: bool = False,
) -> BuildReport:
    """Add new or changed documents to the index in `folder` (created when missing) and save it atomically.

    Args:
        documents: The documents; a source seen before with the same text is skipped, with new text replaced.
        folder: The index folder.
        embeddings: The embedder; the default all-MiniLM-L6-v2 when None.
        chunk_tokens: Chunk size in embedder tokens.
        chunk_overlap: Overlap between consecutive chunks, in tokens.
        batch_size: Chunks embedded per batch.
        progress: Show a progress bar on stderr.
        prune: Remove documents whose source is not among `documents`.
    """
    embeddings = embeddings or default_embeddings()
    sink = FaissSink(folder, embeddings, {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}, prune)
    return stream_index(documents, sink, embeddings, chunk_tokens, chunk_overlap, batch_size, progress)


def default_index_dir(embedder: str | None = None) -> Path:
    """Where the embedded Python-reference index lives: the user's cache folder, one per Python version and embedder.

    The default embedder's index has no suffix; another `FASTRAG_EMBEDDER` gets its own folder, so switching between
    embedders does not rebuild the index each time.
    """
    name = f"python-reference-{sys.version_info.major}.{sys.version_info.minor}"
    spec = (Settings().embedder if embedder is None else embedder).strip()
    if spec not in ("", DEFAULT_SPEC):
        name += "-" + re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-")[-60:]
    return Path(user_cache_dir("fastcrag")) / name


def ensure_default_index(
    chunk_tokens: int = 128, chunk_overlap: int = 24, progress: bool = True, embedder: str | None = None
) -> Path:
    """Build the embedded Python-reference index once with `embedder` (default: `FASTRAG_EMBEDDER`), then reuse it."""
    folder = default_index_dir(embedder)
    embeddings = default_embeddings(embedder)
    try:
        store = FaissStore.load(folder, embeddings)
        if store.lexical_error is not None:
            print(f"fastcrag: {store.lexical_error}; rebuilding it from the chunks", file=sys.stderr)
            store.save(folder, meta={"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap})
    except IndexLoadError:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"fastcrag: building the embedded Python-reference index in {folder} (once)", file=sys.stderr)
        build_index(
            python_reference(),
            folder,
            embeddings,
            chunk_tokens=chunk_tokens,
            chunk_overlap=chunk_overlap,
            progress=progress,
        )
    return folder
