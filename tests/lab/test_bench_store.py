"""`python -m lab bench-store` pieces: vector generation, recall, the FAISS stores, the report (no Postgres/model)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lab.benchmarks import bench_store
from lab.cli import main


def _sample(n: int = 300, dim: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((5, dim))
    x = centres[rng.integers(0, 5, n)] + 0.3 * rng.standard_normal((n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_synthetic_vectors_match_the_sample_and_are_unit_norm() -> None:
    sample = _sample()
    drawn = bench_store.synthetic_vectors(sample, 5000, seed=1, chunk=1000)
    assert drawn.shape == (5000, 32) and drawn.dtype == np.float32
    # Seeded draws; float32 normalisation leaves 6e-8 (measured), so 1e-5 is rounding with room for any BLAS. The
    # means' correlation measured 0.9998: 0.95 asks that the draws follow the sample, not chance (about 0).
    assert np.allclose(np.linalg.norm(drawn, axis=1), 1, atol=1e-5)
    assert np.corrcoef(drawn.mean(axis=0), sample.mean(axis=0))[0, 1] > 0.95


def test_perturbed_copies_sit_as_close_to_parents_as_real_neighbours() -> None:
    sample = _sample()
    drawn, nn_cos = bench_store.perturbed_vectors(sample, 3000, seed=2, chunk=1000)
    assert np.allclose(np.linalg.norm(drawn, axis=1), 1, atol=1e-5)
    best = (drawn @ sample.T).max(axis=1).mean()
    # Seeded: measured 0.959 against nn_cos 0.951, 0.008 apart; 0.05 leaves 6x for another BLAS's rounding, and a
    # copy drawn at another distance from its parent misses it.
    assert best == pytest.approx(nn_cos, abs=0.05)


def test_faiss_stores_and_report(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sample = _sample(dim=16)
    base = bench_store.synthetic_vectors(sample, 2000, seed=3)
    queries = bench_store.synthetic_vectors(sample, 30, seed=4)
    truth, results = bench_store.bench_faiss(base, queries, 10, [16, 64], ["faiss-flat", "faiss-hnsw"])
    assert truth.shape == (30, 10)
    flat = results[0]
    assert flat.store == "faiss-flat" and flat.recall_at_10 == 1.0
    hnsw = [r for r in results if r.store == "faiss-hnsw"]
    assert [r.ef_search for r in hnsw] == [16, 64] and hnsw[1].recall_at_10 >= hnsw[0].recall_at_10
    report = bench_store.Report("v", "q", "m", results, [bench_store.RssResult(10, 100.0, 90.0, 1.0)])
    report.rss.append(bench_store.RssResult(100, 130.0, 90.0, 1.0))
    text = bench_store.render(report)
    assert "exact baseline" in text and "target is at 1M" in text and "+30.0% (misses" in text

    def fake_real_vectors(*args: Any) -> tuple[np.ndarray, np.ndarray, str]:
        return sample, queries, "fake embeddings"

    monkeypatch.setattr(bench_store, "real_vectors", fake_real_vectors)
    argv = ["bench-store", "--sizes", "500", "--stores", "faiss-flat,faiss-hnsw", "--rss-sizes", "--queries", "20"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "faiss-hnsw" in out and "fake embeddings" in out
    assert main(["bench-store", "--stores", "milvus"]) == 2
    assert "unknown store(s) milvus" in capsys.readouterr().err
