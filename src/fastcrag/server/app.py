"""The production HTTP app behind `fastcrag serve`: a thin Starlette app over the compiled graph.

uvicorn runs `create_app` in each worker (factory mode). The worker builds its `Service` once, at startup, and then
answers the subset of the LangGraph server API that `langgraph_sdk` (`get_client` / `get_sync_client`) and
`langgraph.pregel.remote.RemoteGraph` use, so both work unchanged:

    GET  /ok                                       liveness (never needs the key)
    POST /assistants/search  /assistants/count     the one assistant, `crag` (graph id) = ASSISTANT_ID
    GET  /assistants/{id}/subgraphs[/{namespace}]  the subgraphs' schemas by namespace (`flare`), `?recurse`
    GET  /assistants/{id}  /assistants/{id}/schemas  /assistants/{id}/graph
    POST /threads                                  create a thread (recorded beside the checkpoints)
    GET  /threads/{id}  PATCH /threads/{id}  DELETE /threads/{id}   read, merge metadata, delete (with checkpoints)
    POST /threads/search  /threads/count          recorded threads by metadata, ids, status; paged and sorted
    POST /threads/{id}/copy                        a new thread with every checkpoint of this one
    GET  /threads/{id}/state  /threads/{id}/state/{checkpoint_id}   the state (latest, or at a checkpoint)
    POST /threads/{id}/state/checkpoint            the state at a given checkpoint (RemoteGraph.get_state)
    POST /threads/{id}/state                       write state as a node (`as_node`), from a checkpoint (a fork)
    POST|GET /threads/{id}/history                 the thread's states, newest first
    POST /runs/wait  /runs/stream                  a run without a thread (no checkpoint is written)
    POST /threads/{id}/runs/wait  /threads/{id}/runs/stream   a run on a thread (history in the checkpointer)
    POST /threads/{id}/runs  GET /threads/{id}/runs[/{run_id}[/join|/stream]]  POST .../cancel  DELETE .../{run_id}
                                                   background runs: queued in the database, run by any worker
    GET  /metrics                                  Prometheus, summed over every worker (multiprocess mode)
    GET  /console  /console/{asset}                the decision-trace console (static files, no data)

A browser page on another origin (a chat UI) may call the API when its origin is listed in `FASTRAG_CORS_ORIGINS`
(`--cors-origins`): preflights are answered before the key check, and `Content-Location` is exposed.

Per-user access: with langgraph.json's `auth` path (`FASTRAG_AUTH`), LangGraph's own `Auth` handlers authenticate
every request but `/ok` and the console's files, and limit every thread operation to what their filters allow
(`access.py`); without it, the shared API key above.

Routes of the API that fastcrag does not serve (`NOT_SERVED`: stateless background runs, crons, the store, assistant
management) answer 501 naming the route, never 404/405. `/threads/{id}/runs/crons` is routed before the run routes,
so that it is not read as a run id.

Why not the stock LangGraph server (`langgraph-api`) for production: `langgraph dev` (langgraph-api with the
in-memory runtime, whose queue is polled every 0.5 s) stays the Studio path. Its Postgres runtime on PyPI,
`langgraph-runtime-pg` 0.11.1.post1 (MIT), pins `langgraph-api==0.11.1` and `langgraph-checkpoint-postgres==3.1.0`,
which conflict with the langgraph-api 0.16.x (via `langgraph-cli[inmem]`) and checkpoint-postgres 3.2 that fastcrag
ships, and it depends on Redis (`redis>=5.0`) beside Postgres. langgraph-api itself is licensed Elastic-2.0
(`pip show langgraph-api`), which forbids offering it to third parties as a managed service. A thin app over the
compiled graph and the shared checkpointer needs neither, keeps runs synchronous to the request (no queue polling on
the latency path), and keeps the wire format the SDK and RemoteGraph expect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from importlib.metadata import version

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fastcrag.config.settings import Settings
from fastcrag.graph.checkpoints import describe
from fastcrag.server import console
from fastcrag.server.access import Access, load_auth
from fastcrag.server.assistants import (
    GRAPH_ID,
    assistant_graph,
    assistant_schemas,
    assistant_subgraphs,
    count_assistants,
    get_assistant,
    search_assistants,
)
from fastcrag.server.background import (
    Runner,
    cancel_run,
    create_run,
    delete_run,
    get_run,
    join_run,
    join_stream,
    list_runs,
)
from fastcrag.server.limits import ServeSettings
from fastcrag.server.runs import run_stream, run_wait
from fastcrag.server.service import Service, configured_secrets, start_service, startup_reason
from fastcrag.server.state import get_thread_state, post_thread_state, thread_history, update_thread_state
from fastcrag.server.threads import (
    copy_thread,
    count_threads,
    create_thread,
    delete_thread,
    get_thread,
    search_threads,
    update_thread,
)
from fastcrag.server.wire import Guard, OrjsonResponse, http_error

log = logging.getLogger("fastcrag.server")

StartService = Callable[[AsyncExitStack], Awaitable[Service]]


async def ok(request: Request) -> Response:
    """Liveness."""
    return OrjsonResponse({"ok": True})


async def info(request: Request) -> Response:
    """What serves here (the SDK and Studio read `/info`)."""
    return OrjsonResponse({"version": version("fastcrag"), "flags": {"assistants": True, "crons": False}})


#: The server API's routes that fastcrag serve does not serve (docs/DEPLOY.md): each answers 501 naming itself.
NOT_SERVED: dict[str, tuple[str, ...]] = {
    "/runs": ("POST",),
    "/runs/batch": ("POST",),
    "/runs/crons": ("POST",),
    "/runs/crons/search": ("POST",),
    "/runs/crons/count": ("POST",),
    "/runs/crons/{cron_id}": ("PATCH", "DELETE"),
    "/threads/prune": ("POST",),
    "/assistants": ("POST",),
    "/assistants/{assistant_id}": ("PATCH", "DELETE"),
    "/assistants/{assistant_id}/versions": ("POST",),
    "/assistants/{assistant_id}/latest": ("POST",),
    "/store/items": ("GET", "PUT", "DELETE"),
    "/store/items/search": ("POST",),
    "/store/namespaces": ("POST",),
}


async def not_served(request: Request) -> Response:
    """501 for a route of the server API that fastcrag serve deliberately does not serve."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    raise HTTPException(501, f"{request.method} {path} is not served by fastcrag serve (see docs/DEPLOY.md)")


