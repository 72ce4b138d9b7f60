"""What every node shares: one wrapper that resolves the run's settings, guards them and times the stage."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.graph.state import State
from fastcrag.graph.nodes import Node


@dataclass(frozen=True)
class Run:
    """One node's run: the parts, the run's resolved settings, and the stage clock."""

    parts: Components
    cfg: RunConfig
    started: float

    def ms(self) -> float:
        """Milliseconds since the node started."""
        return (time.perf_counter() - self.started) * 1000


Body = Callable[[State, Run], dict[str, Any]]


def stage(parts: Components, body: Body, timed: str | None, on_start: Callable[[State], State] | None = None) -> Node:
    """A node running `body` with the run's settings; its time is added to the `timed` stage.

    Settings that cannot be resolved (an invalid calibration, an override out of bounds) become a `failure`, which
    routes to abstain, the same way in every node. A body that times itself returns its own `timings`.

    Args:
        parts: The components.
        body: The node's work: `(state, run) -> partial update`.
        timed: The stage the node's time counts to (`crag_ms`, `generate_ms`), or None.
        on_start: An update applied whatever happens next (retrieve: a fresh question's trace); the body still
            reads the state as it was.
    """

    def node(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        started = time.perf_counter()
        first: dict[str, Any] = dict(on_start(state)) if on_start else {}
        try:
            cfg = parts.run_config(runtime.context)
        except Exception as exc:  # the reason travels in the trace; abstain needs no settings to answer
            return first | {"failure": str(exc)}
        update = body(state, Run(parts, cfg, started))
        own = update.pop("timings", None)
        if own is None and timed:
            own = {timed: (time.perf_counter() - started) * 1000}
        timings = {**first.get("timings", {}), **(own or {})}
        return first | update | ({"timings": timings} if timings else {})

    node.__name__ = getattr(body, "__name__", "node")
    return node


def provenance(parts: Components, cfg: RunConfig | None) -> dict[str, Any]:
    """Trace fields naming the grader and the thresholds a run used (None where they could not be resolved)."""
    try:
        name: str | None = parts.reranker().name
    except Exception:  # the failure itself is already in the trace
        name = None
    thresholds = (
        {
            "reranker_threshold": cfg.reranker_threshold,
            "crag_upper": cfg.crag_upper,
            "condition_factor": cfg.condition_factor,
        }
        if cfg
        else None
    )
    return {"reranker": name, "thresholds": thresholds}
