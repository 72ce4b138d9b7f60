"""Thread records for `fastcrag serve`, kept in the checkpoints' own database (Postgres or SQLite).

A thread's history lives in the LangGraph checkpointer; this table only remembers that a thread was created
(`POST /threads`, before any run) with its metadata and times, so that every worker can answer for it. Workers hold
no thread state of their own.
"""

from __future__ import annotations

import contextlib
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from fastcrag.server.access import Filter

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

    @property
    def placeholder(self) -> str:
        """The driver's parameter mark (`%s` or `?`)."""

    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement; its rows."""

    async def setup(self) -> None:
        """Create the table when missing (safe to run from several workers at once)."""

    async def create(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Insert a thread; None when one with this id exists already."""

    async def get(self, thread_id: str, where: Filter | None = None) -> ThreadRecord | None:
        """The thread's record, or None (also when its metadata does not satisfy `where`)."""

    async def claim(self, thread_id: str, run_id: str, seconds: float) -> bool:
        """Take the thread's run lease for `seconds`; False while another run holds an unexpired one.

        A worker that dies mid-run leaves its lease to expire; the run timeout bounds how long that takes.
        """

    async def release(self, thread_id: str, run_id: str) -> None:
        """Give back the lease `run_id` holds (nothing when it holds none)."""

    async def search(self, query: ThreadQuery, auth: Filter | None = None) -> list[ThreadRecord]:
        """The records matching `query` (and the auth filter `auth`), sorted and paginated as it says."""

    async def count(self, metadata: dict[str, Any], where: Filter | None = None) -> int:
        """How many records hold `metadata` (JSON containment) and satisfy `where`."""

    async def update(
        self, thread_id: str, metadata: dict[str, Any], where: Filter | None = None
    ) -> ThreadRecord | None:
        """Merge `metadata` into the record's and set `updated_at`; None without such a record satisfying `where`."""

    async def delete(self, thread_id: str, where: Filter | None = None) -> bool:
        """Remove the record (when it satisfies `where`) and its lease; whether there was a record."""

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


COLUMNS = "thread_id, created_at, updated_at, metadata"


