"""The label-free fit's gap on documentation (lab/scripts/fit_gap.py): the stored shift is taken back off."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fastcrag.config.calibration import load_calibration
from fastcrag.grading.onnx_grader import sigmoid
from lab.scripts import fit_gap


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_medians_and_gap_read_the_pseudo_grades_before_the_shift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shift = load_calibration().pseudo_shift or 0.0
    results = _jsonl(
        tmp_path / "results.jsonl",
        [
            {"type": "header"},
            {"id": "a", "topic_first": True, "top_score": sigmoid(1.0)},
            {"id": "b", "topic_first": False, "top_score": 0.01},  # its right page is not first: not counted
        ],
    )
    stored = [sigmoid(2.5 + shift), sigmoid(0.5 + shift)]  # as fit writes them: moved by the packaged shift
    obs = _jsonl(
        tmp_path / "observations.jsonl",
        [{"kind": "answerable", "top_score": stored[0]}, {"kind": "gold_removed", "top_score": stored[1]}],
    )
    monkeypatch.setattr(sys, "argv", ["fit_gap", str(results), str(obs)])
    fit_gap.main()
    out = capsys.readouterr().out
    assert "n=1, median logit 1.00" in out
    assert "pseudo-questions (before the shift): n=1, median logit 2.50" in out
    assert "twins (before the shift): n=1, median logit 0.50" in out
    assert "gap real - pseudo: -1.50" in out


def test_no_real_question_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _jsonl(tmp_path / "results.jsonl", [{"id": "a", "topic_first": False, "top_score": 0.9}])
    obs = _jsonl(tmp_path / "observations.jsonl", [{"kind": "answerable", "top_score": 0.9}])
    monkeypatch.setattr(sys, "argv", ["fit_gap", str(results), str(obs)])
    with pytest.raises(SystemExit, match="no real question"):
        fit_gap.main()
