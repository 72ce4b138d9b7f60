"""The production HTTP server behind `fastcrag serve`: a thin Starlette app over the compiled graph.

Each uvicorn worker builds the graph once (`build_graph(checkpointer=...)`, the checkpointer from
`open_checkpointer(Settings())`), warms its models up in a thread, and then answers the subset of the LangGraph
server API that `langgraph_sdk` (`get_client` / `get_sync_client`) and `langgraph.pregel.remote.RemoteGraph` use,
so both work unchanged:

    GET  /ok                                       liveness (never needs the key)
    POST /assistants/search                        the one assistant, `crag` (graph id) = ASSISTANT_ID
    GET  /assistants/{id}  /assistants/{id}/schemas  /assistants/{id}/graph
    POST /threads                                  create a thread (recorded beside the checkpoints)
    GET  /threads/{id}  /threads/{id}/state  /threads/{id}/state/{checkpoint_id}
    POST /threads/{id}/state/checkpoint            the state at a given checkpoint (RemoteGraph.get_state)
    POST /runs/wait  /runs/stream                  a run without a thread (no checkpoint is written)
    POST /threads/{id}/runs/wait  /threads/{id}/runs/stream   a run on a thread (history in the checkpointer)
    GET  /metrics                                  Prometheus, summed over every worker (multiprocess mode)
    GET  /console  /console/{asset}                the decision-trace console (static files, no data)

Workers hold no state of their own: a thread's history lives in the checkpointer (Postgres for several workers or
machines, a SQLite file for one machine) and its record in a `fastcrag_threads` table in the same database, so any
worker continues any thread. Runs use the graph's async API (`ainvoke` / `astream`), which runs the synchronous
nodes in threads: the event loop never blocks on a model.

Guards: with `FASTRAG_API_KEY` set, every route but `/ok` and the console's static files needs
`Authorization: Bearer <key>` or `x-api-key: <key>` (compared with `hmac.compare_digest`; 401 otherwise, before any
body is read or any run starts). Request bodies are capped (`FASTRAG_MAX_BODY_BYTES`, 413). A run is capped by
`FASTRAG_RUN_TIMEOUT_S`; a run that times out, or whose checkpointer or store fails (a Postgres that went away), ends
in the graph's abstention shape (`answer` = the abstain message, `citations` [], `crag.action` "abstain",
`crag.failure` the reason with every URL password and key redacted) and the worker keeps serving. No response, log
line or metric carries a traceback, a database password or the key.

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
import hmac
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastcrag.config.settings import Context, Settings, redact_url, url_passwords
from fastcrag.server import app as console_app

log = logging.getLogger("fastcrag.server")

GRAPH_ID = "crag"
#: The assistant's id: the same uuid5 the LangGraph server derives from the graph id, so ids match `langgraph dev`.
ASSISTANT_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), GRAPH_ID))
#: Paths anyone may fetch: liveness and the console's packaged static files (they carry no data; the console
#: sends the key with each API call it makes).
OPEN_PATHS = frozenset({"/ok", "/console", "/console/", *(f"/console/{name}" for name in console_app.ASSETS)})
THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
CONTEXT: TypeAdapter[Context] = TypeAdapter(Context)
STREAM_MODES = {"values": "values", "updates": "updates", "custom": "custom", "debug": "debug"}
STREAM_MODES |= {"messages": "messages", "messages-tuple": "messages"}


class ServeSettings(BaseSettings):
    """The server's own limits, from `FASTRAG_*` environment variables (`fastcrag serve` flags set them)."""

    model_config = SettingsConfigDict(env_prefix="FASTRAG_", extra="ignore")

    run_timeout_s: float = Field(
        300.0, gt=0, description="A run still going after this many seconds ends in an abstention saying so."
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Larger request bodies are refused with 413.")


class _Failure(Exception):
    """A run that could not finish; `reason` is safe to show (redacted)."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass
class Service:
    """What one worker serves: the graph (with its checkpointer), a checkpoint-less twin, and the limits."""

    graph: Any
    stateless: Any
    saver: Any
    threads: Any
    settings: Settings
    limits: ServeSettings
    secrets: list[str] = field(default_factory=list)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))

    def redact(self, text: str) -> str:
        """`text` with every configured secret (URLs, their passwords, the key) and URL password replaced."""
        return _redacted(text, self.secrets)

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


def _redacted(text: str, secrets: list[str]) -> str:
    """`text` with each of `secrets` and any URL password replaced."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return redact_url(text)


def _secrets(settings: Settings) -> list[str]:
    found: list[str] = []
    for url in (settings.checkpoints, settings.store):
        if not url:
            continue
        found += [url, *url_passwords(url)]
    if settings.api_key is not None and settings.api_key.get_secret_value():
        found.append(settings.api_key.get_secret_value())
    return sorted(found, key=len, reverse=True)  # longest first: a URL before the password inside it


async def start_service(stack: AsyncExitStack, settings: Settings | None = None) -> Service:
    """Open the checkpointer, build and warm up the graph, and set up the thread records (one worker's startup).

    Raises:
        Exception: the checkpointer, a model, the index or the calibration could not be loaded.
    """
    from fastcrag.graph.builder import build_graph
    from fastcrag.graph.checkpoints import open_checkpointer
    from fastcrag.server.threads import thread_records

    settings = settings or Settings()
    limits = ServeSettings()
    saver = await stack.enter_async_context(open_checkpointer(settings))
    graph = build_graph(settings=settings, checkpointer=saver)
    parts = graph.parts  # type: ignore[attr-defined]
    await asyncio.to_thread(parts.warm_up)
    # Runs without a thread write no checkpoint: a twin graph over the same, already loaded parts.
    stateless = build_graph(
        retriever=parts.retriever(),
        reranker=parts.reranker(),
        llm=parts.generator(),
        calibration=parts.calibration(),
        settings=settings,
    )
    threads = thread_records(saver)
    await threads.setup()
    return Service(graph, stateless, saver, threads, settings, limits, _secrets(settings))


# ---------------------------------------------------------------------------------------------- JSON and errors


def _default(obj: Any) -> Any:
    """JSON for what orjson does not know: pydantic models (LangChain messages), named tuples, sets, exceptions."""
    if hasattr(obj, "model_dump") and not isinstance(obj, type):
        return obj.model_dump()
    if hasattr(obj, "_asdict") and not isinstance(obj, type):
        return obj._asdict()
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, BaseException):
        return {"error": type(obj).__name__}
    return str(obj)


