"""ONNX Runtime cross-encoder grader (int8 or fp32 `model.onnx` + `tokenizer.json`), scores in [0, 1]."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_MAX_LENGTH = 256


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


class OnnxCrossEncoderReranker:
    """A one-logit cross-encoder exported to ONNX, served by ONNX Runtime on the CPU.

    The folder holds `model.onnx`, `tokenizer.json` and optionally `fastcrag_model.json` with `name`,
    `max_length` and `lowercase` keys. Nothing is downloaded.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        batch_size: int = 32,
        threads: int | None = None,
        model_file: str = "model.onnx",
    ) -> None:
        """Create the reranker; the session and tokenizer load on first use.

        Args:
            path: The model folder.
            max_length: Token limit of a (query, text) pair; the folder's `max_length` (else 256) when None.
            batch_size: Pairs per ONNX Runtime call.
            threads: Intra-op threads; `FASTRAG_ORT_THREADS` or ONNX Runtime's default when None.
            model_file: The ONNX file inside the folder.
        """
        self.path = Path(path)
        meta: dict[str, Any] = {}
        meta_path = self.path / "fastcrag_model.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        self.name = str(meta.get("name", self.path.name))
        self.max_length = int(max_length or meta.get("max_length", DEFAULT_MAX_LENGTH))
        self.batch_size = batch_size
        env_threads = os.environ.get("FASTRAG_ORT_THREADS", "")
        self.threads = threads if threads is not None else (int(env_threads) if env_threads.isdigit() else None)
        self.model_file = model_file
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: list[str] = []
        self._lock = threading.Lock()

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if self.threads:
                opts.intra_op_num_threads = self.threads
                opts.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(self.path / self.model_file), sess_options=opts, providers=["CPUExecutionProvider"]
            )
            tok = Tokenizer.from_file(str(self.path / "tokenizer.json"))
            tok.enable_truncation(max_length=self.max_length, strategy="longest_first")
            tok.enable_padding(pad_id=tok.token_to_id("[PAD]") or 0, pad_token="[PAD]")
            self._input_names = [i.name for i in session.get_inputs()]
            self._tokenizer = tok
            self._session = session

    def logits(self, query: str, texts: Sequence[str]) -> list[float]:
        """Raw logits of (query, text) pairs."""
        import numpy as np

        if self._session is None:
            self._load()
        out: list[float] = []
        for s in range(0, len(texts), self.batch_size):
            encs = self._tokenizer.encode_batch([(query, t) for t in texts[s : s + self.batch_size]])
            feeds = {
                "input_ids": np.asarray([e.ids for e in encs], dtype=np.int64),
                "attention_mask": np.asarray([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.asarray([e.type_ids for e in encs], dtype=np.int64),
            }
            res = self._session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})
            out.extend(float(x) for x in np.asarray(res[0]).reshape(-1))
        return out

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """Score each text against the query: sigmoid of the logit, in [0, 1]."""
        if not texts:
            return []
        return [_sigmoid(x) for x in self.logits(query, texts)]
