"""The thread routes of `fastcrag serve`: create, read, search, count, update, copy and delete threads.

A thread's history is the checkpointer's (its state routes are in `state.py`); its record (`records.py`) says that
it was created, with its metadata and times. A thread known only by its checkpoints (written by another process on
the same database) counts as existing, but only recorded threads are found by a search.

With an `Auth` object (`access.py`), each route first runs its handler (`threads.create`, `read`, `update`,
`delete`, `search`) and reads the thread only through the filter it returns: a thread outside it is `404`, as if it
did not exist, and a thread known only by its checkpoints is outside every filter.
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

from fastcrag.server.access import Filter, as_id, authorize
from fastcrag.server.records import SORTABLE, ThreadQuery
from fastcrag.server.service import Service, service_of
from fastcrag.server.wire import OrjsonResponse, read_json

log = logging.getLogger("fastcrag.server")

THREAD_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")
MAX_PAGE = 1000
"""The most threads one search returns."""
STATUSES = ("idle", "busy", "interrupted", "error")
"""Thread statuses: fastcrag's graph never interrupts, and a failed run abstains, so only idle and busy occur."""


def valid_thread_id(value: Any) -> str:
    """`value` as a thread id.

    Raises:
        HTTPException: 422 for an id that is not 1-128 letters, digits and `_.:@-`.
    """
    text = str(value)
    if not THREAD_ID.match(text):
        raise HTTPException(422, "a thread id is 1-128 letters, digits and `_.:@-`, starting with a letter or digit")
    return text


async def store_call(service: Service, what: str, call: Awaitable[Any]) -> Any:
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


async def thread_exists(service: Service, thread_id: str) -> Any:
    """`thread_known`, with a database failure as a redacted 503."""
    return await store_call(service, "reading the thread", thread_known(service, thread_id))


async def owned_thread(
    service: Service, request: Request, operation: str = "read", value: dict[str, Any] | None = None
) -> tuple[str, Any, Filter | None]:
    """The path's thread id, its record (True: known by its checkpoints only) and the auth filter it was read with.

    The `threads.<operation>` auth handler allows it first, given `value` with the `thread_id` added (it may change
    `value`: the caller reads it back).

    Raises:
        HTTPException: 422 for a bad id, 404 for an unknown thread (or one outside the filter), 403 when the
            handler refuses, 503 when the database fails.
    """
    thread_id = valid_thread_id(request.path_params["thread_id"])
    value = {} if value is None else value
    value["thread_id"] = as_id(thread_id)
    where = await authorize(request, "threads", operation, value)
    if where is not None:
        record = await store_call(service, "reading the thread", service.threads.get(thread_id, where))
    else:
        record = await thread_exists(service, thread_id)
    if record is None:
        raise HTTPException(404, f"thread {thread_id} not found")
    return thread_id, record, where


async def known_thread(service: Service, request: Request, operation: str = "read", **value: Any) -> tuple[str, Any]:
    """`owned_thread` without the filter: the thread id and its record."""
    thread_id, record, _ = await owned_thread(service, request, operation, value)
    return thread_id, record


async def thread_values(service: Service, thread_id: str) -> dict[str, Any]:
    """The thread's latest state values (a database failure as a redacted 503)."""
    snapshot = await store_call(
        service, "reading the checkpoints", service.graph.aget_state({"configurable": {"thread_id": thread_id}})
    )
    return dict(snapshot.values or {})


def _thread_json(record: Any, thread_id: str, values: dict[str, Any], status: str = "idle") -> dict[str, Any]:
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
        "status": status,
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
    value = {"thread_id": as_id(thread_id), "metadata": metadata, "if_exists": if_exists}
    where = await authorize(request, "threads", "create", value)
    metadata = _metadata_of(value)  # the handler may have added to it (an owner)
    record = await store_call(service, "creating the thread", service.threads.create(thread_id, metadata))
    if record is None:
        if if_exists == "raise":
            raise HTTPException(409, f"thread {thread_id} exists already")
        record = await store_call(service, "reading the thread", service.threads.get(thread_id, where))
        if record is None:  # another caller's thread: no more said than for `raise`
            raise HTTPException(409, f"thread {thread_id} exists already")
    return OrjsonResponse(_thread_json(record, thread_id, {}))


async def get_thread(request: Request) -> Response:
    """`GET /threads/{id}`: the record and the latest values."""
    service = service_of(request)
    thread_id, record = await known_thread(service, request)
    return OrjsonResponse(_thread_json(record, thread_id, await thread_values(service, thread_id)))


def _metadata_of(body: dict[str, Any], name: str = "metadata") -> dict[str, Any]:
    value = body.get(name) or {}
    if not isinstance(value, dict):
        raise HTTPException(422, f"{name} must be a JSON object")
    return value


def _unsupported(body: dict[str, Any], *names: str) -> None:
    for name in names:
        if body.get(name):
            raise HTTPException(422, f"`{name}` is not supported by fastcrag serve")


