"""The pluggable parts one graph runs on, loaded lazily (importing and compiling the graph loads no model).

Parts are methods, not properties: LangGraph inspects node closures with `getattr`, which must not load models.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from platformdirs import user_cache_dir

from fastcrag.cache import Lazy
from fastcrag.config.calibration import (
    Calibration,
    CalibrationError,
    IndexFit,
    index_fit,
    load_calibration,
    materialise_fit,
    packaged_flare_threshold,
)
from fastcrag.config.settings import Context, RunConfig, Settings, as_context, is_postgres_url, resolve
from fastcrag.generation.chat import load_chat_model
from fastcrag.generation.extractive import ExtractiveGenerator
from fastcrag.generation.flare import FlareWriter, unsupported
from fastcrag.generation.generators import ChatBacked, ChatGenerator, Generator
from fastcrag.grading.reranker import Reranker, calibration_for, default_reranker_spec, load_reranker
from fastcrag.retrieval.embeddings import Embedder, default_embeddings, embedder_name
from fastcrag.retrieval.hybrid import HybridRetriever, RoutedSearch, SearchableStore
from fastcrag.retrieval.indexing import ensure_default_index
from fastcrag.retrieval.store import FaissStore

EXTRACTIVE = "extractive"


class Components:
    """Retriever, reranker, generator and calibration; each built on first use from settings unless given."""

    def __init__(
        self,
        settings: Settings | None = None,
        retriever: BaseRetriever | VectorStore | RoutedSearch | None = None,
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
        self._loaded: dict[str, Lazy[Any]] = {}
        self._run_configs = functools.lru_cache(maxsize=64)(self._resolve)

    def _once(self, key: str, load: Callable[[], Any]) -> Any:
        """Load a part once (thread-safe); a failed load is retried on the next call."""
        part = self._loaded.get(key)
        if part is None:
            part = self._loaded.setdefault(key, Lazy(load))  # atomic: racing threads share one `Lazy`
        return part.get()

    def retriever(self) -> BaseRetriever | RoutedSearch:
        """The retriever: a `HybridRetriever` in the configured mode over a FAISS or Postgres store, or the given one.

        A given retriever is a LangChain one, or any object searching by route (`RoutedSearch`), which the graph asks
        as it asks a `HybridRetriever`.

        With no retriever or store given: the Postgres collection when `FASTRAG_STORE` is a Postgres URL, else the
        configured or embedded FAISS index.
        """
        return self._once("retriever", self._load_retriever)  # type: ignore[no-any-return]

    def _load_retriever(self) -> BaseRetriever | RoutedSearch:
        given = self._retriever
        if isinstance(given, BaseRetriever | RoutedSearch):
            return given
        if given is None:
            s = self.settings
            if is_postgres_url(s.store):
                from fastcrag.retrieval.pgstore import PgStore  # psycopg is in the optional `postgres` extra

                given = PgStore(s.store, default_embeddings(s.embedder), s.collection, ef_search=s.ef_search)
            else:
                folder = s.index_dir or ensure_default_index(s.chunk_tokens, s.chunk_overlap, embedder=s.embedder)
                given = FaissStore.load(folder, default_embeddings(s.embedder))
        if isinstance(given, SearchableStore):  # FaissStore, PgStore: dense, lexical or hybrid
            return HybridRetriever(store=given, mode=self.settings.retrieval, k=self.settings.top_k)
        return given.as_retriever(search_kwargs={"k": self.settings.top_k})

    def reranker(self) -> Reranker:
        """The grader."""
        return self._once("reranker", self._load_reranker)  # type: ignore[no-any-return]

    def _load_reranker(self) -> Reranker:
        given = self._reranker
        if given is None or isinstance(given, str):
            fit = self.index_fit() if not (given or self.settings.reranker) else None
            fitted = str(fit.grader) if fit and fit.grader else None
            return load_reranker(given or self.settings.reranker or fitted or default_reranker_spec())
        return given

    def index_fit(self) -> IndexFit | None:
        """The fit installed with the configured index (`fastcrag fit --install`): a FAISS folder or a collection.

        It is used unless settings or arguments name a grader or a calibration.

        Raises:
            CalibrationError: the installed fit is incomplete, or was made with another embedder.
        """
        return self._once("fit", self._load_fit)  # type: ignore[no-any-return]

    def _load_fit(self) -> IndexFit | None:
        s = self.settings
        if self._retriever is not None:
            return None
        if is_postgres_url(s.store):
            where = f"collection {s.collection!r}"
            store = getattr(self.retriever(), "store", None)
            record = store.fit() if store is not None and hasattr(store, "fit") else None
            cache = Path(user_cache_dir("fastcrag")) / "fits"
            fit = materialise_fit(record[0], record[1], record[2], cache) if record else None
        else:
            where = str(s.index_dir)
            fit = index_fit(s.index_dir) if s.index_dir is not None else None
        embedder = getattr(default_embeddings(s.embedder), "name", "")
        if fit is not None and fit.embedder and fit.embedder != embedder:
            raise CalibrationError(
                f"the fit installed in {where} was made with embedder {fit.embedder!r}, not {embedder!r}; "
                "set FASTRAG_EMBEDDER to it, or run `fastcrag fit --install` again"
            )
        return fit

    def generator(self) -> Generator:
        """The generator and rewriter."""
        return self._once("generator", self._load_generator)  # type: ignore[no-any-return]

    def _load_generator(self) -> Generator:
        given = self._llm if self._llm is not None else self.settings.llm
        if isinstance(given, str):
            if given == EXTRACTIVE:
                cal = self.calibration()
                thresholds = cal.reader_threshold, cal.refine_reader_threshold
                return ExtractiveGenerator(self.reranker(), *thresholds, chunks=self.chunks_by_id)
            model = load_chat_model(given, self.settings.max_new_tokens, self.settings.llm_timeout_s)
            return ChatGenerator(model, self.settings.llm_timeout_s, name=given)
        if isinstance(given, BaseChatModel):
            return ChatGenerator(given, self.settings.llm_timeout_s)
        return given

    def chunks_by_id(self, ids: Sequence[str]) -> list[Document]:
        """Chunks by id from the retriever's store (LangChain's `VectorStore.get_by_ids`).

        The store is the retriever's (`HybridRetriever.store`, a LangChain retriever's `vectorstore`), asked on first
        use, so building the generator loads no index.

        Raises:
            NotImplementedError: the retriever has no store, or its store cannot fetch by id.
        """
        retriever = self.retriever()
        store = getattr(retriever, "store", None)  # not `or`: a store's truth is its length (a query in Postgres)
        if store is None:
            store = getattr(retriever, "vectorstore", None)
        if not isinstance(store, VectorStore):
            raise NotImplementedError("the retriever has no store to fetch chunks from")
        return list(store.get_by_ids(ids))

    def flare_unsupported(self) -> str | None:
        """Why this generator cannot run FLARE mode (naming the mode and the provider), or None when it can.

        Read from the setting or the object given, without loading a model.
        """
        return unsupported(self._llm if self._llm is not None else self.settings.llm)

    def writer(self) -> FlareWriter:
        """FLARE's writer over the chat model.

        Raises:
            ValueError: the generator cannot run FLARE mode (`flare_unsupported`).
        """
        if why := self.flare_unsupported():
            raise ValueError(why)
        return self._once("writer", self._load_writer)  # type: ignore[no-any-return]

    def _load_writer(self) -> FlareWriter:
        generator = self.generator()
        if not isinstance(generator, ChatBacked):  # unsupported() said it is one
            raise ValueError(unsupported(generator) or "no chat model")
        return FlareWriter(generator.llm, self.settings.llm_timeout_s)

    def calibration(self) -> Calibration:
        """The thresholds, checked against the reranker's name."""
        return self._once("calibration", self._load_calibration)  # type: ignore[no-any-return]

    def _load_calibration(self) -> Calibration:
        if isinstance(self._calibration, Calibration):
            return self._calibration
        # a grader shipped or fitted with its own thresholds brings them; an index's fit serves the default grader
        named = self._reranker if isinstance(self._reranker, str) else self.settings.reranker
        path = calibration_for(self._calibration or self.settings.calibration, named)
        if path is None and self._reranker is None and not self.settings.reranker and (fit := self.index_fit()):
            path = fit.calibration
        return load_calibration(path, expected_model=self.reranker().name)

    def run_config(self, context: Any) -> RunConfig:
        """Settings for one run: environment, calibration, then the run's context overrides.

        Resolved once per distinct context: every node of a run asks, and gets the same object.

        Raises:
            ValueError: the calibration cannot be loaded, or an override is out of bounds.
        """
        return self._run_configs(as_context(context))

    def embedder(self) -> Embedder:
        """The configured embedder (`FASTRAG_EMBEDDER`), as the index's search uses it."""
        return default_embeddings(self.settings.embedder)

    def _resolve(self, context: Context) -> RunConfig:
        calibration = self.calibration()
        flare = calibration.flare_threshold
        floor = calibration.answer_floor
        if floor is not None and calibration.answer_embedder != embedder_name(self.embedder()):
            floor = None  # drawn on another embedder's cosines
        return resolve(
            self.settings,
            calibration.thresholds(),
            context,
            calibration.rerank_weight,
            calibration.condition_factor,
            packaged_flare_threshold() if flare is None else flare,
            floor,
        )

    def warm_up(self) -> None:
        """Load every part and run each model once (the CLI and servers call this; the graph loads lazily).

        The cheap checks come first: a bad calibration or chat-model setting fails before an index is built or loaded.
        """
        self.calibration()
        self.generator()
        retriever = self.retriever()
        retriever.search("warm-up") if isinstance(retriever, RoutedSearch) else retriever.invoke("warm-up")
        self.reranker().score("warm-up", ["warm-up"])
