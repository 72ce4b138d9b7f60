"""Node `rewrite`: a better search query, once per cap: the chat model under a JSON schema, else keywords."""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context
from fastcrag.generation.rewriters import keyword_rewrite
from fastcrag.graph.state import State, add_time
from fastcrag.nodes import Node
from fastcrag.retrieval.hybrid import HybridRetriever


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form, to tell an unchanged rewrite."""
    return " ".join(text.casefold().split())


def make(parts: Components) -> Node:
    """Build the node over `parts`."""

    def llm_rewrite(question: str) -> tuple[str | None, str]:
        """The chat model's rewrite, or None and why it gave none."""
        try:
            query = parts.generator().rewrite(question).strip()
        except Exception as exc:  # whatever the model does, the keyword rewrite or an abstention follows
            return None, f"{type(exc).__name__}: {exc}"
        if not query:
            return None, "it returned an empty query"
        if normalise(query) == normalise(question):
            return None, "it returned the query unchanged"
        return query, ""

    def rewrite(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        """Rewrite the question; when neither rewriter gives a new query, a `failure` (routed to abstain)."""
        started = time.perf_counter()
        question = str(state["question"])
        update: dict[str, Any] = {"rewrites": state.get("rewrites", 0) + 1}
        query, why = llm_rewrite(question)
        if query is not None:
            update |= {"rewritten_query": query, "rewriter": "llm", "retry": True}
        else:
            retriever = parts.retriever()
            idf = retriever.idf() if isinstance(retriever, HybridRetriever) else None
            # candidates are best first (retrieve sorts them); keyword_rewrite reads the top few
            keywords = keyword_rewrite(question, [c["text"] for c in state.get("candidates") or []], idf)
            if keywords and normalise(keywords) != normalise(question):
                update |= {"rewritten_query": keywords, "rewriter": "keyword", "retry": True}
            else:
                update["failure"] = f"rewrite failed: the chat model gave no rewrite ({why}); no keywords to search"
        update["timings"] = add_time(state, "crag_ms", (time.perf_counter() - started) * 1000)
        return update

    return rewrite