def routes() -> list[Route]:
    """The API's routes; `/metrics` and the console are the console app's handlers (multiprocess-aware metrics)."""
    return [
        Route("/ok", ok, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
        Route("/assistants/search", search_assistants, methods=["POST"]),
        Route("/assistants/count", count_assistants, methods=["POST"]),
        Route("/assistants/{assistant_id}/subgraphs", assistant_subgraphs, methods=["GET"]),
        Route("/assistants/{assistant_id}/subgraphs/{namespace}", assistant_subgraphs, methods=["GET"]),
        Route("/assistants/{assistant_id}", get_assistant, methods=["GET"]),
        Route("/assistants/{assistant_id}/schemas", assistant_schemas, methods=["GET"]),
        Route("/assistants/{assistant_id}/graph", assistant_graph, methods=["GET"]),
        Route("/threads", create_thread, methods=["POST"]),
        Route("/threads/search", search_threads, methods=["POST"]),
        Route("/threads/count", count_threads, methods=["POST"]),
        Route("/threads/{thread_id}", get_thread, methods=["GET"]),
        Route("/threads/{thread_id}", update_thread, methods=["PATCH"]),
        Route("/threads/{thread_id}", delete_thread, methods=["DELETE"]),
        Route("/threads/{thread_id}/copy", copy_thread, methods=["POST"]),
        Route("/threads/{thread_id}/history", thread_history, methods=["GET", "POST"]),
        Route("/threads/{thread_id}/state", get_thread_state, methods=["GET"]),
        Route("/threads/{thread_id}/state", update_thread_state, methods=["POST"]),
        Route("/threads/{thread_id}/state/checkpoint", post_thread_state, methods=["POST"]),
        Route("/threads/{thread_id}/state/{checkpoint_id}", get_thread_state, methods=["GET"]),
        Route("/threads/{thread_id}/runs", create_run, methods=["POST"]),
        Route("/threads/{thread_id}/runs", list_runs, methods=["GET"]),
        Route("/threads/{thread_id}/runs/wait", run_wait, methods=["POST"]),
        Route("/threads/{thread_id}/runs/stream", run_stream, methods=["POST"]),
        Route("/threads/{thread_id}/runs/crons", not_served, methods=["POST"]),
        Route("/threads/{thread_id}/runs/{run_id}", get_run, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}", delete_run, methods=["DELETE"]),
        Route("/threads/{thread_id}/runs/{run_id}/join", join_run, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}/stream", join_stream, methods=["GET"]),
        Route("/threads/{thread_id}/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
        Route("/runs/wait", run_wait, methods=["POST"]),
        Route("/runs/stream", run_stream, methods=["POST"]),
        Route("/metrics", console.metrics, methods=["GET"]),
        Route("/console", console.console, methods=["GET"]),
        Route("/console/", console.console, methods=["GET"]),
        Route("/console/{asset}", console.console_asset, methods=["GET"]),
        *(Route(path, not_served, methods=list(methods)) for path, methods in NOT_SERVED.items()),
    ]


class Server:
    """The ASGI app: its own lifespan (startup errors as one clear line, never a traceback), then `Guard`."""

    def __init__(
        self,
        start: StartService | None = None,
        key: str | None = None,
        origins: list[str] | None = None,
        access: Access | None = None,
    ) -> None:
        """Serve the service `start` builds (default: from the `FASTRAG_*` environment).

        Requests are guarded by `access` (an `Auth` object's handlers), or else by `key`. Browser pages from
        `origins` may call it (CORS; `*` for any).
        """
        self.start: StartService = start or start_service
        router = Starlette(routes=routes(), exception_handlers={HTTPException: http_error})
        self.app: ASGIApp = Guard(router, key, access)
        if origins:
            self.app = CORSMiddleware(
                self.app,
                allow_origins=origins,
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["Content-Location", "Location"],
                max_age=600,
            )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle the lifespan here; pass requests through the guard."""
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        stack = AsyncExitStack()
        try:
            service = await self.start(stack)
        except Exception as exc:
            with contextlib.suppress(Exception):
                await stack.aclose()
            reason = startup_reason(exc)
            await send({"type": "lifespan.startup.failed", "message": f"fastcrag serve: cannot start: {reason}"})
            return
        try:
            await service.queue.setup()
        except Exception as exc:
            with contextlib.suppress(Exception):
                await stack.aclose()
            await send({"type": "lifespan.startup.failed", "message": f"fastcrag serve: {service.reason(exc)}"})
            return
        runner = Runner(service)
        task = asyncio.create_task(runner.run_forever())
        stack.push_async_callback(runner.stop)
        stack.push_async_callback(_cancel, task)
        if "state" in scope:
            scope["state"]["service"] = service
        checkpoints = describe(service.settings.checkpoints)
        log.info("worker %d ready: graph %s, checkpoints %s", os.getpid(), GRAPH_ID, checkpoints)
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await stack.aclose()
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": f"fastcrag serve: {service.reason(exc)}"})
            return
        await send({"type": "lifespan.shutdown.complete"})


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        await task


def create_app(start: StartService | None = None, settings: Settings | None = None) -> Server:
    """The app uvicorn runs in each worker (`fastcrag.server.app:create_app`, factory mode).

    Args:
        start: Builds the worker's `Service` (tests inject one); the default reads the `FASTRAG_*` environment.
        settings: Settings for the key check; read from the environment when None.

    Raises:
        AuthLoadError: `FASTRAG_AUTH` names no usable `Auth` object (`serve` checks it before any worker starts).
    """
    settings = settings or Settings()
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    serve = ServeSettings()
    access = Access(load_auth(serve.auth), configured_secrets(settings)) if serve.auth else None
    return Server(start, key or None, serve.origins(), access)
