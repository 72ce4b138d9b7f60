"""The Ray build's pieces without a cluster: actor planning, deduplication as the single-process build does, chunking
with the single-process function, the count rows, Parquet corpora, and the command line's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastcrag.cli import main
from fastcrag.config.settings import Settings
from fastcrag.retrieval.indexing import chunk_document, document_digest
from fastcrag.retrieval.loaders import SourceDocument, load_documents

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from fastcrag.retrieval import raybuild  # noqa: E402  (its stages take pyarrow tables)


def test_plan_uses_gpu_actors_only_when_the_cluster_has_gpus() -> None:
    settings = Settings()
    assert raybuild.plan({"CPU": 16.0}, settings) == raybuild.RayPlan(16, 0.0, settings.ray_writers)
    assert raybuild.plan({"CPU": 16.0, "GPU": 4.0}, settings) == raybuild.RayPlan(4, 1.0, settings.ray_writers)
    half = Settings(ray_num_gpus=0.5, ray_writers=3)
    assert raybuild.plan({"CPU": 8.0, "GPU": 2.0}, half) == raybuild.RayPlan(4, 0.5, 3)
    assert raybuild.plan({"CPU": 8.0}, Settings(ray_embed_actors=3)).embed_actors == 3


def _docs(rows: list[tuple[str, str, int, int]]) -> pa.Table:
    """Documents as the read stage gives them: (source, text, file, line)."""
    return pa.table(
        {
            "source": [r[0] for r in rows],
            "title": ["t" for _ in rows],
            "text": [r[1] for r in rows],
            "digest": [document_digest(r[1], 128, 24) for r in rows],
            "file": [r[2] for r in rows],
            "line": [r[3] for r in rows],
        }
    )


def test_deduplication_keeps_the_first_source_of_a_text_and_the_last_text_of_a_source() -> None:
    same_text = _docs([("b", "shared text", 1, 0), ("a", "shared text", 0, 5), ("c", "shared text", 0, 7)])
    kept = raybuild.first_of_text(same_text).to_pylist()
    assert [(r["source"], r["dups"]) for r in kept] == [("a", 2)]
    same_source = _docs([("s", "later", 1, 0), ("s", "earlier", 0, 3)])
    assert raybuild.last_of_source(same_source).column("text").to_pylist() == ["later"]


def test_chunk_uses_chunk_document_skips_unchanged_and_carries_the_counts() -> None:
    text = "Vitamin D supports bone health. " * 40
    docs = _docs([("new", text, 0, 0), ("old", "Unchanged text.", 0, 1), ("edited", "New words here.", 0, 2)])
    stored = ["", document_digest("Unchanged text.", 128, 24), "an older hash"]
    batch = docs.append_column("stored", pa.array(stored)).append_column("dups", pa.array([1, 0, 0]))
    out = raybuild.chunk(batch, 128, 24).to_pylist()
    expected = chunk_document(SourceDocument("new", "t", text), 128, 24)
    assert [r["source"] for r in out] == ["new", "edited"]
    assert tuple(out[0]["chunk_ids"]) == expected.entry.chunk_ids and out[0]["texts"] == expected.texts
    totals = {k: sum(r[k] for r in out) for k in raybuild.COUNTS}
    assert totals == {"added": 1, "changed": 1, "unchanged": 1, "dups": 1}


def test_a_batch_of_unchanged_documents_still_reports_its_counts() -> None:
    docs = _docs([("old", "Unchanged text.", 0, 0)])
    batch = docs.append_column("stored", docs.column("digest")).append_column("dups", pa.array([0]))
    (row,) = raybuild.chunk(batch, 128, 24).to_pylist()
    assert row["chunk_ids"] == [] and row["unchanged"] == 1


def test_parquet_corpora_load_like_jsonl(tmp_path: Path) -> None:
    rows = [{"_id": "1", "title": "Bones", "text": "Vitamin D and bone density."}, {"_id": "2", "text": "No title."}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(
        pa.table({"_id": ["1", "2"], "title": ["Bones", None], "text": [r["text"] for r in rows]}),
        tmp_path / "c.parquet",
    )
    from_jsonl = list(load_documents([tmp_path / "c.jsonl"]))
    from_parquet = list(load_documents([tmp_path / "c.parquet"]))
    assert [(d.title, d.text) for d in from_parquet] == [(d.title, d.text) for d in from_jsonl]
    assert [d.source for d in from_parquet] == ["c.parquet#1", "c.parquet#2"]
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="needs the columns _id and text"):
        list(load_documents([tmp_path / "bad.parquet"]))


def test_ray_needs_a_postgres_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.md").write_text("text")
    assert main(["index", str(tmp_path), "--ray"]) == 2
    assert "--ray builds into a Postgres store" in capsys.readouterr().err


def test_an_address_without_a_cluster_fails_fast() -> None:
    with pytest.raises(raybuild.RayBuildError, match=r"no Ray cluster answers at '127\.0\.0\.1:1'"):
        raybuild._check_reachable("127.0.0.1:1")
    with pytest.raises(raybuild.RayBuildError, match="HOST:PORT"):
        raybuild._check_reachable("somewhere")
