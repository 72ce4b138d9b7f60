"""Background runs of `fastcrag serve`: a queue in the checkpoints' own database, taken by any worker.

`POST /threads/{id}/runs` stores the validated request as a `pending` row and answers at once. Every worker polls
the queue (`POLL_S` when idle) and takes the oldest pending run whose thread has none running, marking it `running`
with a lease of the run timeout plus a grace; the thread's run lease (`records.claim`) still keeps runs on one
thread from overlapping with any other run. A run ends `success`, `error`, `timeout` or `interrupted` (cancelled).
A worker that dies mid-run leaves its lease to expire: the run is then taken up again by another worker, at most
`MAX_ATTEMPTS` times in all, after which it is marked `error` with that reason; a worker that shuts down gives its
runs back to the queue at once. Times are the workers' clocks
(leases are minutes long, so clock skew of seconds between machines does not matter).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from fastcrag.server.records import ThreadRecords

TABLE = "fastcrag_runs"
MAX_ATTEMPTS = 2
"""A run is started at most this many times (the second after its worker stopped mid-run)."""
STATUSES = ("pending", "running", "success", "error", "timeout", "interrupted")
FINISHED = frozenset({"success", "error", "timeout", "interrupted"})
COLUMNS = "run_id, thread_id, status, body, metadata, multitask, created, updated, attempts, cancel, error"


@dataclass(frozen=True)
class QueuedRun:
    """One background run as stored."""

    run_id: str
    thread_id: str
    status: str
    body: dict[str, Any]
    metadata: dict[str, Any]
    multitask: str
    created: float
    updated: float
    attempts: int
    cancel: bool
    error: str | None

    @property
    def finished(self) -> bool:
        """Whether the run has ended (any way)."""
        return self.status in FINISHED


def _row(row: Any) -> QueuedRun:
    return QueuedRun(
        run_id=str(row[0]),
        thread_id=str(row[1]),
        status=str(row[2]),
        body=json.loads(row[3]),
        metadata=json.loads(row[4]),
        multitask=str(row[5]),
        created=float(row[6]),
        updated=float(row[7]),
        attempts=int(row[8]),
        cancel=bool(row[9]),
        error=None if row[10] is None else str(row[10]),
    )


class RunQueue:
    """The background-run table beside the thread records (Postgres or SQLite: the SQL is the same but for `%s`)."""

    def __init__(self, db: ThreadRecords) -> None:
        """Queue runs in `db`'s database."""
        self.db = db
        self.postgres = db.placeholder == "%s"

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.db.placeholder)

    async def _run(self, sql: str, *params: Any) -> list[Any]:
        return await self.db.execute(self._sql(sql), params)

    async def setup(self) -> None:
        """Create the table when missing (on Postgres under an advisory lock: workers start together)."""
        real = "DOUBLE PRECISION" if self.postgres else "REAL"
        statements = [
            f"CREATE TABLE IF NOT EXISTS {TABLE} (run_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, "
            f"status TEXT NOT NULL, body TEXT NOT NULL, metadata TEXT NOT NULL, multitask TEXT NOT NULL, "
            f"created {real} NOT NULL, updated {real} NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
            f"cancel INTEGER NOT NULL DEFAULT 0, error TEXT, owner TEXT, lease_until {real})",
            f"CREATE INDEX IF NOT EXISTS {TABLE}_queue ON {TABLE} (status, created)",
            f"CREATE INDEX IF NOT EXISTS {TABLE}_thread ON {TABLE} (thread_id, created)",
        ]
        if self.postgres:  # concurrent CREATE ... IF NOT EXISTS can still collide in the catalogue
            locked = "; ".join(statements)
            await self._run(f"DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('{TABLE}_setup')); {locked}; END $$")
            return
        for statement in statements:
            await self._run(statement)

    async def enqueue(
        self, run_id: str, thread_id: str, body: dict[str, Any], metadata: dict[str, Any], multitask: str
    ) -> QueuedRun:
        """Store a pending run."""
        now = time.time()
        rows = await self._run(
            f"INSERT INTO {TABLE} (run_id, thread_id, status, body, metadata, multitask, created, updated) "
            f"VALUES (?, ?, 'pending', ?, ?, ?, ?, ?) RETURNING {COLUMNS}",
            run_id,
            thread_id,
            json.dumps(body),
            json.dumps(metadata),
            multitask,
            now,
            now,
        )
        return _row(rows[0])

    async def claim(self, owner: str, lease_s: float) -> QueuedRun | None:
        """Take the oldest pending run (or one whose worker's lease ran out) whose thread has none running."""
        now = time.time()
        lock = " FOR UPDATE SKIP LOCKED" if self.postgres else ""
        rows = await self._run(
            f"UPDATE {TABLE} SET status = 'running', owner = ?, lease_until = ?, attempts = attempts + 1, "
            f"updated = ? WHERE run_id = (SELECT r.run_id FROM {TABLE} r WHERE (r.status = 'pending' OR "
            f"(r.status = 'running' AND r.lease_until < ?)) AND NOT EXISTS (SELECT 1 FROM {TABLE} o WHERE "
            f"o.thread_id = r.thread_id AND o.status = 'running' AND o.lease_until >= ?) "
            f"ORDER BY r.created LIMIT 1{lock}) RETURNING {COLUMNS}",
            owner,
            now + lease_s,
            now,
            now,
            now,
        )
        return _row(rows[0]) if rows else None

    async def finish(self, run_id: str, owner: str, status: str, error: str | None = None) -> None:
        """End a run this owner holds (a run taken up by another worker meanwhile is left to it)."""
        await self._run(
            f"UPDATE {TABLE} SET status = ?, error = ?, updated = ?, lease_until = NULL "
            "WHERE run_id = ? AND owner = ? AND status = 'running'",
            status,
            error,
            time.time(),
            run_id,
            owner,
        )

    async def requeue(self, run_id: str, owner: str) -> None:
        """Give a run this owner holds back to the queue, as if never started (its worker is shutting down)."""
        await self._run(
            f"UPDATE {TABLE} SET status = 'pending', owner = NULL, lease_until = NULL, attempts = attempts - 1, "
            "updated = ? WHERE run_id = ? AND owner = ? AND status = 'running'",
            time.time(),
            run_id,
            owner,
        )

    async def get(self, thread_id: str, run_id: str) -> QueuedRun | None:
        """One run of a thread."""
        rows = await self._run(f"SELECT {COLUMNS} FROM {TABLE} WHERE thread_id = ? AND run_id = ?", thread_id, run_id)
        return _row(rows[0]) if rows else None

    async def list(self, thread_id: str, limit: int, offset: int, status: str | None) -> list[QueuedRun]:
        """A thread's runs, newest first."""
        where = " AND status = ?" if status else ""
        rows = await self._run(
            f"SELECT {COLUMNS} FROM {TABLE} WHERE thread_id = ?{where} ORDER BY created DESC LIMIT ? OFFSET ?",
            *(thread_id, *([status] if status else []), limit, offset),
        )
        return [_row(r) for r in rows]

    async def active(self, thread_id: str) -> bool:
        """Whether the thread has a run pending or running."""
        rows = await self._run(
            f"SELECT run_id FROM {TABLE} WHERE thread_id = ? AND status IN ('pending', 'running') LIMIT 1", thread_id
        )
        return bool(rows)

    async def cancel(self, thread_id: str, run_id: str) -> str | None:
        """Cancel a run: a pending one ends `interrupted` at once, a running one is asked to stop.

        Returns:
            The run's status after the call (`interrupted`, or `running` while it stops), None when unknown.
        """
        now = time.time()
        rows = await self._run(
            f"UPDATE {TABLE} SET status = 'interrupted', error = 'cancelled before it started', updated = ? "
            "WHERE thread_id = ? AND run_id = ? AND status = 'pending' RETURNING run_id",
            now,
            thread_id,
            run_id,
        )
        if rows:
            return "interrupted"
        await self._run(
            f"UPDATE {TABLE} SET cancel = 1, updated = ? WHERE thread_id = ? AND run_id = ? AND status = 'running'",
            now,
            thread_id,
            run_id,
        )
        run = await self.get(thread_id, run_id)
        return None if run is None else run.status

    async def cancelled(self, run_id: str) -> bool:
        """Whether a cancel was asked for this run."""
        rows = await self._run(f"SELECT cancel FROM {TABLE} WHERE run_id = ?", run_id)
        return bool(rows) and bool(rows[0][0])

    async def delete(self, thread_id: str, run_id: str) -> bool:
        """Delete a run that is not running; whether one was deleted."""
        rows = await self._run(
            f"DELETE FROM {TABLE} WHERE thread_id = ? AND run_id = ? AND status <> 'running' RETURNING run_id",
            thread_id,
            run_id,
        )
        return bool(rows)

    async def forget_thread(self, thread_id: str) -> None:
        """Delete a thread's runs (with the thread)."""
        await self._run(f"DELETE FROM {TABLE} WHERE thread_id = ?", thread_id)
