"""Distil the grader-reader into a smaller one: a few of the teacher's own layers, trained on the teacher's outputs.

The student starts as the teacher with evenly spaced encoder layers kept (the last always among them, so the heads
read the representation they were trained on), and learns the teacher's relevance logit (squared error) and its
answer-start and answer-end distributions (KL divergence over the passage tokens and [CLS]) on the training pool.
The teacher is the grader as shipped (its int8 ONNX file, scored by ONNX Runtime as the graph scores it), so the
student imitates what the graph sees. The student keeps the teacher's grade fusion, so its scores stand on the
teacher's scale; `python -m lab calibrate` still draws its own thresholds.

torch, transformers and ONNX Runtime are imported inside the functions that use them (see `training.train`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.fileio import write_json_atomic
from fastcrag.fitting.model import build_model, save_model, span_allowed
from fastcrag.fitting.train_loop import TrainConfig, _encoded_pool, make_optimizer, prepare_run, train_loop
from fastcrag.fitting.weights import file_sha1
from fastcrag.measures import auc_of_labels
from fastcrag.modelmeta import read_model_meta
from lab.training.train import _prepare_pool, predict_heads

#: Weight of the span distributions' KL divergence beside the relevance logit's squared error.
SPAN_WEIGHT = 1.0


def kept_layers(teacher_layers: int, student_layers: int) -> list[int]:
    """The teacher layers a student keeps: evenly spaced, the last always kept (3 of 6: [1, 3, 5]).

    Raises:
        ValueError: `student_layers` is not between 1 and `teacher_layers`.
    """
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"a student keeps 1 to {teacher_layers} layers, not {student_layers}")
    return [round((i + 1) * teacher_layers / student_layers) - 1 for i in range(student_layers)]


def shrink(model: Any, layers: list[int]) -> Any:
    """`model` (a grader-reader) with only the encoder layers `layers`, in their order; its config says so."""
    import torch

    encoder = model.encoder
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in layers])
    encoder.config.num_hidden_layers = len(layers)
    return model


class OnnxTeacher:
    """The shipped grader's ONNX graph, scoring padded token batches: (relevance, start, end) as torch tensors."""

    def __init__(self, grader_dir: Path, threads: int) -> None:
        from fastcrag.ortsession import cpu_session

        self.session = cpu_session(grader_dir / "model.onnx", threads)
        self.inputs = {i.name for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        if not {"logits", "start_logits", "end_logits"} <= set(outputs):
            raise ValueError(f"{grader_dir}: the teacher must be a grader-reader (logits, start_logits, end_logits)")

    def __call__(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> tuple[Any, Any, Any]:
        """The teacher's relevance logits (batch,) and start and end logits (batch, sequence) of a torch batch."""
        import torch

        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feed = {k: v.cpu().numpy().astype(np.int64) for k, v in feed.items() if k in self.inputs}
        rel, start, end = self.session.run(["logits", "start_logits", "end_logits"], feed)
        return torch.from_numpy(rel[:, 0]), torch.from_numpy(start), torch.from_numpy(end)


def distillation_loss(
    student: tuple[Any, Any, Any], teacher: tuple[Any, Any, Any], allowed: Any, span_weight: float = SPAN_WEIGHT
) -> Any:
    """Squared error of the relevance logits plus `span_weight` times the mean KL of start and end distributions.

    `allowed` (batch, sequence) marks the positions a span may take: passage tokens and [CLS] ("no answer").
    """
    import torch
    import torch.nn.functional as F

    rel_s, st_s, en_s = student
    rel_t, st_t, en_t = (t.to(rel_s.device).float() for t in teacher)
    loss = F.mse_loss(rel_s.float(), rel_t)

    def kl(s: Any, t: Any) -> Any:
        s = s.float().masked_fill(~allowed, -1e4)
        t = t.masked_fill(~allowed, -1e4)
        return F.kl_div(torch.log_softmax(s, -1), torch.log_softmax(t, -1), log_target=True, reduction="batchmean")

    return loss + span_weight * (kl(st_s, st_t) + kl(en_s, en_t)) / 2


def distill(cfg: TrainConfig, teacher_dir: Path, teacher_torch: Path, layers: int) -> Path:
    """Run (or resume) a distillation and write the student to `<output_dir>/final`.

    Args:
        cfg: The training run (pool, schedule, time budget, checkpoints), as for `train`.
        teacher_dir: The teacher as shipped (ONNX grader-reader folder): the targets.
        teacher_torch: Its trainable weights (`python -m lab unpack-grader`): the student's starting layers.
        layers: Encoder layers the student keeps.

    Returns:
        The student's folder (encoder, heads, tokenizer, the teacher's grade fusion).
    """
    from transformers import AutoTokenizer

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg.base_model = str(teacher_torch)
    meta = read_model_meta(teacher_dir)
    fusion = meta.get("grade")
    if not meta.get("reader") or not isinstance(fusion, dict):
        raise ValueError(f"{teacher_dir}: the teacher must be a grader-reader with its grade fusion")
    model = build_model(teacher_torch)
    keep = kept_layers(int(model.encoder.config.num_hidden_layers), layers)
    shrink(model, keep)
    sha1 = file_sha1(teacher_dir / "model.onnx")
    plan_path = out / "distill_config.json"
    if plan_path.is_file():  # a run to resume: only from the same teacher and layers
        earlier = json.loads(plan_path.read_text(encoding="utf-8"))
        if (earlier.get("teacher_sha1"), earlier.get("layers")) != (sha1, keep):
            raise ValueError(
                f"{out} holds a distillation of {earlier.get('teacher_name')!r} keeping layers {earlier.get('layers')}"
                f" (teacher file SHA-1 {earlier.get('teacher_sha1')}); this run distils {meta.get('name')!r} keeping"
                f" {keep} (SHA-1 {sha1}): choose another --output, or remove it to start over"
            )
    plan = {
        "teacher": str(teacher_dir),
        "teacher_name": meta.get("name"),
        "teacher_sha1": sha1,
        "layers": keep,
        **asdict(cfg),
    }
    write_json_atomic(plan_path, plan)
    device = prepare_run(cfg)
    train_pairs, dev_pairs = _prepare_pool(cfg, out)
    tokenizer = AutoTokenizer.from_pretrained(str(teacher_torch), local_files_only=True)
    data = _encoded_pool(out / "pool" / f"encoded-{cfg.max_length}.npz", tokenizer, train_pairs, cfg.max_length)
    labels = [train_pairs[i].label for i in data.keep]
    teacher = OnnxTeacher(teacher_dir, cfg.threads)
    optimizer = make_optimizer(model, cfg, device, head_lr_scale=1.0)  # the heads start trained
    run = train_loop(
        model,
        optimizer,
        data,
        labels,
        cfg,
        out,
        pad_id=int(tokenizer.pad_token_id or 0),
        device=device,
        desc=f"distill-grader ({layers} layers)",
        loss=lambda outputs, ids, tt, am: distillation_loss(outputs, teacher(ids, am, tt), span_allowed(tt, am)),
    )
    final = out / "final"
    model.eval()
    save_model(model, tokenizer, final, fusion)
    summary = {
        "layers": keep,
        "steps": run.steps,
        "total_steps": run.total_steps,
        "pairs_seen": run.pairs_seen,
        "train_minutes": round(run.elapsed_s / 60, 2),
        "pairs_per_s": round(run.pairs_seen / max(1e-9, run.elapsed_s), 1),
        "dev": agreement(model, tokenizer, teacher_dir, dev_pairs, fusion, cfg) if dev_pairs else {},
    }
    (out / "distill_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(json.dumps(summary, indent=2))
    return final


def agreement(
    model: Any, tokenizer: Any, teacher_dir: Path, dev: Any, fusion: dict[str, float], cfg: TrainConfig
) -> dict[str, float]:
    """Student against teacher on up to 2,000 dev pairs: each one's grade AUC and how far the grades lie apart.

    Both grades use the teacher's fusion; the teacher is scored as the graph scores it (`OnnxCrossEncoderReranker`).
    """
    from fastcrag.grading.onnx_grader import OnnxCrossEncoderReranker
    from lab.training.train import fused_logits

    sample = list(dev[:2000])
    rel, margin = predict_heads(model, tokenizer, [(p.question, p.passage) for p in sample], cfg.max_length, 64, False)
    student = 1 / (1 + np.exp(-np.asarray(fused_logits(rel, margin, fusion))))
    grader = OnnxCrossEncoderReranker(teacher_dir, max_length=cfg.max_length, threads=cfg.threads, cache_size=0)
    t0 = time.time()
    teacher = np.asarray([grader.score(p.question, [p.passage])[0] for p in sample])
    labels = [p.label for p in sample]
    gap = np.abs(student - teacher)
    return {
        "pairs": len(sample),
        "auc_student": round(auc_of_labels(labels, student.tolist()), 4),
        "auc_teacher": round(auc_of_labels(labels, teacher.tolist()), 4),
        "mean_abs_score_gap": round(float(gap.mean()), 4),
        "p95_abs_score_gap": round(float(np.quantile(gap, 0.95)), 4),
        "teacher_seconds": round(time.time() - t0, 1),
    }
