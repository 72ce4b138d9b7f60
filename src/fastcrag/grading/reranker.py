"""Reranker / grader: `score(query, texts) -> list[float]` in [0, 1], one score per text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from fastcrag.cache import Lazy, LRUCache
from fastcrag.grading.asks import ask_of
from fastcrag.grading.conditions import conditioned
from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
from fastcrag.grading.reader import Span, is_reader
from fastcrag.modelmeta import META_FILE, read_model_meta
from fastcrag.retrieval.embeddings import SentenceTransformerEmbeddings, default_embeddings

MODELS = Path(__file__).resolve().parent.parent / "models"
PACKAGED_GRADER = MODELS / "grader"
"""The default grader."""
OWN_CALIBRATION = "calibration.json"
"""A grader folder may carry its own calibration: used when no calibration is named."""
BI_ENCODER = "bi-encoder"
TEXT_CACHE_SIZE = 50_000  # bi-encoder text embeddings kept


class RerankerError(RuntimeError):
    """The reranker failed or returned scores that cannot be used."""


@runtime_checkable
class Reranker(Protocol):
    """Anything that scores (query, text) pairs in [0, 1]; `name` ties it to its calibration."""

    name: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Score each text against the query; higher is more relevant."""
        ...


def checked_scores(reranker: Reranker, query: str, texts: Sequence[str], condition_factor: float = 1.0) -> list[float]:
    """Score with `reranker` and validate the result.

    A message of several sentences is graded as a whole and as its ask (`ask_of`); each text keeps the higher grade.
    Texts lacking a condition `query` names are then scored down by `condition_factor` (`conditioned`; 1: unchecked).

    Raises:
        RerankerError: the reranker raised, or returned the wrong number of scores, a NaN, or a value outside [0, 1].
    """
    if not texts:
        return []
    scores = [0.0] * len(texts)
    for asked in [query, ask] if (ask := ask_of(query)) else [query]:  # a message and its ask: the higher grade
        try:
            raw = [float(s) for s in reranker.score(asked, texts)]
        except Exception as exc:  # any reranker failure must become a traced abstention, not a crash
            raise RerankerError(f"reranker {reranker.name!r} raised {type(exc).__name__}: {exc}") from exc
        if len(raw) != len(texts):
            raise RerankerError(f"reranker {reranker.name!r} returned {len(raw)} scores for {len(texts)} texts")
        if any(math.isnan(s) or s < 0.0 or s > 1.0 for s in raw):
            raise RerankerError(f"reranker {reranker.name!r} returned a score that is NaN or outside [0, 1]")
        scores = [max(a, b) for a, b in zip(scores, raw, strict=True)]
    return conditioned(query, texts, scores, condition_factor)


