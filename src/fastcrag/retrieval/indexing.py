"""Index building: load, chunk, embed in batches and persist; re-runs add only new or changed documents."""

from __future__ import annotations

import hashlib
import logging
import shutil
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fastcrag.retrieval.embeddings import SentenceTransformerEmbeddings, default_embeddings
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
    chunks_added: int = 0
    chunks_total: int = 0
    seconds: float = 0.0

    @property
    def chunks_per_second(self) -> float:
        """Embedding throughput of this build."""
        return self.chunks_added / self.seconds if self.seconds > 0 else 0.0


def build_index(
    documents: Iterable[SourceDocument],
    folder: Path,
    embeddings: SentenceTransformerEmbeddings | None = None,
    chunk_tokens: int = 128,
    chunk_overlap: int = 24,
    batch_size: int = 256,
    progress: bool = True,
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
    """
    from tqdm import tqdm

    embeddings = embeddings or default_embeddings()
    started = time.perf_counter()
    try:
        store = FaissStore.load(folder, embeddings)
    except IndexFormatError as exc:
        log.warning("%s: re-indexing every document", exc)
        store = FaissStore(embeddings)
    except IndexLoadError:
        if (folder / "CURRENT").exists():
            raise
        store = FaissStore(embeddings)
    settings = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}
    report = BuildReport()
    texts: list[str] = []
    metas: list[dict[str, str]] = []
    ids: list[str] = []
    seen: set[str] = set()
    for doc in documents:
        report.documents_seen += 1
        digest = hashlib.sha256(f"{settings}\0{doc.text}".encode()).hexdigest()
        if digest in seen:
            log.info("%s duplicates a document already in this build; skipped", doc.source)
            continue
        seen.add(digest)
        previous = store.documents.get(doc.source)
        if previous is not None and previous["hash"] == digest:
            report.documents_unchanged += 1
            continue
        if previous is not None:
            store.delete(previous["ids"])
            report.documents_changed += 1
        else:
            report.documents_added += 1
        chunks = chunk_text(doc.text, chunk_tokens, chunk_overlap)
        chunk_ids = [f"{digest[:16]}-{i}" for i in range(len(chunks))]
        store.documents[doc.source] = {"hash": digest, "ids": chunk_ids}
        texts.extend(chunks)
        ids.extend(chunk_ids)
        metas.extend({"source": doc.source, "title": doc.title} for _ in chunks)
    if texts:
        bar = tqdm(total=len(texts), unit="chunk", desc="embedding", disable=not progress, file=sys.stderr)
        for start in range(0, len(texts), batch_size):
            end = start + batch_size
            vectors = embeddings.encode(texts[start:end])
            store.add_vectors(texts[start:end], vectors, metas[start:end], ids=ids[start:end])
            bar.update(len(vectors))
        bar.close()
    report.chunks_added = len(texts)
    report.chunks_total = len(store)
    if texts or report.documents_changed or store.lexical_error or not (folder / "CURRENT").exists():
        store.save(folder, meta=settings)
    report.seconds = time.perf_counter() - started
    return report


def default_index_dir() -> Path:
    """Where the embedded Python-reference index lives: the user's cache folder, one per Python version."""
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("fastcrag")) / f"python-reference-{sys.version_info.major}.{sys.version_info.minor}"


def ensure_default_index(chunk_tokens: int = 128, chunk_overlap: int = 24, progress: bool = True) -> Path:
    """Build the embedded Python-reference index once, then reuse it."""
    folder = default_index_dir()
    try:
        store = FaissStore.load(folder, default_embeddings())
        if store.lexical_error is not None:
            print(f"fastcrag: {store.lexical_error}; rebuilding it from the chunks", file=sys.stderr)
            store.save(folder, meta={"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap})
    except IndexLoadError:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"fastcrag: building the embedded Python-reference index in {folder} (once)", file=sys.stderr)
        build_index(
            python_reference(),
            folder,
            chunk_tokens=chunk_tokens,
            chunk_overlap=chunk_overlap,
            progress=progress,
        )
    return folder