@dataclass(frozen=True)
class Dialect:
    """What the thread records' SQL says differently on Postgres and SQLite; the statements are written once.

    Statements use `?` for parameters; `sql` puts the driver's placeholder in. Postgres keeps times as `timestamptz`
    on the database's clock (workers' clocks need not agree) and metadata as `jsonb`, matched and merged in SQL;
    SQLite (one machine's file) keeps ISO text and epoch seconds from this machine's clock, and JSON text that is
    matched and merged here.
    """

    placeholder: str
    time_type: str
    json_type: str
    json_mark: str
    """The parameter mark of a JSON value."""
    expiry_type: str
    postgres: bool

    def sql(self, statement: str) -> str:
        """The statement with the driver's placeholder."""
        return statement.replace("?", self.placeholder)

    def now(self) -> Any:
        """The current time as a `time_type` value."""
        return _now() if self.postgres else _now().isoformat()

    def clock(self) -> tuple[str, tuple[Any, ...]]:
        """The lease clock's current time: SQL and its parameters."""
        return ("clock_timestamp()", ()) if self.postgres else ("?", (time.time(),))

    def expiry(self, seconds: float) -> tuple[str, tuple[Any, ...]]:
        """A lease's expiry `seconds` from now on the lease clock: SQL and its parameters."""
        if self.postgres:
            return "clock_timestamp() + make_interval(secs => ?)", (float(seconds),)
        return "?", (time.time() + seconds,)

    def any_of(self, values: list[str]) -> tuple[str, tuple[Any, ...]]:
        """`IN` these values: SQL (after the column) and its parameters."""
        if self.postgres:
            return "= ANY(?)", (values,)
        return f"IN ({', '.join('?' for _ in values)})", tuple(values)

    def where(self, condition: Filter) -> tuple[str, tuple[Any, ...]]:
        """A checked auth filter (`access.checked_filter`) on the `metadata` column: SQL and its parameters.

        Keys are ANDed; `$eq` is JSON equality of the key's value, `$contains` that the key's value is an array
        holding every given element; `$or` / `$and` combine filters.
        """
        parts: list[str] = []
        params: list[Any] = []
        for key, item in condition.items():
            if key in ("$or", "$and"):
                branches = [self.where(branch) for branch in item]
                joiner = " OR " if key == "$or" else " AND "
                parts.append("(" + joiner.join(f"({sql})" for sql, _ in branches) + ")")
                params.extend(p for _, branch_params in branches for p in branch_params)
                continue
            op, operand = next(iter(item.items()))
            sql, more = (self._pg_match if self.postgres else self._sqlite_match)(key, op, operand)
            parts.append(sql)
            params.extend(more)
        return (" AND ".join(parts) or "TRUE"), tuple(params)

    @staticmethod
    def _pg_match(key: str, op: str, operand: Any) -> tuple[str, tuple[Any, ...]]:
        if op == "$eq":
            return "(metadata -> ?::text) = ?::jsonb", (key, json.dumps(operand))
        wanted = operand if isinstance(operand, list) else [operand]
        return (
            "(jsonb_typeof(metadata -> ?::text) = 'array' AND (metadata -> ?::text) @> ?::jsonb)",
            (key, key, json.dumps(wanted)),
        )

    @staticmethod
    def _sqlite_match(key: str, op: str, operand: Any) -> tuple[str, tuple[Any, ...]]:
        path = f'$."{key}"'  # checked_filter allows no quote or backslash in a key
        if op == "$eq":
            test, reads, more = _sqlite_equals(operand, "json_type(metadata, ?)", "json_extract(metadata, ?)")
            return test, (path, *((path, *more) if reads else ()))
        wanted = operand if isinstance(operand, list) else [operand]
        clauses = ["json_type(metadata, ?) = 'array'"]
        params: list[Any] = [path]
        for element in wanted:
            test, _, more = _sqlite_equals(element, "e.type", "e.atom", "e.value")
            clauses.append(f"EXISTS (SELECT 1 FROM json_each(metadata, ?) AS e WHERE {test})")
            params += [path, *more]
        return "(" + " AND ".join(clauses) + ")", tuple(params)


def _sqlite_equals(
    value: Any, type_sql: str, value_sql: str, json_sql: str | None = None
) -> tuple[str, bool, tuple[Any, ...]]:
    """SQLite's test that a JSON value equals `value`: the SQL, whether it reads the value, and its parameters.

    The JSON value is given by its type (`type_sql`, a `json_type` name), its SQL value (`value_sql`) and its JSON
    text (`json_sql`, default `value_sql`).
    """
    if value is None:
        return f"{type_sql} = 'null'", False, ()
    if isinstance(value, bool):
        return f"{type_sql} = '{'true' if value else 'false'}'", False, ()
    if isinstance(value, int | float):
        return f"({type_sql} IN ('integer', 'real') AND {value_sql} = ?)", True, (value,)
    if isinstance(value, str):
        return f"({type_sql} = 'text' AND {value_sql} = ?)", True, (value,)
    # an object or array: compared as SQLite's minified JSON text (key order counts here, unlike on Postgres)
    text = json_sql or value_sql
    return f"({type_sql} IN ('object', 'array') AND {text} = json(?))", True, (json.dumps(value),)


POSTGRES = Dialect("%s", "TIMESTAMPTZ", "JSONB NOT NULL DEFAULT '{}'::jsonb", "?::jsonb", "TIMESTAMPTZ", postgres=True)
SQLITE = Dialect("?", "TEXT", "TEXT NOT NULL DEFAULT '{}'", "?", "REAL", postgres=False)


