"""The grader-reader network: a MiniLM encoder with a relevance head and a span (reader) head, one pass.

torch, transformers and safetensors are imported inside the functions that need them (torch alone takes over a
second), so that the span helpers here import cheaply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HEADS_FILE = "heads.safetensors"
FUSION_FILE = "grade_fusion.json"


def build_model(base: str | Path) -> Any:
    """A `GraderReader` over the encoder weights in `base` (heads freshly initialised, or loaded when saved)."""
    import torch
    from transformers import AutoModel

    class GraderReader(torch.nn.Module):
        """Encoder + relevance logit from [CLS] + start/end logits per token ([CLS] is "no answer")."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder
            hidden = int(encoder.config.hidden_size)
            self.dropout = torch.nn.Dropout(0.1)
            self.relevance = torch.nn.Linear(hidden, 1)
            self.span = torch.nn.Linear(hidden, 2)

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> tuple[Any, Any, Any]:
            h = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            rel = self.relevance(self.dropout(h[:, 0])).squeeze(-1)
            se = self.span(h)
            return rel, se[..., 0], se[..., 1]

    encoder = AutoModel.from_pretrained(str(base), local_files_only=True, add_pooling_layer=False)
    model = GraderReader(encoder)
    heads = Path(base) / HEADS_FILE
    if heads.is_file():
        from safetensors.torch import load_file

        state = load_file(str(heads))
        model.relevance.load_state_dict({k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("relevance.")})
        model.span.load_state_dict({k.split(".", 1)[1]: v for k, v in state.items() if k.startswith("span.")})
    return model


def save_model(model: Any, tokenizer: Any, folder: Path, fusion: dict[str, float] | None = None) -> None:
    """Write the encoder (Hugging Face format), the heads (safetensors), the tokenizer and the grade fusion."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(str(folder), safe_serialization=True)
    heads = {f"relevance.{k}": v for k, v in model.relevance.state_dict().items()}
    heads |= {f"span.{k}": v for k, v in model.span.state_dict().items()}
    save_file({k: v.detach().contiguous().cpu() for k, v in heads.items()}, str(folder / HEADS_FILE))
    tokenizer.save_pretrained(str(folder))
    if fusion is not None:
        (folder / FUSION_FILE).write_text(json.dumps(fusion, indent=2) + "\n", encoding="utf-8")


def read_fusion(folder: Path) -> dict[str, float] | None:
    """The grade fusion weights saved with a model, if any."""
    path = folder / FUSION_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def passage_masks(token_type_ids: Any, attention_mask: Any) -> Any:
    """True at passage tokens: second segment, attended, not the final [SEP] (a torch bool tensor)."""
    import torch

    mask = (token_type_ids == 1) & (attention_mask == 1)
    last = attention_mask.sum(dim=1) - 1  # the final [SEP]
    mask[torch.arange(mask.shape[0]), last] = False
    return mask


def span_allowed(token_type_ids: Any, attention_mask: Any) -> Any:
    """Positions an answer span may take: the passage's tokens and [CLS] ("no answer")."""
    allowed = passage_masks(token_type_ids, attention_mask)
    allowed[:, 0] = True
    return allowed


def span_targets(
    offsets: list[tuple[int, int]], seq_ids: list[int | None], char_start: int, char_end: int
) -> tuple[int, int]:
    """Token (start, end) of a character span of the passage, or (-1, -1) when it was truncated away."""
    start = end = -1
    for i, ((a, b), sid) in enumerate(zip(offsets, seq_ids, strict=True)):
        if sid != 1:
            continue
        if start < 0 and a <= char_start < b:
            start = i
        if a < char_end <= b:
            end = i
            break
    return (start, end) if 0 <= start <= end else (-1, -1)


def find_answer(passage: str, answer: str) -> tuple[int, int]:
    """Character span of the first occurrence of `answer` in `passage` (case-insensitive), or (-1, -1)."""
    if not answer.strip():
        return -1, -1
    i = passage.find(answer)
    if i < 0:
        i = passage.lower().find(answer.lower())
    return (i, i + len(answer)) if i >= 0 else (-1, -1)
