"""A run request of `fastcrag serve`, validated into a `RunPlan`: input, context, config, stream modes, strategy.

Everything a run may not do is refused here with 422, before a thread is touched or a lease taken: the graph never
interrupts, so commands, interrupts, webhooks and delayed starts are not served. A run on a thread may start from
one of its checkpoints (`checkpoint` or `checkpoint_id`): the graph then runs on from that state, a fork the thread's
history keeps beside the line it left.

With an `Auth` object (`access.py`), a valid request then goes through the `threads.create_run` handler
(`authorize_run`): it may refuse, add run metadata (which a thread the run creates takes on, as in LangGraph), or
return a filter that the run's thread must satisfy; and the run's `config["configurable"]` carries the caller
(`langgraph_auth_user`, `langgraph_auth_user_id`, `langgraph_auth_permissions`), as LangGraph passes it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from typing import Any

from langchain_core.messages import convert_to_messages
from pydantic import TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request

from fastcrag.config.settings import Context
from fastcrag.server.access import Caller, Filter, as_id, authorize, caller_of
from fastcrag.server.assistants import ASSISTANT_ID, check_assistant
from fastcrag.server.service import Service
from fastcrag.server.wire import read_json

CONTEXT: TypeAdapter[Context] = TypeAdapter(Context)
STREAM_MODES = {"values": "values", "updates": "updates", "custom": "custom", "debug": "debug"}
STREAM_MODES |= {"messages": "messages", "messages-tuple": "messages"}
"""The stream modes served, each mapped to the graph's own mode."""
MULTITASK = ("reject", "enqueue")
"""What a run does when its thread has a run in flight: fail with 409 (LangGraph's default), or wait its turn."""
UNSUPPORTED = ("command", "interrupt_before", "interrupt_after", "webhook")


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
    subgraphs: bool = False
    """Stream the subgraphs' events too (`stream_subgraphs`), each named `mode|namespace` (`updates|flare:<task>`)."""
    where: Filter | None = None
    """The auth filter the run's thread must satisfy (None: any thread)."""
    thread_metadata: dict[str, Any] = field(default_factory=dict)
    """Metadata a thread this run creates starts with (the `create_run` handler's run metadata)."""
    caller: Caller | None = None
    """Who asked for the run (None in the shared-key mode)."""

    def act_for(self, caller: Caller | None) -> None:
        """Run for `caller`: its identity goes into the run's `configurable`, as LangGraph passes it."""
        self.caller = caller
        if caller is not None:
            self.config["configurable"] = {**self.config.get("configurable", {}), **caller.configurable()}


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


def _checkpoint(body: dict[str, Any], thread_id: str | None) -> dict[str, str]:
    """The checkpoint a run starts from (`checkpoint`, as the SDK sends it, or a bare `checkpoint_id`), or none.

    Raises:
        HTTPException: 422 for a malformed one, or one named on a run without a thread.
    """
    given = body.get("checkpoint") or ({"checkpoint_id": body["checkpoint_id"]} if body.get("checkpoint_id") else {})
    if not given:
        return {}
    if not isinstance(given, dict) or not isinstance(given.get("checkpoint_id"), str):
        raise HTTPException(422, "checkpoint must be an object with a checkpoint_id string")
    if thread_id is None:
        raise HTTPException(422, "a run without a thread has no checkpoint to start from")
    try:
        uuid.UUID(given["checkpoint_id"])
    except ValueError:
        raise HTTPException(422, f"checkpoint_id {given['checkpoint_id'][:80]!r} is not a checkpoint id") from None
    namespace = given.get("checkpoint_ns") or ""
    if not isinstance(namespace, str):
        raise HTTPException(422, "checkpoint_ns must be a string")
    return {"checkpoint_id": given["checkpoint_id"], "checkpoint_ns": namespace}


def _run_config(value: Any, thread_id: str | None, run_id: str, checkpoint: dict[str, str]) -> dict[str, Any]:
    given = value if isinstance(value, dict) else {}
    config: dict[str, Any] = {"run_id": uuid.UUID(run_id), "metadata": {"run_id": run_id}}
    if isinstance(given.get("recursion_limit"), int) and not isinstance(given["recursion_limit"], bool):
        config["recursion_limit"] = max(1, min(int(given["recursion_limit"]), 100))
    if isinstance(given.get("tags"), list):
        config["tags"] = [t for t in given["tags"] if isinstance(t, str)][:20]
    if thread_id is not None:
        config["configurable"] = {"thread_id": thread_id, **checkpoint}
        config["metadata"]["thread_id"] = thread_id
    return config


async def plan_run(request: Request, service: Service, thread_id: str | None) -> RunPlan:
    """Read and validate a run request (on the thread `thread_id`, or on none).

    Raises:
        HTTPException: 404 for another assistant, 413 for a large body, 422 for anything not served or invalid.
    """
    body = await read_json(request, service.limits.max_body_bytes)
    plan = plan_of(body, thread_id)
    await authorize_run(request, plan, body)
    return plan


async def authorize_run(request: Request, plan: RunPlan, body: dict[str, Any]) -> dict[str, Any]:
    """Run the `threads.create_run` auth handler on a planned run; the run metadata (as the handler left it).

    The plan takes the handler's filter, the run metadata and the caller. In the shared-key mode nothing runs.

    Raises:
        HTTPException: 422 for metadata that is not an object; the handler refused (403) or failed.
    """
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise HTTPException(422, "metadata must be a JSON object")
    caller = caller_of(request)
    if caller is None:
        return metadata
    value: dict[str, Any] = {
        "thread_id": None if plan.thread_id is None else as_id(plan.thread_id),
        "assistant_id": uuid.UUID(ASSISTANT_ID),
        "run_id": uuid.UUID(plan.run_id),
        "status": "pending",
        "metadata": metadata,
        "prevent_insert_if_inflight": True,
        "multitask_strategy": plan.multitask,
        "if_not_exists": "create" if plan.create_thread else "reject",
        "after_seconds": 0,
        "kwargs": {k: body[k] for k in ("input", "config", "context", "stream_mode") if k in body},
    }
    plan.where = await authorize(request, "threads", "create_run", value)
    if not isinstance(value.get("metadata"), dict):
        raise HTTPException(500, "the server's auth handler for threads.create_run left metadata that is no object")
    plan.thread_metadata = dict(value["metadata"])
    plan.act_for(caller)
    return plan.thread_metadata


def plan_of(body: dict[str, Any], thread_id: str | None, run_id: str | None = None) -> RunPlan:
    """Validate a run request's body (a background run is planned again, under its id, by the worker that runs it).

    Raises:
        HTTPException: 404 for another assistant, 422 for anything not served or invalid.
    """
    check_assistant(body.get("assistant_id"))
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
    if body.get("stream_subgraphs") not in (None, True, False):
        raise HTTPException(422, "stream_subgraphs must be true or false")
    run_id = run_id or str(uuid.uuid4())
    return RunPlan(
        run_id=run_id,
        thread_id=thread_id,
        create_thread=if_not_exists == "create",
        input=_input(body.get("input")),
        context=_context(body.get("context")),
        config=_run_config(body.get("config"), thread_id, run_id, _checkpoint(body, thread_id)),
        stream_modes=_stream_modes(body.get("stream_mode")),
        multitask=multitask,
        subgraphs=bool(body.get("stream_subgraphs")),
    )
