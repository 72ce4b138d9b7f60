"""The write interface both stores implement: `ChunkStore` for LangChain's writes, `StoreWriter` for indexing.

A store implements only its own storage: `ChunkStore.add_vectors` (chunks whose embeddings are computed) and a
`StoreWriter` (what it holds by content hash, whole documents in, unseen documents out, the build made durable).
The embedding, chunking, hashing, batching and the report are `fastcrag.retrieval.indexing`'s, once for every store.
"""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

Metadata = dict[str, Any]
"""A chunk's metadata: `source`, `title` and what else a caller stores with it."""


@dataclass(frozen=True)
class DocumentEntry:
    """A new or changed document on its way to a store: its source, content hash and chunk ids."""

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


class StoreWriter(Protocol):
    """How an index build writes into a store (the FAISS folder's `FaissWriter`, Postgres's `PgWriter`).

    Writes are upserts of whole documents keyed by source and content hash, so batches may come in any grouping
    (one process, or the batches of a distributed build) and a re-run writes only what changed.
    """

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        """The stored content hash of each of these sources the store holds (and note them as seen)."""
        ...

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        """Replace or add whole documents: each document's old chunks go, `batch` (all their chunks) comes in."""
        ...

    def prune(self) -> int:
        """Remove the documents whose source was not seen in this run (when asked to); returns how many."""
        ...

    def finish(self, changed: bool) -> int:
        """Make the build durable and visible; returns the chunks in the store."""
        ...


class ChunkStore(VectorStore):
    """A LangChain vector store of embedded chunks; each store brings `_add_chunks`, `empty` and dense search.

    Search results carry the metadata `chunk_id`, `source`, `title`, and `bi_score` from dense search.
    """

    embedding: Embeddings

    @property
    def embeddings(self) -> Embeddings:
        """The embedder."""
        return self.embedding

    @abstractmethod
    def _add_chunks(self, texts: list[str], vectors: Any, metadatas: list[dict[str, Any]], ids: list[str]) -> None:
        """Store chunks (float32 unit-norm `vectors`, row for row, and as many metadatas and ids)."""

    @classmethod
    @abstractmethod
    def empty(cls, embedding: Embeddings, **kwargs: Any) -> Self:
        """A store to add texts to (`from_texts`); `kwargs` say where."""

    @abstractmethod
    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Top-k chunks by cosine similarity, with the similarity."""

    def add_vectors(
        self,
        texts: Sequence[str],
        vectors: Any,
        metadatas: Sequence[Metadata] | None = None,
        ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Add chunks whose unit-norm embeddings were already computed (not tracked as documents); their ids."""
        if len(texts) == 0:
            return []
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape[0] != len(texts):
            raise ValueError(f"{vectors.shape[0]} vectors for {len(texts)} texts")
        ids = list(ids) if ids is not None else [uuid.uuid4().hex for _ in texts]
        self._add_chunks(list(texts), vectors, list(metadatas) if metadatas is not None else [{} for _ in texts], ids)
        return ids

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and add texts as chunks (not tracked as documents); returns their ids."""
        texts = list(texts)
        if not texts:
            return []
        vectors = np.asarray(self.embedding.embed_documents(texts), dtype=np.float32)
        return self.add_vectors(texts, vectors, metadatas, ids=ids)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> Self:
        """A store (`empty`, from `kwargs`) holding these texts."""
        store = cls.empty(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Top-k chunks by cosine similarity; each carries `bi_score` in its metadata."""
        docs = []
        for doc, score in self.similarity_search_with_score(query, k, **kwargs):
            doc.metadata["bi_score"] = score
            docs.append(doc)
        return docs

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return self.similarity_search_with_score(query, k, **kwargs)
