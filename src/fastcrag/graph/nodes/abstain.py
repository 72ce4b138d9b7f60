"""Node `abstain`: the fixed "I don't know" answer, with the trace saying why."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import S, reply, trace
from fastcrag.graph.state import State


def abstention(parts: Components, state: State, context: Any) -> State:
    """The abstention result: the message, no citations, the trace (counted as an `abstain` action).

    The abstain node returns it, and a server returns it for a run that could not finish (`state` then holds only
    the `failure` and the input's `messages`). It succeeds whatever else is broken: settings that cannot be resolved
    fall back to the process settings' message, and the trace names no thresholds.
    """
    cfg: RunConfig | None
    try:
        cfg = parts.run_config(context)
    except Exception:  # even with broken calibration or overrides, abstaining must succeed
        cfg = None
    message = cfg.abstain_message if cfg else parts.settings.abstain_message
    timings = dict(state.get("timings") or {})
    metrics.record("abstain", timings)
    out: State = {"answer": message, "citations": [], "crag": trace(state, "abstain", timings, parts, cfg)}
    return reply(state, message) | out


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def abstain(state: S, *, runtime: Runtime[Context]) -> State:
        """Answer with the abstention message and no citations."""
        return abstention(parts, state, runtime.context)

    return abstain