def dumps(value: Any) -> bytes:
    """Serialize a response value (orjson, LangChain messages as their dicts)."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)


class OrjsonResponse(JSONResponse):
    """A JSON response rendered with `dumps`."""

    def render(self, content: Any) -> bytes:
        """Encode the body."""
        return dumps(content)


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> Response:
    return OrjsonResponse({"detail": detail}, status_code=status, headers=headers)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object, read up to `limit` bytes.

    Raises:
        HTTPException: 413 for a larger body, 422 for a body that is not a JSON object.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body larger than {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body larger than {limit} bytes")
    if not body.strip():
        return {}
    try:
        value = orjson.loads(bytes(body))
    except orjson.JSONDecodeError:
        raise HTTPException(422, "the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise HTTPException(422, "the request body must be a JSON object")
    return value


class Guard:
    """Outermost ASGI layer: the API key check, and no traceback ever reaching a client or the log."""

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        """Wrap `app`; `key` None or empty means no key is required (loopback only, enforced by `serve`)."""
        self.app = app
        self.key = key.encode() if key else None

    def _authorized(self, scope: Scope) -> bool:
        if self.key is None or scope["path"] in OPEN_PATHS:
            return True
        given: bytes | None = None
        for name, value in scope.get("headers", []):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                given = value[7:].strip()
            elif name == b"x-api-key" and given is None:
                given = value.strip()
        return given is not None and hmac.compare_digest(given, self.key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the key, then run the app; an unexpected error becomes a 500 with one redacted log line."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            response = _error(
                401, "missing or wrong API key: send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
            )
            await response(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            service = scope.get("state", {}).get("service")
            reason = service.reason(exc) if isinstance(service, Service) else type(exc).__name__
            log.error("%s %s failed: %s", scope.get("method"), scope.get("path"), reason)
            if not started:
                await _error(500, f"internal error: {reason}")(scope, receive, send)


# ---------------------------------------------------------------------------------------------- assistants


def _assistant(service: Service) -> dict[str, Any]:
    created = service.started.isoformat()
    return {
        "assistant_id": ASSISTANT_ID,
        "graph_id": GRAPH_ID,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "name": GRAPH_ID,
        "description": "Corrective RAG: retrieve, grade, then generate, refine, rewrite or abstain",
        "version": 1,
        "created_at": created,
        "updated_at": created,
    }


def _service(request: Request) -> Service:
    service = getattr(request.state, "service", None)
    if not isinstance(service, Service):
        raise HTTPException(503, "the server is starting")
    return service


def _check_assistant(assistant_id: Any) -> None:
    if assistant_id not in (GRAPH_ID, ASSISTANT_ID):
        raise HTTPException(404, f"assistant {str(assistant_id)[:80]!r} not found (this server has `{GRAPH_ID}`)")


async def ok(request: Request) -> Response:
    """Liveness."""
    return OrjsonResponse({"ok": True})


async def info(request: Request) -> Response:
    """What serves here (the SDK and Studio read `/info`)."""
    from importlib.metadata import version

    return OrjsonResponse({"version": version("fastcrag"), "flags": {"assistants": True, "crons": False}})


async def search_assistants(request: Request) -> Response:
    """`POST /assistants/search`: the one assistant when it matches the filters."""
    service = _service(request)
    body = await read_json(request, service.limits.max_body_bytes)
    found = [_assistant(service)]
    graph_id, name, metadata = body.get("graph_id"), body.get("name"), body.get("metadata") or {}
    if graph_id not in (None, GRAPH_ID) or (name is not None and str(name) not in GRAPH_ID):
        found = []
    if not isinstance(metadata, dict) or any(found[0]["metadata"].get(k) != v for k, v in metadata.items()):
        found = []
    offset, limit = _int(body.get("offset"), 0), _int(body.get("limit"), 10)
    return OrjsonResponse(found[offset : offset + limit])


def _int(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HTTPException(422, "limit and offset must be non-negative integers")
    return value


async def get_assistant(request: Request) -> Response:
    """`GET /assistants/{id}`."""
    service = _service(request)
    _check_assistant(request.path_params["assistant_id"])
    return OrjsonResponse(_assistant(service))


async def assistant_schemas(request: Request) -> Response:
    """`GET /assistants/{id}/schemas`: input, output, state and context JSON schemas."""
    service = _service(request)
    _check_assistant(request.path_params["assistant_id"])
    graph = service.graph
    state_schema = {
        "title": "State",
        "type": "object",
        "properties": {name: {} for name in graph.stream_channels_list},
    }
    return OrjsonResponse(
        {
            "graph_id": GRAPH_ID,
            "input_schema": graph.get_input_jsonschema(),
            "output_schema": graph.get_output_jsonschema(),
            "state_schema": state_schema,
            "config_schema": {},
            "context_schema": graph.get_context_jsonschema(),
        }
    )


async def assistant_graph(request: Request) -> Response:
    """`GET /assistants/{id}/graph`: the drawable graph (RemoteGraph.get_graph)."""
    service = _service(request)
    _check_assistant(request.path_params["assistant_id"])
    drawn = service.graph.get_graph().to_json()
    for node in drawn.get("nodes", []):
        if isinstance(node.get("data"), dict):
            node["data"].pop("id", None)
    return OrjsonResponse(drawn)


# ---------------------------------------------------------------------------------------------- threads


def _thread_id(value: Any) -> str:
    text = str(value)
    if not THREAD_ID.match(text):
        raise HTTPException(422, "a thread id is 1-128 letters, digits and `_.:@-`, starting with a letter or digit")
    return text


def _checkpoint_ref(config: Any) -> dict[str, Any] | None:
    conf = (config or {}).get("configurable") or {}
    if not conf.get("thread_id") or not conf.get("checkpoint_id"):
        return None
    return {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf.get("checkpoint_ns") or "",
        "checkpoint_id": conf["checkpoint_id"],
        "checkpoint_map": conf.get("checkpoint_map"),
    }


def _thread_state(snapshot: Any, thread_id: str) -> dict[str, Any]:
    """A LangGraph `StateSnapshot` in the server API's ThreadState shape."""
    return {
        "values": snapshot.values or {},
        "next": list(snapshot.next),
        "tasks": [
            {
                "id": t.id,
                "name": t.name,
                "path": list(t.path),
                "error": None if t.error is None else type(t.error).__name__,
                "interrupts": [{"id": i.id, "value": i.value} for i in t.interrupts],
                "checkpoint": None,
                "state": None,
                "result": getattr(t, "result", None),
            }
            for t in snapshot.tasks
        ],
        "metadata": snapshot.metadata or {},
        "created_at": snapshot.created_at,
        "checkpoint": _checkpoint_ref(snapshot.config)
        or {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": None, "checkpoint_map": None},
        "parent_checkpoint": _checkpoint_ref(snapshot.parent_config),
        "interrupts": [{"id": i.id, "value": i.value} for i in getattr(snapshot, "interrupts", ())],
        "checkpoint_id": (snapshot.config or {}).get("configurable", {}).get("checkpoint_id"),
        "parent_checkpoint_id": (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
    }


async def _store_call(service: Service, what: str, call: Awaitable[Any]) -> Any:
    """Await a thread-record or checkpoint call; a database failure becomes a redacted 503."""
    try:
        return await call
    except HTTPException:
        raise
    except Exception as exc:
        reason = service.reason(exc)
        log.warning("%s failed: %s", what, reason)
        raise HTTPException(503, f"{what} failed: {reason}") from None


async def _thread_known(service: Service, thread_id: str) -> Any:
    """The thread's record, True for a thread known only by its checkpoints, or None (database errors raise)."""
    record = await service.threads.get(thread_id)
    if record is not None:
        return record
    found = await service.saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    return True if found is not None else None


async def _thread_exists(service: Service, thread_id: str) -> Any:
    """`_thread_known`, with a database failure as a redacted 503."""
    return await _store_call(service, "reading the thread", _thread_known(service, thread_id))


def _thread_json(record: Any, thread_id: str, values: dict[str, Any]) -> dict[str, Any]:
    if record is True or record is None:
        now = datetime.now(UTC).isoformat()
        created, updated, metadata = now, now, {}
    else:
        created, updated, metadata = record.created_at.isoformat(), record.updated_at.isoformat(), record.metadata
    return {
        "thread_id": thread_id,
        "created_at": created,
        "updated_at": updated,
        "metadata": metadata,
        "status": "idle",
        "values": values,
        "interrupts": {},
        "config": {},
    }


async def create_thread(request: Request) -> Response:
    """`POST /threads`: record a thread (`thread_id` optional; `if_exists` raise or do_nothing)."""
    service = _service(request)
    body = await read_json(request, service.limits.max_body_bytes)
    thread_id = _thread_id(body.get("thread_id") or uuid.uuid4())
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise HTTPException(422, "metadata must be a JSON object")
    if body.get("supersteps"):
        raise HTTPException(422, "supersteps are not supported by fastcrag serve")
    if_exists = body.get("if_exists") or "raise"
    if if_exists not in ("raise", "do_nothing"):
        raise HTTPException(422, "if_exists must be `raise` or `do_nothing`")
    record = await _store_call(service, "creating the thread", service.threads.create(thread_id, metadata))
    if record is None:
        if if_exists == "raise":
            raise HTTPException(409, f"thread {thread_id} exists already")
        record = await _store_call(service, "reading the thread", service.threads.get(thread_id))
    return OrjsonResponse(_thread_json(record, thread_id, {}))


async def get_thread(request: Request) -> Response:
    """`GET /threads/{id}`: the record and the latest values."""
    service = _service(request)
    thread_id = _thread_id(request.path_params["thread_id"])
    record = await _thread_exists(service, thread_id)
    if record is None:
        raise HTTPException(404, f"thread {thread_id} not found")
    snapshot = await _store_call(
        service, "reading the checkpoints", service.graph.aget_state({"configurable": {"thread_id": thread_id}})
    )
    return OrjsonResponse(_thread_json(record, thread_id, snapshot.values or {}))


async def _state_at(request: Request, checkpoint: dict[str, Any]) -> Response:
    service = _service(request)
    thread_id = _thread_id(request.path_params["thread_id"])
    if await _thread_exists(service, thread_id) is None:
        raise HTTPException(404, f"thread {thread_id} not found")
    configurable: dict[str, Any] = {"thread_id": thread_id}
    for name in ("checkpoint_ns", "checkpoint_id"):
        value = checkpoint.get(name)
        if value is not None and not isinstance(value, str):
            raise HTTPException(422, f"{name} must be a string")
        if value:
            configurable[name] = value
    snapshot = await _store_call(
        service, "reading the checkpoints", service.graph.aget_state({"configurable": configurable})
    )
    if configurable.get("checkpoint_id") and _checkpoint_ref(snapshot.config) is None:
        raise HTTPException(404, f"checkpoint {configurable['checkpoint_id']} not found on thread {thread_id}")
    return OrjsonResponse(_thread_state(snapshot, thread_id))


async def get_thread_state(request: Request) -> Response:
    """`GET /threads/{id}/state` (the latest checkpoint) and `/threads/{id}/state/{checkpoint_id}`, as ThreadState."""
    return await _state_at(request, {"checkpoint_id": request.path_params.get("checkpoint_id")})


async def post_thread_state(request: Request) -> Response:
    """`POST /threads/{id}/state/checkpoint`: the state at `{"checkpoint": {checkpoint_id, checkpoint_ns}}`."""
    service = _service(request)
    body = await read_json(request, service.limits.max_body_bytes)
    checkpoint = body.get("checkpoint") or {}
    if not isinstance(checkpoint, dict):
        raise HTTPException(422, "checkpoint must be a JSON object")
    return await _state_at(request, checkpoint)


# ---------------------------------------------------------------------------------------------- runs


@dataclass
class RunPlan:
    """One validated run request."""

    run_id: str
    thread_id: str | None
    create_thread: bool
    input: dict[str, Any]
    context: Context
    config: dict[str, Any]
    stream_modes: list[str]
    multitask: str = "reject"


MULTITASK = ("reject", "enqueue")
"""What a run does when its thread has a run in flight: fail with 409 (LangGraph's default), or wait its turn."""
LEASE_POLL_S = 0.05
LEASE_GRACE_S = 5.0
"""A lease outlives the run timeout by this much: a worker that died mid-run frees its thread after it."""

UNSUPPORTED = ("command", "interrupt_before", "interrupt_after", "checkpoint", "checkpoint_id", "webhook")


def _context(value: Any) -> Context:
    if value is None:
        return Context()
    if not isinstance(value, dict):
        raise HTTPException(422, "context must be a JSON object")
    known = {f.name for f in fields(Context)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise HTTPException(422, f"unknown context keys {unknown}; known: {sorted(known)}")
    try:
        return CONTEXT.validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise HTTPException(422, f"invalid context: {problems}") from None


def _input(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HTTPException(422, "input must be a JSON object: {question} or {messages}")
    unknown = sorted(set(value) - {"question", "messages"})
    if unknown:
        raise HTTPException(422, f"unknown input keys {unknown}; the input schema is {{question, messages}}")
    if "question" in value and not isinstance(value["question"], str):
        raise HTTPException(422, "input.question must be a string")
    if "messages" in value:
        from langchain_core.messages import convert_to_messages

        if not isinstance(value["messages"], list):
            raise HTTPException(422, "input.messages must be a list")
        try:
            return {**value, "messages": convert_to_messages(value["messages"])}
        except Exception as exc:
            raise HTTPException(422, f"input.messages: {type(exc).__name__}: {str(exc)[:200]}") from None
    return dict(value)


def _stream_modes(value: Any) -> list[str]:
    modes = [value] if isinstance(value, str) else list(value or ["values"])
    unknown = [m for m in modes if m not in STREAM_MODES]
    if unknown:
        raise HTTPException(422, f"unsupported stream_mode {unknown}; supported: {sorted(STREAM_MODES)}")
    return list(dict.fromkeys(modes))


def _run_config(value: Any, thread_id: str | None, run_id: str) -> dict[str, Any]:
    given = value if isinstance(value, dict) else {}
    config: dict[str, Any] = {"run_id": uuid.UUID(run_id), "metadata": {"run_id": run_id}}
    if isinstance(given.get("recursion_limit"), int) and not isinstance(given["recursion_limit"], bool):
        config["recursion_limit"] = max(1, min(int(given["recursion_limit"]), 100))
    if isinstance(given.get("tags"), list):
        config["tags"] = [t for t in given["tags"] if isinstance(t, str)][:20]
    if thread_id is not None:
        config["configurable"] = {"thread_id": thread_id}
        config["metadata"]["thread_id"] = thread_id
    return config


async def _plan(request: Request, service: Service, thread_id: str | None) -> RunPlan:
    body = await read_json(request, service.limits.max_body_bytes)
    _check_assistant(body.get("assistant_id"))
    for name in UNSUPPORTED:
        if body.get(name):
            raise HTTPException(422, f"`{name}` is not supported by fastcrag serve (the graph never interrupts)")
    if body.get("after_seconds"):
        raise HTTPException(422, "`after_seconds` is not supported: runs start at once")
    if_not_exists = body.get("if_not_exists") or "reject"
    if if_not_exists not in ("reject", "create"):
        raise HTTPException(422, "if_not_exists must be `reject` or `create`")
    multitask = body.get("multitask_strategy") or "reject"
    if multitask not in MULTITASK:
        raise HTTPException(
            422, f"multitask_strategy must be one of {', '.join(MULTITASK)} (the graph's runs are never interrupted)"
        )
    run_id = str(uuid.uuid4())
    return RunPlan(
        run_id=run_id,
        thread_id=thread_id,
        create_thread=if_not_exists == "create",
        input=_input(body.get("input")),
        context=_context(body.get("context")),
        config=_run_config(body.get("config"), thread_id, run_id),
        stream_modes=_stream_modes(body.get("stream_mode")),
        multitask=multitask,
    )


def failure_output(service: Service, plan: RunPlan, reason: str) -> dict[str, Any]:
    """The graph's abstention shape for a run that could not finish; counted like any abstention."""
    from langchain_core.messages import AIMessage

    from fastcrag import metrics
    from fastcrag.graph.state import trace
    from fastcrag.nodes.generate import trace_extra

    parts = service.graph.parts
    try:
        cfg = parts.run_config(plan.context)
    except Exception:
        cfg = None
    message = cfg.abstain_message if cfg else service.settings.abstain_message
    metrics.record("abstain", {})
    out: dict[str, Any] = {
        "answer": message,
        "citations": [],
        "crag": trace({"failure": reason}, "abstain", {}, trace_extra(parts, cfg)),
    }
    if plan.input.get("messages"):
        out["messages"] = [*plan.input["messages"], AIMessage(content=message)]
    return out


def _failure(service: Service, plan: RunPlan, exc: BaseException) -> _Failure:
    from fastcrag import metrics

    if isinstance(exc, TimeoutError):
        limit = service.limits.run_timeout_s
        failure = _Failure(f"the run took longer than {limit:g} s (FASTRAG_RUN_TIMEOUT_S)", "timeout")
    else:
        failure = _Failure(f"the run failed: {service.reason(exc)}", "error")
    metrics.RUN_FAILURES.labels(reason=failure.kind).inc()
    where = f" on thread {plan.thread_id}" if plan.thread_id else ""
    log.warning("run %s%s ended in an abstention: %s", plan.run_id, where, failure.reason)
    return failure


async def _ensure_thread(service: Service, plan: RunPlan) -> None:
    """Check (or create) the run's thread.

    Raises:
        HTTPException: 404 for an unknown thread without `if_not_exists=create`.
        Exception: the database failed (the caller turns it into an abstention).
    """
    if plan.thread_id is None or await _thread_known(service, plan.thread_id) is not None:
        return
    if not plan.create_thread:
        raise HTTPException(404, f"thread {plan.thread_id} not found (send if_not_exists=create to create it)")
    await service.threads.create(plan.thread_id, {})


async def _claim(service: Service, plan: RunPlan) -> None:
    """Take the thread's run lease, so that runs on one thread never overlap, across every worker.

    `enqueue` waits for the run in flight (the caller's timeout bounds the wait); `reject` fails at once.

    Raises:
        HTTPException: 409 when the thread is busy and the strategy is `reject`.
        Exception: the database failed (the caller turns it into an abstention).
    """
    if plan.thread_id is None:
        return
    lease_s = service.limits.run_timeout_s + LEASE_GRACE_S
    while not await service.threads.claim(plan.thread_id, plan.run_id, lease_s):
        if plan.multitask == "reject":
            raise HTTPException(
                409,
                f"thread {plan.thread_id} has a run in progress; retry later or send multitask_strategy=enqueue",
            )
        await asyncio.sleep(LEASE_POLL_S)


async def _release(service: Service, plan: RunPlan) -> None:
    if plan.thread_id is not None:
        try:
            await service.threads.release(plan.thread_id, plan.run_id)
        except Exception as exc:  # the lease expires by itself
            log.warning("releasing thread %s failed: %s", plan.thread_id, service.reason(exc))


def _graph_for(service: Service, plan: RunPlan) -> Any:
    return service.graph if plan.thread_id is not None else service.stateless


async def _touch(service: Service, plan: RunPlan) -> None:
    if plan.thread_id is not None:
        try:
            await service.threads.touch(plan.thread_id)
        except Exception as exc:  # the run itself succeeded; only the record's time is stale
            log.warning("updating thread %s failed: %s", plan.thread_id, service.reason(exc))


async def run_wait(request: Request) -> Response:
    """`POST /runs/wait` and `POST /threads/{id}/runs/wait`: run to the end and return the output values."""
    service = _service(request)
    thread_id = request.path_params.get("thread_id")
    plan = await _plan(request, service, None if thread_id is None else _thread_id(thread_id))
    graph = _graph_for(service, plan)
    claimed = False
    try:
        async with asyncio.timeout(service.limits.run_timeout_s):
            await _ensure_thread(service, plan)
            await _claim(service, plan)
            claimed = True
            output = await graph.ainvoke(plan.input, plan.config, context=plan.context)
    except HTTPException:
        raise
    except Exception as exc:
        output = failure_output(service, plan, _failure(service, plan, exc).reason)
    else:
        await _touch(service, plan)
    finally:
        if claimed:
            await _release(service, plan)
    return Response(service.scrub(dumps(output)), media_type="application/json")


def sse(event: str, data: Any, service: Service | None = None) -> bytes:
    """One server-sent event (its data scrubbed of secrets when `service` is given)."""
    body = dumps(data) if service is None else service.scrub(dumps(data))
    return b"event: " + event.encode() + b"\ndata: " + body + b"\n\n"


async def _produce(graph: Any, plan: RunPlan, queue: asyncio.Queue[Any]) -> None:
    modes = list(dict.fromkeys(STREAM_MODES[m] for m in plan.stream_modes))
    try:
        async for mode, chunk in graph.astream(plan.input, plan.config, context=plan.context, stream_mode=modes):
            await queue.put((mode, chunk))
    except Exception as exc:
        await queue.put(exc)
    else:
        await queue.put(None)


async def _events(service: Service, plan: RunPlan, failed: BaseException | None) -> AsyncIterator[bytes]:
    yield sse("metadata", {"run_id": plan.run_id, "attempt": 1})
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
    if failed is not None:  # the thread could not even be read: the run ends at once, in an abstention
        await queue.put(failed)
        producer = asyncio.create_task(asyncio.sleep(0))
    else:
        producer = asyncio.create_task(_produce(_graph_for(service, plan), plan, queue))
    deadline = time.monotonic() + service.limits.run_timeout_s
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError as exc:
                item = exc
            if item is None:
                await _touch(service, plan)
                return
            if isinstance(item, BaseException):
                output = failure_output(service, plan, _failure(service, plan, item).reason)
                if "values" in plan.stream_modes:
                    yield sse("values", output, service)
                if "updates" in plan.stream_modes:
                    yield sse("updates", {"abstain": output}, service)
                return
            mode, chunk = item
            yield sse(mode, list(chunk) if mode == "messages" else chunk, service)
    finally:
        if not producer.done():
            producer.cancel()
            with contextlib.suppress(BaseException):
                await producer
        if failed is None:
            await _release(service, plan)


async def run_stream(request: Request) -> Response:
    """`POST /runs/stream` and `POST /threads/{id}/runs/stream`: server-sent events, one per graph event."""
    service = _service(request)
    thread_id = request.path_params.get("thread_id")
    plan = await _plan(request, service, None if thread_id is None else _thread_id(thread_id))
    failed: BaseException | None = None
    try:
        async with asyncio.timeout(service.limits.run_timeout_s):
            await _ensure_thread(service, plan)
            await _claim(service, plan)
    except HTTPException:
        raise
    except Exception as exc:
        failed = exc
    return StreamingResponse(
        _events(service, plan, failed),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def metrics(request: Request) -> Response:
    """`GET /metrics`: Prometheus text over every worker (the console app's handler, multiprocess-aware)."""
    return await console_app.metrics(request)


# ---------------------------------------------------------------------------------------------- the app


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def routes() -> list[Route]:
    """The API's routes."""
    return [
        Route("/ok", ok, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
        Route("/assistants/search", search_assistants, methods=["POST"]),
        Route("/assistants/{assistant_id}", get_assistant, methods=["GET"]),
        Route("/assistants/{assistant_id}/schemas", assistant_schemas, methods=["GET"]),
        Route("/assistants/{assistant_id}/graph", assistant_graph, methods=["GET"]),
        Route("/threads", create_thread, methods=["POST"]),
        Route("/threads/{thread_id}", get_thread, methods=["GET"]),
        Route("/threads/{thread_id}/state", get_thread_state, methods=["GET"]),
        Route("/threads/{thread_id}/state/checkpoint", post_thread_state, methods=["POST"]),
        Route("/threads/{thread_id}/state/{checkpoint_id}", get_thread_state, methods=["GET"]),
        Route("/threads/{thread_id}/runs/wait", run_wait, methods=["POST"]),
        Route("/threads/{thread_id}/runs/stream", run_stream, methods=["POST"]),
        Route("/runs/wait", run_wait, methods=["POST"]),
        Route("/runs/stream", run_stream, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/console", console_app.console, methods=["GET"]),
        Route("/console/", console_app.console, methods=["GET"]),
        Route("/console/{asset}", console_app.console_asset, methods=["GET"]),
    ]


StartService = Callable[[AsyncExitStack], Awaitable[Service]]


class Server:
    """The ASGI app: its own lifespan (startup errors as one clear line, never a traceback), then `Guard`."""

    def __init__(self, start: StartService | None = None, key: str | None = None) -> None:
        """Serve the service `start` builds (default: from the `FASTRAG_*` environment), guarded by `key`."""
        self.start: StartService = start or start_service
        router = Starlette(routes=routes(), exception_handlers={HTTPException: _http_error})
        self.app = Guard(router, key)

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
            reason = _startup_reason(exc)
            await send({"type": "lifespan.startup.failed", "message": f"fastcrag serve: cannot start: {reason}"})
            return
        if "state" in scope:
            scope["state"]["service"] = service
        log.info("worker %d ready: graph %s, checkpoints %s", os.getpid(), GRAPH_ID, _describe(service.settings))
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await stack.aclose()
        except Exception as exc:
            await send({"type": "lifespan.shutdown.failed", "message": f"fastcrag serve: {service.reason(exc)}"})
            return
        await send({"type": "lifespan.shutdown.complete"})


def _describe(settings: Settings) -> str:
    from fastcrag.graph.checkpoints import describe

    return describe(settings.checkpoints)


def _startup_reason(exc: BaseException) -> str:
    """One redacted line for a startup failure (the checkpointer already redacts its own messages)."""
    try:
        settings = Settings()
        secrets = _secrets(settings)
    except Exception:
        secrets = []
    text = (str(exc).strip().splitlines() or [""])[0][:400]
    kind = type(exc).__name__
    own = kind in ("CheckpointsError", "CalibrationError", "IndexLoadError")  # their messages name the cause
    return _redacted(text if own else f"{kind}: {text}", secrets)


def create_app(start: StartService | None = None, settings: Settings | None = None) -> Server:
    """The app uvicorn runs in each worker (`fastcrag.server.api:create_app`, factory mode).

    Args:
        start: Builds the worker's `Service` (tests inject one); the default reads the `FASTRAG_*` environment.
        settings: Settings for the key check; read from the environment when None.
    """
    settings = settings or Settings()
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    return Server(start, key or None)
