"""The grader's two trainable networks behind one interface: the one-logit classifier and the grader-reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastcrag.fitting.model import HEADS_FILE, build_model, save_model

#: The Hugging Face class of the one-logit grader (the packaged grader's network).
CLASSIFIER_ARCHITECTURE = "BertForSequenceClassification"


def is_classifier_folder(folder: Path) -> bool:
    """Whether `folder` holds a one-logit sequence classifier (Hugging Face format) rather than a grader-reader.

    A grader-reader folder is an encoder plus `heads.safetensors`; a classifier's `config.json` names a
    `...ForSequenceClassification` architecture.
    """
    config = Path(folder) / "config.json"
    if (Path(folder) / HEADS_FILE).is_file() or not config.is_file():
        return False
    archs = json.loads(config.read_text(encoding="utf-8")).get("architectures") or []
    return any(str(a).endswith("ForSequenceClassification") for a in archs)


def wrap_classifier(hf: Any) -> Any:
    """A one-logit `...ForSequenceClassification` model, wrapped to answer like the grader-reader.

    The wrapper returns `(relevance, None, None)`; its `encoder` is the classifier's base model (BERT with its
    pooler), so the training loop can freeze the word embeddings and give the head its own learning rate; `hf` is
    the Hugging Face model (for saving).

    Raises:
        ValueError: the model has more than one label.
    """
    import torch  # torch takes a second or more to load: only when a network is built

    if int(hf.config.num_labels) != 1:
        raise ValueError(f"a grader has one logit, this classifier has {hf.config.num_labels} labels")

    class SequenceClassifierGrader(torch.nn.Module):
        """A `...ForSequenceClassification` model with one logit: relevance from the pooled [CLS]; no reader."""

        def __init__(self, hf: Any) -> None:
            super().__init__()
            self.hf = hf

        @property
        def encoder(self) -> Any:
            return self.hf.base_model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> tuple[Any, None, None]:
            logits = self.hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
            return logits[:, 0], None, None

    return SequenceClassifierGrader(hf)


def build_classifier(folder: str | Path) -> Any:
    """The one-logit classifier saved in `folder` (Hugging Face format), wrapped by `wrap_classifier`."""
    from transformers import AutoModelForSequenceClassification  # transformers only when a network is built

    return wrap_classifier(AutoModelForSequenceClassification.from_pretrained(str(folder), local_files_only=True))


def load_network(folder: str | Path) -> Any:
    """The trainable grader in `folder`: the one-logit classifier, or the grader-reader (encoder + heads).

    Both answer `model(input_ids, attention_mask, token_type_ids) -> (relevance, start, end)`; the classifier's
    start and end are None.
    """
    return build_classifier(folder) if is_classifier_folder(Path(folder)) else build_model(folder)


def has_reader(model: Any) -> bool:
    """Whether a network from `load_network` has the answer-span (reader) head."""
    return hasattr(model, "span")


def head_parameters(model: Any) -> list[Any]:
    """The parameters outside the encoder: the relevance head (and the span head of a grader-reader)."""
    encoder = {id(p) for p in model.encoder.parameters()}
    return [p for p in model.parameters() if id(p) not in encoder]


def save_network(model: Any, tokenizer: Any, folder: Path, fusion: dict[str, float] | None = None) -> None:
    """Save a network from `load_network` so that `load_network(folder)` reads it back.

    A classifier is written as its Hugging Face folder (safetensors, config, tokenizer); a grader-reader as its
    encoder, heads, tokenizer and grade fusion (`fastcrag.fitting.model.save_model`).
    """
    if has_reader(model):
        save_model(model, tokenizer, folder, fusion)
        return
    folder.mkdir(parents=True, exist_ok=True)
    model.hf.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
