"""Index building: one streaming loop (documents -> chunks -> embedded batches -> store writer) for every store.

Re-runs touch only new or changed documents (by content hash); memory holds one batch of chunks at a time. The
stores implement only their storage (`fastcrag.retrieval.writing.StoreWriter`): the FAISS folder's `FaissWriter`,
Postgres's `PgWriter`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.embeddings import Embeddings
from platformdirs import user_cache_dir
from tqdm import tqdm

from fastcrag.config.settings import Settings, is_postgres_url
from fastcrag.retrieval.blocks import chunk_sections, sections
from fastcrag.retrieval.embeddings import DEFAULT_SPEC, PER_TEXT, default_embeddings
from fastcrag.retrieval.loaders import SourceDocument, python_reference
from fastcrag.retrieval.sections import chunk_id
from fastcrag.retrieval.store import FaissStore, FaissWriter, IndexLoadError
from fastcrag.retrieval.writing import ChunkBatch, DocumentEntry, StoreWriter

if TYPE_CHECKING:
    from fastcrag.retrieval.pgstore import PgWriter

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


def encode(embeddings: Embeddings, texts: list[str]) -> Any:
    """Unit-norm float32 embeddings of passages (the embedder's own `encode` when it has one)."""
    fast = getattr(embeddings, "encode", None)
    vectors = fast(texts) if callable(fast) else embeddings.embed_documents(texts)
    return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


CHUNKER = 4
"""The chunker's version: 4 never ends a chunk with a heading (it opens the next); 3 nests API entries, marks every
later chunk of a section continued and never leaves a heading alone in a chunk; 2 read structure (sections, tables,
code; `fastcrag.retrieval.blocks`); 1 ran on."""


def document_digest(text: str, chunk_tokens: int, chunk_overlap: int) -> str:
    """The content hash of a document under these chunk settings and chunker (a change of any re-indexes it)."""
    settings = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap, "chunker": CHUNKER}
    return hashlib.sha256(f"{settings}\0{text}".encode()).hexdigest()


@dataclass(frozen=True)
class ChunkedDocument:
    """A document cut into chunks as the index stores them: its entry (source, hash, chunk ids), texts, metadata."""

    entry: DocumentEntry
    texts: list[str]
    metadatas: list[dict[str, str]]


def chunk_document(doc: SourceDocument, chunk_tokens: int, chunk_overlap: int, digest: str = "") -> ChunkedDocument:
    """Cut a document into chunks with ids derived from its content hash: a pure function, callable per batch.

    Args:
        doc: The document.
        chunk_tokens: Chunk size in embedder tokens.
        chunk_overlap: Overlap between consecutive chunks, in tokens.
        digest: The document's `document_digest` under these settings, when already computed.
    """
    digest = digest or document_digest(doc.text, chunk_tokens, chunk_overlap)
    pieces = chunk_sections(sections(doc.text), chunk_tokens, chunk_overlap)
    ids = tuple(chunk_id(digest, i) for i in range(len(pieces)))
    metadatas = [{"source": doc.source, "title": title or doc.title} for title, _ in pieces]
    return ChunkedDocument(DocumentEntry(doc.source, digest, ids), [text for _, text in pieces], metadatas)


