"""`python -m lab calibrate` rebuilds a calibration from SQuAD with the real grader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED_DATA

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _index(folder: Path, pages: dict[str, str]) -> Path:
    """A small manual's index, built as a user builds one (`fastcrag index`)."""
    folder.mkdir()
    for name, text in pages.items():
        (folder / name).write_text(text, encoding="utf-8")
    index = folder.with_name(folder.name + "-index")
    command = [sys.executable, "-m", "fastcrag.cli", "index", str(folder), "--index", str(index)]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return index


@pytest.mark.skipif(not (SHARED_DATA / "squad2-dev").exists(), reason="shared evaluation data not present")
def test_calibrate_writes_a_valid_file(tmp_path: Path) -> None:
    out = tmp_path / "calibration.json"
    own = _index(  # SQLAlchemy's written questions are asked of it: a few sessions-and-queries pages stand in
        tmp_path / "orm",
        {
            "session.txt": "The Session establishes all conversations with the database. It holds the objects you "
            "have loaded or associated with it during its lifespan and provides the interface where SELECT and "
            "other queries are made.",
            "engine.txt": "The Engine is the starting point for any SQLAlchemy application. It is created with "
            "create_engine() from a database URL and keeps a pool of connections to the database.",
        },
    )
    other = _index(
        tmp_path / "garden",
        {"roses.txt": "Prune roses in late winter, just before new growth begins, cutting above an outward bud."},
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab",
            "calibrate",
            "--docs",
            f"sqlalchemy={own}",
            "--wrong-manual",
            str(other),
            "--docs-per-manual",
            "4",
            "--squad",
            str(SHARED_DATA / "squad2-dev"),
            "--off-corpus",
            str(SHARED_DATA / "train" / "squad11-train"),
            "--per-class",
            "8",
            "--out",
            str(out),
        ],
        cwd=ROOT,  # the lab is a folder of the repository, not an installed package
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    from fastcrag.config.calibration import load_calibration

    cal = load_calibration(out)
    assert cal.metrics["questions"] == {"answerable": 8, "unanswerable": 8, "off_corpus": 8}
    assert sum(cal.metrics["band_mix"].values()) == 24  # SQuAD's figures stay SQuAD's
    docs = cal.metrics["documentation"]  # the written questions joined the pool the thresholds were drawn on
    asked = docs["questions"]["sqlalchemy"]
    assert asked["answerable"] == 4 and 0 < asked["off_corpus"] <= 4
    assert sum(docs["band_mix"].values()) == asked["answerable"] + asked["off_corpus"]
    assert "documentation: newcomers' written questions of sqlalchemy" in cal.data
    assert "together" in cal.objective and "of squad2-dev's questions" in cal.objective  # crag_upper: SQuAD's
    curve = cal.metrics["auc_by_condition_factor"]  # every answerable question naming a year, ordinal, quarter or month
    assert list(curve) == ["1", "0.75", "0.5", "0.25", "0"]
    assert curve[f"{cal.condition_factor:g}"] == max(curve.values())
    assert "condition changed" in cal.objective
    shift = cal.metrics["pseudo_shift"]["squad"]  # cloze questions of the same corpus grade their evidence higher
    assert cal.pseudo_shift is not None and shift["pseudo_questions"] > 0 and shift["answerable"] > 0
    assert set(cal.metrics["pseudo_shift"]["documentation"]) == set(shift)  # the manual's sides, pooled with SQuAD's
    assert cal.pseudo_shift <= 0 and "pseudo_shift:" in cal.objective
    packaged = load_calibration()  # what calibrate does not draw is kept, with what its objective says of it
    assert (cal.rerank_weight, cal.flare_threshold) == (packaged.rerank_weight, packaged.flare_threshold)
    assert cal.objective.count("rerank_weight:") == 1 and "flare_threshold" in cal.objective
    flare_figures = {k: v for k, v in packaged.metrics.items() if k.startswith("flare_")}
    assert flare_figures and all(cal.metrics[k] == v for k, v in flare_figures.items())
