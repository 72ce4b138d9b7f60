"""What every node shares: the wrapper that resolves the run's settings and times the node, and the trace.

Timing, the one protocol: `timings` holds this question's milliseconds per stage. A node's whole time goes to its
stage (`timed`), unless its body charges stages itself with `Run.charge` (retrieve splits its time between
retrieval and reranking; generate charges before it writes the trace). The wrapper then writes the totals so far
to `timings`: the state's, or none at a new question (intake sets them to `{}`), plus this node's charges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.generation.markdown import chat_message
from fastcrag.graph.nodes import Node
from fastcrag.graph.state import Action, FlareState, Stage, State, Trace


@dataclass
class Run:
    """One node's run: the parts, the run's resolved settings, the node's clock and the stage times it charged."""

    parts: Components
    cfg: RunConfig
    started: float
    base: dict[str, float]
    """The question's stage times before this node."""
    charged: dict[str, float] = field(default_factory=dict)
    """The milliseconds this node charged, by stage."""

    def ms(self) -> float:
        """Milliseconds since the node started."""
        return (time.perf_counter() - self.started) * 1000

    def charge(self, stage: Stage, ms: float) -> None:
        """Add `ms` to `stage`."""
        self.charged[stage] = self.charged.get(stage, 0.0) + ms

    def timings(self) -> dict[str, float]:
        """The question's stage times so far: the state's plus this node's charges."""
        totals = dict(self.base)
        for stage, ms in self.charged.items():
            totals[stage] = round(totals.get(stage, 0.0) + ms, 3)
        return totals


S = TypeVar("S", bound=State)
"""The state a node reads: the graph's, or the FLARE subgraph's (a TypeVar, so that LangGraph filters neither)."""


def stage(parts: Components, body: Callable[[S, Run], State], timed: Stage | None) -> Node:
    """A node running `body` with the run's settings, its time charged to the `timed` stage.

    Settings that cannot be resolved (an invalid calibration, an override out of bounds) become a `failure`, which
    routes to abstain, the same way in every node.

    Args:
        parts: The components.
        body: The node's work: `(state, run) -> partial update`.
        timed: The stage the node's time counts to when the body charges none itself, or None.
    """

    def node(state: S, *, runtime: Runtime[Context]) -> State:
        started = time.perf_counter()
        try:
            cfg = parts.run_config(runtime.context)
        except Exception as exc:  # the reason travels in the trace; abstain needs no settings to answer
            return {"failure": {"code": "settings", "message": str(exc)}}
        read: State = state
        run = Run(parts, cfg, started, dict(read.get("timings") or {}))
        update: State = body(state, run)
        if timed and not run.charged:
            run.charge(timed, run.ms())
        return update | ({"timings": run.timings()} if run.charged else {})

    node.__name__ = getattr(body, "__name__", "node")
    return node


def trace(
    state: State,
    action: Action,
    timings: dict[str, float],
    parts: Components,
    cfg: RunConfig | None,
    flare_stop: str | None = None,
) -> Trace:
    """The `crag` decision trace returned with every answer: what the run did, with which grader and thresholds.

    A FLARE-mode run's trace also lists its active retrievals (`flare`), why writing stopped and their stage time.

    Args:
        state: The run's state.
        action: The path's action.
        timings: The question's stage times.
        parts: The components (the grader's name).
        cfg: The run's settings (its thresholds), or None where they could not be resolved.
        flare_stop: FLARE mode: why writing stopped (None: the run did not reach the answer).
    """
    try:
        reranker: str | None = parts.reranker().name
    except Exception:  # the failure itself is already in the trace
        reranker = None
    out: Trace = {
        "action": action,
        "band": state.get("band"),
        "top_score": state.get("top_score"),
        "strips_kept": state.get("strips_kept") or 0,
        "rewritten_query": state.get("rewritten_query"),
        "rewriter": state.get("rewriter"),
        "retrieval": state.get("retrieval"),
        "verdicts": state.get("verdicts") or [],
        "timings": {
            "retrieve_ms": round(timings.get("retrieve_ms", 0.0), 3),
            "rerank_ms": round(timings.get("rerank_ms", 0.0), 3),
            "crag_ms": round(timings.get("crag_ms", 0.0), 3),
            "generate_ms": round(timings.get("generate_ms", 0.0), 3),
        },
        "failure": failure["message"] if (failure := state.get("failure")) else None,
        "failure_code": failure["code"] if failure else None,
        "question": state.get("question"),
        "conversation": state.get("conversation"),
        "reranker": reranker,
        "thresholds": (
            {
                "reranker_threshold": cfg.reranker_threshold,
                "crag_upper": cfg.crag_upper,
                "condition_factor": cfg.condition_factor,
            }
            if cfg
            else None
        ),
    }
    if cfg is not None and cfg.flare:
        out["timings"]["flare_ms"] = round(timings.get("flare_ms", 0.0), 3)
        out["flare"] = list(cast(FlareState, state).get("flare") or [])
        out["flare_stop"] = flare_stop
    return out


def reply(
    state: State, answer: str, sources: Sequence[str] = (), quoted: bool = False, message_id: str | None = None
) -> State:
    """The AI message to append when the question came as chat messages (nothing otherwise).

    Args:
        state: The state; a reply is made only for chat input.
        answer: The answer, as plain text.
        sources: The sources the answer rests on, listed at the end of the message.
        quoted: The answer quotes passages verbatim (the extractive generator), so Markdown marks in it are text
            to show as they are; a chat model's own Markdown is kept.
        message_id: The id of the chat model's message whose tokens were streamed: the reply takes it, so a chat
            client replaces the streamed text with the reply instead of showing both.
    """
    if not state.get("messages"):
        return {}
    return {"messages": [AIMessage(content=chat_message(answer, sources, escape=quoted), id=message_id)]}
