"""Postgres store: pgvector HNSW for dense search and Postgres full-text search for the lexical side.

fastcrag talks to Postgres through psycopg 3 and the pgvector adapter directly rather than `langchain-postgres`:
that package's fixed schema has no full-text column (so no lexical or hybrid retrieval), no content-hash upsert
(so re-indexing re-embeds everything) and no schema migrations. Here fastcrag owns its schema:

- `fastcrag_schema` holds the schema version. `MIGRATIONS` is an ordered list of steps; a store behind this
  fastcrag is migrated in one transaction under an advisory lock, a store ahead of it is refused.
- `fastcrag_collections`: one row per index name (`FASTRAG_COLLECTION`), recording the embedder, its dimension and
  the chunk settings; a run reads only its collection.
- One chunk table per collection, `fastcrag_chunks_<id>`: chunk id, source, title, text, `embedding vector(dim)`
  under an HNSW index (`vector_cosine_ops`), and a generated `tsvector` (english) under a GIN index.
- `fastcrag_documents`: per collection and source, the content hash and chunk ids (for upserts and `--prune`).

Indexing (`PgWriter`, a `StoreWriter`) writes whole documents per transaction: a changed document's old chunks are
deleted and its new ones inserted in the same transaction, so a build killed at any point leaves the previous content
queryable and the next run completes it. The first build of an empty collection loads the rows and builds the HNSW
graph once at the end (several times faster than growing it row by row; search is exact until then, and a run after
a killed first build makes the index). Every error names the store by its URL with the password redacted.

psycopg, psycopg-pool and pgvector (the optional `postgres` extra) are imported inside the functions that use them,
so that this module imports without them.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from fastcrag.config.settings import (
    DEFAULT_EF_SEARCH,
    HNSW_BUILD_MEMORY_MB,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    is_postgres_url,
    redact_message,
    redact_url,
)
from fastcrag.retrieval.embeddings import embedder_dimension, embedder_name, how_to_read
from fastcrag.retrieval.indexing import BuildReport, build_index
from fastcrag.retrieval.lexical import _idf, words
from fastcrag.retrieval.loaders import SourceDocument
from fastcrag.retrieval.store import IndexLoadError
from fastcrag.retrieval.writing import ChunkBatch, ChunkStore, DocumentEntry

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)

#: Each step is a list of SQL statements; the schema version is the number of steps applied.
MIGRATIONS: list[list[str]] = [
    [  # 1: collections, documents; chunk tables are made per collection (CHUNK_TABLE_DDL)
        """CREATE TABLE fastcrag_collections (
            id serial PRIMARY KEY,
            name text NOT NULL UNIQUE,
            embedder text NOT NULL,
            dim integer NOT NULL CHECK (dim BETWEEN 1 AND 2000),
            chunk_tokens integer,
            chunk_overlap integer,
            chunks bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now()
        )""",
        """CREATE TABLE fastcrag_documents (
            collection_id integer NOT NULL REFERENCES fastcrag_collections (id) ON DELETE CASCADE,
            source text NOT NULL,
            hash text NOT NULL,
            chunk_ids text[] NOT NULL,
            seen_run text,
            PRIMARY KEY (collection_id, source)
        )""",
        "CREATE INDEX fastcrag_documents_hash ON fastcrag_documents (collection_id, hash)",
    ],
    [  # 2: a collection's installed fit (`fastcrag fit --install`): its calibration, and its fitted grader (a tar)
        """CREATE TABLE fastcrag_fits (
            collection_id integer PRIMARY KEY REFERENCES fastcrag_collections (id) ON DELETE CASCADE,
            calibration jsonb NOT NULL,
            grader bytea,
            grader_sha1 text,
            embedder text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )""",
    ],
    [  # 3: a collection's first build is hidden from readers until it finishes (`PgWriter.finish` sets `ready`)
        "ALTER TABLE fastcrag_collections ADD COLUMN ready boolean NOT NULL DEFAULT true",
    ],
]
SCHEMA_VERSION = len(MIGRATIONS)
MAX_DIM = 2000  # pgvector's HNSW limit for `vector`
_SCHEMA_LOCK = 0x66617374637261  # advisory lock key ("fastcra") serialising migrations
_WRITER_LOCK = 0x66637267  # advisory lock class ("fcrg"; int4), one lock per collection id, held by a writer
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")

_CHUNK_TABLE_DDL = [
    """CREATE TABLE {table} (
        chunk_id text PRIMARY KEY,
        source text NOT NULL,
        title text NOT NULL,
        text text NOT NULL,
        embedding vector({dim}) NOT NULL,
        tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
    )""",
    "CREATE INDEX {hnsw} ON {table} USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
    "CREATE INDEX {gin} ON {table} USING gin (tsv)",
]


class PgStoreError(IndexLoadError):
    """The Postgres store is unreachable, lacks pgvector, or does not fit this run; the URL is redacted."""


class SchemaVersionError(PgStoreError):
    """The store's schema was written by a newer (or unknown) fastcrag."""


