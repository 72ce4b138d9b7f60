"""Where threads keep their history: a Postgres checkpointer shared by every worker, or a local SQLite file.

`FASTRAG_CHECKPOINTS=postgresql://...` selects langgraph-checkpoint-postgres (a connection pool; the tables are
created on first open), so a thread started on one worker continues on another. Anything else is a SQLite file
path; empty means `threads.sqlite` in the user's data folder (the embedded default, one machine).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastcrag.config.settings import Settings, is_postgres_url, redact_message, redact_url

#: How long a run waits for a pooled connection: while Postgres is down, runs abstain after this, not psycopg's 30 s.
POOL_WAIT_S = 5.0


class CheckpointsError(RuntimeError):
    """The configured checkpoint store cannot be opened (the message names it, without any password)."""


def default_checkpoints_path() -> Path:
    """The embedded default: `threads.sqlite` in the user's data folder."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("fastcrag")) / "threads.sqlite"


def describe(target: str) -> str:
    """The checkpoint store as it may appear in logs: the kind and a redacted location."""
    if is_postgres_url(target):
        return f"postgres {redact_url(target)}"
    return f"sqlite {target or default_checkpoints_path()}"


@asynccontextmanager
async def open_checkpointer(settings: Settings | None = None, *, pool_size: int = 8) -> AsyncIterator[Any]:
    """An async LangGraph checkpointer for `settings.checkpoints`, open for the block's lifetime.

    Raises:
        CheckpointsError: the database cannot be reached or set up (no traceback, no password in the message).
    """
    target = (settings or Settings()).checkpoints
    if is_postgres_url(target):
        async with _postgres(target, pool_size) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    path = Path(target).expanduser() if target else default_checkpoints_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cm = AsyncSqliteSaver.from_conn_string(str(path))
        saver = await cm.__aenter__()
        await saver.setup()
    except Exception as exc:
        raise CheckpointsError(f"checkpoints: cannot open {describe(target)}: {type(exc).__name__}: {exc}") from None
    try:
        yield saver
    finally:
        await cm.__aexit__(None, None, None)


@asynccontextmanager
async def _postgres(url: str, pool_size: int) -> AsyncIterator[Any]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool
    except ImportError as exc:
        raise CheckpointsError("Postgres checkpoints need the extra: pip install 'fastcrag[postgres]'") from exc
    url = url.replace("postgresql+psycopg://", "postgresql://")
    try:  # one plain connection first: a wrong URL fails fast, with the driver's reason
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
        await conn.close()
    except Exception as exc:
        raise CheckpointsError(f"checkpoints: cannot open {describe(url)}: {_reason(exc, url)}") from None
    pool = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=pool_size,
        open=False,
        timeout=POOL_WAIT_S,
        # a connection is checked as it leaves the pool: after a Postgres restart, dead ones are replaced, not used
        check=AsyncConnectionPool.check_connection,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    )
    try:
        await pool.open(wait=True, timeout=15)
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
    except Exception as exc:
        await pool.close()
        raise CheckpointsError(f"checkpoints: cannot open {describe(url)}: {_reason(exc, url)}") from None
    try:
        yield saver
    finally:
        await pool.close()


def _reason(exc: BaseException, url: str) -> str:
    """The first line of a driver error, with the URL and any password redacted."""
    return f"{type(exc).__name__}: {redact_message((str(exc).strip().splitlines() or [''])[0], url)}"
