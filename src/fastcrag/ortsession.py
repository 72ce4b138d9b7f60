"""ONNX Runtime on the CPU, as the grader and the embedder use it: one session and one padded tokenizer per model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def ort_threads(threads: int | None) -> int | None:
    """Intra-op threads: the given count, else `FASTRAG_ORT_THREADS`, else None (ONNX Runtime's default)."""
    if threads is not None:
        return threads
    env = os.environ.get("FASTRAG_ORT_THREADS", "")
    return int(env) if env.isdigit() else None


def cpu_session(model: Path, threads: int | None) -> Any:
    """An `InferenceSession` for `model` with every graph optimisation, `threads` intra-op threads when given."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), sess_options=opts, providers=["CPUExecutionProvider"])


def padded_tokenizer(path: Path, max_length: int, strategy: str = "longest_first") -> Any:
    """A `tokenizers.Tokenizer` from `tokenizer.json`, truncating at `max_length` and padding to the batch's longest."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=max_length, strategy=strategy)
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]") or 0, pad_token="[PAD]")
    return tok


def text_tokenizer(path: Path, max_length: int) -> Any:
    """A `tokenizers.Tokenizer` from `tokenizer.json` that truncates at `max_length` and never pads."""
    tok = padded_tokenizer(path, max_length)
    tok.no_padding()
    return tok
