"""The Postgres + pgvector store against a real Postgres: search, collections, upserts, kills, errors, outages."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fastcrag import build_graph
from fastcrag.cli import main
from fastcrag.config.settings import Settings
from fastcrag.retrieval.hybrid import HybridRetriever
from fastcrag.retrieval.indexing import build_index
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.pgstore import (
    SCHEMA_VERSION,
    PgStore,
    PgStoreError,
    SchemaVersionError,
    build_pg_index,
    connect,
)
from fastcrag.retrieval.store import FaissStore

from fakes import ALPHA, CALIBRATION, SECTIONED, FakeChat, HashEmbeddings, ScriptedReranker

pytestmark = pytest.mark.integration  # a real Postgres server (no model: a deterministic fake embedder)

PASSWORD = "s3cret-pw"  # the bundled server trusts its socket, so any password works; it must never be shown

DOCS = [
    SourceDocument("rust.md", "Rust", "The borrow checker enforces ownership and borrowing rules at compile time."),
    SourceDocument("py.md", "Python", "The with statement wraps a block in a context manager's enter and exit."),
    SourceDocument("paris.md", "Paris", "The Eiffel Tower stands in Paris and was finished in 1889."),
    SourceDocument("fruit.md", "Fruit", "Bananas are yellow fruit grown in the tropics."),
]


def _database_url(base: str, name: str, user: str = "postgres", password: str = PASSWORD) -> str:
    """The URL of database `name` on the session's server (`base` is postgresql://postgres:@/db?host=...)."""
    query = base.split("?", 1)[1]
    return f"postgresql://{user}:{password}@/{name}?{query}"


