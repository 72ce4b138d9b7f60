"""FAISS vector store with its BM25 twin, persisted without pickle and swapped atomically.

A version folder holds index.faiss + lexical.npz + chunks.jsonl + manifest.json, row for row in step.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from fastcrag.retrieval.embeddings import embedder_dimension, embedder_name, how_to_read, is_retired
from fastcrag.retrieval.lexical import FILE as LEXICAL_FILE
from fastcrag.retrieval.lexical import LexicalIndex, LexicalIndexError
from fastcrag.retrieval.writing import ChunkBatch, ChunkStore, DocumentEntry

log = logging.getLogger(__name__)

CURRENT = "CURRENT"
# 2: a lexical index beside the FAISS one, and passages cleaned of markup before chunking.
FORMAT_VERSION = 2


class IndexLoadError(RuntimeError):
    """The index folder is missing, damaged or out of step; the message names the folder."""


class IndexFormatError(IndexLoadError):
    """The index was written by another format version of fastcrag; rebuild it."""


class RetiredEmbedderError(IndexLoadError):
    """The index was built by an embedder no setting reads now (`embeddings.is_retired`); rebuild it."""


class FaissStore(ChunkStore):
    """Inner-product FAISS index over normalised embeddings, with its chunk store in step, row for row."""

    def __init__(
        self,
        embedding: Embeddings,
        index: Any = None,
        chunks: list[dict[str, Any]] | None = None,
        documents: dict[str, dict[str, Any]] | None = None,
        lexical: LexicalIndex | None = None,
        lexical_error: str | None = None,
    ) -> None:
        """Create a store.

        Args:
            embedding: The embedder that produced (and will produce) the vectors.
            index: A `faiss.IndexFlatIP`; a new empty one when None.
            chunks: One dict per index row: `id`, `text`, and `metadata`.
            documents: Per source document: `hash` and its chunk `ids` (for incremental updates).
            lexical: The BM25 index over `chunks`, row for row; built from the chunks on first use when None.
            lexical_error: Why the saved lexical index could not be used (then lexical search is refused).
        """
        self.embedding = embedding
        self._index = index
        self.chunks: list[dict[str, Any]] = chunks or []
        self.documents: dict[str, dict[str, Any]] = documents or {}
        self._lexical = lexical
        self.lexical_error = lexical_error
        self._rows: dict[str, int] | None = None  # chunk id -> its first row, built on first use

    def _ensure_index(self, dim: int) -> Any:
        import faiss  # a native library (about 30 ms): loaded with the first index, not on import

        if self._index is None:
            self._index = faiss.IndexFlatIP(dim)
        return self._index

    def sources(self) -> set[str]:
        """The source of every document in the store (as citations name them)."""
        return {str(c["metadata"].get("source", "")) for c in self.chunks} - {""}

    def sample_chunks(self, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` (source, text) chunks, spread over the store in a fixed pseudo-random order."""
        order = sorted(self.chunks, key=lambda c: hashlib.md5(str(c["id"]).encode()).hexdigest())
        return [(str(c["metadata"].get("source", "")), str(c["text"])) for c in order[:limit]]

    def __len__(self) -> int:
        return len(self.chunks)

    # -- writing -----------------------------------------------------------------------------------------
    def _add_chunks(self, texts: list[str], vectors: Any, metadatas: list[dict[str, Any]], ids: list[str]) -> None:
        self._ensure_index(vectors.shape[1]).add(vectors)
        self._lexical, self.lexical_error = None, None  # rebuilt from the chunks when next needed
        self._rows = None
        for text, meta, chunk_id in zip(texts, metadatas, ids, strict=True):
            self.chunks.append({"id": chunk_id, "text": text, "metadata": {**meta, "chunk_id": chunk_id}})

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove chunks by id (rebuilds the flat index from its stored vectors)."""
        if not ids or self._index is None:
            return False
        drop = set(ids)
        keep = [i for i, c in enumerate(self.chunks) if c["id"] not in drop]
        if len(keep) == len(self.chunks):
            return False
        import faiss  # a native library (about 30 ms): loaded with the first index, not on import

        vectors = self._index.reconstruct_n(0, self._index.ntotal)[keep] if keep else None
        index = faiss.IndexFlatIP(self._index.d)
        if vectors is not None:
            index.add(np.ascontiguousarray(vectors))
        self._index = index
        self.chunks = [self.chunks[i] for i in keep]
        self._lexical, self.lexical_error = None, None
        self._rows = None
        return True

    # -- reading -----------------------------------------------------------------------------------------
    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Top-k chunks by cosine similarity, with the similarity."""
        if self._index is None or self._index.ntotal == 0 or not query.strip():
            return []
        vector = np.asarray([self.embedding.embed_query(query)], dtype=np.float32)
        scores, rows = self._index.search(vector, min(k, self._index.ntotal))
        out = []
        for score, row in zip(scores[0], rows[0], strict=True):
            if row < 0:
                continue
            chunk = self.chunks[int(row)]
            out.append((Document(page_content=chunk["text"], metadata=dict(chunk["metadata"])), float(score)))
        return out

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The chunks with these ids (LangChain's `VectorStore.get_by_ids`), each carrying its id.

        Unknown ids are left out; a chunk stored under two sources (one id, two rows) is given once, as first stored.
        """
        if self._rows is None:  # built on first use; adding or deleting chunks drops it
            self._rows = {}
            for row, chunk in enumerate(self.chunks):
                self._rows.setdefault(str(chunk["id"]), row)
        out = []
        for chunk_id in dict.fromkeys(ids):
            found = self._rows.get(chunk_id)
            if found is not None:
                chunk = self.chunks[found]
                out.append(Document(id=chunk_id, page_content=chunk["text"], metadata=dict(chunk["metadata"])))
        return out

    def lexical(self) -> LexicalIndex:
        """The BM25 index over the chunks (built on first use for a store made in memory).

        Raises:
            LexicalIndexError: the saved lexical index was missing, damaged or out of step (message names it).
        """
        if self.lexical_error is not None:
            raise LexicalIndexError(self.lexical_error)
        if self._lexical is None:
            self._lexical = LexicalIndex.build([c["text"] for c in self.chunks])
        return self._lexical

    def lexical_idf(self) -> Callable[[str], float]:
        """BM25's inverse document frequency of a word (`SearchableStore`)."""
        return self.lexical().idf

    def lexical_search_with_score(self, query: str, k: int = 4) -> list[tuple[Document, float]]:
        """Top-k chunks by BM25, with the BM25 score."""
        hits = self.lexical().search(query, k) if query.strip() else []
        out = []
        for row, score in hits:
            chunk = self.chunks[row]
            out.append((Document(page_content=chunk["text"], metadata=dict(chunk["metadata"])), score))
        return out

    @classmethod
    def empty(cls, embedding: Embeddings, **kwargs: Any) -> FaissStore:
        """A new store in memory."""
        return cls(embedding)

    # -- persistence -------------------------------------------------------------------------------------
    def save(self, folder: str | Path, meta: dict[str, Any] | None = None) -> Path:
        """Write the store as a new version under `folder` and switch `folder/CURRENT` to it atomically.

        A build killed at any point leaves the previous version loadable: files are written into a fresh
        folder, flushed, and only then is the one-line pointer file replaced with `os.replace`.
        """
        import faiss  # a native library (about 30 ms): loaded with the first index, not on import

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".tmp-{uuid.uuid4().hex}"
        staging.mkdir()
        index = self._index if self._index is not None else faiss.IndexFlatIP(embedder_dimension(self.embedding))
        faiss.write_index(index, str(staging / "index.faiss"))
        if self.lexical_error is not None:  # a damaged lexical index is rebuilt from the chunks
            self._lexical, self.lexical_error = None, None
        self.lexical().save(staging / LEXICAL_FILE)
        with open(staging / "chunks.jsonl", "w", encoding="utf-8") as fh:
            for chunk in self.chunks:
                fh.write(json.dumps(chunk, ensure_ascii=False) + "\n")
        manifest = {
            "format": FORMAT_VERSION,
            "count": len(self.chunks),
            "dim": int(index.d),
            "embedder": embedder_name(self.embedding),
            "documents": self.documents,
            **(meta or {}),
        }
        (staging / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
        for name in ("index.faiss", LEXICAL_FILE, "chunks.jsonl", "manifest.json"):
            _fsync(staging / name)
        version = folder / f"v-{uuid.uuid4().hex[:12]}"
        os.replace(staging, version)
        pointer = folder / f".{CURRENT}.{uuid.uuid4().hex}"
        pointer.write_text(version.name + "\n", encoding="utf-8")
        _fsync(pointer)
        os.replace(pointer, folder / CURRENT)
        _fsync(folder)
        for old in folder.iterdir():
            if old.name != version.name and (old.name.startswith(("v-", ".tmp-", f".{CURRENT}."))):
                shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)
        return version

    @classmethod
    def load(cls, folder: str | Path, embedding: Embeddings) -> FaissStore:
        """Load the current version of a saved store.

        A lexical index that is missing, damaged or out of step does not stop the load: the store serves dense
        search and refuses lexical search with `lexical_error`, which names the file.

        Raises:
            IndexLoadError: the folder holds no index, a file is damaged, the chunk store is out of step with
                the FAISS index, or the index was built with another embedder.
            IndexFormatError: the index was written by another format version.
            RetiredEmbedderError: the index was built by a retired embedder (`embeddings.is_retired`).
        """
        import faiss  # a native library (about 30 ms): loaded with the first index, not on import

        folder = Path(folder)
        try:
            version = folder / (folder / CURRENT).read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            raise IndexLoadError(f"no index in {folder} (build one with `fastcrag index PATH --index {folder}`)")
        except OSError as exc:
            raise IndexLoadError(f"cannot read index {folder}: {exc}") from None
        if not version.name.startswith("v-") or not version.is_dir():
            raise IndexLoadError(f"index {folder}: {CURRENT} points to a missing version {version.name!r}")
        try:
            manifest = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
            index = faiss.read_index(str(version / "index.faiss"))
            with open(version / "chunks.jsonl", encoding="utf-8") as fh:
                chunks = [json.loads(line) for line in fh if line.strip()]
        except (OSError, ValueError, RuntimeError) as exc:
            raise IndexLoadError(f"index {folder} is damaged ({type(exc).__name__}: {exc}); rebuild it") from None
        if manifest.get("format") != FORMAT_VERSION:
            raise IndexFormatError(
                f"index {folder} has format {manifest.get('format')}, this fastcrag reads format {FORMAT_VERSION}; "
                "rebuild it (`fastcrag index` rebuilds it in place)"
            )
        if not (index.ntotal == len(chunks) == manifest.get("count")):
            raise IndexLoadError(
                f"index {folder} is out of step: FAISS holds {index.ntotal} vectors, the chunk store "
                f"{len(chunks)} chunks, the manifest {manifest.get('count')}; rebuild it"
            )
        name = getattr(embedding, "name", None)
        if name is not None and manifest.get("embedder") not in (None, name):
            refused = RetiredEmbedderError if is_retired(str(manifest["embedder"])) else IndexLoadError
            raise refused(
                f"index {folder} was built with embedder {manifest['embedder']!r}, not {name!r}: "
                + how_to_read(str(manifest["embedder"]), f"index it again (`fastcrag index PATHS --index {folder}`)")
            )
        lexical, lexical_error = None, None
        try:
            lexical = LexicalIndex.load(version / LEXICAL_FILE, len(chunks))
        except LexicalIndexError as exc:
            lexical_error = str(exc)
        return cls(embedding, index, chunks, manifest.get("documents", {}), lexical, lexical_error)


class FaissWriter:
    """How an index build writes a FAISS folder: the store in memory, saved as a new version when the build ends.

    A build killed before `finish` leaves the folder's previous version current (`FaissStore.save`).
    """

    def __init__(self, folder: Path, embeddings: Embeddings, meta: dict[str, Any], prune: bool = False) -> None:
        """Load the index in `folder` (a new one when there is none or it has an older format).

        Raises:
            IndexLoadError: the folder holds an index that is damaged or was built with another embedder (one that a
                setting still reads: an index of a retired embedder, like one of an older format, is built again).
        """
        self.folder = folder
        self.meta = meta
        self.prune_unseen = prune
        self.seen: set[str] = set()
        try:
            self.store = FaissStore.load(folder, embeddings)
        except (IndexFormatError, RetiredEmbedderError) as exc:  # nothing reads it: built again, in place
            log.warning("%s: re-indexing every document", exc)
            self.store = FaissStore(embeddings)
        except IndexLoadError:
            if (folder / CURRENT).exists():
                raise
            self.store = FaissStore(embeddings)

    def close(self) -> None:
        """Nothing to release: an unfinished build is dropped with the store in memory."""

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        """The stored hashes of these sources."""
        if self.prune_unseen:
            self.seen.update(sources)
        docs = self.store.documents
        return {s: str(docs[s]["hash"]) for s in sources if s in docs}

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        """Drop the documents' old chunks and add the new ones (in memory until `finish`)."""
        known = self.store.documents
        self.store.delete([cid for d in documents if d.source in known for cid in known[d.source]["ids"]])
        for d in documents:
            known[d.source] = {"hash": d.digest, "ids": list(d.chunk_ids)}
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
        if changed or self.store.lexical_error or not (self.folder / CURRENT).exists():
            self.store.save(self.folder, meta=self.meta)
        return len(self.store)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