@dataclass(frozen=True)
class Collection:
    """One index in the store."""

    id: int
    name: str
    embedder: str
    dim: int
    chunk_tokens: int | None
    chunk_overlap: int | None

    @property
    def table(self) -> str:
        """The collection's chunk table."""
        return f"fastcrag_chunks_{self.id}"


def _psycopg() -> Any:
    try:
        import psycopg
        from pgvector.psycopg import register_vector  # noqa: F401
    except ImportError as exc:
        raise PgStoreError(
            f"the Postgres store needs the `postgres` extra (pip install 'fastcrag[postgres]'): {exc}"
        ) from None
    return psycopg


def connect(url: str) -> psycopg.Connection[Any]:
    """Open one autocommit connection, bring the schema up to date and register the vector type.

    Raises:
        PgStoreError: the URL is malformed, the server is unreachable or refuses the login, the database does not
            exist, or pgvector is not available.
        SchemaVersionError: the schema was written by a newer fastcrag.
    """
    psycopg = _psycopg()
    from pgvector.psycopg import register_vector

    shown = redact_url(url)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise PgStoreError(f"cannot connect to the Postgres store {shown}: {redact_message(str(exc), url)}") from None
    try:
        ensure_schema(conn, url)
        register_vector(conn)
    except BaseException:
        conn.close()
        raise
    return conn  # type: ignore[no-any-return]


def ensure_schema(conn: psycopg.Connection[Any], url: str) -> None:
    """Create pgvector and fastcrag's tables when missing and apply pending migrations (one transaction, locked).

    Raises:
        PgStoreError: pgvector is not available to this database (or this role may not create it).
        SchemaVersionError: the schema is newer than this fastcrag knows.
    """
    psycopg = _psycopg()
    shown = redact_url(url)
    try:
        found = _schema_version(conn)
        _refuse_newer(found or 0, shown)  # before any DDL: a read-only role gets this error, not a permission one
        if found == SCHEMA_VERSION and _has_vector(conn):
            return
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            if not _has_vector(conn):
                try:
                    with conn.transaction():
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                except psycopg.Error as exc:
                    raise PgStoreError(
                        f"the Postgres store {shown} has no pgvector: CREATE EXTENSION vector failed "
                        f"({redact_message(str(exc), url)}); install pgvector on the server, or have a superuser run "
                        "CREATE EXTENSION vector in this database"
                    ) from None
            conn.execute(
                "CREATE TABLE IF NOT EXISTS fastcrag_schema ("
                " singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), version integer NOT NULL)"
            )
            row = conn.execute("SELECT version FROM fastcrag_schema FOR UPDATE").fetchone()
            version = int(row[0]) if row else 0
            _refuse_newer(version, shown)
            for step in MIGRATIONS[version:]:
                for statement in step:
                    conn.execute(statement)  # fixed SQL from MIGRATIONS, no user input
            conn.execute(
                "INSERT INTO fastcrag_schema (singleton, version) VALUES (true, %s) "
                "ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
                (SCHEMA_VERSION,),
            )
    except psycopg.Error as exc:
        raise PgStoreError(
            f"Postgres store {shown}: setting up the schema failed: {redact_message(str(exc), url)}"
        ) from None


def _schema_version(conn: psycopg.Connection[Any]) -> int | None:
    if conn.execute("SELECT to_regclass('fastcrag_schema')").fetchone() == (None,):
        return None
    row = conn.execute("SELECT version FROM fastcrag_schema").fetchone()
    version = int(row[0]) if row else 0
    return version


def _has_vector(conn: psycopg.Connection[Any]) -> bool:
    return conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is not None


def _refuse_newer(version: int, shown: str) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the Postgres store {shown} has fastcrag schema version {version}; this fastcrag knows versions up to "
            f"{SCHEMA_VERSION}: upgrade fastcrag (or use another database)"
        )