def _query(body: dict[str, Any]) -> tuple[ThreadQuery, str | None, list[str] | None]:
    """A search body as a query, the status filter and the fields to return.

    Raises:
        HTTPException: 422 naming the first bad field.
    """
    _unsupported(body, "values", "extract")
    limit, offset = body.get("limit", 10), body.get("offset", 0)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise HTTPException(422, f"limit must be an integer in 1-{MAX_PAGE}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise HTTPException(422, "offset must be a non-negative integer")
    sort_by = body.get("sort_by") or "created_at"
    if sort_by not in SORTABLE:
        raise HTTPException(422, f"sort_by must be one of {', '.join(SORTABLE)}")
    order = body.get("sort_order") or "desc"
    if order not in ("asc", "desc"):
        raise HTTPException(422, "sort_order must be `asc` or `desc`")
    status = body.get("status")
    if status is not None and status not in STATUSES:
        raise HTTPException(422, f"status must be one of {', '.join(STATUSES)}")
    ids = body.get("ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise HTTPException(422, "ids must be a list of thread ids")
    select = body.get("select")
    if select is not None and (not isinstance(select, list) or not all(isinstance(f, str) for f in select)):
        raise HTTPException(422, "select must be a list of field names")
    query = ThreadQuery(_metadata_of(body), tuple(ids), limit, offset, sort_by, order == "desc")
    return query, status, select


async def search_threads(request: Request) -> Response:
    """`POST /threads/search`: recorded threads by metadata (JSON containment), ids and status; paged and sorted."""
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    query, status, select = _query(body)
    value = {"metadata": query.metadata, "values": body.get("values") or {}, "status": status}
    where = await authorize(request, "threads", "search", {**value, "limit": query.limit, "offset": query.offset})
    # the status is the lease's, not the record's: with a status filter, search everything, filter, then page
    whole = ThreadQuery(query.metadata, query.ids, 1_000_000, 0, query.sort_by, query.descending)
    found = await store_call(
        service, "searching threads", service.threads.search(query if status is None else whole, where)
    )
    busy = await store_call(service, "reading run leases", service.threads.busy([r.thread_id for r in found]))
    if status is not None:
        found = [r for r in found if ("busy" if r.thread_id in busy else "idle") == status]
        found = found[query.offset : query.offset + query.limit]
    out = []
    for record in found:
        values = await thread_values(service, record.thread_id) if select is None or "values" in select else {}
        thread = _thread_json(record, record.thread_id, values, "busy" if record.thread_id in busy else "idle")
        out.append(thread if select is None else {k: v for k, v in thread.items() if k in select})
    return OrjsonResponse(out)


async def count_threads(request: Request) -> Response:
    """`POST /threads/count`: how many recorded threads hold the metadata."""
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    _unsupported(body, "values", "status")
    metadata = _metadata_of(body)
    where = await authorize(request, "threads", "search", {"metadata": metadata, "values": {}, "status": None})
    return OrjsonResponse(await store_call(service, "counting threads", service.threads.count(metadata, where)))


async def update_thread(request: Request) -> Response:
    """`PATCH /threads/{id}`: merge metadata (a thread known only by its checkpoints gets a record)."""
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    _unsupported(body, "ttl")
    metadata = _metadata_of(body)
    value = {"metadata": metadata}
    thread_id, record, where = await owned_thread(service, request, "update", value)
    metadata = _metadata_of(value)  # as the handler left it
    if record is True:
        await store_call(service, "recording the thread", service.threads.create(thread_id, {}))
    updated = await store_call(service, "updating the thread", service.threads.update(thread_id, metadata, where))
    if updated is None:  # deleted meanwhile
        raise HTTPException(404, f"thread {thread_id} not found")
    if request.headers.get("prefer", "").replace(" ", "") == "return=minimal":
        return Response(status_code=204)
    return OrjsonResponse(_thread_json(updated, thread_id, await thread_values(service, thread_id)))


async def refuse_busy(service: Service, thread_id: str) -> None:
    """409 while a run holds the thread's lease (its state must not change under the run)."""
    if thread_id in await store_call(service, "reading run leases", service.threads.busy([thread_id])):
        raise HTTPException(409, f"thread {thread_id} has a run in flight; try again when it ends")


async def delete_thread(request: Request) -> Response:
    """`DELETE /threads/{id}`: its checkpoints, writes and record (409 while a run holds it)."""
    service = service_of(request)
    thread_id, _ = await known_thread(service, request, "delete")
    await refuse_busy(service, thread_id)
    if await store_call(service, "reading the queue", service.queue.active(thread_id)):
        raise HTTPException(409, f"thread {thread_id} has background runs pending; cancel them first")
    await store_call(service, "deleting the checkpoints", service.saver.adelete_thread(thread_id))
    await store_call(service, "deleting its runs", service.queue.forget_thread(thread_id))
    await store_call(service, "deleting the thread", service.threads.delete(thread_id))
    return Response(status_code=204)


async def copy_thread(request: Request) -> Response:
    """`POST /threads/{id}/copy`: a new thread with the same metadata and every checkpoint (and pending write)."""
    service = service_of(request)
    source, record = await known_thread(service, request)
    target = str(uuid.uuid4())
    metadata = {} if record is True else dict(record.metadata)
    value = {"thread_id": as_id(target), "metadata": metadata, "if_exists": "raise"}
    await authorize(request, "threads", "create", value)  # the copy is created as a thread (an owner stamped)
    metadata = _metadata_of(value)
    created = await store_call(service, "creating the thread", service.threads.create(target, metadata))
    await store_call(service, "copying the checkpoints", copy_checkpoints(service.saver, source, target))
    return OrjsonResponse(_thread_json(created, target, await thread_values(service, target)))


async def copy_checkpoints(saver: Any, source: str, target: str) -> None:
    """Every checkpoint of `source`, oldest first, with its parent links and pending writes, onto `target`."""
    tuples = [t async for t in saver.alist({"configurable": {"thread_id": source}})]
    for tup in reversed(tuples):  # alist is newest first: parents go in before their children
        conf = tup.config["configurable"]
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        into: dict[str, Any] = {"thread_id": target, "checkpoint_ns": conf.get("checkpoint_ns", "")}
        if parent:
            into["checkpoint_id"] = parent
        saved = await saver.aput(
            {"configurable": into}, tup.checkpoint, tup.metadata, dict(tup.checkpoint.get("channel_versions", {}))
        )
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in tup.pending_writes or []:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(saved, writes, task_id)