@pytest.fixture(scope="module")
def admin(postgres_url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the session's server; skips when pgvector cannot compute a distance here."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        try:
            conn.execute("SELECT '[1,2,3]'::vector <=> '[3,2,1]'::vector").fetchone()
        except psycopg.OperationalError as exc:  # e.g. a pgvector built for AVX-512 on a CPU without it (SIGILL)
            pytest.skip(f"pgvector crashes on this machine's CPU ({exc}); rebuild it for this CPU")
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def db(admin: psycopg.Connection[Any], postgres_url: str) -> Iterator[str]:
    """A fresh database for one test; its URL carries a password that must never appear in errors."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    admin.execute(f'CREATE DATABASE "{name}"')
    yield _database_url(postgres_url, name)
    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _build(url: str, docs: list[SourceDocument], collection: str = "default", **kwargs: Any) -> Any:
    return build_pg_index(
        docs, url, HashEmbeddings(), collection, chunk_tokens=32, chunk_overlap=8, progress=False, **kwargs
    )


def _store(url: str, collection: str = "default", **kwargs: Any) -> PgStore:
    return PgStore(url, HashEmbeddings(), collection, **kwargs)


def _consistent(url: str, collection: str = "default") -> int:
    """Check every document's chunks are stored, no chunk is orphaned and the count is right; returns the count."""
    with connect(url) as conn:
        cid, chunks = conn.execute(
            "SELECT id, chunks FROM fastcrag_collections WHERE name = %s", (collection,)
        ).fetchone()
        wanted = {
            c
            for (ids,) in conn.execute("SELECT chunk_ids FROM fastcrag_documents WHERE collection_id = %s", (cid,))
            for c in ids
        }
        stored = [r[0] for r in conn.execute(f"SELECT chunk_id FROM fastcrag_chunks_{int(cid)}")]
    assert set(stored) == wanted
    assert len(stored) == chunks
    return chunks


def test_round_trip_dense_lexical_hybrid_like_faiss(db: str, tmp_path: Path) -> None:
    report = _build(db, DOCS)
    assert (report.documents_added, report.chunks_added, report.chunks_total) == (4, 4, 4)
    faiss_folder = tmp_path / "faiss"
    build_index(DOCS, faiss_folder, HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, progress=False)
    faiss = FaissStore.load(faiss_folder, HashEmbeddings())
    with _store(db) as store:
        assert len(store) == 4
        dense = store.similarity_search("borrow checker ownership rules", k=2)
        reference = faiss.similarity_search("borrow checker ownership rules", k=2)
        assert dense[0].metadata["source"] == "rust.md"
        assert [d.metadata["chunk_id"] for d in dense] == [d.metadata["chunk_id"] for d in reference]
        assert set(dense[0].metadata) == set(reference[0].metadata) == {"chunk_id", "source", "title", "bi_score"}
        # the same float32 vectors scored by pgvector and by FAISS: two kernels, float32 rounding apart (1e-7 scale)
        assert dense[0].metadata["bi_score"] == pytest.approx(reference[0].metadata["bi_score"], abs=1e-5)
        lexical = store.lexical_search_with_score("When was the Eiffel Tower finished?", k=3)
        assert lexical[0][0].metadata["source"] == "paris.md" and lexical[0][1] > 0
        assert set(lexical[0][0].metadata) == {"chunk_id", "source", "title"}
        assert store.lexical_search_with_score("the of and", k=3) == []  # stop words only: no query
        assert store.lexical_search_with_score("'); DROP TABLE x; --", k=3) == []  # user text is only a parameter
        idf = store.lexical_idf()
        assert idf("bananas") > idf("the") == 0.0 and idf("zeppelin") == 0.0
        retriever = HybridRetriever(store=store, k=3)
        docs, route = retriever.search("What does the borrow checker enforce?")
        assert route == "hybrid" and docs[0].metadata["source"] == "rust.md"
        assert "rrf" in docs[0].metadata and "lexical_score" in docs[0].metadata
        assert retriever.search("borrow checker", "lexical")[1] == "lexical"
        assert retriever.idf() is not None


def test_collections_are_isolated(db: str) -> None:
    _build(db, DOCS[:2], "code")
    _build(db, DOCS[2:], "world")
    with _store(db, "code") as code, _store(db, "world") as world:
        assert {d.metadata["source"] for d in code.similarity_search("Eiffel Tower Paris", k=10)} == {
            "rust.md",
            "py.md",
        }
        assert {d.metadata["source"] for d, _ in world.lexical_search_with_score("borrow checker Eiffel", k=10)} == {
            "paris.md"
        }
        assert len(code) == len(world) == 2
    with pytest.raises(PgStoreError, match="no collection 'other'"):
        _store(db, "other")


def test_upserts_by_hash_and_prunes(db: str) -> None:
    _build(db, DOCS)
    with connect(db) as conn:
        before = conn.execute("SELECT chunk_id, xmin::text FROM fastcrag_chunks_1 ORDER BY 1").fetchall()
    again = _build(db, DOCS)
    assert (again.documents_unchanged, again.chunks_added, again.chunks_total) == (4, 0, 4)
    with connect(db) as conn:
        assert conn.execute("SELECT chunk_id, xmin::text FROM fastcrag_chunks_1 ORDER BY 1").fetchall() == before

    changed = [*DOCS[:3], SourceDocument("fruit.md", "Fruit", "Mangoes are orange fruit from South Asia.")]
    report = _build(db, changed)
    assert (report.documents_changed, report.documents_unchanged, report.chunks_total) == (1, 3, 4)
    with _store(db) as store:
        assert store.lexical_search_with_score("bananas", k=5) == []
        assert store.lexical_search_with_score("mangoes", k=5)[0][0].metadata["source"] == "fruit.md"
    assert _consistent(db) == 4

    pruned = _build(db, changed[:2], prune=True)
    assert (pruned.documents_removed, pruned.documents_unchanged, pruned.chunks_total) == (2, 2, 2)
    assert _consistent(db) == 2
    kept = _build(db, changed[:1])  # without --prune nothing is removed
    assert (kept.documents_removed, kept.chunks_total) == (0, 2)


def test_duplicate_text_under_two_sources_shares_chunks_safely(db: str) -> None:
    same = "Identical text about compilers and linkers."
    _build(db, [SourceDocument("a.md", "A", same)])
    _build(db, [SourceDocument("b.md", "B", same)])  # a later run: the chunk already exists
    _build(db, [SourceDocument("a.md", "A", "Now a is about something else entirely.")])
    with _store(db) as store:  # b.md still finds its chunk after a.md moved away from it
        assert store.lexical_search_with_score("compilers linkers", k=5)
    assert _consistent(db) == 2


BUILDER = """
import sys
sys.path.insert(0, {tests!r})
from fakes import HashEmbeddings
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.pgstore import build_pg_index
docs = (SourceDocument(f"doc-{{i}}", "t", f"Document {{i}} {run} talks about topic {{i}}. " * 30) for i in range(800))
build_pg_index(docs, {url!r}, HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, batch_size=16, progress=False)
"""


def test_sigkill_mid_build_keeps_previous_content_and_next_run_completes(db: str) -> None:
    _build(db, [SourceDocument("seed", "t", "The first version of the seed document.")])
    tests_dir = str(Path(__file__).resolve().parents[1])
    rng = random.Random(11)
    kills = 0
    for run in range(3):
        proc = subprocess.Popen([sys.executable, "-c", BUILDER.format(tests=tests_dir, url=db, run=run)])
        time.sleep(rng.uniform(1.5, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=120)
        _consistent(db)
        with _store(db) as store:  # previous content stays queryable
            assert store.lexical_search_with_score("first version seed", k=1)[0][0].metadata["source"] == "seed"
            assert store.similarity_search("first version of the seed document", k=1)
    assert kills >= 2, "the builds finished before they could be killed; slow them down"
    final = subprocess.run([sys.executable, "-c", BUILDER.format(tests=tests_dir, url=db, run=2)], timeout=300)
    assert final.returncode == 0
    with connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM fastcrag_documents").fetchone() == (801,)
    _consistent(db)


def test_bad_stores_are_clear_errors_without_the_password(
    db: str, admin: psycopg.Connection[Any], postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(PgStoreError, match="cannot connect") as refused:
        _store(f"postgresql://fastcrag:{PASSWORD}@127.0.0.1:1/nothing")
    with pytest.raises(PgStoreError, match='database "no_such_db" does not exist') as missing:
        _store(_database_url(postgres_url, "no_such_db"))
    for exc in (refused, missing):
        assert PASSWORD not in str(exc.value) and "***" in str(exc.value)

    _build(db, DOCS[:1])
    with connect(db) as conn:
        conn.execute("UPDATE fastcrag_schema SET version = %s", (SCHEMA_VERSION + 7,))
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION + 7}.*upgrade fastcrag") as newer:
        _store(db)
    assert PASSWORD not in str(newer.value)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE fastcrag_schema SET version = %s", (SCHEMA_VERSION,))

    class Narrow(HashEmbeddings):
        dimension = 32

    class Other(HashEmbeddings):
        name = "other-embedder"

    with pytest.raises(PgStoreError, match=r"holds 64-dimensional vectors.*gives 32"):
        PgStore(db, Narrow())
    with pytest.raises(PgStoreError, match="built with embedder 'hash-embeddings', not 'other-embedder'"):
        PgStore(db, Other())

    # a collection of the int8 embedder that batched its texts: no setting reads it, the refusal says what to do
    from fastcrag.modelmeta import read_model_meta
    from fastcrag.retrieval.embeddings import PACKAGED_EMBEDDER, PER_TEXT

    packaged = str(read_model_meta(PACKAGED_EMBEDDER)["name"])
    before, now = HashEmbeddings(), HashEmbeddings()
    before.name, now.name = packaged, packaged + PER_TEXT  # type: ignore[misc]
    build_pg_index(DOCS[:1], db, before, "batched", chunk_tokens=32, chunk_overlap=8, progress=False)
    with pytest.raises(PgStoreError) as retired:
        PgStore(db, now, "batched")
    assert "which no setting reads now; index into another collection (`fastcrag index" in str(retired.value)
    assert "FASTRAG_EMBEDDER=" not in str(retired.value)

    role = f"noext_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
    admin.execute(f'CREATE DATABASE "{role}" OWNER {role}')
    try:
        with pytest.raises(PgStoreError, match="has no pgvector: CREATE EXTENSION vector failed") as no_vector:
            _store(_database_url(postgres_url, role, user=role), create=True)
        assert PASSWORD not in str(no_vector.value)
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{role}" WITH (FORCE)')
        admin.execute(f"DROP ROLE IF EXISTS {role}")

    # the CLI reports each in one line, without a traceback or the password
    bad = f"postgresql://fastcrag:{PASSWORD}@127.0.0.1:1/nothing"
    assert main(["index", str(Path(__file__)), "--store", bad, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fastcrag: error: cannot connect") and "\n" not in err
    assert PASSWORD not in err and "Traceback" not in err
    assert main(["index", str(Path(__file__)), "--store", "mysql://x", "--quiet"]) == 2
    assert "takes a Postgres URL" in capsys.readouterr().err


def test_cli_indexes_into_postgres_and_prunes(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fastcrag.retrieval.embeddings as embeddings

    monkeypatch.setattr(embeddings, "default_embeddings", lambda spec=None: HashEmbeddings())
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Alpha particles are helium nuclei.", encoding="utf-8")
    (corpus / "b.txt").write_text("Beta decay emits an electron.", encoding="utf-8")
    assert main(["index", str(corpus), "--store", db, "--collection", "physics", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "collection 'physics': 2 new" in out and PASSWORD not in out
    (corpus / "b.txt").unlink()
    assert main(["index", str(corpus), "--store", db, "--collection", "physics", "--prune", "--quiet"]) == 0
    assert "1 unchanged documents, 1 removed" in capsys.readouterr().out
    with _store(db, "physics") as store:
        assert [d.metadata["title"] for d in store.similarity_search("alpha helium", k=5)] == ["a"]


def test_postgres_gone_mid_run_abstains_with_the_redacted_reason(db: str, admin: psycopg.Connection[Any]) -> None:
    _build(db, DOCS)
    store = _store(db, timeout=2)
    graph = build_graph(
        retriever=store,
        reranker=ScriptedReranker({"borrow": 0.9}),
        llm=FakeChat(),
        calibration=CALIBRATION,
        settings=Settings(),
    )
    ok = graph.invoke({"question": "What does the borrow checker enforce?"})
    assert ok["crag"]["action"] == "generate" and ok["crag"]["retrieval"] == "hybrid"
    admin.execute(f'DROP DATABASE "{db.split("/")[3].split("?")[0]}" WITH (FORCE)')
    gone = graph.invoke({"question": "What does the borrow checker enforce?"})
    crag = gone["crag"]
    assert crag["action"] == "abstain" and gone["answer"] == "I don't know."
    assert "PgStoreError" in crag["failure"] and "Postgres store" in crag["failure"]
    assert PASSWORD not in crag["failure"] and "***" in crag["failure"]
    store.close()


def test_first_build_defers_the_hnsw_index_and_a_killed_one_is_repaired(db: str) -> None:
    def has_index() -> bool:
        with connect(db) as conn:
            return conn.execute("SELECT to_regclass('fastcrag_chunks_1_hnsw')").fetchone() != (None,)

    _build(db, DOCS)
    assert has_index()
    with connect(db) as conn:  # what a first build killed before its last step leaves: rows, no graph
        conn.execute("DROP INDEX fastcrag_chunks_1_hnsw")
    with _store(db) as store:  # still searchable (exactly) meanwhile
        assert store.similarity_search("borrow checker ownership rules", k=1)[0].metadata["source"] == "rust.md"
    _build(db, DOCS)  # nothing changed, but the next run completes the index
    assert has_index()


def test_components_pick_the_postgres_store_from_settings(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastcrag import components
    from fastcrag.components import Components

    monkeypatch.setattr(components, "default_embeddings", lambda spec=None: HashEmbeddings())
    _build(db, DOCS, "docs")
    retriever = Components(settings=Settings(store=db, collection="docs", retrieval="hybrid")).retriever()
    assert isinstance(retriever, HybridRetriever) and isinstance(retriever.store, PgStore)
    docs, route = retriever.search("What does the borrow checker enforce?")
    assert route == "hybrid" and docs[0].metadata["source"] == "rust.md"
    retriever.store.close()
    with pytest.raises(PgStoreError, match="no collection 'missing'") as missing:
        Components(settings=Settings(store=db, collection="missing")).retriever()
    assert PASSWORD not in str(missing.value)


def test_get_by_ids_and_where_a_section_opens_like_faiss(db: str, tmp_path: Path) -> None:
    from fastcrag.retrieval.sections import section_before

    _build(db, [SECTIONED, *DOCS])
    build_index([SECTIONED, *DOCS], tmp_path, HashEmbeddings(), chunk_tokens=32, chunk_overlap=8, progress=False)
    faiss = FaissStore.load(tmp_path, HashEmbeddings())
    ids = faiss.documents["guide.md"]["ids"]
    with _store(db) as store:
        got = store.get_by_ids([ids[1], "nope-0", ids[0]])
        assert [d.id for d in got] == [ids[1], ids[0]]
        assert [(d.page_content, d.metadata) for d in got] == [
            (d.page_content, d.metadata) for d in faiss.get_by_ids(ids[1::-1])
        ]
        before = section_before(store.get_by_ids, ids[-2], ALPHA)
        assert [d.id for d in before] == ids[:-2]  # back over Alpha's continued chunks, as FAISS gives them
        assert store.get_by_ids([]) == []