def stream_index(
    documents: Iterable[SourceDocument],
    writer: StoreWriter,
    embeddings: Embeddings,
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    batch_size: int = 256,
    progress: bool = True,
) -> BuildReport:
    """Documents -> chunks -> embedded batches -> store writer, holding at most about `batch_size` chunks at a time.

    Sources are looked up in groups of `batch_size` documents; a document whose hash is stored is skipped, a new
    or changed one is chunked into the pending batch, and a pending batch of `batch_size` chunks (or more, when one
    document alone is longer) is embedded and written as a whole, document by document.

    Args:
        documents: The documents; a source seen before with the same text is skipped, with new text replaced.
        writer: The store's writer.
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
        writer.write(list(entries), pending)
        report.chunks_added += len(pending.texts)
        bar.update(len(pending.texts))
        entries.clear()
        pending.texts, pending.metadatas, pending.ids, pending.vectors = [], [], [], None

    def process(group: list[SourceDocument]) -> None:
        known = writer.lookup(list(dict.fromkeys(d.source for d in group)))
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
            chunked = chunk_document(doc, chunk_tokens, chunk_overlap, digest)
            known[doc.source] = digest
            entries.append(chunked.entry)
            pending.texts.extend(chunked.texts)
            pending.ids.extend(chunked.entry.chunk_ids)
            pending.metadatas.extend(chunked.metadatas)
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
    report.documents_removed = writer.prune()
    changed = bool(report.chunks_added or report.documents_changed or report.documents_removed)
    report.chunks_total = writer.finish(changed)
    report.seconds = time.perf_counter() - started
    return report


def open_writer(
    target: str | Path,
    embeddings: Embeddings,
    *,
    collection: str = "default",
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    prune: bool = False,
) -> FaissWriter | PgWriter:
    """The writer of the store `target` names: a Postgres URL's collection, else a FAISS folder.

    Raises:
        IndexLoadError: the FAISS folder holds an index that is damaged or was built with another embedder.
        PgStoreError: the Postgres store is unreachable, lacks pgvector, or the collection was built with another
            embedder, or another build is writing it.
    """
    if isinstance(target, str) and is_postgres_url(target):
        from fastcrag.retrieval.pgstore import PgWriter  # psycopg is in the optional `postgres` extra

        return PgWriter(target, embeddings, collection, chunk_settings=(chunk_tokens, chunk_overlap), prune=prune)
    meta = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}
    return FaissWriter(Path(target), embeddings, meta, prune)


def build_index(
    documents: Iterable[SourceDocument],
    target: str | Path,
    embeddings: Embeddings | None = None,
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    batch_size: int = 256,
    progress: bool = True,
    prune: bool = False,
    *,
    collection: str = "default",
) -> BuildReport:
    """Add new or changed documents to a FAISS folder or a Postgres collection (created when missing).

    A FAISS folder is saved atomically as a new version at the end; Postgres takes whole documents per transaction.
    Either way a build killed at any point leaves the previous content readable.

    Args:
        documents: The documents; a source stored with the same text is skipped, with new text replaced.
        target: The FAISS index folder, or a Postgres URL.
        embeddings: The embedder (recorded with the index; another one is refused); all-MiniLM-L6-v2 when None.
        chunk_tokens: Chunk size in embedder tokens.
        chunk_overlap: Overlap between consecutive chunks, in tokens.
        batch_size: Chunks embedded and written per batch.
        progress: Show a progress bar on stderr.
        prune: Remove documents whose source is not among `documents`.
        collection: The index name in a Postgres store.

    Raises:
        IndexLoadError: the index cannot be opened for writing (`open_writer`); a `PgStoreError` for Postgres.
    """
    embeddings = embeddings or default_embeddings()
    writer = open_writer(
        target, embeddings, collection=collection, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, prune=prune
    )
    try:
        return stream_index(documents, writer, embeddings, chunk_tokens, chunk_overlap, batch_size, progress)
    finally:
        writer.close()


def default_index_dir(embedder: str | None = None) -> Path:
    """Where the embedded Python-reference index lives: the user's cache folder, one per Python version and embedder.

    The default embedder's index is named for how it embeds (`-per-text`: each text alone, so a fastcrag whose int8
    embedder batched its texts keeps its own folder instead of rebuilding this one); another `FASTRAG_EMBEDDER` gets
    its own folder, so switching between embedders does not rebuild the index each time.
    """
    name = f"python-reference-{sys.version_info.major}.{sys.version_info.minor}"
    if CHUNKER > 1:  # another chunker's chunks: a folder of their own, built once like the first
        name += f"-c{CHUNKER}"
    spec = (Settings().embedder if embedder is None else embedder).strip()
    if spec in ("", DEFAULT_SPEC):
        name += "-" + PER_TEXT.lstrip("+")
    else:
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
