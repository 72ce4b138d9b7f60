"""The state routes of `fastcrag serve`: a thread's state at any checkpoint, its history, and state updates.

All of it is the checkpointer's: `aget_state`, `aget_state_history` and `aupdate_state` of the compiled graph, in
the server API's ThreadState shape. Reads go through the `threads.read` auth handler, a state update through
`threads.update` (`threads.known_thread`).
"""

from __future__ import annotations

from typing import Any

from langgraph.errors import InvalidUpdateError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from fastcrag.server.service import service_of
from fastcrag.server.threads import MAX_PAGE, known_thread, refuse_busy, store_call
from fastcrag.server.wire import OrjsonResponse, read_json


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


def _config(thread_id: str, checkpoint: Any) -> dict[str, Any]:
    """The checkpointer config of a thread at `checkpoint`.

    `checkpoint` is `{checkpoint_id, checkpoint_ns}`, a config holding it under `configurable`, a bare id, or None.

    Raises:
        HTTPException: 422 for a checkpoint that is neither an object nor a string, or fields that are not strings.
    """
    if isinstance(checkpoint, str):
        checkpoint = {"checkpoint_id": checkpoint}
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("configurable"), dict):
        checkpoint = checkpoint["configurable"]  # a checkpoint config, as `langgraph dev` takes `before`
    if checkpoint is not None and not isinstance(checkpoint, dict):
        raise HTTPException(422, "a checkpoint is an object {checkpoint_id, checkpoint_ns} or a checkpoint id")
    configurable: dict[str, Any] = {"thread_id": thread_id}
    for name in ("checkpoint_ns", "checkpoint_id"):
        value = (checkpoint or {}).get(name)
        if value is not None and not isinstance(value, str):
            raise HTTPException(422, f"{name} must be a string")
        if value:
            configurable[name] = value
    return {"configurable": configurable}


async def _state_at(request: Request, checkpoint: Any) -> Response:
    service = service_of(request)
    thread_id, _ = await known_thread(service, request)
    config = _config(thread_id, checkpoint)
    snapshot = await store_call(service, "reading the checkpoints", service.graph.aget_state(config))
    wanted = config["configurable"].get("checkpoint_id")
    if wanted and _checkpoint_ref(snapshot.config) is None:
        raise HTTPException(404, f"checkpoint {wanted} not found on thread {thread_id}")
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


async def update_thread_state(request: Request) -> Response:
    """`POST /threads/{id}/state`: write `values` as a new checkpoint, as if node `as_node` had returned them.

    From the latest checkpoint, or from `checkpoint` (a fork); refused (409) while a run holds the thread.
    """
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    thread_id, _ = await known_thread(service, request, "update")
    values = body.get("values")
    if values is not None and not isinstance(values, dict):
        raise HTTPException(422, "values must be a JSON object (one update) or null")
    as_node = body.get("as_node")
    nodes = [n for n in service.graph.nodes if not n.startswith("__")]
    if as_node is not None and as_node not in nodes:
        raise HTTPException(422, f"as_node must be one of the graph's nodes: {', '.join(nodes)}")
    config = _config(thread_id, body.get("checkpoint") or body.get("checkpoint_id"))
    await refuse_busy(service, thread_id)
    try:
        written = await service.graph.aupdate_state(config, values, as_node=as_node)
    except (InvalidUpdateError, ValueError, KeyError, TypeError) as exc:  # the update does not fit the state
        raise HTTPException(422, f"the update does not fit the thread's state: {service.redact(str(exc))}") from None
    except Exception as exc:
        raise HTTPException(503, f"writing the state failed: {service.reason(exc)}") from None
    return OrjsonResponse({"checkpoint": _checkpoint_ref(written)})


async def thread_history(request: Request) -> Response:
    """`POST`/`GET /threads/{id}/history`: ThreadStates newest first (`limit`, `before`, `metadata`, `checkpoint`)."""
    service = service_of(request)
    body = (
        await read_json(request, service.limits.max_body_bytes)
        if request.method == "POST"
        else dict(request.query_params)
    )
    thread_id, _ = await known_thread(service, request)
    try:
        limit = int(body.get("limit", 10))
    except (TypeError, ValueError):
        limit = 0
    if not 1 <= limit <= MAX_PAGE:
        raise HTTPException(422, f"limit must be an integer in 1-{MAX_PAGE}")
    metadata = body.get("metadata") or None
    if metadata is not None and not isinstance(metadata, dict):
        raise HTTPException(422, "metadata must be a JSON object")
    before = _config(thread_id, body["before"]) if body.get("before") else None
    config = _config(thread_id, body.get("checkpoint"))

    async def collect() -> list[Any]:
        history = service.graph.aget_state_history(config, filter=metadata, before=before, limit=limit)
        return [s async for s in history]

    snapshots = await store_call(service, "reading the checkpoints", collect())
    return OrjsonResponse([_thread_state(s, thread_id) for s in snapshots])
