"""Node `compose` (FLARE mode): the kept sentences as the answer, with citations and the decision trace."""

from __future__ import annotations

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, reply, stage, trace
from fastcrag.graph.state import Citation, FlareState, State


def compose(state: FlareState, run: Run) -> State:
    """Join the kept sentences; cite every passage of the context (as the chat generator does).

    No kept sentence is a `failure` (routed to abstain): nothing was asserted.
    """
    sentences = list(state.get("sentences") or [])
    retrievals = state.get("flare") or []
    if not sentences:
        dropped = sum(1 for r in retrievals if r["action"] == "drop")
        why = f"FLARE asserted no sentence ({dropped} dropped after their evidence graded INCORRECT or could not be "
        why += "searched; an uncertain one left at the retrieval cap is never asserted)"
        return {"failure": {"code": "generation", "message": why}}
    if state.get("pending") is not None:
        stop = "retrieval cap"
    elif state.get("ahead"):
        stop = "sentence cap"
    else:
        stop = "end"
    text = " ".join(sentences)
    citations: list[Citation] = []
    for p in state.get("context") or []:
        if all(c["chunk_id"] != p["chunk_id"] for c in citations):
            citations.append({"chunk_id": p["chunk_id"], "source": p["source"], "score": round(p["score"], 6)})
    timings = run.timings()
    action = state.get("action") or "generate"
    metrics.record(action, timings)
    out: State = {
        "answer": text,
        "citations": citations,
        "crag": trace(state, action, timings, run.parts, run.cfg, stop),
    }
    return out | reply(state, text, [c["source"] for c in citations])


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, compose, None)
