"""`python -m lab bench-batching` pieces, no models: its argument checks and the alone-against-batch measure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.benchmarks.bench_batching import GROUP, alone_against_batch
from lab.cli import main

from fakes import HashEmbeddings


def test_bad_arguments_are_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-batching", "--beir", str(tmp_path)]) == 2
    assert "no SciFact corpus at" in capsys.readouterr().err
    (tmp_path / "corpus.jsonl.gz").write_bytes(b"")
    assert main(["bench-batching", "--beir", str(tmp_path), "--chunks", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_alone_against_batch_tells_a_batch_dependent_embedder_apart() -> None:
    texts = [f"text number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(2 * GROUP)]
    cos, same = alone_against_batch(HashEmbeddings().encode, texts)
    assert len(cos) == len(same) == len(texts) and same.all() and np.allclose(cos, 1.0)

    def batch_dependent(batch: Any) -> Any:  # each vector pulled toward the batch's mean, as shared scales would
        vectors = HashEmbeddings().encode(list(batch))
        moved = vectors + 0.1 * vectors.mean(axis=0)
        return moved / np.linalg.norm(moved, axis=1, keepdims=True)

    cos, same = alone_against_batch(batch_dependent, texts)
    assert not same.any() and (cos < 1.0).all()
