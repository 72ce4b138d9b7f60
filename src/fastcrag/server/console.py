"""The custom HTTP app that `langgraph dev` mounts beside its API (langgraph.json `http.app`): console and metrics.

Routes:
    GET /console: the decision-trace console (plain HTML + JS, no build step, no CDN); it calls the server's own
        `POST /runs/wait` on the `crag` assistant.
    GET /console/{asset}: the console's script and stylesheet.
    GET /metrics: Prometheus text (`crag_actions`, `fastcrag_stage_seconds`). Under `langgraph dev` the server's
        own `/metrics` route comes first; it serves the same global prometheus-client registry, so the fastcrag
        series appear there too. This route answers when the app runs on its own
        (`uvicorn fastcrag.server.console:app`).
    GET /fastcrag/metrics: the same text, under a path the LangGraph server never claims.
    With `PROMETHEUS_MULTIPROC_DIR` set (`fastcrag serve --workers K` sets it), both routes sum every worker's
    series (prometheus-client's multiprocess collector) instead of reading this process's registry.
    GET /fastcrag/health: `{"status": "ok"}` (the app's own readiness probe).

Every handler is async and does no blocking I/O: the page assets are read once, at import.
"""

from __future__ import annotations

import os
from importlib import resources

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

import fastcrag.metrics  # noqa: F401  (registers the fastcrag series with the global registry)

ASSETS: dict[str, tuple[str, str]] = {
    "console.js": ("text/javascript; charset=utf-8", "console.js"),
    "console.css": ("text/css; charset=utf-8", "console.css"),
}


def _read_web(name: str) -> str:
    """The text of one packaged console file."""
    return resources.files("fastcrag.web").joinpath(name).read_text(encoding="utf-8")


INDEX_HTML = _read_web("index.html")
ASSET_TEXT = {name: _read_web(file) for name, (_, file) in ASSETS.items()}


async def console(request: Request) -> HTMLResponse:
    """The console page."""
    return HTMLResponse(INDEX_HTML, headers={"Cache-Control": "no-store"})


async def console_asset(request: Request) -> Response:
    """One of the console's static files (a fixed allow-list, never a path on disk)."""
    name = str(request.path_params["asset"])
    if name not in ASSETS:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response(ASSET_TEXT[name], media_type=ASSETS[name][0], headers={"Cache-Control": "no-store"})


def registry() -> CollectorRegistry:
    """The registry to expose: every worker's series in multiprocess mode, else this process's global registry."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    return merged


async def metrics(request: Request) -> Response:
    """Prometheus exposition of the global registry (fastcrag's series included)."""
    return Response(generate_latest(registry()), media_type=CONTENT_TYPE_LATEST)


async def health(request: Request) -> JSONResponse:
    """Readiness of the custom app."""
    return JSONResponse({"status": "ok"})


def create_app() -> Starlette:
    """Build the Starlette app (one per server)."""
    return Starlette(
        routes=[
            Route("/console", console, methods=["GET"]),
            Route("/console/", console, methods=["GET"]),
            Route("/console/{asset}", console_asset, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/fastcrag/metrics", metrics, methods=["GET"]),
            Route("/fastcrag/health", health, methods=["GET"]),
        ]
    )


app = create_app()
