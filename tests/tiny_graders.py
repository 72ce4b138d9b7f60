"""Tiny random BERT graders (classifier and grader-reader) and labelled pairs, for the fine-tune and lab tests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
import transformers

from fastcrag.fitting.mix import Pair

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
FACTS = [
    ("Who designed the Eiffel Tower?", "The Eiffel Tower was designed by the company of Gustave Eiffel.", "Eiffel"),
    ("What do plants release?", "Photosynthesis releases oxygen as a by-product.", "oxygen"),
    ("What enforces ownership in Rust?", "Rust's borrow checker enforces ownership at compile time.", "borrow checker"),
    ("When did the Berlin Wall fall?", "The Berlin Wall fell on 9 November 1989.", "9 November 1989"),
    ("What is the capital of Australia?", "Canberra is the capital city of Australia.", "Canberra"),
]


def _tokenizer() -> Any:
    from fastcrag.retrieval.embeddings import packaged_minilm_path

    return transformers.AutoTokenizer.from_pretrained(str(packaged_minilm_path()), local_files_only=True)


def _perturb(model: Any, seed: int) -> None:
    """Random values everywhere (a fresh model has LayerNorms of ones and zero biases, all alike)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def tiny_classifier(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised one-logit BERT classifier (hidden 32, 2 layers) saved as a Hugging Face folder."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(num_labels=1, architectures=["BertForSequenceClassification"], **TINY)
    model = transformers.BertForSequenceClassification(config)
    _perturb(model, seed)
    model.save_pretrained(str(folder))
    _tokenizer().save_pretrained(str(folder))
    return folder


def tiny_reader(folder: Path, seed: int = 0) -> Path:
    """A randomly initialised tiny grader-reader (encoder + relevance and span heads) with a grade fusion."""
    from fastcrag.fitting.model import build_model, save_model

    torch.manual_seed(seed)
    encoder_dir = folder.parent / f"{folder.name}-encoder"
    transformers.BertModel(transformers.BertConfig(**TINY), add_pooling_layer=False).save_pretrained(str(encoder_dir))
    model = build_model(encoder_dir)
    _perturb(model, seed)
    save_model(model, _tokenizer(), folder, {"relevance": 1.2, "span": 0.3, "bias": -0.4})
    return folder


def onnx_grader(model_dir: Path, dest: Path, name: str) -> Path:
    """Export as the packaged grader is exported (int8), keeping the tiny config beside it for the rebuild."""
    from fastcrag.fitting.export import export_grader

    export_grader(model_dir, dest, name=name)
    shutil.copyfile(model_dir / "config.json", dest / "config.json")
    return dest


def _user_pairs() -> list[Pair]:
    out = []
    for i, (q, p, a) in enumerate(FACTS):
        for j, (_, other, _) in enumerate(FACTS):
            label = 1.0 if i == j else 0.0
            out.append(Pair(q, p if i == j else other, label, "user", f"g{i}", a if i == j else ""))
        out += [Pair(q, p + " It is well known.", 1.0, "user", f"g{i}"), Pair(q, "Nothing here.", 0.0, "user", "x")]
        out += [Pair(q, f"{p} Also {FACTS[(i + 1) % 5][1]}", 1.0, "user", f"g{i}")]
    return out  # 40 pairs
