"""Package a trained grader as an ONNX grader folder: ONNX export, int8 quantisation and its metadata."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastcrag.fitting.model import read_fusion
from fastcrag.fitting.network import has_reader, is_classifier_folder, load_network
from fastcrag.modelmeta import write_model_meta


def export_onnx(model_dir: Path, onnx_path: Path, opset: int = 17) -> None:
    """Export a trained grader to ONNX (fp32, dynamic batch and sequence axes).

    Outputs: `logits` (batch, 1) relevance and, for a grader-reader, `start_logits` and `end_logits` (batch,
    sequence) of the reader; a one-logit classifier folder (`fastcrag.fitting.network`) exports `logits` only.
    """
    import torch

    inner = load_network(model_dir)
    inner.eval()
    reader = has_reader(inner)

    class Export(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            rel, st, en = self.inner(input_ids, attention_mask, token_type_ids)
            return (rel.unsqueeze(-1), st, en) if reader else rel.unsqueeze(-1)

    ids = torch.ones((2, 16), dtype=torch.long)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    axes = {0: "batch", 1: "sequence"}
    with torch.inference_mode():
        torch.onnx.export(
            Export().eval(),
            (ids, ids.clone(), torch.zeros_like(ids)),
            str(onnx_path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits", "start_logits", "end_logits"] if reader else ["logits"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "logits": {0: "batch"},
                **({"start_logits": axes, "end_logits": axes} if reader else {}),
            },
            opset_version=opset,
            dynamo=False,
        )


def quantize_int8(src: Path, dst: Path, per_channel: bool = True) -> None:
    """Dynamic int8 quantisation of an ONNX model's weights (per-channel keeps scores closest to fp32)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel)


def package_grader(
    write_fp32: Callable[[Path], None],
    tokenizer: Path,
    dest: Path,
    *,
    name: str,
    max_length: int,
    int8: bool,
    reader: bool,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """An ONNX grader folder from any exporter: `write_fp32(path)` writes the fp32 model, quantised here when `int8`.

    Writes `model.onnx`, `tokenizer.json` (a copy of `tokenizer`) and `fastcrag_model.json` into `dest`.

    Returns:
        `dest`.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model_fp32.onnx"
        write_fp32(fp32)
        if int8:
            quantize_int8(fp32, dest / "model.onnx")
        else:
            shutil.copyfile(fp32, dest / "model.onnx")
    shutil.copyfile(tokenizer, dest / "tokenizer.json")
    meta: dict[str, Any] = {
        "name": name,
        "format": "onnx-int8-dynamic-per-channel" if int8 else "onnx-fp32",
        "max_length": max_length,
        "activation": "sigmoid",
        "labels": "1 = the passage states the answer",
        "reader": reader,
    }
    meta.update(extra_meta or {})
    write_model_meta(dest, meta)
    return dest


def export_grader(
    model_dir: Path,
    dest: Path,
    *,
    name: str,
    train_dir: Path | None = None,
    max_length: int = 256,
    int8: bool = True,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Package a trained model as an ONNX grader folder loadable by `fastcrag.grading.reranker.load_reranker`.

    Writes `model.onnx` (int8 when `int8`), `tokenizer.json` and `fastcrag_model.json` (with the grade fusion
    fitted on the run's dev split) into `dest`. `model_dir` is a grader-reader folder (`reader: true`) or a one-logit
    classifier folder (`reader: false`; see `fastcrag.fitting.network`).

    Returns:
        `dest`.
    """
    reader = not is_classifier_folder(model_dir)
    more: dict[str, Any] = {}
    fusion = read_fusion(model_dir)
    if fusion is not None and reader:
        more["grade"] = fusion
    if train_dir is not None and (train_dir / "train_config.json").exists():
        cfg = json.loads((train_dir / "train_config.json").read_text(encoding="utf-8"))
        more["dev_percent"] = cfg["pool"]["dev_percent"]
        more["seed"] = cfg["seed"]
    more.update(extra_meta or {})
    return package_grader(
        lambda path: export_onnx(model_dir, path),
        model_dir / "tokenizer.json",
        dest,
        name=name,
        max_length=max_length,
        int8=int8,
        reader=reader,
        extra_meta=more,
    )
