"""The pluggable parts one graph runs on, loaded lazily (importing and compiling the graph loads no model).

Parts are methods, not properties: LangGraph inspects node closures with `getattr`, which must not load models.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore

from fastcrag.config.calibration import Calibration, load_calibration
from fastcrag.config.settings import RunConfig, Settings, resolve
from fastcrag.generation.generators import ChatGenerator, ExtractiveGenerator, Generator
from fastcrag.grading.reranker import Reranker, default_reranker_spec, load_reranker
from fastcrag.retrieval.hybrid import HybridRetriever, SearchableStore
from fastcrag.retrieval.store import FaissStore

EXTRACTIVE = "extractive"


class Components:
    """Retriever, reranker, generator and calibration; each built on first use from settings unless given."""

    def __init__(
        self,
        settings: Settings | None = None,
        retriever: BaseRetriever | VectorStore | None = None,
        reranker: Reranker | str | None = None,
        llm: BaseChatModel | Generator | str | None = None,
        calibration: Calibration | Path | None = None,
    ) -> None:
        """Hold the given parts; missing ones come from `settings` (the environment when None)."""
        self.settings = settings or Settings()
        self._retriever = retriever
        self._reranker = reranker
        self._llm = llm
        self._calibration = calibration
        self._lock = threading.RLock()
        self._loaded: dict[str, Any] = {}

    def _once(self, key: str, load: Callable[[], Any]) -> Any:
        """Load a part once (thread-safe); a failed load is retried on the next call."""
        if key not in self._loaded:
            with self._lock:
                if key not in self._loaded:
                    self._loaded[key] = load()
        return self._loaded[key]

    def retriever(self) -> BaseRetriever:
        """The retriever: a `HybridRetriever` in the configured mode over a FAISS or Postgres store, or the given one.

        With no retriever or store given: the Postgres collection when `FASTRAG_STORE` is a Postgres URL, else the
        configured or embedded FAISS index.
        """
        return self._once("retriever", self._load_retriever)  # type: ignore[no-any-return]

    def _load_retriever(self) -> BaseRetriever:
        given = self._retriever
        if isinstance(given, BaseRetriever):
            return given
        if given is None:
            from fastcrag.config.settings import is_postgres_url
            from fastcrag.retrieval.embeddings import default_embeddings

            s = self.settings
            if is_postgres_url(s.store):
                from fastcrag.retrieval.pgstore import PgStore  # psycopg is in the optional `postgres` extra

                given = PgStore(s.store, default_embeddings(), s.collection, ef_search=s.ef_search)
            else:
                from fastcrag.retrieval.indexing import ensure_default_index

                folder = s.index_dir or ensure_default_index(s.chunk_tokens, s.chunk_overlap)
                given = FaissStore.load(folder, default_embeddings())
        if isinstance(given, SearchableStore):  # FaissStore, PgStore: dense, lexical or hybrid
            return HybridRetriever(store=given, mode=self.settings.retrieval, k=self.settings.top_k)
        return given.as_retriever(search_kwargs={"k": self.settings.top_k})

    def reranker(self) -> Reranker:
        """The grader."""
        return self._once("reranker", self._load_reranker)  # type: ignore[no-any-return]

    def _load_reranker(self) -> Reranker:
        given = self._reranker
        if given is None or isinstance(given, str):
            return load_reranker(given or self.settings.reranker or default_reranker_spec())
        return given

    def generator(self) -> Generator:
        """The generator and rewriter."""
        return self._once("generator", self._load_generator)  # type: ignore[no-any-return]

    def _load_generator(self) -> Generator:
        given = self._llm if self._llm is not None else self.settings.llm
        if isinstance(given, str):
            if given == EXTRACTIVE:
                return ExtractiveGenerator(self.reranker(), self.calibration().reader_threshold)
            from fastcrag.generation.chat import load_chat_model

            model = load_chat_model(given, self.settings.max_new_tokens, self.settings.llm_timeout_s)
            return ChatGenerator(model, self.settings.llm_timeout_s, name=given)
        if isinstance(given, BaseChatModel):
            return ChatGenerator(given, self.settings.llm_timeout_s)
        return given

    def calibration(self) -> Calibration:
        """The thresholds, checked against the reranker's name."""
        return self._once("calibration", self._load_calibration)  # type: ignore[no-any-return]

    def _load_calibration(self) -> Calibration:
        if isinstance(self._calibration, Calibration):
            return self._calibration
        path = self._calibration or self.settings.calibration
        return load_calibration(path, expected_model=self.reranker().name)

    def run_config(self, context: Any) -> RunConfig:
        """Settings for one run: environment, calibration, then the run's context overrides."""
        return resolve(self.settings, self.calibration().thresholds(), context)

    def warm_up(self) -> None:
        """Load every part and run each model once (the CLI and servers call this; the graph loads lazily)."""
        self.calibration()
        self.retriever().invoke("warm-up")
        self.reranker().score("warm-up", ["warm-up"])
        self.generator()
