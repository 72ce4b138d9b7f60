"""The grader's training loop, resume and ONNX export on a tiny user data set (real all-MiniLM-L6-v2 weights)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fastcrag.grading.reader import is_reader
from fastcrag.grading.reranker import load_reranker
from fastcrag.modelmeta import read_model_meta

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

FACTS = [
    (
        "Who designed the Eiffel Tower?",
        "The Eiffel Tower was designed by the company of Gustave Eiffel.",
        "Gustave Eiffel",
    ),
    ("What do plants release in photosynthesis?", "Photosynthesis releases oxygen as a by-product.", "oxygen"),
    (
        "What enforces ownership in Rust?",
        "Rust's borrow checker enforces ownership rules at compile time.",
        "borrow checker",
    ),
    ("When did the Berlin Wall fall?", "The Berlin Wall fell on 9 November 1989.", "9 November 1989"),
    ("What is the capital of Australia?", "Canberra is the capital city of Australia.", "Canberra"),
    ("How many legs does a spider have?", "Spiders have eight legs and two body segments.", "eight"),
    ("What metal is liquid at room temperature?", "Mercury is a metal that is liquid at room temperature.", "Mercury"),
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare.", "William Shakespeare"),
]


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each question with its own passage (1) and the next fact's passage (0), one document per fact."""
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    rows = []
    for i, (q, p, a) in enumerate(FACTS):
        rows.append({"question": q, "passage": p, "label": 1, "group": f"doc{i}", "answer": a})
        rows.append({"question": q, "passage": FACTS[(i + 1) % len(FACTS)][1], "label": 0, "group": f"doc{i}"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def _log_steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "train_log.jsonl").read_text().splitlines()]


def _train_cli(run: Path, pairs: Path, *extra: str) -> dict[str, object]:
    args = ["--output", str(run), "--no-shared-data", "--user-data", str(pairs), "--dev-percent", "0"]
    args += ["--batch-size", "4", "--max-length", "64", "--checkpoint-every", "2", "--lr", "1e-4", "--threads", "1"]
    args += ["--seed", "13"]  # Python's random and torch (head initialisation, dropout, the batch order)
    out = subprocess.run(
        [sys.executable, "-m", "lab", "train-reranker", *args, *extra],
        cwd=ROOT,  # the lab is a folder of the repository, not an installed package
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    summary: dict[str, object] = json.loads((run / "train_summary.json").read_text())
    return summary


def test_train_resume_and_export(tmp_path: Path, pairs_file: Path) -> None:
    run = tmp_path / "my-run"
    first = _train_cli(run, pairs_file)
    assert first["train_pairs"] == 2 * len(FACTS) and first["steps"] == first["total_steps"] == 4
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == 4

    # A second epoch over the same kept pool resumes from the checkpoint instead of starting again,
    # then exports int8 ONNX under a name of its own (never the packaged grader's).
    second = _train_cli(run, pairs_file, "--epochs", "2", "--export", str(tmp_path / "onnx"))
    assert second["steps"] == second["total_steps"] == 8
    assert _log_steps(run) == [2, 4, 6, 8]
    meta = read_model_meta(tmp_path / "onnx", required=True)
    assert meta["name"] == "grader-my-run" and meta["format"].startswith("onnx-int8")

    onnx = load_reranker(str(tmp_path / "onnx"))
    q, passages = FACTS[0][0], [p for _, p, _ in FACTS]
    a, b = onnx.score(q, passages), _torch_scores(run / "final", q, passages)
    assert onnx.name == "grader-my-run"
    assert all(0.0 <= s <= 1.0 for s in a)
    # The int8 export against its fp32 weights: int8 rounding of weights and activations, not a different model.
    # Measured at most 0.016 over every question of FACTS, on ATen's AVX2 and default paths alike (the int8 side runs
    # in ONNX Runtime either way); 0.15 leaves 9x for another CPU's int8 kernels.
    gap = max(abs(x - y) for x, y in zip(a, b, strict=True))
    assert gap < 0.15, (a, b)
    # The reader head comes from the same pass: every span is a piece of its own passage.
    assert is_reader(onnx)
    spans = onnx.read(q, passages)  # type: ignore[attr-defined]
    assert all(s is not None and passages[i][s.start : s.end] == s.text for i, s in enumerate(spans))


def _torch_scores(folder: Path, question: str, passages: list[str]) -> list[float]:
    """The trained torch model's relevance scores (no dev split here, so the grade is the relevance logit)."""
    from transformers import AutoTokenizer

    from fastcrag.fitting.model import build_model
    from lab.training.train import predict_heads

    rel, _ = predict_heads(
        build_model(folder),
        AutoTokenizer.from_pretrained(str(folder)),
        [(question, p) for p in passages],
        max_length=64,
        batch_size=8,
        bf16=False,
    )
    return [1 / (1 + math.exp(-r)) for r in rel]


def test_an_earlier_grader_is_read_from_git_by_revision(tmp_path: Path) -> None:
    from lab.training.cli import GRADER_FILES, grader_at

    folder = grader_at("HEAD", tmp_path / "grader")
    assert sorted(p.name for p in folder.iterdir()) == sorted(GRADER_FILES)
    assert json.loads((folder / "fastcrag_model.json").read_text())["name"].startswith("fastcrag-grader")
    with pytest.raises(FileNotFoundError, match="no-such-revision"):
        grader_at("no-such-revision", tmp_path / "none")
