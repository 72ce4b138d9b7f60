"""Every notebook in notebooks/ runs top to bottom, offline, in a fresh kernel (nbclient), so none can rot."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import SHARED_DATA

pytestmark = pytest.mark.integration

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
BUDGET_S = 240  # each must run in well under this (they take tens of seconds on a quiet machine)


def test_every_numbered_notebook_is_collected() -> None:
    names = [p.name for p in NOTEBOOKS]
    assert names[:3] == [
        "01_quickstart.ipynb",
        "02_calibration_and_evaluation.ipynb",
        "03_chat_agent.ipynb",
    ], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_offline(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    if "calibration" in path.name and not (SHARED_DATA / "squad2-dev").exists():
        pytest.skip(f"SQuAD data not found at {SHARED_DATA}")
    monkeypatch.setenv("FASTRAG_DATA", str(SHARED_DATA))  # the kernel inherits it: where notebook 02 reads SQuAD
    book = nbformat.read(path, as_version=4)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    client = NotebookClient(
        book,
        timeout=BUDGET_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    started = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - started
    executed = tmp_path / path.name
    nbformat.write(book, executed)
    with capsys.disabled():
        print(f"\n[notebook] {path.name}: {elapsed:.1f} s (executed copy: {executed})")
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert elapsed < BUDGET_S
    if "calibration" in path.name:  # the plot was drawn
        assert any(
            "image/png" in o.get("data", {}) for c in book.cells if c.cell_type == "code" for o in c.get("outputs", [])
        )
