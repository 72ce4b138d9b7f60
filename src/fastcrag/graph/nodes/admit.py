"""Node `admit` (FLARE mode): add an active retrieval's CORRECT or AMBIGUOUS evidence to the context."""

from __future__ import annotations

import time

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.lookup import SentenceEvidence
from fastcrag.graph.nodes.refine import strips, usable
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import ActiveRetrieval, FlareAction, FlareState


def admit(state: FlareState, run: Run) -> FlareState:
    """Add the evidence (AMBIGUOUS refined into strips) and have the sentence written again.

    Strips are kept as `refine` keeps them, graded as the lookup graded (`SentenceEvidence`). Candidates below
    `reranker_threshold` never reach the context; at most `top_n` passages not already in it are added. When no strip
    survives refinement, the usable candidates are added unchanged (as `refine` does). A refinement that fails is a
    `failure` (routed to abstain).
    """
    cfg = run.cfg
    retrievals: list[ActiveRetrieval] = list(state.get("flare") or [])
    if not retrievals:  # routing sends only a graded active retrieval here
        return {"failure": {"code": "generation", "message": "no active retrieval to admit"}}
    entry = retrievals[-1]
    found = list(state.get("found") or [])
    kept = usable(found, cfg.reranker_threshold)
    started = time.perf_counter()
    refine_ms = 0.0
    passages = kept
    if entry["band"] == "AMBIGUOUS":
        try:
            grader = SentenceEvidence(run.parts.reranker(), str(state["question"]), cfg.condition_factor)
            passages = strips(grader, entry["query"], found, cfg)[0] or kept
        except Exception as exc:
            return {"failure": {"code": "grading", "message": f"refinement failed: {exc}"}}
        refine_ms = round((time.perf_counter() - started) * 1000, 3)
    context = list(state.get("context") or [])
    have = {(p.get("chunk_id"), p.get("text")) for p in context}
    added = [p for p in passages if (p["chunk_id"], p["text"]) not in have][: cfg.top_n]
    action: FlareAction = "refine" if entry["band"] == "AMBIGUOUS" else "add"
    retrievals[-1] = {
        **entry,
        "action": action,
        "added": list(dict.fromkeys(p["chunk_id"] for p in added)),
        "timings": {**entry["timings"], "refine_ms": refine_ms},
    }
    metrics.record_flare(action)
    return {"context": context + added, "ahead": None, "found": [], "flare": retrievals}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, admit, "flare_ms")
