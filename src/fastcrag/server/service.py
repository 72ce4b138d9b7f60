"""What one `fastcrag serve` worker serves: the parts, the graphs over them, the thread records and the limits.

Each uvicorn worker builds its `Service` once at startup (`start_service`): it opens the checkpointer from
`open_checkpointer(Settings())`, loads and warms up the parts (`Components`) in a thread, and compiles the graph
over them twice, with the checkpointer (runs on a thread) and without (runs without one, which write no
checkpoint). Workers hold no state of their own: a thread's history lives in the checkpointer and its record in a
`fastcrag_threads` table beside it, so any worker continues any thread.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from fastcrag.components import Components
from fastcrag.config.settings import Settings, redact_url, url_passwords
from fastcrag.graph.builder import build_graph
from fastcrag.graph.checkpoints import open_checkpointer
from fastcrag.server.limits import ServeSettings
from fastcrag.server.queue import RunQueue
from fastcrag.server.records import ThreadRecords, thread_records


@dataclass
class Service:
    """What one worker serves: the parts, the graph (with its checkpointer), a checkpoint-less twin, the limits."""

    parts: Components
    graph: Any
    stateless: Any
    saver: Any
    threads: ThreadRecords
    limits: ServeSettings
    secrets: list[str] = field(init=False)
    queue: RunQueue = field(init=False)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        """Collect the secrets that responses and logs must never carry; queue background runs beside the threads."""
        self.secrets = configured_secrets(self.settings)
        self.queue = RunQueue(self.threads)

    @property
    def settings(self) -> Settings:
        """The settings the parts were built from."""
        return self.parts.settings

    def redact(self, text: str) -> str:
        """`text` with every configured secret (URLs, their passwords, the key) and URL password replaced."""
        return redacted(text, self.secrets)

    def scrub(self, body: bytes) -> bytes:
        """A serialized run output with the configured secrets replaced (node failures quote their exceptions).

        Secrets shorter than 8 characters are left alone here: replacing them would corrupt ordinary answers.
        """
        for secret in self.secrets:
            if len(secret) >= 8:
                body = body.replace(secret.encode(), b"***")
        return body

    def reason(self, exc: BaseException) -> str:
        """One redacted line naming an exception."""
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return self.redact(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)


def redacted(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` and any URL password replaced."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return redact_url(text)


def configured_secrets(settings: Settings) -> list[str]:
    """The database URLs, their passwords and the API key that `settings` hold, longest first."""
    found: list[str] = []
    for url in (settings.checkpoints, settings.store):
        if not url:
            continue
        found += [url, *url_passwords(url)]
    if settings.api_key is not None and settings.api_key.get_secret_value():
        found.append(settings.api_key.get_secret_value())
    return sorted(found, key=len, reverse=True)  # longest first: a URL before the password inside it


async def start_service(stack: AsyncExitStack, settings: Settings | None = None) -> Service:
    """Open the checkpointer, load and warm up the parts, build the graphs, set up the thread records.

    Args:
        stack: Closes the checkpointer when the worker stops.
        settings: Settings; read from the environment when None.

    Raises:
        Exception: the checkpointer, a model, the index or the calibration could not be loaded.
    """
    settings = settings or Settings()
    limits = ServeSettings()
    saver = await stack.enter_async_context(open_checkpointer(settings))
    parts = Components(settings)
    await asyncio.to_thread(parts.warm_up)
    graph = build_graph(parts=parts, checkpointer=saver)
    stateless = build_graph(parts=parts)  # runs without a thread write no checkpoint
    threads = thread_records(saver)
    await threads.setup()
    return Service(parts, graph, stateless, saver, threads, limits)


def startup_reason(exc: BaseException) -> str:
    """One redacted line for a startup failure (the checkpointer already redacts its own messages)."""
    try:
        secrets = configured_secrets(Settings())
    except Exception:
        secrets = []
    text = (str(exc).strip().splitlines() or [""])[0][:400]
    kind = type(exc).__name__
    own = kind in ("CheckpointsError", "CalibrationError", "IndexLoadError")  # their messages name the cause
    return redacted(text if own else f"{kind}: {text}", secrets)


def service_of(request: Request) -> Service:
    """The worker's service, which the lifespan put in the request's state.

    Raises:
        HTTPException: 503 while the worker is still starting.
    """
    service = getattr(request.state, "service", None)
    if not isinstance(service, Service):
        raise HTTPException(503, "the server is starting")
    return service