class SqlThreadRecords(ABC):
    """`ThreadRecords` in a SQL database; a subclass brings its `dialect` and `_execute` (connections, commits)."""

    dialect: Dialect

    @property
    def placeholder(self) -> str:
        """The driver's parameter mark (the background-run queue writes its SQL with it)."""
        return self.dialect.placeholder

    @abstractmethod
    async def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Run one statement (parameters marked with the driver's placeholder); its rows as tuples, in column order."""

    async def _run(self, statement: str, *params: Any) -> list[Any]:
        """Run one statement written with `?` marks."""
        return await self.execute(self.dialect.sql(statement), params)

    async def setup(self) -> None:
        """Create the tables when missing (safe to run from several workers at once)."""
        d = self.dialect
        statements = [
            f"CREATE TABLE IF NOT EXISTS {TABLE} (thread_id TEXT PRIMARY KEY, created_at {d.time_type} NOT NULL, "
            f"updated_at {d.time_type} NOT NULL, metadata {d.json_type})",
            f"CREATE TABLE IF NOT EXISTS {RUNS} (thread_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
            f"expires_at {d.expiry_type} NOT NULL)",
        ]
        if d.postgres:  # an advisory lock keeps concurrent workers from racing on the catalogue
            statements = [
                "DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('fastcrag_threads_setup')); "
                + "; ".join(statements)
                + "; END $$"
            ]
        for statement in statements:
            await self._run(statement)

    async def create(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord | None:
        """Insert a thread; None when it exists."""
        now = self.dialect.now()
        rows = await self._run(
            f"INSERT INTO {TABLE} ({COLUMNS}) VALUES (?, ?, ?, {self.dialect.json_mark}) "
            f"ON CONFLICT (thread_id) DO NOTHING RETURNING {COLUMNS}",
            thread_id,
            now,
            now,
            json.dumps(metadata),
        )
        return _record(rows[0]) if rows else None

    def _also(self, where: Filter | None) -> tuple[str, tuple[Any, ...]]:
        """` AND <the filter>` and its parameters; nothing without a filter."""
        if not where:
            return "", ()
        sql, params = self.dialect.where(where)
        return f" AND {sql}", params

    async def get(self, thread_id: str, where: Filter | None = None) -> ThreadRecord | None:
        """The thread's record, or None (also when it does not satisfy `where`)."""
        also, params = self._also(where)
        rows = await self._run(f"SELECT {COLUMNS} FROM {TABLE} WHERE thread_id = ?{also}", thread_id, *params)
        return _record(rows[0]) if rows else None

    async def claim(self, thread_id: str, run_id: str, seconds: float) -> bool:
        """Take the lease (on the dialect's lease clock)."""
        expiry, expiry_params = self.dialect.expiry(seconds)
        clock, clock_params = self.dialect.clock()
        rows = await self._run(
            f"INSERT INTO {RUNS} (thread_id, run_id, expires_at) VALUES (?, ?, {expiry}) ON CONFLICT (thread_id) "
            f"DO UPDATE SET run_id = excluded.run_id, expires_at = excluded.expires_at "
            f"WHERE {RUNS}.expires_at < {clock} RETURNING run_id",
            thread_id,
            run_id,
            *expiry_params,
            *clock_params,
        )
        return bool(rows)

    async def release(self, thread_id: str, run_id: str) -> None:
        """Give back the lease."""
        await self._run(f"DELETE FROM {RUNS} WHERE thread_id = ? AND run_id = ?", thread_id, run_id)

    async def search(self, query: ThreadQuery, auth: Filter | None = None) -> list[ThreadRecord]:
        """Matching records (JSON containment, Postgres's `@>`; the auth filter `auth`), sorted and paginated.

        Postgres matches, sorts and pages in the database; SQLite applies the auth filter in the database and
        matches the query's metadata and pages here.
        """
        where: list[str] = []
        params: list[Any] = []
        if auth:
            auth_sql, auth_params = self.dialect.where(auth)
            where.append(auth_sql)
            params.extend(auth_params)
        if query.ids:
            ids_sql, ids_params = self.dialect.any_of(list(query.ids))
            where.append(f"thread_id {ids_sql}")
            params.extend(ids_params)
        if not self.dialect.postgres:
            found = [r for r in await self._select(where, params) if contains(r.metadata, query.metadata)]
            found.sort(key=lambda r: r.thread_id)
            found.sort(key=lambda r: getattr(r, query.sort_by), reverse=query.descending)
            return found[query.offset : query.offset + query.limit]
        order = f"{query.sort_by} {'DESC' if query.descending else 'ASC'}, thread_id"  # sort_by is checked: SORTABLE
        where.insert(0, f"metadata @> {self.dialect.json_mark}")
        params.insert(0, json.dumps(query.metadata))
        return await self._select(where, [*params, query.limit, query.offset], f" ORDER BY {order} LIMIT ? OFFSET ?")

    async def _select(self, where: list[str], params: list[Any], tail: str = "") -> list[ThreadRecord]:
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        return [_record(r) for r in await self._run(f"SELECT {COLUMNS} FROM {TABLE}{condition}{tail}", *params)]

    async def count(self, metadata: dict[str, Any], where: Filter | None = None) -> int:
        """How many records hold `metadata` and satisfy `where`."""
        if not self.dialect.postgres:
            condition, condition_params = self.dialect.where(where) if where else ("", ())
            found = await self._select([condition] if where else [], list(condition_params))
            return sum(contains(r.metadata, metadata) for r in found)
        also, params = self._also(where)
        rows = await self._run(
            f"SELECT count(*) FROM {TABLE} WHERE metadata @> {self.dialect.json_mark}{also}",
            json.dumps(metadata),
            *params,
        )
        return int(rows[0][0])

    async def update(
        self, thread_id: str, metadata: dict[str, Any], where: Filter | None = None
    ) -> ThreadRecord | None:
        """Merge `metadata` (top-level keys) and set `updated_at`; None without such a record satisfying `where`."""
        if self.dialect.postgres:
            merged, value = f"metadata || {self.dialect.json_mark}", metadata
        else:
            record = await self.get(thread_id, where)
            if record is None:
                return None
            merged, value = self.dialect.json_mark, {**record.metadata, **metadata}
        also, params = self._also(where)
        rows = await self._run(
            f"UPDATE {TABLE} SET metadata = {merged}, updated_at = ? WHERE thread_id = ?{also} RETURNING {COLUMNS}",
            json.dumps(value),
            self.dialect.now(),
            thread_id,
            *params,
        )
        return _record(rows[0]) if rows else None

    async def delete(self, thread_id: str, where: Filter | None = None) -> bool:
        """Remove the record (when it satisfies `where`) and its lease."""
        also, params = self._also(where)
        rows = await self._run(f"DELETE FROM {TABLE} WHERE thread_id = ?{also} RETURNING thread_id", thread_id, *params)
        if rows or not where:  # a thread known by its checkpoints only may hold a lease too
            await self._run(f"DELETE FROM {RUNS} WHERE thread_id = ?", thread_id)
        return bool(rows)

    async def busy(self, thread_ids: list[str]) -> set[str]:
        """Threads whose lease is held (on the lease clock)."""
        if not thread_ids:
            return set()
        ids_sql, ids_params = self.dialect.any_of(thread_ids)
        clock, clock_params = self.dialect.clock()
        rows = await self._run(
            f"SELECT thread_id FROM {RUNS} WHERE thread_id {ids_sql} AND expires_at >= {clock}",
            *ids_params,
            *clock_params,
        )
        return {str(r[0]) for r in rows}


class PostgresThreadRecords(SqlThreadRecords):
    """Thread records in the Postgres database of an `AsyncPostgresSaver` (its pool or connection)."""

    dialect = POSTGRES

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


class SqliteThreadRecords(SqlThreadRecords):
    """Thread records in the SQLite file of an `AsyncSqliteSaver`, sharing its connection and lock."""

    dialect = SQLITE

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