def check_collection_name(name: str) -> str:
    """The collection name, checked (letters, digits, `_ . -`, at most 63 characters).

    Raises:
        PgStoreError: the name is not allowed.
    """
    if not _NAME.match(name):
        raise PgStoreError(f"collection name {name!r}: use 1-63 letters, digits, '_', '.' or '-'")
    return name


def open_collection(
    conn: psycopg.Connection[Any],
    url: str,
    name: str,
    embedding: Embeddings,
    *,
    create: bool = False,
    chunk_settings: tuple[int, int] | None = None,
    building: bool = False,
) -> Collection:
    """The named collection, checked against the embedder; created (with its chunk table) when `create`.

    A collection an index build creates (`building`) stays hidden from readers until that build (or the run that
    completes it after a kill) finishes: a reader never sees a half-built collection.

    Raises:
        PgStoreError: the collection does not exist (and `create` is false), its first build has not finished (and
            `create` is false), or it was built with another embedder or another dimension.
    """
    psycopg = _psycopg()
    from psycopg import sql

    check_collection_name(name)
    shown = redact_url(url)
    model, dim = embedder_name(embedding), embedder_dimension(embedding)
    try:
        row = conn.execute(
            "SELECT id, name, embedder, dim, chunk_tokens, chunk_overlap, ready FROM fastcrag_collections "
            "WHERE name = %s",
            (name,),
        ).fetchone()
        if row is None and create:
            if not 1 <= dim <= MAX_DIM:
                raise PgStoreError(f"embedder {model!r} gives {dim}-dimensional vectors; pgvector's HNSW takes 1-2000")
            tokens, overlap = chunk_settings or (None, None)
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                row = conn.execute(
                    "INSERT INTO fastcrag_collections (name, embedder, dim, chunk_tokens, chunk_overlap, ready) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING "
                    "RETURNING id, name, embedder, dim, chunk_tokens, chunk_overlap, ready",
                    (name, model, dim, tokens, overlap, not building),
                ).fetchone()
                if row is not None:
                    table = f"fastcrag_chunks_{int(row[0])}"
                    for statement in _CHUNK_TABLE_DDL:
                        conn.execute(
                            sql.SQL(statement).format(
                                table=sql.Identifier(table),
                                hnsw=sql.Identifier(f"{table}_hnsw"),  # = _hnsw(collection)
                                gin=sql.Identifier(f"{table}_tsv"),
                                dim=sql.Literal(dim),
                            )
                        )
            if row is None:  # created by a concurrent run meanwhile
                return open_collection(conn, url, name, embedding, create=create, building=building)
    except psycopg.Error as exc:
        raise PgStoreError(
            f"Postgres store {shown}: reading collection {name!r} failed: {redact_message(str(exc), url)}"
        ) from None
    if row is None:
        raise PgStoreError(
            f"the Postgres store {shown} has no collection {name!r}; build it with "
            f"`fastcrag index PATHS --store URL --collection {name}`"
        )
    if not row[6] and not create:
        raise PgStoreError(
            f"collection {name!r} in {shown} is not ready: its first build has not finished (or was interrupted; "
            f"run `fastcrag index PATHS --store URL --collection {name}` again to complete it)"
        )
    collection = Collection(int(row[0]), str(row[1]), str(row[2]), int(row[3]), row[4], row[5])
    if collection.dim != dim:
        raise PgStoreError(
            f"collection {name!r} in {shown} holds {collection.dim}-dimensional vectors (embedder "
            f"{collection.embedder!r}), but embedder {model!r} gives {dim}; use the same embedder or another collection"
        )
    if collection.embedder != model:
        raise PgStoreError(
            f"collection {name!r} in {shown} was built with embedder {collection.embedder!r}, not {model!r}; "
            + how_to_read(
                collection.embedder,
                "index into another collection (`fastcrag index PATHS --store URL --collection NEW`)",
            )
        )
    return collection


def _vector(values: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))


