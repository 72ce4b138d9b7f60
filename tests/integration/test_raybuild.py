"""`fastcrag index --ray` against the bundled Postgres and a local Ray runtime of 2 CPUs, on a slice of SciFact.

The same chunks (ids, content hashes, texts), the same vectors bit for bit and the same answers (text, citations,
band) as the single-process build; a killed embedding actor loses and duplicates nothing; a killed build leaves its
collection hidden, and the rerun writes only what is missing.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastcrag.config.settings import Settings
from fastcrag.retrieval.indexing import BuildReport
from fastcrag.retrieval.loaders import load_documents
from fastcrag.retrieval.pgstore import PgStore, PgStoreError, build_pg_index, connect

from conftest import SHARED_DATA

ray = pytest.importorskip("ray")
psycopg = pytest.importorskip("psycopg")
from fastcrag.retrieval.raybuild import ray_build_index  # noqa: E402  (after the skip: needs the `ray` extra)

pytestmark = pytest.mark.integration

CORPUS = SHARED_DATA / "scifact" / "corpus.jsonl.gz"
SLICE = 80  # SciFact abstracts (about 3.5 chunks each)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder: SciFact abstracts (one text twice, under two ids), 3 more as Parquet, a Markdown file."""
    if not CORPUS.is_file():
        pytest.skip(f"SciFact not found at {CORPUS}")
    folder = tmp_path_factory.mktemp("corpus")
    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:
        lines = list(itertools.islice(fh, SLICE + 3))
    lines, parquet = lines[:SLICE], lines[SLICE:]
    again = {**json.loads(lines[0]), "_id": "copy-of-first"}  # a duplicate text: indexed once, under its first source
    (folder / "scifact.jsonl").write_text("".join(lines) + json.dumps(again) + "\n", encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in parquet]
    table = pa.table({k: [f"pq-{r['_id']}" if k == "_id" else r[k] for r in rows] for k in ("_id", "title", "text")})
    pq.write_table(table, folder / "more.parquet")
    (folder / "notes.md").write_text("# Notes\n\nVitamin D and bone density: a short note on the evidence.\n")
    return folder


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[str]:
    """A local Ray runtime of 2 CPUs for this module; its address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def db(postgres_url: str) -> Iterator[str]:
    name = f"r_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.replace("/fastcrag_test?", f"/{name}?")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def single(db: str, corpus: Path) -> dict[str, Any]:
    """The single-process build of the corpus (collection `single`) and what it stored."""
    report = build_pg_index(load_documents([corpus]), db, _embedder(), "single", progress=False)
    return {"report": report, **_stored(db, "single")}


def _embedder() -> Any:
    from fastcrag.retrieval.embeddings import default_embeddings

    return default_embeddings()


def _stored(url: str, collection: str) -> dict[str, Any]:
    """The collection's chunks (id, source, title, text), documents (source, hash, chunk ids) and vectors."""
    with connect(url) as conn:
        row = conn.execute("SELECT id FROM fastcrag_collections WHERE name = %s", (collection,)).fetchone()
        assert row is not None
        table = f"fastcrag_chunks_{row[0]}"
        chunks = conn.execute(f"SELECT chunk_id, source, title, text FROM {table} ORDER BY chunk_id").fetchall()
        vectors = dict(conn.execute(f"SELECT chunk_id, embedding FROM {table}").fetchall())
        documents = conn.execute(
            "SELECT source, hash, chunk_ids FROM fastcrag_documents WHERE collection_id = %s ORDER BY source", row
        ).fetchall()
        counted = conn.execute("SELECT chunks FROM fastcrag_collections WHERE id = %s", row).fetchone()
    assert counted == (len(chunks),)  # the running count matches the rows: nothing written twice
    return {"chunks": chunks, "documents": documents, "vectors": vectors}


def _ray_build(url: str, corpus: Path, collection: str, address: str) -> BuildReport:
    return ray_build_index([corpus], url, collection, address=address, settings=Settings(), progress=False)


def _assert_same(single: dict[str, Any], built: dict[str, Any]) -> None:
    """The same chunks (ids, texts), documents (content hashes, chunk ids) and vectors, bit for bit.

    The embedder embeds each text alone, so a chunk's vector does not depend on its batch-mates, on the batch size
    or on the threads (an embedding actor runs one, the single-process build one per CPU).
    """
    assert built["chunks"] == single["chunks"]
    assert built["documents"] == single["documents"]
    assert built["vectors"].keys() == single["vectors"].keys()
    differ = [
        k for k, v in single["vectors"].items() if not np.array_equal(built["vectors"][k].to_numpy(), v.to_numpy())
    ]
    assert not differ, f"{len(differ)} of {len(single['vectors'])} vectors differ, e.g. {differ[:3]}"


