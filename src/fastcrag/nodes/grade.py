"""Node `grade`: place the top reranker score in a band and give every candidate its verdict."""

from __future__ import annotations

import time
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context
from fastcrag.graph.state import Passage, State, add_time, band_of
from fastcrag.nodes import Node


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def grade(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        """Two comparisons per candidate; INCORRECT candidates never reach the generator, except in plain RAG."""
        started = time.perf_counter()
        if state.get("failure"):
            return {}
        try:
            cfg = parts.run_config(runtime.context)
        except Exception as exc:  # invalid calibration or overrides: abstain, naming the cause
            return {"failure": str(exc)}
        lo, hi = cfg.reranker_threshold, cfg.crag_upper
        candidates = state.get("candidates") or []
        verdicts = [
            {
                "chunk_id": c["chunk_id"],
                "source": c["source"],
                "score": round(c["score"], 6),
                "verdict": band_of(c["score"], lo, hi),
            }
            for c in candidates
        ]
        top = candidates[0]["score"] if candidates else 0.0
        band = band_of(top, lo, hi)
        # Candidates come best first. Plain RAG hands the top_n to the generator whatever their verdict.
        kept = (
            candidates
            if cfg.plain_rag
            else [c for c, v in zip(candidates, verdicts, strict=True) if v["verdict"] != "INCORRECT"]
        )
        context = [
            Passage(chunk_id=c["chunk_id"], source=c["source"], text=c["text"], score=c["score"])
            for c in kept[: cfg.top_n]
        ]
        get_stream_writer()(
            {"event": "graded", "band": band, "top_score": top, "scores": [v["score"] for v in verdicts]}
        )
        timings = add_time(state, "crag_ms", (time.perf_counter() - started) * 1000)
        return {
            "band": band,
            "top_score": round(top, 6),
            "verdicts": verdicts,
            "context": context,
            "timings": timings,
        }

    return grade
