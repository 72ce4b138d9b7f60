"""Node `abstain`: the fixed "I don't know" answer, with the trace saying why."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.graph.state import State, reply, trace
from fastcrag.nodes import Node
from fastcrag.nodes.generate import trace_extra


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def abstain(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        """Answer with the abstention message and no citations."""
        cfg: RunConfig | None
        try:
            cfg = parts.run_config(runtime.context)
        except Exception:  # even with broken calibration or overrides, abstaining must succeed
            cfg = None
        message = cfg.abstain_message if cfg else parts.settings.abstain_message
        timings = dict(state.get("timings") or {})
        metrics.record("abstain", timings)
        return {
            **reply(state, message),
            "answer": message,
            "citations": [],
            "crag": trace(state, "abstain", timings, trace_extra(parts, cfg)),
        }

    return abstain
