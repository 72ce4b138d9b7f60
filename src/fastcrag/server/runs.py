"""The run routes of `fastcrag serve`: wait for a run's output, or stream its events, on a thread or on none.

Runs use the graph's async API (`ainvoke` / `astream`), which runs the synchronous nodes in threads: the event loop
never blocks on a model. A run on a thread holds the thread's lease while it runs, so runs on one thread never
overlap, on any worker. A run is capped by `FASTRAG_RUN_TIMEOUT_S`; a run that times out, or whose checkpointer or
store fails (a Postgres that went away), ends in the graph's abstention with `crag.failure` the redacted reason,
and the worker keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from fastcrag import metrics
from fastcrag.graph.nodes.abstain import abstention
from fastcrag.graph.state import State
from fastcrag.server.assistants import ASSISTANT_ID, GRAPH_ID
from fastcrag.server.plans import STREAM_MODES, RunPlan, plan_run
from fastcrag.server.service import Service, service_of
from fastcrag.server.threads import thread_known, valid_thread_id
from fastcrag.server.wire import dumps, sse

log = logging.getLogger("fastcrag.server")

LEASE_POLL_S = 0.05
LEASE_GRACE_S = 5.0
"""A lease outlives the run timeout by this much: a worker that died mid-run frees its thread after it."""
RUN_METADATA = {"graph_id": GRAPH_ID, "assistant_id": ASSISTANT_ID}
"""What a run on a thread merges into the thread's metadata."""


def failure_output(service: Service, plan: RunPlan, reason: str) -> dict[str, Any]:
    """The graph's abstention for a run that could not finish (counted like any abstention), with its messages."""
    messages = plan.input.get("messages")
    state: State = {"failure": {"code": "run", "message": reason}}
    if messages:
        state["messages"] = messages
    out: dict[str, Any] = {**abstention(service.parts, state, plan.context)}
    if messages:
        out["messages"] = [*messages, *out["messages"]]
    return out


def _failure_reason(service: Service, plan: RunPlan, exc: BaseException) -> str:
    """The redacted reason a run failed, counted and logged once."""
    if isinstance(exc, TimeoutError):
        reason, kind = f"the run took longer than {service.limits.run_timeout_s:g} s (FASTRAG_RUN_TIMEOUT_S)", "timeout"
    else:
        reason, kind = f"the run failed: {service.reason(exc)}", "error"
    metrics.RUN_FAILURES.labels(reason=kind).inc()
    where = f" on thread {plan.thread_id}" if plan.thread_id else ""
    log.warning("run %s%s ended in an abstention: %s", plan.run_id, where, reason)
    return reason


async def _ensure_thread(service: Service, plan: RunPlan) -> None:
    """Check (or create) the run's thread, and the checkpoint it starts from when it names one.

    Raises:
        HTTPException: 404 for an unknown thread without `if_not_exists=create`, or an unknown checkpoint.
        Exception: the database failed (the caller turns it into an abstention).
    """
    if plan.thread_id is None:
        return
    missing = HTTPException(404, f"thread {plan.thread_id} not found (send if_not_exists=create to create it)")
    if plan.where is not None:  # the caller's own threads only; one they may not see is as good as missing
        if await service.threads.get(plan.thread_id, plan.where) is None:
            if not plan.create_thread or await thread_known(service, plan.thread_id) is not None:
                raise missing
            if await service.threads.create(plan.thread_id, {**plan.thread_metadata, **RUN_METADATA}) is None:
                raise missing  # another caller created it meanwhile
    elif await thread_known(service, plan.thread_id) is None:
        if not plan.create_thread:
            raise missing
        await service.threads.create(plan.thread_id, {**plan.thread_metadata, **RUN_METADATA})
    checkpoint_id = plan.config["configurable"].get("checkpoint_id")
    if checkpoint_id and await service.saver.aget_tuple(plan.config) is None:
        raise HTTPException(404, f"checkpoint {checkpoint_id} not found on thread {plan.thread_id}")


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


LEASE_RETRY_S = 0.5
"""How often a lease whose release failed (the database was away) is given back again, until its expiry."""
_RETRIES: set[asyncio.Task[None]] = set()


async def _release(service: Service, plan: RunPlan) -> None:
    if plan.thread_id is None:
        return
    try:
        await service.threads.release(plan.thread_id, plan.run_id)
    except Exception as exc:
        # The lease would hold the thread until it expires (run timeout + grace): keep giving it back meanwhile,
        # so the thread answers again as soon as the database does.
        log.warning("releasing thread %s failed: %s (retrying)", plan.thread_id, service.reason(exc))
        task = asyncio.create_task(_release_later(service, plan.thread_id, plan.run_id))
        _RETRIES.add(task)
        task.add_done_callback(_RETRIES.discard)


