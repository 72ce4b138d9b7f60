"""Thread records for `fastcrag serve`, kept in the checkpoints' own database (Postgres or SQLite).

A thread's history lives in the LangGraph checkpointer; this table only remembers that a thread was created
(`POST /threads`, before any run) with its metadata and times, so that every worker can answer for it. Workers hold
no thread state of their own.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

TABLE = "fastcrag_threads"
RUNS = "fastcrag_thread_runs"
"""One row per thread with a run in flight: the run's lease, so that runs on one thread never overlap."""


@dataclass(frozen=True)
class ThreadRecord:
    """One created thread."""

    thread_id: str
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]


class ThreadRecords(Protocol):
    """Where thread records are kept (the background-run queue shares the database: `execute`, `placeholder`)."""

    placeholder: str

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement; its rows."""

    async def setup(self) -> None:
        """Create the table when missing (safe to run from several workers at once)."""

    async def create(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Insert a thread; None when one with this id exists already."""

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread's record, or None."""

    async def claim(self, thread_id: str, run_id: str, seconds: float) -> bool:
        """Take the thread's run lease for `seconds`; False while another run holds an unexpired one.

        A worker that dies mid-run leaves its lease to expire; the run timeout bounds how long that takes.
        """

    async def release(self, thread_id: str, run_id: str) -> None:
        """Give back the lease `run_id` holds (nothing when it holds none)."""

    async def search(self, query: ThreadQuery) -> list[ThreadRecord]:
        """The records matching `query`, sorted and paginated as it says."""

    async def count(self, metadata: dict[str, Any]) -> int:
        """How many records hold `metadata` (JSON containment)."""

    async def update(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Merge `metadata` into the record's and set `updated_at`; None when there is no such record."""

    async def delete(self, thread_id: str) -> bool:
        """Remove the record and its lease; whether there was a record."""

    async def busy(self, thread_ids: list[str]) -> set[str]:
        """Those of `thread_ids` whose run lease is held and unexpired."""


SORTABLE = ("thread_id", "created_at", "updated_at")
"""The fields threads can be sorted by."""


@dataclass(frozen=True)
class ThreadQuery:
    """A thread search: metadata containment, ids, page and order (the server API's `POST /threads/search`)."""

    metadata: dict[str, Any] = field(default_factory=dict)
    ids: tuple[str, ...] = ()
    limit: int = 10
    offset: int = 0
    sort_by: str = "created_at"
    descending: bool = True


def contains(outer: Any, inner: Any) -> bool:
    """JSON containment as Postgres's `@>`: every key of an object, every element of an array, equal scalars."""
    if isinstance(inner, dict):
        return isinstance(outer, dict) and all(k in outer and contains(outer[k], v) for k, v in inner.items())
    if isinstance(inner, list):
        return isinstance(outer, list) and all(any(contains(o, i) for o in outer) for i in inner)
    if isinstance(inner, bool) or isinstance(outer, bool):  # JSON true is not 1
        return outer is inner
    return bool(outer == inner)


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: Any) -> datetime:
    """A timezone-aware datetime from a database value (a datetime or ISO text)."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _metadata(value: Any) -> dict[str, Any]:
    loaded = json.loads(value) if isinstance(value, str | bytes) else value
    return dict(loaded) if isinstance(loaded, dict) else {}


def _record(row: Any) -> ThreadRecord:
    return ThreadRecord(
        thread_id=str(row[0]),
        created_at=_aware(row[1]),
        updated_at=_aware(row[2]),
        metadata=_metadata(row[3]),
    )


class PostgresThreadRecords:
    """Thread records in the Postgres database of an `AsyncPostgresSaver` (its pool or connection)."""

    placeholder = "%s"

    def __init__(self, conn: Any) -> None:
        """Use `conn`: a psycopg `AsyncConnectionPool` or `AsyncConnection`."""
        self._conn = conn

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement on a pooled connection (autocommit); its rows as tuples, in column order.

        The saver's pool hands out dict-row connections: rows are turned into tuples here, so every caller reads
        Postgres rows as it reads SQLite's.
        """
        from psycopg_pool import AsyncConnectionPool  # lazy: psycopg is the optional `postgres` extra

        pooled = isinstance(self._conn, AsyncConnectionPool)
        async with self._conn.connection() if pooled else contextlib.nullcontext(self._conn) as conn:
            async with conn.cursor() as cur:
                await cur.execute(sql, params)
                rows = list(await cur.fetchall()) if cur.description else []
        return [tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows]

    async def setup(self) -> None:
        """Create the table; an advisory lock keeps concurrent workers from racing on the catalogue."""
        await self.execute(
            "DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('fastcrag_threads_setup')); "
            f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, "
            "created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, "
            "metadata JSONB NOT NULL DEFAULT '{}'::jsonb); "
            f"CREATE TABLE IF NOT EXISTS {RUNS} (thread_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
            "expires_at TIMESTAMPTZ NOT NULL); END $$"
        )

    async def create(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Insert a thread; None when it exists."""
        now = _now()
        rows = await self.execute(
            f"INSERT INTO {TABLE} (thread_id, created_at, updated_at, metadata) VALUES (%s, %s, %s, %s::jsonb) "
            "ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id, created_at, updated_at, metadata",
            (thread_id, now, now, json.dumps(metadata)),
        )
        return _record(rows[0]) if rows else None

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread's record, or None."""
        rows = await self.execute(
            f"SELECT thread_id, created_at, updated_at, metadata FROM {TABLE} WHERE thread_id = %s", (thread_id,)
        )
        return _record(rows[0]) if rows else None

    async def claim(self, thread_id: str, run_id: str, seconds: float) -> bool:
        """Take the lease (times on the database's clock, so workers' clocks need not agree)."""
        rows = await self.execute(
            f"INSERT INTO {RUNS} (thread_id, run_id, expires_at) "
            "VALUES (%s, %s, clock_timestamp() + make_interval(secs => %s)) ON CONFLICT (thread_id) DO UPDATE "
            "SET run_id = excluded.run_id, expires_at = excluded.expires_at "
            f"WHERE {RUNS}.expires_at < clock_timestamp() RETURNING run_id",
            (thread_id, run_id, float(seconds)),
        )
        return bool(rows)

    async def release(self, thread_id: str, run_id: str) -> None:
        """Give back the lease."""
        await self.execute(f"DELETE FROM {RUNS} WHERE thread_id = %s AND run_id = %s", (thread_id, run_id))

    async def search(self, query: ThreadQuery) -> list[ThreadRecord]:
        """Matching records (`metadata @>`), sorted and paginated in the database."""
        order = f"{query.sort_by} {'DESC' if query.descending else 'ASC'}, thread_id"  # sort_by is checked: SORTABLE
        ids = " AND thread_id = ANY(%s)" if query.ids else ""
        rows = await self.execute(
            f"SELECT thread_id, created_at, updated_at, metadata FROM {TABLE} WHERE metadata @> %s::jsonb{ids} "
            f"ORDER BY {order} LIMIT %s OFFSET %s",
            (json.dumps(query.metadata), *([list(query.ids)] if query.ids else []), query.limit, query.offset),
        )
        return [_record(r) for r in rows]

    async def count(self, metadata: dict[str, Any]) -> int:
        """How many records hold `metadata`."""
        rows = await self.execute(f"SELECT count(*) FROM {TABLE} WHERE metadata @> %s::jsonb", (json.dumps(metadata),))
        return int(rows[0][0])

    async def update(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Merge `metadata` (top-level keys) and set `updated_at`."""
        rows = await self.execute(
            f"UPDATE {TABLE} SET metadata = metadata || %s::jsonb, updated_at = %s WHERE thread_id = %s "
            "RETURNING thread_id, created_at, updated_at, metadata",
            (json.dumps(metadata), _now(), thread_id),
        )
        return _record(rows[0]) if rows else None

    async def delete(self, thread_id: str) -> bool:
        """Remove the record and its lease."""
        rows = await self.execute(f"DELETE FROM {TABLE} WHERE thread_id = %s RETURNING thread_id", (thread_id,))
        await self.execute(f"DELETE FROM {RUNS} WHERE thread_id = %s", (thread_id,))
        return bool(rows)

    async def busy(self, thread_ids: list[str]) -> set[str]:
        """Threads whose lease is held (the database's clock)."""
        if not thread_ids:
            return set()
        rows = await self.execute(
            f"SELECT thread_id FROM {RUNS} WHERE thread_id = ANY(%s) AND expires_at >= clock_timestamp()",
            (thread_ids,),
        )
        return {str(r[0]) for r in rows}


class SqliteThreadRecords:
    """Thread records in the SQLite file of an `AsyncSqliteSaver`, sharing its connection and lock."""

    placeholder = "?"

    def __init__(self, conn: Any, lock: Any) -> None:
        """Use the saver's aiosqlite connection and its `asyncio.Lock`."""
        self._conn = conn
        self._lock = lock

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement under the saver's lock, and commit; its rows."""
        async with self._lock:
            cursor = await self._conn.execute(sql, params)
            rows = list(await cursor.fetchall())
            await cursor.close()
            await self._conn.commit()
            return rows

    async def setup(self) -> None:
        """Create the table when missing."""
        await self.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, created_at TEXT NOT NULL, "
            "updated_at TEXT NOT NULL, metadata TEXT NOT NULL DEFAULT '{}')"
        )
        await self.execute(
            f"CREATE TABLE IF NOT EXISTS {RUNS} (thread_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
            "expires_at REAL NOT NULL)"
        )

    async def create(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Insert a thread; None when it exists."""
        now = _now().isoformat()
        rows = await self.execute(
            f"INSERT INTO {TABLE} (thread_id, created_at, updated_at, metadata) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (thread_id) DO NOTHING RETURNING thread_id, created_at, updated_at, metadata",
            (thread_id, now, now, json.dumps(metadata)),
        )
        return _record(rows[0]) if rows else None

    async def get(self, thread_id: str) -> ThreadRecord | None:
        """The thread's record, or None."""
        rows = await self.execute(
            f"SELECT thread_id, created_at, updated_at, metadata FROM {TABLE} WHERE thread_id = ?", (thread_id,)
        )
        return _record(rows[0]) if rows else None

    async def claim(self, thread_id: str, run_id: str, seconds: float) -> bool:
        """Take the lease (one machine: its clock)."""
        now = time.time()
        rows = await self.execute(
            f"INSERT INTO {RUNS} (thread_id, run_id, expires_at) VALUES (?, ?, ?) ON CONFLICT (thread_id) DO UPDATE "
            f"SET run_id = excluded.run_id, expires_at = excluded.expires_at WHERE {RUNS}.expires_at < ? "
            "RETURNING run_id",
            (thread_id, run_id, now + seconds, now),
        )
        return bool(rows)

    async def release(self, thread_id: str, run_id: str) -> None:
        """Give back the lease."""
        await self.execute(f"DELETE FROM {RUNS} WHERE thread_id = ? AND run_id = ?", (thread_id, run_id))

    async def _all(self) -> list[ThreadRecord]:
        rows = await self.execute(f"SELECT thread_id, created_at, updated_at, metadata FROM {TABLE}")
        return [_record(r) for r in rows]

    async def search(self, query: ThreadQuery) -> list[ThreadRecord]:
        """Matching records (JSON containment, as Postgres's `@>`), sorted and paginated here (one machine's file)."""
        wanted = set(query.ids)
        found = [
            r
            for r in await self._all()
            if contains(r.metadata, query.metadata) and (not wanted or r.thread_id in wanted)
        ]
        found.sort(key=lambda r: r.thread_id)
        found.sort(key=lambda r: getattr(r, query.sort_by), reverse=query.descending)
        return found[query.offset : query.offset + query.limit]

    async def count(self, metadata: dict[str, Any]) -> int:
        """How many records hold `metadata`."""
        return sum(contains(r.metadata, metadata) for r in await self._all())

    async def update(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Merge `metadata` (top-level keys) and set `updated_at`."""
        record = await self.get(thread_id)
        if record is None:
            return None
        merged = {**record.metadata, **metadata}
        rows = await self.execute(
            f"UPDATE {TABLE} SET metadata = ?, updated_at = ? WHERE thread_id = ? "
            "RETURNING thread_id, created_at, updated_at, metadata",
            (json.dumps(merged), _now().isoformat(), thread_id),
        )
        return _record(rows[0]) if rows else None

    async def delete(self, thread_id: str) -> bool:
        """Remove the record and its lease."""
        rows = await self.execute(f"DELETE FROM {TABLE} WHERE thread_id = ? RETURNING thread_id", (thread_id,))
        await self.execute(f"DELETE FROM {RUNS} WHERE thread_id = ?", (thread_id,))
        return bool(rows)

    async def busy(self, thread_ids: list[str]) -> set[str]:
        """Threads whose lease is held."""
        if not thread_ids:
            return set()
        marks = ", ".join("?" for _ in thread_ids)
        rows = await self.execute(
            f"SELECT thread_id FROM {RUNS} WHERE thread_id IN ({marks}) AND expires_at >= ?", (*thread_ids, time.time())
        )
        return {str(r[0]) for r in rows}


def thread_records(saver: Any) -> ThreadRecords:
    """The thread records beside `saver`'s checkpoints (same database, same connections).

    Raises:
        TypeError: the checkpointer is neither the Postgres nor the SQLite saver.
    """
    kind = type(saver).__name__
    if kind == "AsyncPostgresSaver":
        return PostgresThreadRecords(saver.conn)
    if kind == "AsyncSqliteSaver":
        return SqliteThreadRecords(saver.conn, saver.lock)
    raise TypeError(f"fastcrag serve keeps thread records beside Postgres or SQLite checkpoints, not {kind}")
