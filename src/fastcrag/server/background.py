"""Background runs of `fastcrag serve`: create, get, list, join, cancel and delete; and the worker that runs them.

The queue is `queue.RunQueue`; each worker runs one `Runner` beside its routes, so a run created on one worker may
be executed by another and joined from a third. A run executes exactly as `runs/wait` does (`runs.execute`): under
the thread's lease and the run timeout, ending in an abstention with the reason when it cannot finish.

With an `Auth` object (`access.py`), creating a run goes through `threads.create_run`, reading or joining one
through `threads.read`, listing through `threads.search`, cancelling through `threads.update` and deleting through
`threads.delete`, each limited to the threads its filter allows. The queued run keeps its caller (identity, name,
permissions: never credentials) for the worker that runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fastcrag.server.access import Caller, as_id
from fastcrag.server.plans import authorize_run, plan_of
from fastcrag.server.queue import MAX_ATTEMPTS, STATUSES, QueuedRun
from fastcrag.server.runs import LEASE_GRACE_S, execute
from fastcrag.server.service import Service, service_of
from fastcrag.server.threads import MAX_PAGE, known_thread, store_call, thread_exists, thread_values, valid_thread_id
from fastcrag.server.wire import OrjsonResponse, dumps, read_json, sse

log = logging.getLogger("fastcrag.server")

CALLER_KEY = "__fastcrag_caller__"
"""Where a queued run's body keeps its caller (a client's own value under this key is dropped)."""
POLL_S = 0.2
"""How often an idle worker looks for a pending run, and a join for the run's end."""
CANCEL_POLL_S = 0.25
"""How often a running background run checks whether it was cancelled."""
CONCURRENCY = 4
"""Background runs one worker executes at once (each holds a different thread)."""


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def run_json(run: QueuedRun) -> dict[str, Any]:
    """A queued run in the server API's Run shape."""
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": str(run.body.get("assistant_id") or "crag"),
        "created_at": _iso(run.created),
        "updated_at": _iso(run.updated),
        "status": run.status,
        "metadata": run.metadata,
        "multitask_strategy": run.multitask,
        "kwargs": {k: run.body.get(k) for k in ("input", "context", "config") if k in run.body},
        "error": run.error,
    }


class Runner:
    """Takes pending runs off the queue and executes them, up to `CONCURRENCY` at once, until stopped."""

    def __init__(self, service: Service) -> None:
        """Run `service`'s queue."""
        self.service = service
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.slots = asyncio.Semaphore(CONCURRENCY)
        self.tasks: dict[asyncio.Task[None], str] = {}

    async def run_forever(self) -> None:
        """Poll the queue; a database failure is logged and retried after a pause, never fatal."""
        lease_s = self.service.limits.run_timeout_s + LEASE_GRACE_S
        while True:
            await self.slots.acquire()
            try:
                job = await self.service.queue.claim(self.owner, lease_s)
            except Exception as exc:
                self.slots.release()
                log.warning("reading the run queue failed: %s", self.service.reason(exc))
                await asyncio.sleep(5 * POLL_S)
                continue
            if job is None:
                self.slots.release()
                await asyncio.sleep(POLL_S)
                continue
            task = asyncio.create_task(self._run(job))
            self.tasks[task] = job.run_id
            task.add_done_callback(lambda done: self.tasks.pop(done, None))

    async def stop(self) -> None:
        """Stop the runs in flight and give them back to the queue, for another worker to run from the start."""
        running = dict(self.tasks)
        for task in running:
            task.cancel()
        for task, run_id in running.items():
            with contextlib.suppress(BaseException):
                await task
            try:
                await self.service.queue.requeue(run_id, self.owner)
            except Exception as exc:  # its lease expires instead
                log.warning("giving run %s back to the queue failed: %s", run_id, self.service.reason(exc))

    async def _run(self, job: QueuedRun) -> None:
        queue = self.service.queue
        try:
            if job.attempts > MAX_ATTEMPTS:
                reason = f"its worker stopped while running it {job.attempts - 1} times"
                await queue.finish(job.run_id, self.owner, "error", reason)
                return
            plan = plan_of(job.body, job.thread_id, job.run_id)
            plan.act_for(Caller.restored(job.body.get(CALLER_KEY)))
            plan.multitask = "enqueue"  # admitted already: it waits for a synchronous run on its thread
            work = asyncio.create_task(execute(self.service, plan))
            try:
                while not work.done():
                    await asyncio.wait({work}, timeout=CANCEL_POLL_S)
                    if not work.done() and await queue.cancelled(job.run_id):
                        work.cancel()
            except BaseException:  # this worker stops (or its database failed): the run stops with it
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                raise
            if work.cancelled():
                await queue.finish(job.run_id, self.owner, "interrupted", "cancelled while running")
                return
            output, failed = work.result()
            why = (output.get("crag") or {}).get("failure") if failed else None  # the abstention's own words
            await queue.finish(job.run_id, self.owner, failed or "success", None if why is None else str(why))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an HTTPException (thread gone) or a database failure: the run ends in error
            reason = exc.detail if isinstance(exc, HTTPException) else self.service.reason(exc)
            log.warning("background run %s failed: %s", job.run_id, reason)
            with contextlib.suppress(Exception):
                await queue.finish(job.run_id, self.owner, "error", str(reason))
        finally:
            self.slots.release()


async def _run_of(request: Request, service: Service, what: str = "read", **value: Any) -> QueuedRun:
    run_id = str(request.path_params["run_id"])
    thread_id, _ = await known_thread(service, request, what, run_id=as_id(run_id), **value)
    run: QueuedRun | None = await store_call(service, "reading the run", service.queue.get(thread_id, run_id))
    if run is None:
        raise HTTPException(404, f"run {run_id} not found on thread {thread_id}")
    return run