async def _release_later(service: Service, thread_id: str, run_id: str) -> None:
    deadline = time.monotonic() + service.limits.run_timeout_s + LEASE_GRACE_S
    while time.monotonic() < deadline:
        await asyncio.sleep(LEASE_RETRY_S)
        with contextlib.suppress(Exception):
            await service.threads.release(thread_id, run_id)
            return


def _graph_for(service: Service, plan: RunPlan) -> Any:
    return service.graph if plan.thread_id is not None else service.stateless


async def _touch(service: Service, plan: RunPlan) -> None:
    """After a run: the thread's `updated_at`, and its graph and assistant merged into its metadata.

    LangGraph tags a thread so, and a chat UI lists its threads by `graph_id`.
    """
    if plan.thread_id is not None:
        try:
            await service.threads.update(plan.thread_id, dict(RUN_METADATA))
        except Exception as exc:  # the run itself succeeded; only the record is stale
            log.warning("updating thread %s failed: %s", plan.thread_id, service.reason(exc))


async def _plan(request: Request, service: Service) -> RunPlan:
    """The request's run plan, on the thread its path names (checked before the body is read) or on none."""
    thread_id = request.path_params.get("thread_id")
    return await plan_run(request, service, None if thread_id is None else valid_thread_id(thread_id))


async def execute(service: Service, plan: RunPlan) -> tuple[dict[str, Any], str | None]:
    """Run a plan to its end under the thread's lease: its output, and how it failed (`timeout`, `error`) or None.

    A run that cannot finish ends in the graph's abstention with the redacted reason.

    Raises:
        HTTPException: 404 for an unknown thread, 409 for a busy one under `reject`.
    """
    graph = _graph_for(service, plan)
    claiming = False
    try:
        async with asyncio.timeout(service.limits.run_timeout_s):
            await _ensure_thread(service, plan)
            # From here the lease may be held even if the claim is cut short (a worker shutting down cancels the
            # run while the database takes the lease): release it then too; a release only frees this run's lease.
            claiming = True
            await _claim(service, plan)
            output = await graph.ainvoke(plan.input, plan.config, context=plan.context)
    except HTTPException:
        raise
    except Exception as exc:
        kind = "timeout" if isinstance(exc, TimeoutError) else "error"
        return failure_output(service, plan, _failure_reason(service, plan, exc)), kind
    else:
        await _touch(service, plan)
    finally:
        if claiming:
            await _release(service, plan)
    return output, None


async def run_wait(request: Request) -> Response:
    """`POST /runs/wait` and `POST /threads/{id}/runs/wait`: run to the end and return the output values."""
    service = service_of(request)
    plan = await _plan(request, service)
    output, _ = await execute(service, plan)
    return Response(service.scrub(dumps(output)), media_type="application/json", headers=_location(plan))


def _location(plan: RunPlan) -> dict[str, str]:
    """The run's own path, which the SDK reads from `Content-Location` to learn the run id."""
    where = f"/threads/{plan.thread_id}" if plan.thread_id is not None else ""
    return {"Content-Location": f"{where}/runs/{plan.run_id}"}


async def _produce(graph: Any, plan: RunPlan, queue: asyncio.Queue[Any]) -> None:
    modes, subgraphs = list(dict.fromkeys(STREAM_MODES[m] for m in plan.stream_modes)), plan.subgraphs
    try:
        stream = graph.astream(plan.input, plan.config, context=plan.context, stream_mode=modes, subgraphs=subgraphs)
        async for part in stream:  # (namespace, mode, chunk) with subgraphs, the graph's own namespace being ()
            await queue.put(part if subgraphs else ((), *part))
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
                output = failure_output(service, plan, _failure_reason(service, plan, item))
                if "values" in plan.stream_modes:
                    yield sse("values", output, service)
                if "updates" in plan.stream_modes:
                    yield sse("updates", {"abstain": output}, service)
                return
            namespace, mode, chunk = item  # a subgraph's event is named `mode|namespace`, as LangGraph names it
            yield sse("|".join([mode, *namespace]), list(chunk) if mode == "messages" else chunk, service)
    finally:
        if not producer.done():
            producer.cancel()
            with contextlib.suppress(BaseException):
                await producer
        if failed is None:
            await _release(service, plan)


async def run_stream(request: Request) -> Response:
    """`POST /runs/stream` and `POST /threads/{id}/runs/stream`: server-sent events, one per graph event."""
    service = service_of(request)
    plan = await _plan(request, service)
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
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", **_location(plan)},
    )