def scores_until(
    reranker: Reranker, query: str, texts: Sequence[str], batch: int, enough: float, condition_factor: float = 1.0
) -> list[float]:
    """Scores of `texts` in order, `batch` at a time, stopping after the batch where one reaches `enough`.

    The result covers a prefix of `texts` (all of them when none reaches `enough`, or when `batch` is 0). Texts
    lacking a condition the query names are scored down by `condition_factor` first (`checked_scores`).

    Raises:
        RerankerError: as `checked_scores`.
    """
    step = batch or len(texts)
    scores: list[float] = []
    for start in range(0, len(texts), max(1, step)):
        batch_scores = checked_scores(reranker, query, texts[start : start + step], condition_factor)
        scores += batch_scores
        if max(batch_scores) >= enough:  # the earlier batches all stayed below it
            break
    return scores


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` with one logit, squashed by a sigmoid into [0, 1]."""

    def __init__(self, model: str | Path, max_length: int = 256, batch_size: int = 32) -> None:
        """Create the reranker; the weights load on first use.

        Args:
            model: A local folder or a model name already in the local cache (nothing is downloaded).
            max_length: Token limit for the (query, text) pair.
            batch_size: Pairs per forward pass.
        """
        self.model_path = str(model)
        self.name = _model_name(Path(self.model_path))
        self.max_length = max_length
        self.batch_size = batch_size
        self._model: Lazy[Any] = Lazy(self._load)

    def _load(self) -> Any:
        # torch and sentence-transformers load only with the model: importing the grader must stay cheap
        import torch
        from sentence_transformers import CrossEncoder

        return CrossEncoder(
            self.model_path,
            device="cpu",
            max_length=self.max_length,
            local_files_only=True,
            activation_fn=torch.nn.Sigmoid(),
        )

    @property
    def model(self) -> Any:
        """The loaded `CrossEncoder` (loaded once, thread-safe)."""
        return self._model.get()

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Score each text against the query."""
        pairs = [(query, t) for t in texts]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return [float(s) for s in scores]


class BiEncoderReranker:
    """Stand-in grader: cosine of the bi-encoder embeddings, clipped to [0, 1]."""

    def __init__(self, embeddings: SentenceTransformerEmbeddings | None = None) -> None:
        """Create the grader over `embeddings` (the default embedder when None)."""
        self.embeddings = embeddings or default_embeddings()
        self.name = f"{BI_ENCODER}:{self.embeddings.name}"
        self._cache: LRUCache[str, Any] = LRUCache(TEXT_CACHE_SIZE)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Cosine similarity of the query to each text, clipped to [0, 1]; text embeddings are cached (LRU)."""
        known = self._cache.get_many(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        fresh = self.embeddings.encode([query, *missing])
        local = dict(zip(missing, fresh[1:], strict=True))
        self._cache.put_many(local.items())
        vectors = [local[t] if t in local else known[t] for t in texts]
        return [min(1.0, max(0.0, float(v @ fresh[0]))) for v in vectors]


def _model_name(path: Path) -> str:
    """A stable name for a model folder: its `fastcrag_model.json` name when present, else the folder name."""
    try:
        name = read_model_meta(path).get("name")
    except (ValueError, OSError):  # a name-less or unreadable file names nothing: the folder name stands
        name = None
    return str(name) if name is not None else path.name or str(path)


def default_reranker_spec() -> str:
    """The packaged grader when it is installed, else the bi-encoder stand-in."""
    return str(PACKAGED_GRADER) if (PACKAGED_GRADER / META_FILE).is_file() else BI_ENCODER


@cache
def load_reranker(spec: str) -> Reranker:
    """Load a reranker from a spec: `bi-encoder`, a local folder, or a cached model name.

    A folder holding `model.onnx` is served by ONNX Runtime; any other folder or name by sentence-transformers.
    """
    if spec in (BI_ENCODER, f"{BI_ENCODER}:all-MiniLM-L6-v2"):
        return BiEncoderReranker()
    path = grader_folder(spec) or Path(spec).expanduser()
    if (path / "model.onnx").is_file():
        return OnnxCrossEncoderReranker(path)
    return CrossEncoderReranker(path if path.exists() else spec)


def packaged_graders() -> dict[str, Path]:
    """The graders shipped with fastcrag, by name (the default and the options beside it)."""
    return {
        str(read_model_meta(f.parent).get("name", f.parent.name)): f.parent for f in MODELS.glob("grader*/model.onnx")
    }


def grader_folder(spec: str) -> Path | None:
    """The ONNX grader folder `spec` names: a folder holding `model.onnx`, or a packaged grader's name; else None."""
    path = Path(spec).expanduser()
    if (path / "model.onnx").is_file():
        return path
    return packaged_graders().get(spec)


def own_calibration(spec: str) -> Path | None:
    """The calibration a grader folder carries (`OWN_CALIBRATION`), if `spec` names such a folder."""
    folder = grader_folder(spec)
    return folder / OWN_CALIBRATION if folder is not None and (folder / OWN_CALIBRATION).is_file() else None


def calibration_for(named: Path | None, reranker: str | None) -> Path | None:
    """The calibration file a run reads: the one `named`, else the one the `reranker` spec's folder carries.

    None means neither: the caller falls back (to an index's fit, or the packaged calibration).
    """
    if named is not None:
        return named
    return own_calibration(reranker) if reranker else None


class CachingReranker:
    """Wraps a grader and memoises its scores, so that variants of one question share the scoring work.

    Only for quality runs: a latency benchmark must use the plain grader.
    """

    def __init__(self, inner: Reranker, max_items: int = 200_000) -> None:
        """Wrap `inner`; its `name` is kept, so the calibration check still applies."""
        self.inner = inner
        self.name = inner.name
        self.has_reader = is_reader(inner)
        self.max_items = max_items
        self._cache: LRUCache[tuple[str, str], float] = LRUCache(max_items)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Scores for (query, text) pairs, computing only those not seen before."""
        known = {t: s for (_, t), s in self._cache.get_many((query, t) for t in texts).items()}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = [float(s) for s in self.inner.score(query, missing)]
            if len(fresh) != len(missing):
                return fresh  # let the caller's validation report the broken grader
            known.update(zip(missing, fresh, strict=True))
            self._cache.put_many(((query, t), s) for t, s in zip(missing, fresh, strict=True))
        return [known[t] for t in texts]

    def read(self, query: str, texts: Sequence[str]) -> list[Span | None]:
        """The inner grader's answer spans (a reader keeps the spans of the passes it has scored)."""
        return self.inner.read(query, texts) if self.has_reader else [None for _ in texts]  # type: ignore[attr-defined]
