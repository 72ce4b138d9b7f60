"""Node `grade`: place the top reranker score in a band and give every candidate its verdict."""

from __future__ import annotations

from langgraph.config import get_stream_writer

from fastcrag.components import Components
from fastcrag.grading.bands import UNGRADED, band_of
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import Candidate, Passage, State, Verdict


def verdict_of(c: Candidate, lo: float, hi: float) -> Verdict:
    """A candidate's grade for the trace: its band by the run's rule (or `UNGRADED`), and what it does not state."""
    if c.get("ungraded"):
        return {"chunk_id": c["chunk_id"], "source": c["source"], "score": None, "verdict": UNGRADED}
    out: Verdict = {
        "chunk_id": c["chunk_id"],
        "source": c["source"],
        "score": round(c["score"], 6),
        "verdict": band_of(c["score"], lo, hi),
    }
    return out | ({"unmet": c["unmet"]} if c.get("unmet") else {})


def grade(state: State, run: Run) -> State:
    """Two comparisons per candidate; INCORRECT candidates never reach the generator, except in plain RAG."""
    if state.get("failure"):
        return {}
    cfg = run.cfg
    lo, hi = cfg.reranker_threshold, cfg.crag_upper
    candidates = state.get("candidates") or []
    verdicts = [verdict_of(c, lo, hi) for c in candidates]
    top = max((c["score"] for c in candidates if not c.get("ungraded")), default=0.0)  # the order may mix in ranks
    band = band_of(top, lo, hi)
    # Candidates come best first (retrieve orders them). Plain RAG hands the top_n to the generator, any verdict.
    kept = (
        candidates
        if cfg.plain_rag
        else [c for c, v in zip(candidates, verdicts, strict=True) if v["verdict"] not in ("INCORRECT", UNGRADED)]
    )
    context = [
        Passage(chunk_id=c["chunk_id"], source=c["source"], text=c["text"], score=c["score"]) for c in kept[: cfg.top_n]
    ]
    scores = [v["score"] for v in verdicts if v["score"] is not None]
    get_stream_writer()({"event": "graded", "band": band, "top_score": top, "scores": scores})
    update: State = {"band": band, "top_score": round(top, 6), "verdicts": verdicts, "context": context}
    if not cfg.crag_enabled:  # the uncorrected paths name themselves; with CRAG on, the node taking an action does
        update["action"] = "plain" if cfg.plain_rag else "disabled"
    return update


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, grade, "crag_ms")
