"""Node `drop` (FLARE mode): an uncertain sentence whose evidence graded INCORRECT is not asserted."""

from __future__ import annotations

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import ActiveRetrieval, FlareState


def drop(state: FlareState, run: Run) -> FlareState:
    """Leave the pending sentence out of the answer; the sentences drafted after it are still checked one by one.

    They are not drafted again: from the same passages the chat model would likely write the dropped sentence again.
    """
    retrievals: list[ActiveRetrieval] = list(state.get("flare") or [])
    if retrievals:
        retrievals[-1] = {**retrievals[-1], "action": "drop"}
    metrics.record_flare("drop")
    return {"pending": None, "found": [], "flare": retrievals}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, drop, "flare_ms")
