"""Node `rewrite`: ask the generator for a better search query under a JSON schema, once per cap."""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context
from fastcrag.graph.state import State, add_time
from fastcrag.nodes import Node


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form, to tell an unchanged rewrite."""
    return " ".join(text.casefold().split())


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def rewrite(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        """Rewrite the question; raising, empty or unchanged output is a `failure` (routed to abstain)."""
        started = time.perf_counter()
        question = str(state["question"])
        update: dict[str, Any] = {"rewrites": state.get("rewrites", 0) + 1}
        try:
            query = parts.generator().rewrite(question).strip()
        except Exception as exc:  # whatever the model does, the outcome is an abstention with a reason
            update["failure"] = f"rewrite failed: {type(exc).__name__}: {exc}"
        else:
            if not query:
                update["failure"] = "rewrite returned an empty query"
            elif normalise(query) == normalise(question):
                update["failure"] = "rewrite returned the query unchanged"
            else:
                update |= {"rewritten_query": query, "retry": True}
        update["timings"] = add_time(state, "crag_ms", (time.perf_counter() - started) * 1000)
        return update

    return rewrite