async def create_run(request: Request) -> Response:
    """`POST /threads/{id}/runs`: validate and queue a run; answer at once with it, `pending`."""
    service = service_of(request)
    body = await read_json(request, service.limits.max_body_bytes)
    body.pop(CALLER_KEY, None)
    thread_id = valid_thread_id(request.path_params["thread_id"])
    plan = plan_of(body, thread_id)  # every refusal (422, 404 assistant) before anything is stored
    if body.get("stream_resumable"):
        raise HTTPException(422, "`stream_resumable` is not supported: join_stream sends the run's final values")
    metadata = await authorize_run(request, plan, body)
    missing = HTTPException(404, f"thread {thread_id} not found (send if_not_exists=create to create it)")
    if plan.where is not None and await store_call(
        service, "reading the thread", service.threads.get(thread_id, plan.where)
    ):
        pass  # the caller's own thread
    elif await thread_exists(service, thread_id) is None:
        if not plan.create_thread:
            raise missing
        created = service.threads.create(thread_id, dict(plan.thread_metadata))
        if await store_call(service, "creating the thread", created) is None and plan.where is not None:
            raise missing  # another caller created it meanwhile
    elif plan.where is not None:
        raise missing  # another caller's thread
    if plan.caller is not None:
        body[CALLER_KEY] = plan.caller.stored()
    if plan.multitask == "reject":
        busy = await store_call(service, "reading the queue", service.queue.active(thread_id))
        busy = busy or thread_id in await store_call(service, "reading leases", service.threads.busy([thread_id]))
        if busy:
            raise HTTPException(409, f"thread {thread_id} has a run in progress; send multitask_strategy=enqueue")
    run = await store_call(
        service, "queueing the run", service.queue.enqueue(plan.run_id, thread_id, body, metadata, plan.multitask)
    )
    return OrjsonResponse(run_json(run))


async def get_run(request: Request) -> Response:
    """`GET /threads/{id}/runs/{run_id}`."""
    service = service_of(request)
    return OrjsonResponse(run_json(await _run_of(request, service)))


async def list_runs(request: Request) -> Response:
    """`GET /threads/{id}/runs`: newest first (`limit`, `offset`, `status`)."""
    service = service_of(request)
    thread_id, _ = await known_thread(service, request, "search", metadata={})
    params = request.query_params
    try:
        limit, offset = int(params.get("limit", 10)), int(params.get("offset", 0))
    except ValueError:
        raise HTTPException(422, "limit and offset must be integers") from None
    status = params.get("status")
    if not 1 <= limit <= MAX_PAGE or offset < 0 or (status is not None and status not in STATUSES):
        raise HTTPException(422, f"limit in 1-{MAX_PAGE}, offset >= 0, status one of {', '.join(STATUSES)}")
    runs = await store_call(service, "listing runs", service.queue.list(thread_id, limit, offset, status))
    return OrjsonResponse([run_json(r) for r in runs])


async def _until_finished(service: Service, run: QueuedRun) -> QueuedRun:
    """The run once it has ended (polled; bounded by the run timeout, its lease's grace and one retry)."""
    deadline = time.monotonic() + MAX_ATTEMPTS * (service.limits.run_timeout_s + 2 * LEASE_GRACE_S)
    while not run.finished:
        if time.monotonic() > deadline:
            raise HTTPException(504, f"run {run.run_id} has not ended; join it again later")
        await asyncio.sleep(POLL_S)
        found = await store_call(service, "reading the run", service.queue.get(run.thread_id, run.run_id))
        if found is None:
            raise HTTPException(404, f"run {run.run_id} was deleted")
        run = found
    return run


async def join_run(request: Request) -> Response:
    """`GET /threads/{id}/runs/{run_id}/join`: wait for the run's end; the thread's values then."""
    service = service_of(request)
    run = await _until_finished(service, await _run_of(request, service))
    return Response(service.scrub(dumps(await thread_values(service, run.thread_id))), media_type="application/json")


async def join_stream(request: Request) -> Response:
    """`GET /threads/{id}/runs/{run_id}/stream`: `metadata`, then the thread's `values` when the run ends.

    Events are not relayed between workers: a join sees the run's end, not its steps.
    """
    service = service_of(request)
    run = await _run_of(request, service)

    async def events() -> AsyncIterator[bytes]:
        yield sse("metadata", {"run_id": run.run_id, "attempt": max(1, run.attempts)})
        try:
            ended = await _until_finished(service, run)
            yield sse("values", await thread_values(service, ended.thread_id), service)
        except HTTPException as exc:
            yield sse("error", {"error": "RunError", "message": str(exc.detail)})

    return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


async def cancel_run(request: Request) -> Response:
    """`POST /threads/{id}/runs/{run_id}/cancel` (`action=interrupt`; `wait=1` waits for it to stop)."""
    service = service_of(request)
    action = request.query_params.get("action", "interrupt")
    run = await _run_of(request, service, "update", action=action)
    if action != "interrupt":
        raise HTTPException(422, "cancel action must be `interrupt` (steps already written stay in the history)")
    status = await store_call(service, "cancelling the run", service.queue.cancel(run.thread_id, run.run_id))
    if request.query_params.get("wait") in ("1", "true") and status == "running":
        await _until_finished(service, run)
    return Response(status_code=202 if status == "running" else 204)


async def delete_run(request: Request) -> Response:
    """`DELETE /threads/{id}/runs/{run_id}`: a run that is not running (409 while it runs)."""
    service = service_of(request)
    run = await _run_of(request, service, "delete")
    if not await store_call(service, "deleting the run", service.queue.delete(run.thread_id, run.run_id)):
        raise HTTPException(409, f"run {run.run_id} is running; cancel it first")
    return Response(status_code=204)
