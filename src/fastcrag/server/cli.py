"""Subcommand `serve` for the main `fastcrag` CLI: the production server (uvicorn workers over `server.app`)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import shutil
import sys
import tempfile
from typing import Any

APP = "fastcrag.server.app:create_app"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (a hostname other than localhost counts as not)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def _probe_checkpoints(settings: Any) -> None:
    """Open and close the checkpointer once, so that a wrong URL fails here in one line, before any worker."""
    from fastcrag.graph.checkpoints import open_checkpointer

    async with open_checkpointer(settings, pool_size=1):
        pass


def _build_default_index(chunk_tokens: int, chunk_overlap: int) -> None:
    """Child process: build the embedded index when missing (errors as one line, exit code 2)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from fastcrag.retrieval.indexing import ensure_default_index

        ensure_default_index(chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, progress=False)
    except Exception as exc:
        print(f"fastcrag: error: the embedded index could not be built: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(2)


def _prepare_default_index(chunk_tokens: int, chunk_overlap: int) -> int:
    """Build the embedded index once, in a short-lived child, so that K workers never race to build it.

    Returns:
        0 when the index is ready, else the exit code to stop with.
    """
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(
        target=_build_default_index, args=(chunk_tokens, chunk_overlap), name="fastcrag-index"
    )
    child.start()
    child.join()
    return 0 if child.exitcode == 0 else 2


def log_config(access_log: bool) -> dict[str, Any]:
    """The uvicorn logging config, with fastcrag's server logger on the same handler."""
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = {
        **LOGGING_CONFIG,
        "loggers": {name: dict(value) for name, value in LOGGING_CONFIG["loggers"].items()},
    }
    config["loggers"]["fastcrag"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    if not access_log:
        config["loggers"]["uvicorn.access"]["level"] = "WARNING"
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    """Run `fastcrag serve` until interrupted; 2 for a refused configuration, 1 when a worker failed to start."""
    from pydantic import ValidationError

    from fastcrag.config.settings import Settings
    from fastcrag.graph.checkpoints import CheckpointsError

    if args.workers < 1:
        return _refuse("--workers must be at least 1")
    if not 0 < args.port < 65536:
        return _refuse("--port must be between 1 and 65535")
    if args.run_timeout is not None:
        if args.run_timeout <= 0:
            return _refuse("--run-timeout must be positive")
        os.environ["FASTRAG_RUN_TIMEOUT_S"] = str(args.run_timeout)
    if args.cors_origins is not None:
        bad = [o for o in args.cors_origins.split(",") if o.strip() and o.strip() != "*" and "://" not in o]
        if bad:
            return _refuse(f"--cors-origins takes origins such as http://localhost:3000 (or *), not {bad[0].strip()!r}")
        os.environ["FASTRAG_CORS_ORIGINS"] = args.cors_origins
    local_url = ""
    if args.local_postgres:
        from fastcrag.server.postgres import LocalPostgresError, start_local_postgres

        try:
            local_url = start_local_postgres(args.local_postgres, "fastcrag")
        except LocalPostgresError as exc:
            return _refuse(str(exc))
        os.environ.setdefault("FASTRAG_STORE", local_url)
        os.environ.setdefault("FASTRAG_CHECKPOINTS", local_url)
    refused = _configure_auth(args.config)
    if refused:
        return refused
    try:
        settings = Settings()
        from fastcrag.server.limits import ServeSettings

        auth = ServeSettings().auth
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return _refuse(f"invalid setting: {problems}")
    if auth:
        from fastcrag.server.access import AuthLoadError, load_auth

        try:
            load_auth(auth)  # once here, so that a broken auth file fails in one line before any worker
        except AuthLoadError as exc:
            return _refuse(str(exc))
    key = settings.api_key.get_secret_value() if settings.api_key is not None else ""
    if key and len(key) < 16:
        return _refuse("FASTRAG_API_KEY must be at least 16 characters (e.g. `openssl rand -hex 24`)")
    if key and auth:
        print(
            "fastcrag: warning: FASTRAG_API_KEY is not checked: the auth handler of langgraph.json authenticates "
            "every request",
            file=sys.stderr,
        )
    if not key and not auth and not is_loopback(args.host):
        return _refuse(
            f"refusing to serve on {args.host} without FASTRAG_API_KEY or an auth handler: set a key, name an "
            "`auth` path in langgraph.json, or bind 127.0.0.1 (the default)"
        )
    from fastcrag.config.settings import is_postgres_url

    if args.workers > 1 and not is_postgres_url(settings.checkpoints):
        print(
            f"fastcrag: warning: {args.workers} workers share one SQLite checkpoint file (writes take turns); "
            "set FASTRAG_CHECKPOINTS to a Postgres URL for production",
            file=sys.stderr,
        )
    try:
        asyncio.run(_probe_checkpoints(settings))
    except CheckpointsError as exc:
        return _refuse(str(exc))

    if settings.index_dir is None and not settings.store:
        code = _prepare_default_index(settings.chunk_tokens, settings.chunk_overlap)
        if code:
            return code
    if local_url and settings.store == local_url:
        code = _index_embedded_corpus(settings)
        if code:
            return code

    # Each worker's ONNX Runtime keeps its default pool (one thread per core), unless FASTRAG_ORT_THREADS says
    # otherwise: measured with 2 workers on 2 cores, a pool of cores / workers made single runs 315 ms slower and
    # the 200-run load test slower too (5.7 vs 9.1 runs/s): a run is not all grader time, so pools rarely collide.

    metrics_dir = tempfile.mkdtemp(prefix="fastcrag-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # before any worker imports prometheus_client
    try:
        return _run(args)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _configure_auth(config: str | None) -> int:
    """Set `FASTRAG_AUTH` from langgraph.json's `auth.path` (`config`, else ./langgraph.json when there is one).

    Returns:
        0, or the exit code to stop with (a missing or unreadable config file).
    """
    from pathlib import Path

    from fastcrag.server.access import AuthLoadError, auth_spec

    path = Path(config) if config else Path("langgraph.json")
    if not path.is_file():
        return _refuse(f"--config {config}: no such file") if config else 0
    try:
        spec = auth_spec(path)
    except AuthLoadError as exc:
        return _refuse(str(exc))
    if spec:
        os.environ["FASTRAG_AUTH"] = spec
    return 0


def _index_embedded_corpus(settings: Any) -> int:
    """Bring the local Postgres store's collection up to date with the embedded corpus; 2 when that fails.

    Incremental: after the first start only unchanged-document lookups run.
    """
    from fastcrag.retrieval.embeddings import default_embeddings
    from fastcrag.retrieval.loaders import python_reference
    from fastcrag.retrieval.pgstore import build_pg_index

    try:
        report = build_pg_index(
            python_reference(),
            settings.store,
            default_embeddings(),
            settings.collection,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap=settings.chunk_overlap,
            progress=False,
        )
    except Exception as exc:
        return _refuse(f"indexing the embedded corpus into the local Postgres failed: {type(exc).__name__}: {exc}")
    print(
        f"fastcrag: local Postgres store, collection {settings.collection!r}: {report.chunks_total} chunks "
        f"({report.documents_added} documents added)",
        file=sys.stderr,
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    """Bind once and supervise `args.workers` spawned workers (even one, so each starts with a clean import)."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors.multiprocess import Multiprocess

    config = uvicorn.Config(
        APP,
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_config=log_config(not args.no_access_log),
        timeout_graceful_shutdown=30,
        timeout_worker_healthcheck=20,  # a worker loading models on a busy machine can be slow to answer a ping
        server_header=False,
    )
    sock = config.bind_socket()
    supervisor = Multiprocess(config, sockets=[sock])
    supervisor.run()
    if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes):
        print("fastcrag: error: a worker failed to start (the reason is logged above)", file=sys.stderr)
        return 1
    return 0


def _refuse(message: str) -> int:
    print(f"fastcrag: error: {message}", file=sys.stderr)
    return 2


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `serve` to the main CLI's subparsers."""
    s = subparsers.add_parser(
        "serve",
        help="the production server: LangGraph API routes (SDK, RemoteGraph), /metrics and /console",
        description="Serve the `crag` graph with uvicorn workers over the shared checkpointer "
        "(FASTRAG_CHECKPOINTS). Off loopback it needs FASTRAG_API_KEY, or an `auth` path in langgraph.json.",
    )
    s.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}, loopback)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    s.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    s.add_argument(
        "--run-timeout", type=float, help="seconds a run may take before it abstains (FASTRAG_RUN_TIMEOUT_S, 300)"
    )
    s.add_argument(
        "--cors-origins",
        help="comma-separated origins whose browser pages may call the API, e.g. a chat UI's http://localhost:3000 "
        "(FASTRAG_CORS_ORIGINS; * for any; default none)",
    )
    s.add_argument(
        "--config",
        metavar="LANGGRAPH_JSON",
        help="the langgraph.json whose `auth.path` names a langgraph_sdk.Auth object that authenticates and "
        "authorizes every request (per-user threads); default ./langgraph.json when present. Without an `auth` "
        "path: the shared FASTRAG_API_KEY",
    )
    s.add_argument("--no-access-log", action="store_true", help="do not log one line per request")
    s.add_argument(
        "--local-postgres",
        metavar="DIR",
        default="",
        help="the whole stack on this machine: start the bundled Postgres + pgvector in DIR (as an unprivileged "
        "user), use it for the store and checkpoints unless FASTRAG_STORE / FASTRAG_CHECKPOINTS are set, and index "
        "the embedded corpus into it",
    )
    s.set_defaults(func=cmd_serve)
