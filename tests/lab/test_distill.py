"""Distilling the grader-reader into fewer layers, on a tiny random teacher exported as the packaged grader is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from fastcrag.fitting.mix import write_pairs  # noqa: E402

from tiny_graders import FACTS, _user_pairs, onnx_grader, tiny_reader  # noqa: E402

FUSION = {"relevance": 1.2, "span": 0.3, "bias": -0.4}  # tiny_reader's grade fusion


def test_kept_layers_are_evenly_spaced_and_end_with_the_last() -> None:
    from lab.training.distill import kept_layers

    assert kept_layers(6, 3) == [1, 3, 5]
    assert kept_layers(6, 2) == [2, 5]
    assert kept_layers(6, 4) == [1, 2, 3, 5]
    assert kept_layers(6, 6) == list(range(6))
    for bad in (0, 7):
        with pytest.raises(ValueError, match="keeps 1 to 6 layers"):
            kept_layers(6, bad)


def _gap(student_dir: Path, teacher_dir: Path) -> float:
    """Mean absolute difference of the two graders' scores over every (question, passage) pair of FACTS."""
    from fastcrag.grading.reranker import load_reranker

    student, teacher = load_reranker(str(student_dir)), load_reranker(str(teacher_dir))
    gaps = [
        np.abs(np.asarray(student.score(q, [p for _, p, _ in FACTS])) - teacher.score(q, [p for _, p, _ in FACTS]))
        for q, _, _ in FACTS
    ]
    return float(np.mean(gaps))


def test_a_student_learns_its_teachers_scores_and_exports_as_a_grader(tmp_path: Path) -> None:
    from fastcrag.fitting.export import export_grader
    from fastcrag.fitting.model import build_model, save_model
    from fastcrag.fitting.train_loop import TrainConfig
    from fastcrag.fitting.weights import trainable_grader
    from lab.training.distill import distill, kept_layers, shrink

    teacher = onnx_grader(tiny_reader(tmp_path / "src", seed=3), tmp_path / "teacher", "tiny-teacher")
    weights = trainable_grader(teacher, tmp_path / "teacher-torch")
    run = tmp_path / "run"
    pairs = _user_pairs()
    write_pairs(run / "pool" / "train.jsonl", pairs * 4)
    write_pairs(run / "pool" / "dev.jsonl", pairs)

    def export(folder: Path, name: str) -> Path:
        return export_grader(folder, tmp_path / f"export-{name}", name=name)

    # the student before training: the teacher's last layer and heads
    untrained = shrink(build_model(weights), kept_layers(2, 1))
    save_model(untrained, transformers.AutoTokenizer.from_pretrained(str(weights)), tmp_path / "untrained", FUSION)
    before = _gap(export(tmp_path / "untrained", "untrained"), teacher)

    # The seed fixes everything that trains: Python's random and torch (dropout, the batch order); nothing in training
    # draws from numpy. One thread keeps the training's sums in one order.
    # 20 batches a pass, 32 passes: 640 steps. The teacher's scores spread little (std 0.016) and int8 rounding moves
    # them by about a third of that, so a short run's outcome is chance: after 160 steps (8 passes) seeds 13, 1 and 2
    # ended at 0.58x, 0.93x and 0.74x of the untrained gap on an AVX2 CPU, where AVX-512 gave seed 13 below 0.5x.
    # After 640 steps seeds 13, 1, 2, 3, 4 end at 0.26x, 0.35x, 0.29x, 0.41x, 0.34x on AVX2, and seeds 13, 1, 2 at
    # 0.26x, 0.37x, 0.29x on ATen's default (no SIMD) path: mean 0.32x, standard deviation 0.05, so 0.5x holds for a
    # kernel whose rounding sends training 3 standard deviations off, and fails a student that closes half as much.
    cfg = TrainConfig(str(run), seed=13, epochs=32, batch_size=8, lr=3e-3, max_length=64, bf16=False, threads=1)
    exported = export(distill(cfg, teacher, weights, layers=1), "student")
    after = _gap(exported, teacher)
    assert after < 0.5 * before, (before, after)
    meta = json.loads((exported / "fastcrag_model.json").read_text())
    assert meta["reader"] is True and meta["grade"] == FUSION
    summary = json.loads((run / "distill_summary.json").read_text())
    assert summary["layers"] == [1] and summary["dev"]["pairs"] == len(pairs)
    config = transformers.AutoConfig.from_pretrained(str(run / "final"))
    assert config.num_hidden_layers == 1
    # the run's folder is tied to its teacher and layers: another distillation there is refused, not resumed
    with pytest.raises(ValueError, match="keeping layers \\[1\\]"):
        distill(cfg, teacher, weights, layers=2)