def _ask(url: str, collection: str, questions: list[str]) -> list[dict[str, Any]]:
    """Each question's answer, citations (source, chunk id), band and action, from the collection."""
    from fastcrag.components import Components
    from fastcrag.graph.builder import build_graph

    parts = Components(Settings(store=url, collection=collection, llm="extractive"))
    graph = build_graph(parts=parts)
    out = []
    for question in questions:
        result = graph.invoke({"question": question})
        out.append(
            {
                "answer": result["answer"],
                "citations": [(c["source"], c["chunk_id"]) for c in result.get("citations", [])],
                "band": result["crag"]["band"],
                "action": result["crag"]["action"],
            }
        )
    return out


def test_ray_build_matches_the_single_process_build_and_answers(
    db: str, corpus: Path, single: dict[str, Any], ray_runtime: str
) -> None:
    report = _ray_build(db, corpus, "ray", ray_runtime)
    assert report.documents_added == len(single["documents"]) == SLICE + 3 + 1  # SciFact, Parquet, Markdown
    assert report.documents_seen == report.documents_added + 1  # the duplicate text, skipped as single-process does
    assert report.chunks_added == report.chunks_total == len(single["chunks"])
    built = _stored(db, "ray")
    _assert_same(single, built)

    titles = [row[2] for row in single["chunks"][:: max(1, len(single["chunks"]) // 4)]][:4]
    questions = [f"What does the study '{t}' find?" for t in titles] + ["Does vitamin D affect bone density?"]
    answers = _ask(db, "ray", questions)
    assert any(a["citations"] for a in answers), "no question was answered with citations"
    assert answers == _ask(db, "single", questions)  # the same answers, citations, bands and actions


def _embed_actor_pids() -> list[int]:
    """The processes of Ray's embedding actors (Ray names them after the stage)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "MapBatches(Embed)" in cmdline and cmdline.startswith("ray::"):
                pids.append(int(entry.name))
    return pids


def _documents_written(url: str, collection: str) -> int:
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM fastcrag_documents d JOIN fastcrag_collections c ON c.id = d.collection_id "
            "WHERE c.name = %s",
            (collection,),
        ).fetchone()
    return int(row[0]) if row else 0


def _settled(url: str, collection: str, quiet: float = 3.0, timeout: float = 60.0) -> int:
    """The documents written once the count has not moved for `quiet` seconds (a killed job's writers wound down)."""
    deadline = time.monotonic() + timeout
    count, since = _documents_written(url, collection), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            pytest.fail(f"the documents written to {collection!r} still moved after {timeout:g} s")
        time.sleep(0.5)
        now = _documents_written(url, collection)
        if now != count:
            count, since = now, time.monotonic()
    return count


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_killed_embedding_actor_loses_and_duplicates_nothing(
    db: str, corpus: Path, single: dict[str, Any], ray_runtime: str
) -> None:
    outcome: dict[str, Any] = {}

    def build() -> None:
        try:
            outcome["report"] = _ray_build(db, corpus, "killed-actor", ray_runtime)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=build)
    thread.start()
    _wait_for(lambda: _documents_written(db, "killed-actor") > 0 or not thread.is_alive(), 240, "the first write")
    victims = _embed_actor_pids()
    assert thread.is_alive() and victims, "the build finished before an embedding actor could be killed"
    os.kill(victims[0], signal.SIGKILL)
    thread.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    report = outcome["report"]
    assert report.chunks_total == len(single["chunks"])
    _assert_same(single, _stored(db, "killed-actor"))


def test_a_killed_build_stays_hidden_and_the_rerun_writes_only_what_is_missing(
    db: str, corpus: Path, single: dict[str, Any], ray_runtime: str
) -> None:
    command = [sys.executable, "-m", "fastcrag.cli", "index", str(corpus), "--store", db, "--collection", "cut"]
    proc = subprocess.Popen([*command, "--ray", ray_runtime, "--quiet"], cwd=REPO)
    try:
        _wait_for(lambda: _documents_written(db, "cut") > 0 or proc.poll() is not None, 240, "the first write")
        assert proc.poll() is None, "the build finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    written = _settled(db, "cut")  # the job's actors on the cluster outlive its driver for a moment
    assert 0 < written < len(single["documents"])
    with pytest.raises(PgStoreError, match="not ready"):  # `ask` and `serve` never read a half-built collection
        PgStore(db, _embedder(), "cut")

    before = len(_stored(db, "cut")["chunks"])  # whole documents only: the counts agree (checked there)

    report = _ray_build(db, corpus, "cut", ray_runtime)
    assert report.documents_unchanged == written
    assert report.documents_added == len(single["documents"]) - written
    assert report.chunks_added == len(single["chunks"]) - before
    _assert_same(single, _stored(db, "cut"))
    with PgStore(db, _embedder(), "cut") as store:  # finished: readable
        assert len(store) == len(single["chunks"])
