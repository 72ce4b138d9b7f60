"""First-pass retrieval over a store (FAISS or Postgres): dense, lexical, or both fused by reciprocal rank fusion."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TypeVar, get_args, runtime_checkable

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from fastcrag.config.settings import RetrievalMode
from fastcrag.retrieval.lexical import LexicalIndexError

Mode = RetrievalMode
MODES: tuple[str, ...] = get_args(Mode)
RRF_K = 60  # the constant of Cormack et al. (2009): ranks past a few dozen barely count
Key = TypeVar("Key", bound=Hashable)


def rrf(rankings: Sequence[Sequence[Key]], k: int = RRF_K, weights: Sequence[float] | None = None) -> dict[Key, float]:
    """Reciprocal rank fusion: sum over rankings of weight / (k + rank), rank from 1; ids in several lists add up.

    `weights` gives each ranking its share (1 each when None).
    """
    fused: dict[Key, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, key in enumerate(ranking, 1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return fused


def fused_order(scores: Sequence[float], weight: float, k: int = RRF_K) -> list[int]:
    """The order of candidates given in first-pass order, by the grader's `scores` mixed with that first pass.

    Weighted reciprocal rank fusion (`rrf`) of the grader's ranking (share `weight`) and the first pass's
    (`1 - weight`): weight 1 is the grader's order, 0 the first pass's; ties keep the first-pass order. `fastcrag fit`
    chooses the weight on the user's held-out questions (`rerank_weight` in calibration.json).
    """
    by_score = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    fused = rrf([by_score, range(len(scores))], k, (weight, 1.0 - weight))
    return sorted(range(len(scores)), key=lambda i: fused[i], reverse=True)


def fuse(dense: list[Document], lexical: list[Document], k: int) -> list[Document]:
    """The `k` best of both rankings by reciprocal rank fusion, one document per chunk id (metadata merged).

    Each kept document's metadata carries its fused score as `rrf`.
    """
    by_id: dict[str, Document] = {}
    for doc in [*dense, *lexical]:
        key = _key(doc)
        if key in by_id:
            by_id[key].metadata.update(doc.metadata)
        else:
            by_id[key] = doc
    fused = rrf([[_key(d) for d in dense], [_key(d) for d in lexical]])
    best = sorted(by_id, key=lambda key: fused[key], reverse=True)[:k]
    for key in best:
        by_id[key].metadata["rrf"] = round(fused[key], 6)
    return [by_id[key] for key in best]


@runtime_checkable
class SearchableStore(Protocol):
    """What hybrid retrieval needs of a store: dense search, lexical search and the lexical word weights.

    `FaissStore` (FAISS + BM25 files) and `PgStore` (pgvector + Postgres full-text search) implement it. Documents
    carry `chunk_id`, `source` and `title` in their metadata.
    """

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """Top-k chunks by embedding similarity; each carries `bi_score`."""
        ...

    def lexical_search_with_score(self, query: str, k: int = 4) -> list[tuple[Document, float]]:
        """Top-k chunks by the lexical score, with the score.

        Raises:
            LexicalIndexError: the lexical side is unusable (the message names what is wrong).
        """
        ...

    def lexical_idf(self) -> Callable[[str], float]:
        """The lexical side's inverse document frequency of a word (for query expansion).

        Raises:
            LexicalIndexError: the lexical side is unusable.
        """
        ...


@runtime_checkable
class RoutedSearch(Protocol):
    """A retriever that searches by route (dense, lexical, hybrid) to a depth it is given; the graph grades `k`.

    `HybridRetriever` is one; any retriever with these takes the same path (a keyword rewrite is searched lexically).
    """

    k: int

    def search(self, query: str, mode: Mode | None = None, k: int | None = None) -> tuple[list[Document], str]:
        """The `k` (default `self.k`) best documents for `query` by `mode` (default its own), and the route taken."""
        ...


@runtime_checkable
class TermWeights(Protocol):
    """A retriever that weighs words by their rarity in its corpus (the keyword rewrite keeps the rare ones)."""

    def idf(self) -> Callable[[str], float] | None:
        """A word's inverse document frequency, or None when the weights are unusable."""
        ...


class HybridRetriever(BaseRetriever):
    """The `k` best chunks for a query by `mode`; each document's metadata carries `route`, the mode that ran.

    In hybrid mode each side retrieves `k` chunks; the union, de-duplicated by chunk id, is ordered by reciprocal
    rank fusion. When the lexical index is unusable (missing, damaged or out of step with the FAISS rows), hybrid
    mode falls back to dense search and says so in `route`; lexical mode raises the error, which names the file.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    store: SearchableStore
    mode: Mode = "hybrid"
    k: int = 20

    def search(self, query: str, mode: Mode | None = None, k: int | None = None) -> tuple[list[Document], str]:
        """The `k` (default `self.k`) best documents and the route taken.

        The route is `hybrid`, `dense`, `lexical`, or `dense (fallback: ...)`.
        """
        mode = mode or self.mode
        k = k or self.k
        if mode not in MODES:
            raise ValueError(f"retrieval mode {mode!r} is not one of {', '.join(MODES)}")
        if mode == "dense":
            return self._dense(query, k), "dense"
        try:
            lexical = self.store.lexical_search_with_score(query, k)
        except LexicalIndexError as exc:
            if mode == "lexical":
                raise
            return self._dense(query, k), f"dense (fallback: {exc})"
        for doc, score in lexical:
            doc.metadata["lexical_score"] = score
        if mode == "lexical":
            return [d for d, _ in lexical], "lexical"
        return fuse(self._dense(query, k), [d for d, _ in lexical], k), "hybrid"

    def idf(self) -> Callable[[str], float] | None:
        """The lexical index's word weights (for query expansion), or None when it is unusable."""
        try:
            return self.store.lexical_idf()
        except LexicalIndexError:
            return None

    def _dense(self, query: str, k: int) -> list[Document]:
        return self.store.similarity_search(query, k=k)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        docs, route = self.search(query, kwargs.get("mode"))
        for doc in docs:
            doc.metadata["route"] = route
        return docs


def _key(doc: Document) -> str:
    return chunk_key(doc.page_content, doc.metadata)


def chunk_key(text: str, metadata: dict[str, Any] | None) -> str:
    """A chunk's identity: its `chunk_id` (or `id`) metadata, else a hash of its text."""
    meta = metadata or {}
    return str(meta.get("chunk_id") or meta.get("id") or hashlib.sha256(text.encode()).hexdigest()[:16])
