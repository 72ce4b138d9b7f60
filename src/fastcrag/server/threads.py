"""The thread routes of `fastcrag serve`: create a thread, read it, and read its state at any checkpoint.

A thread's history is the checkpointer's; its record (`records.py`) only says that it was created, with its
metadata and times. A thread known only by its checkpoints (written by another process on the same database)
counts as existing.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fastcrag.server.service import Service, service_of
from fastcrag.server.wire import OrjsonResponse, read_json

log = logging.getLogger("fastcrag.server")

THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")


def valid_thread_id(value: Any) -> str:
    """`value` as a thread id.

    Raises:
        HTTPException: 422 for an id that is not 1-128 letters, digits and `_.:@-`.
    """
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


async def thread_known(service: Service, thread_id: str) -> Any:
    """The thread's record, True for a thread known only by its checkpoints, or None (database errors raise)."""
    record = await service.threads.get(thread_id)
    if record is not None:
        return record
    found = await service.saver.aget_tuple({"configurable": {"thread_id": thread_id}})
    return True if found is not None else None


async def _thread_exists(service: Service, thread_id: str) -> Any:
    """`thread_known`, with a database failure as a redacted 503."""
    return await _store_call(service, "reading the thread", thread_known(service, thread_id))


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
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    thread_id = valid_thread_id(body.get("thread_id") or uuid.uuid4())
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
    service = service_of(request)
    thread_id = valid_thread_id(request.path_params["thread_id"])
    record = await _thread_exists(service, thread_id)
    if record is None:
        raise HTTPException(404, f"thread {thread_id} not found")
    snapshot = await _store_call(
        service, "reading the checkpoints", service.graph.aget_state({"configurable": {"thread_id": thread_id}})
    )
    return OrjsonResponse(_thread_json(record, thread_id, snapshot.values or {}))


async def _state_at(request: Request, checkpoint: dict[str, Any]) -> Response:
    service = service_of(request)
    thread_id = valid_thread_id(request.path_params["thread_id"])
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
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    checkpoint = body.get("checkpoint") or {}
    if not isinstance(checkpoint, dict):
        raise HTTPException(422, "checkpoint must be a JSON object")
    return await _state_at(request, checkpoint)
