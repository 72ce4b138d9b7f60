"""Export all-mpnet-base-v2 as an ONNX embedder folder (lab notebook, "Tries on the CPU ...", 2026-12-05).

    python lab/experiments/mpnet_embedder_export.py MPNET_FOLDER OUT_FOLDER   # then FASTRAG_EMBEDDER=OUT_FOLDER/int8

MPNET_FOLDER is the sentence-transformers folder that `lab/scripts/train_grader_v5.sh` assembles from the five PyPI
parts (`RUN/mpnet`). Writes OUT_FOLDER/fp32 and OUT_FOLDER/int8 (per-tensor dynamic int8: the per-channel
quantisation the packaged embedder uses scatters this model's cosines), each with pooling and normalisation in the
graph. MPNet takes no `token_type_ids`, so the graph has none. Tried as the first pass's embedder and not kept.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any


def main(source: Path, out: Path) -> None:
    """Write the fp32 and int8 folders."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(str(source), local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    axes = {0: "batch", 1: "sequence"}
    ids = torch.ones((2, 16), dtype=torch.long)
    for kind in ("fp32", "int8"):
        (out / kind).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / "tokenizer.json", out / kind / "tokenizer.json")
        meta = {"name": f"all-mpnet-base-v2-onnx-{kind}", "dimension": 768, "max_length": 384}
        (out / kind / "fastcrag_model.json").write_text(json.dumps(meta))
    with torch.inference_mode():
        torch.onnx.export(
            Pooled().eval(),
            (ids, ids.clone()),
            str(out / "fp32" / "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "sentence_embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    quantize_dynamic(
        out / "fp32" / "model.onnx", out / "int8" / "model.onnx", weight_type=QuantType.QInt8, per_channel=False
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
