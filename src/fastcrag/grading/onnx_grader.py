"""ONNX Runtime grader (int8 or fp32 `model.onnx` + `tokenizer.json`): scores in [0, 1]; spans with a reader head."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.cache import Lazy, LRUCache
from fastcrag.grading.reader import Span, span_margins
from fastcrag.modelmeta import read_model_meta
from fastcrag.ortsession import cpu_session, ort_threads, padded_tokenizer

DEFAULT_MAX_LENGTH = 256


def sigmoid(x: float) -> float:
    """The logistic function, without overflow for large |x|."""
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def length_batches(lengths: Sequence[int], max_batch: int, slack: float = 0.15) -> list[list[int]]:
    """Indices sorted by length, cut into batches of at most `max_batch` whose padding stays within `slack`.

    A batch is padded to its longest member; it is closed when taking the next (longer) item would make the padded
    size exceed the real token count by more than `slack`, or when it is full.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for i in order:
        width = lengths[i]  # the longest so far: items arrive in increasing length
        if current and (len(current) >= max_batch or width * (len(current) + 1) > (1 + slack) * (tokens + width)):
            batches.append(current)
            current, tokens = [], 0
        current.append(i)
        tokens += lengths[i]
    if current:
        batches.append(current)
    return batches


@dataclass(frozen=True)
class _Runtime:
    """A loaded model: its ONNX Runtime session, its tokenizer and the session's input names."""

    session: Any
    tokenizer: Any
    input_names: list[str]


class OnnxCrossEncoderReranker:
    """A cross-encoder grader exported to ONNX, served by ONNX Runtime on the CPU.

    The folder holds `model.onnx`, `tokenizer.json` and optionally `fastcrag_model.json` with `name`,
    `max_length` and, for a grader-reader, `grade` (the fusion weights of relevance logit and span margin, fitted
    on the training run's dev split). A model with `start_logits`/`end_logits` outputs also reads: `read` returns
    each passage's best answer span from the same forward pass that scored it (results are cached per
    (query, passage), so reading after scoring costs no second pass). Nothing is downloaded.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        batch_size: int = 32,
        threads: int | None = None,
        model_file: str = "model.onnx",
        cache_size: int = 4096,
    ) -> None:
        """Create the reranker; the session and tokenizer load on first use.

        Args:
            path: The model folder.
            max_length: Token limit of a (query, text) pair; the folder's `max_length` (else 256) when None.
            batch_size: Pairs per ONNX Runtime call.
            threads: Intra-op threads; `FASTRAG_ORT_THREADS` or ONNX Runtime's default when None.
            model_file: The ONNX file inside the folder.
            cache_size: (query, text) results kept, so that reading after scoring needs no second pass; 0: none.
        """
        self.path = Path(path)
        meta = read_model_meta(self.path)
        self.name = str(meta.get("name", self.path.name))
        self.max_length = int(max_length or meta.get("max_length", DEFAULT_MAX_LENGTH))
        self.batch_size = batch_size
        self.threads = ort_threads(threads)
        self.model_file = model_file
        self.cache_size = cache_size
        self.grade: dict[str, float] | None = meta.get("grade")
        self.has_reader = bool(meta.get("reader", False))
        self._cache: LRUCache[tuple[str, str], tuple[float, Span | None]] = LRUCache(cache_size)
        self._runtime: Lazy[_Runtime] = Lazy(self._load)

    def _load(self) -> _Runtime:
        session = cpu_session(self.path / self.model_file, self.threads)
        tok = padded_tokenizer(self.path / "tokenizer.json", self.max_length)
        tok.no_padding()  # `_run` pads each length-sorted batch to its own width
        return _Runtime(session, tok, [i.name for i in session.get_inputs()])

    def _run(self, query: str, texts: Sequence[str]) -> list[tuple[float, Span | None]]:
        """(grade logit, best span) of each text, in the given order.

        The pairs are tokenised once, sorted by length and cut into batches that pad little (`length_batches`),
        so a batch of short strips never pays for the longest chunk's width.
        """
        runtime = self._runtime.get()
        encs = runtime.tokenizer.encode_batch([(query, t) for t in texts])
        out: list[tuple[float, Span | None]] = [(0.0, None)] * len(texts)
        for rows in length_batches([len(e.ids) for e in encs], self.batch_size):
            width = max(len(encs[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encs[i].ids)
                ids[r, :n], mask[r, :n], types[r, :n] = encs[i].ids, 1, encs[i].type_ids
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            res = runtime.session.run(None, {k: v for k, v in feeds.items() if k in runtime.input_names})
            rel = np.asarray(res[0], dtype=np.float64).reshape(-1)
            if not self.has_reader or len(res) < 3:
                for i, logit in zip(rows, rel, strict=True):
                    out[i] = (float(logit), None)
                continue
            masks = np.zeros((len(rows), width), dtype=bool)
            for r, i in enumerate(rows):
                masks[r, : len(encs[i].ids)] = [sid == 1 for sid in encs[i].sequence_ids]
            margins = span_margins(np.asarray(res[1]), np.asarray(res[2]), masks)
            for i, logit, (a, b, margin) in zip(rows, rel, margins, strict=True):
                span = None
                if a >= 0:
                    start, end = encs[i].offsets[a][0], encs[i].offsets[b][1]
                    span = Span(texts[i][start:end], start, end, sigmoid(margin))
                m = max(-30.0, min(30.0, margin)) if math.isfinite(margin) else -30.0
                w = self.grade
                out[i] = (w["relevance"] * float(logit) + w["span"] * m + w["bias"] if w else float(logit), span)
        return out

    def _cached(self, query: str, texts: Sequence[str]) -> list[tuple[float, Span | None]]:
        hits = {t: v for (_, t), v in self._cache.get_many((query, t) for t in texts).items()}
        missing = list(dict.fromkeys(t for t in texts if t not in hits))
        if missing:
            fresh = dict(zip(missing, self._run(query, missing), strict=True))
            self._cache.put_many(((query, t), v) for t, v in fresh.items())
            hits |= fresh
        return [hits[t] for t in texts]

    def clear_cache(self) -> None:
        """Forget every cached result (for benchmarks that must pay each forward pass)."""
        self._cache.clear()

    def logits(self, query: str, texts: Sequence[str]) -> list[float]:
        """Grade logits of (query, text) pairs: the relevance logit, fused with the span margin when read."""
        return [g for g, _ in self._cached(query, texts)]

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Score each text against the query: sigmoid of the grade logit, in [0, 1]."""
        if not texts:
            return []
        return [sigmoid(x) for x in self.logits(query, texts)]

    def read(self, query: str, texts: Sequence[str]) -> list[Span | None]:
        """The best answer span of each text (None for every text when the model has no reader head)."""
        if not texts:
            return []
        return [span for _, span in self._cached(query, texts)]