class PgStore(ChunkStore):
    """A collection in Postgres: pgvector HNSW (cosine) for dense search, full-text search for the lexical side.

    Implements `SearchableStore`, so `HybridRetriever` runs over it exactly as over `FaissStore`; documents carry
    the same metadata (`chunk_id`, `source`, `title`, and `bi_score` from dense search). Connections come from a
    small pool, checked on checkout, so a restarted server is reconnected and a vanished one is a clear error.
    """

    def __init__(
        self,
        url: str,
        embedding: Embeddings,
        collection: str = "default",
        *,
        create: bool = False,
        pool_size: int = 4,
        timeout: float = 5.0,
        ef_search: int = DEFAULT_EF_SEARCH,
    ) -> None:
        """Connect, migrate the schema when behind, and open the collection.

        Args:
            url: A Postgres URL (`postgresql://user:password@host:port/database`).
            embedding: The embedder the collection was (or will be) built with.
            collection: The index name.
            create: Create the collection when it does not exist (else that is an error).
            pool_size: Most connections held at once.
            timeout: Seconds to wait for a working connection before a search fails.
            ef_search: HNSW's candidate list size for dense search (raised to 2k for a larger k).

        Raises:
            PgStoreError: connecting, pgvector, the collection or the embedder does not fit (the message says which).
            SchemaVersionError: the schema was written by a newer fastcrag.
        """
        self.url = url
        self.shown_url = redact_url(url)
        self.embedding = embedding
        self.timeout = timeout
        self.ef_search = ef_search
        conn = connect(url)
        try:
            self.collection = open_collection(conn, url, collection, embedding, create=create)
        finally:
            conn.close()
        from pgvector.psycopg import register_vector
        from psycopg_pool import ConnectionPool

        self._pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
            configure=register_vector,
            check=ConnectionPool.check_connection,
            timeout=timeout,
            name=f"fastcrag-{collection}",
            open=False,
        )
        self._pool.open(wait=False)
        self._finalizer = weakref.finalize(self, self._pool.close)

    def close(self) -> None:
        """Close the connection pool."""
        self._finalizer()

    def __enter__(self) -> PgStore:
        """Use the store as a context manager that closes its pool."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the pool."""
        self.close()

    @contextmanager
    def _connection(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; any database error becomes a `PgStoreError` naming the action and redacted store."""
        psycopg = _psycopg()
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise PgStoreError(
                f"Postgres store {self.shown_url}: {action} failed: no working connection within {self.timeout:g} s "
                f"({self._why_unreachable()})"
            ) from None
        except psycopg.Error as exc:
            raise PgStoreError(
                f"Postgres store {self.shown_url}: {action} failed: {redact_message(str(exc), self.url)}"
            ) from None

    def _why_unreachable(self) -> str:
        psycopg = _psycopg()
        try:
            psycopg.connect(self.url, connect_timeout=3).close()
        except psycopg.Error as exc:
            return redact_message(str(exc), self.url)
        return "the server answers again; retry"

    def _table(self) -> Any:
        from psycopg import sql

        return sql.Identifier(self.collection.table)

    def __len__(self) -> int:
        """Chunks in the collection."""
        with self._connection("counting chunks") as conn:
            row = conn.execute(
                "SELECT chunks FROM fastcrag_collections WHERE id = %s", (self.collection.id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def sources(self) -> set[str]:
        """The source of every document in the collection (as citations name them)."""
        with self._connection("listing sources") as conn:
            rows = conn.execute(
                "SELECT source FROM fastcrag_documents WHERE collection_id = %s", (self.collection.id,)
            ).fetchall()
        return {str(r[0]) for r in rows}

    def save_fit(self, calibration: dict[str, Any], grader: bytes | None, embedder: str) -> None:
        """Install a fit with the collection (one transaction; replaces an earlier one)."""
        from psycopg.types.json import Jsonb

        sha1 = hashlib.sha1(grader).hexdigest() if grader is not None else None
        with self._connection("installing the fit") as conn, conn.transaction():
            conn.execute(
                "INSERT INTO fastcrag_fits (collection_id, calibration, grader, grader_sha1, embedder) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (collection_id) DO UPDATE SET calibration = "
                "excluded.calibration, grader = excluded.grader, grader_sha1 = excluded.grader_sha1, "
                "embedder = excluded.embedder, created_at = now()",
                (self.collection.id, Jsonb(calibration), grader, sha1, embedder),
            )

    def fit(self) -> tuple[dict[str, Any], bytes | None, str] | None:
        """The collection's installed fit: (calibration, grader tar or None, embedder), or None."""
        with self._connection("reading the fit") as conn:
            row = conn.execute(
                "SELECT calibration, grader, embedder FROM fastcrag_fits WHERE collection_id = %s",
                (self.collection.id,),
            ).fetchone()
        return None if row is None else (dict(row[0]), None if row[1] is None else bytes(row[1]), str(row[2]))

    def sample_chunks(self, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` (source, text) chunks, spread over the collection in a fixed pseudo-random order."""
        from psycopg import sql

        query = sql.SQL("SELECT source, text FROM {} ORDER BY md5(chunk_id) LIMIT %s").format(self._table())
        with self._connection("sampling chunks") as conn:
            return [(str(r[0]), str(r[1])) for r in conn.execute(query, (limit,)).fetchall()]

    # -- reading -----------------------------------------------------------------------------------------
    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """Top-k chunks by cosine similarity (HNSW), with the similarity."""
        if not query.strip() or k <= 0:
            return []
        return self.similarity_search_by_vector_with_score(self.embedding.embed_query(query), k)

    def similarity_search_by_vector_with_score(
        self, vector: Any, k: int = 4, ef_search: int | None = None
    ) -> list[tuple[Document, float]]:
        """Top-k chunks nearest to a unit vector, with the cosine similarity.

        Args:
            vector: The query embedding.
            k: How many chunks.
            ef_search: HNSW's candidate list size (recall against speed); when None, the store's `ef_search` or
                2k, whichever is larger (at most 1000).
        """
        from psycopg import sql

        query = sql.SQL(
            "SELECT chunk_id, source, title, text, 1 - (embedding <=> %(q)s) FROM {} ORDER BY embedding <=> %(q)s "
            "LIMIT %(k)s"
        ).format(self._table())
        with self._connection("dense search") as conn, conn.transaction():
            conn.execute(
                "SELECT set_config('hnsw.ef_search', %s, true)",
                (str(min(1000, ef_search or max(self.ef_search, 2 * k))),),
            )
            rows = conn.execute(query, {"q": _vector(vector), "k": k}).fetchall()
        return [(_document(row), float(row[4])) for row in rows]

    def lexical_search_with_score(self, query: str, k: int = 4) -> list[tuple[Document, float]]:
        """Top-k chunks by full-text rank (`ts_rank_cd`) for any of the question's words, with the rank."""
        from psycopg import sql

        terms = list(dict.fromkeys(words(query)))
        if not terms or k <= 0:
            return []
        # websearch_to_tsquery never raises on user text; the words (\w+, no stop words) are joined by `or`.
        statement = sql.SQL(
            "SELECT chunk_id, source, title, text, ts_rank_cd(tsv, q) AS rank "
            "FROM {}, websearch_to_tsquery('english', %(q)s) AS q WHERE tsv @@ q "
            "ORDER BY rank DESC, chunk_id LIMIT %(k)s"
        ).format(self._table())
        with self._connection("lexical search") as conn:
            rows = conn.execute(statement, {"q": " or ".join(terms), "k": k}).fetchall()
        return [(_document(row), float(row[4])) for row in rows]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The chunks with these ids (LangChain's `VectorStore.get_by_ids`), with their ids; unknown ids left out."""
        from psycopg import sql

        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return []
        statement = sql.SQL("SELECT chunk_id, source, title, text FROM {} WHERE chunk_id = ANY(%s)").format(
            self._table()
        )
        with self._connection("reading chunks by id") as conn:
            rows = {str(row[0]): row for row in conn.execute(statement, (wanted,)).fetchall()}
        return [_document(rows[i], with_id=True) for i in wanted if i in rows]

    def lexical_idf(self) -> Callable[[str], float]:
        """BM25's inverse document frequency of a word, from its document frequency in the collection (cached)."""
        from psycopg import sql

        n = len(self)
        cache: dict[str, float] = {}
        statement = sql.SQL("SELECT count(*) FROM {} WHERE tsv @@ plainto_tsquery('english', %s)").format(self._table())

        def idf(word: str) -> float:
            key = word.casefold()
            if key not in cache:
                if not key.strip() or n == 0:
                    cache[key] = 0.0
                else:
                    with self._connection("reading word frequencies") as conn:
                        row = conn.execute(statement, (key,)).fetchone()
                    df = int(row[0]) if row else 0
                    cache[key] = _idf(df, n) if df else 0.0  # a word the index does not hold weighs nothing
            return cache[key]

        return idf

    # -- writing (LangChain's interface; `fastcrag index` writes through `PgWriter`) ----------------------
    def _add_chunks(self, texts: list[str], vectors: Any, metadatas: list[dict[str, Any]], ids: list[str]) -> None:
        with self._connection("adding chunks") as conn, conn.transaction():
            added = _insert_chunks(conn, self.collection, _rows(ids, metadatas, texts, vectors))
            _count(conn, self.collection, added)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Remove chunks by id."""
        from psycopg import sql

        if not ids:
            return False
        with self._connection("deleting chunks") as conn, conn.transaction():
            cur = conn.execute(sql.SQL("DELETE FROM {} WHERE chunk_id = ANY(%s)").format(self._table()), (list(ids),))
            _count(conn, self.collection, -cur.rowcount)
        return cur.rowcount > 0

    @classmethod
    def empty(cls, embedding: Embeddings, **kwargs: Any) -> PgStore:
        """Collection `collection` (default "default") in the store at `url`, created when missing."""
        if "url" not in kwargs:
            raise PgStoreError("PgStore.from_texts needs url=postgresql://...")
        return cls(kwargs["url"], embedding, kwargs.get("collection", "default"), create=True)


def _document(row: Sequence[Any], with_id: bool = False) -> Document:
    chunk_id, source, title, text = row[0], row[1], row[2], row[3]
    metadata = {"source": source, "title": title, "chunk_id": chunk_id}
    return Document(id=chunk_id if with_id else None, page_content=text, metadata=metadata)


def _rows(
    ids: Sequence[str], metadatas: Sequence[dict[str, Any]], texts: Sequence[str], vectors: Any
) -> list[tuple[Any, ...]]:
    """Chunk table rows: (chunk_id, source, title, text, vector)."""
    return [
        (cid, str(meta.get("source", "")), str(meta.get("title", "")), text, vec)
        for cid, meta, text, vec in zip(ids, metadatas, texts, vectors, strict=True)
    ]


def _insert_chunks(conn: psycopg.Connection[Any], collection: Collection, rows: Sequence[tuple[Any, ...]]) -> int:
    """COPY (binary) rows of (chunk_id, source, title, text, vector) into a staging table, then insert the new ones.

    Returns:
        How many chunks were inserted (chunk ids already present, shared by a duplicate document, are kept).
    """
    from psycopg import sql

    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS fastcrag_stage "
        "(chunk_id text, source text, title text, text text, embedding vector) ON COMMIT DELETE ROWS"
    )
    with conn.cursor() as cur:
        with cur.copy(
            "COPY fastcrag_stage (chunk_id, source, title, text, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "text", "text", "vector"])
            for row in rows:
                copy.write_row(row)
        cur.execute(
            sql.SQL(
                "INSERT INTO {} (chunk_id, source, title, text, embedding) "
                "SELECT chunk_id, source, title, text, embedding FROM fastcrag_stage ON CONFLICT (chunk_id) DO NOTHING"
            ).format(sql.Identifier(collection.table))
        )
        added = cur.rowcount
    return max(0, added)  # the staging rows go at commit


def _count(conn: psycopg.Connection[Any], collection: Collection, delta: int) -> None:
    conn.execute(
        "UPDATE fastcrag_collections SET chunks = chunks + %s, updated_at = now() WHERE id = %s",
        (delta, collection.id),
    )


def _chunks(conn: psycopg.Connection[Any], collection: Collection) -> int:
    row = conn.execute("SELECT chunks FROM fastcrag_collections WHERE id = %s", (collection.id,)).fetchone()
    return int(row[0]) if row else 0


def _hnsw(collection: Collection) -> str:
    return f"{collection.table}_hnsw"


def build_hnsw_index(
    conn: psycopg.Connection[Any],
    collection: Collection,
    *,
    m: int = HNSW_M,
    ef_construction: int = HNSW_EF_CONSTRUCTION,
    memory_limit_mb: int = HNSW_BUILD_MEMORY_MB,
) -> str | None:
    """Create the collection's HNSW index when it is missing, with memory and workers sized for the rows.

    `maintenance_work_mem` is set (for this statement only) so the graph fits in memory up to `memory_limit_mb`
    (past it pgvector builds on disk, several times slower), and `max_parallel_maintenance_workers` to the cores
    but one (at most 7).

    Returns:
        The settings it was built with, or None when the index was there.
    """
    from psycopg import sql

    if conn.execute("SELECT to_regclass(%s)", (_hnsw(collection),)).fetchone() != (None,):
        return None
    rows = _chunks(conn, collection)
    graph_mb = int(rows * (collection.dim * 4 + 24 * m) * 1.3 / 2**20) + 64
    workers = max(0, min(7, (os.cpu_count() or 2) - 1))
    memory = f"{min(graph_mb, memory_limit_mb)}MB"
    with conn.transaction():
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
        conn.execute("SELECT set_config('max_parallel_maintenance_workers', %s, true)", (str(workers),))
        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = {}, ef_construction = {})"
            ).format(
                sql.Identifier(_hnsw(collection)),
                sql.Identifier(collection.table),
                sql.Literal(m),
                sql.Literal(ef_construction),
            )
        )
    return f"maintenance_work_mem {memory}, max_parallel_maintenance_workers {workers}"


def stored_hashes(
    conn: psycopg.Connection[Any], collection: Collection, sources: Sequence[str], run_id: str | None = None
) -> dict[str, str]:
    """The stored content hash of each of these sources the collection holds; marked seen by `run_id` when given."""
    if not sources:
        return {}
    if run_id is not None:
        statement = (
            "UPDATE fastcrag_documents SET seen_run = %s WHERE collection_id = %s AND source = ANY(%s) "
            "RETURNING source, hash"
        )
        params: tuple[Any, ...] = (run_id, collection.id, list(sources))
    else:
        statement = "SELECT source, hash FROM fastcrag_documents WHERE collection_id = %s AND source = ANY(%s)"
        params = (collection.id, list(sources))
    rows = conn.execute(statement, params).fetchall()
    return {str(source): str(digest) for source, digest in rows}


def write_documents(
    conn: psycopg.Connection[Any],
    collection: Collection,
    run_id: str,
    documents: Sequence[DocumentEntry],
    batch: ChunkBatch,
) -> int:
    """Replace or add whole documents and their chunks in one transaction: an upsert by source and content hash.

    Writing the same documents again changes nothing (chunk ids derive from the content hash), so a batch may be
    retried after a failure at any point, and batches of different documents may be written concurrently.

    Returns:
        The chunks added to the collection (minus those removed).
    """
    sources = [d.source for d in documents]
    rows = _rows(batch.ids, batch.metadatas, batch.texts, batch.vectors)
    with conn.transaction():
        old = conn.execute(
            "SELECT source, hash, chunk_ids FROM fastcrag_documents WHERE collection_id = %s AND source = ANY(%s) "
            "FOR UPDATE",
            (collection.id, sources),
        ).fetchall()
        # Writers running at once (a Ray build's) hold the content hashes they add or drop until commit, so that a
        # text moving from one source to another is never dropped by one while the other counts on its chunks.
        conn.execute(
            "SELECT pg_advisory_xact_lock(%s, k) FROM "
            "(SELECT DISTINCT hashtext(h) AS k FROM unnest(%s::text[]) AS h ORDER BY k) AS keys",
            (collection.id, sorted({d.digest for d in documents} | {str(h) for _, h, _ in old})),
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO fastcrag_documents (collection_id, source, hash, chunk_ids, seen_run) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (collection_id, source) DO UPDATE "
                "SET hash = excluded.hash, chunk_ids = excluded.chunk_ids, seen_run = excluded.seen_run",
                [(collection.id, d.source, d.digest, list(d.chunk_ids), run_id) for d in documents],
            )
        removed = _drop_chunks(conn, collection, [(str(h), list(ids)) for _, h, ids in old])
        added = _insert_chunks(conn, collection, rows)
        _count(conn, collection, added - removed)
    return added - removed


def _drop_chunks(
    conn: psycopg.Connection[Any], collection: Collection, documents: Sequence[tuple[str, list[str]]]
) -> int:
    """Delete the chunks of replaced or removed documents that no remaining document shares (same hash)."""
    from psycopg import sql

    removed = 0
    statement = sql.SQL(
        "DELETE FROM {} WHERE chunk_id = ANY(%s) AND NOT EXISTS "
        "(SELECT 1 FROM fastcrag_documents WHERE collection_id = %s AND hash = %s)"
    ).format(sql.Identifier(collection.table))
    for digest, ids in documents:
        removed += max(0, conn.execute(statement, (ids, collection.id, digest)).rowcount)
    return removed


class PgWriter:
    """Where `fastcrag index --store URL` writes: one collection, whole documents per transaction.

    Holds a session advisory lock on the collection for the whole build, so two builds never interleave (a killed
    build's lock goes with its session). Into an empty collection, the HNSW index is built once in `finish`.
    """

    def __init__(
        self,
        url: str,
        embedding: Embeddings,
        collection: str = "default",
        *,
        chunk_settings: tuple[int, int] | None = None,
        prune: bool = False,
    ) -> None:
        """Connect, migrate, open or create the collection, and take its writer lock.

        Raises:
            PgStoreError: as `PgStore`, or another build is writing the collection.
        """
        from psycopg import sql

        self.url = url
        self.shown_url = redact_url(url)
        self.prune_unseen = prune
        self.run_id = uuid.uuid4().hex
        self._conn = connect(url)
        try:
            self.collection = open_collection(
                self._conn, url, collection, embedding, create=True, chunk_settings=chunk_settings, building=True
            )
            with self._guard("taking the writer lock"):
                row = self._conn.execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (_WRITER_LOCK, self.collection.id)
                ).fetchone()
            if not row or not row[0]:
                raise PgStoreError(
                    f"another `fastcrag index` is writing collection {collection!r} in {self.shown_url}; "
                    "wait for it to finish"
                )
            if chunk_settings is not None:
                with self._guard("recording the chunk settings"):
                    self._conn.execute(
                        "UPDATE fastcrag_collections SET chunk_tokens = %s, chunk_overlap = %s WHERE id = %s",
                        (*chunk_settings, self.collection.id),
                    )
            with self._guard("preparing the HNSW index"):
                if _chunks(self._conn, self.collection) == 0:
                    # An empty collection is loaded first and its graph built once at the end (several times faster
                    # than growing it row by row); until then, and after a build killed before that, search is exact.
                    self._conn.execute(
                        sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(_hnsw(self.collection)))
                    )
                else:
                    build_hnsw_index(self._conn, self.collection)  # a no-op unless a killed first build left none
        except BaseException:
            self._conn.close()
            raise

    @contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        psycopg = _psycopg()
        try:
            yield
        except psycopg.Error as exc:
            raise PgStoreError(
                f"Postgres store {self.shown_url}: {action} failed: {redact_message(str(exc), self.url)}"
            ) from None

    def close(self) -> None:
        """Release the writer lock, then close the connection.

        The lock is released in the session: a closed session's locks go only when its server process has ended, a
        moment after the client hangs up, and a build started at once would find the collection still locked.
        """
        try:
            self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", (_WRITER_LOCK, self.collection.id))
        except Exception as exc:  # a broken connection: its locks go with it
            log.debug("releasing the writer lock failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._conn.close()

    def lookup(self, sources: Sequence[str]) -> dict[str, str]:
        """The stored content hash of each source the collection holds (marking them seen when pruning)."""
        with self._guard("reading document hashes"):
            return stored_hashes(self._conn, self.collection, sources, self.run_id if self.prune_unseen else None)

    def write(self, documents: Sequence[DocumentEntry], batch: ChunkBatch) -> None:
        """Replace or add whole documents and their chunks in one transaction."""
        with self._guard("writing a batch"):
            write_documents(self._conn, self.collection, self.run_id, documents, batch)

    def prune(self) -> int:
        """Delete the documents (and their chunks) whose source this run did not see; returns how many."""
        if not self.prune_unseen:
            return 0
        with self._guard("pruning unseen documents"), self._conn.transaction():
            gone = self._conn.execute(
                "DELETE FROM fastcrag_documents WHERE collection_id = %s AND seen_run IS DISTINCT FROM %s "
                "RETURNING hash, chunk_ids",
                (self.collection.id, self.run_id),
            ).fetchall()
            removed = _drop_chunks(self._conn, self.collection, [(str(h), list(i)) for h, i in gone])
            _count(self._conn, self.collection, -removed)
        return len(gone)

    def finish(self, changed: bool) -> int:
        """Build the HNSW index when deferred, refresh statistics, show a new collection; returns the chunk count."""
        from psycopg import sql

        with self._guard("building the HNSW index"):
            build_hnsw_index(self._conn, self.collection)
        with self._guard("finishing the build"):
            if changed:
                self._conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(self.collection.table)))
            self._conn.execute(
                "UPDATE fastcrag_collections SET ready = true WHERE id = %s AND NOT ready", (self.collection.id,)
            )
            return _chunks(self._conn, self.collection)


def build_pg_index(
    documents: Iterable[SourceDocument],
    url: str,
    embedding: Embeddings,
    collection: str = "default",
    **options: Any,
) -> BuildReport:
    """`build_index` into collection `collection` of the Postgres store at `url`; `options` as `build_index` takes.

    Raises:
        PgStoreError: `url` is no Postgres URL, the store is unreachable, lacks pgvector, or the collection was built
            with another embedder.
    """
    if not is_postgres_url(url):
        raise PgStoreError(f"the Postgres store takes a Postgres URL (postgresql://...), not {redact_url(url)!r}")
    return build_index(documents, url, embedding, collection=collection, **options)
