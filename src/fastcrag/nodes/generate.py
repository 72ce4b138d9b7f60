"""Node `generate`: answer from the graded (or refined) passages, with citations and the decision trace."""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.generation.generators import generate_answer
from fastcrag.graph.state import Action, Citation, State, add_time, reply, trace
from fastcrag.nodes import Node


def action_of(state: State, cfg: RunConfig) -> Action:
    """The action that produced a generated answer (`plain` for plain RAG, `disabled` for threshold-only)."""
    if cfg.plain_rag:
        return "plain"
    if not cfg.crag_enabled:
        return "disabled"
    if state.get("rewrites", 0) and state.get("rewritten_query"):
        return "rewrite"
    return "refine" if state.get("strips_kept") is not None else "generate"


def trace_extra(parts: Components, cfg: RunConfig | None) -> dict[str, Any]:
    """Trace fields naming the grader and the thresholds this run used (None where they could not be resolved)."""
    try:
        name: str | None = parts.reranker().name
    except Exception:  # the failure itself is already in the trace
        name = None
    thresholds = {"reranker_threshold": cfg.reranker_threshold, "crag_upper": cfg.crag_upper} if cfg else None
    return {"reranker": name, "thresholds": thresholds}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def generate(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        """Generate; a generator failure or an empty answer becomes a `failure` (routed to abstain)."""
        started = time.perf_counter()
        cfg = parts.run_config(runtime.context)
        passages = list(state.get("context") or [])
        try:
            if not passages:
                raise ValueError("retrieval returned no passage" if cfg.plain_rag else "no passage passed grading")
            answer = generate_answer(parts.generator(), str(state["question"]), passages, abstain=not cfg.plain_rag)
            if not answer.text.strip():
                raise ValueError("the generator returned an empty answer")
        except Exception as exc:  # never an answer without grounding: abstain with the reason
            return {
                "failure": f"generation failed: {type(exc).__name__}: {exc}",
                "timings": add_time(state, "generate_ms", (time.perf_counter() - started) * 1000),
            }
        timings = add_time(state, "generate_ms", (time.perf_counter() - started) * 1000)
        citations: list[Citation] = []
        for i in answer.used:
            p = passages[i]
            if all(c["chunk_id"] != p["chunk_id"] for c in citations):
                citations.append({"chunk_id": p["chunk_id"], "source": p["source"], "score": round(p["score"], 6)})
        action = action_of(state, cfg)
        metrics.record(action, timings)
        return {
            "answer": answer.text.strip(),
            "citations": citations,
            "timings": timings,
            "crag": trace({**state, "timings": timings}, action, timings, trace_extra(parts, cfg)),
            **reply(state, answer.text.strip()),
        }

    return generate
