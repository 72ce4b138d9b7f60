"""Node `rewrite`: a better search query, once per cap: the chat model under a JSON schema, else keywords."""

from __future__ import annotations

from fastcrag.components import Components
from fastcrag.generation.rewriters import keyword_rewrite
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import State
from fastcrag.retrieval.hybrid import TermWeights
from fastcrag.retrieval.text import normalise


def llm_rewrite(parts: Components, question: str) -> tuple[str | None, str]:
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


def rewrite(state: State, run: Run) -> State:
    """Rewrite the question; when neither rewriter gives a new query, a `failure` (routed to abstain)."""
    question = str(state["question"])
    update: State = {"rewrites": state.get("rewrites", 0) + 1}
    query, why = llm_rewrite(run.parts, question)
    if query is not None:
        return update | {"rewritten_query": query, "query": query, "rewriter": "llm", "action": "rewrite"}
    retriever = run.parts.retriever()
    idf = retriever.idf() if isinstance(retriever, TermWeights) else None
    # candidates are best first (retrieve sorts them); keyword_rewrite reads the top few
    keywords = keyword_rewrite(question, [c["text"] for c in state.get("candidates") or []], idf)
    if keywords and normalise(keywords) != normalise(question):
        return update | {"rewritten_query": keywords, "query": keywords, "rewriter": "keyword", "action": "rewrite"}
    why = f"rewrite failed: the chat model gave no rewrite ({why}); no keywords to search"
    return update | {"failure": {"code": "rewrite", "message": why}}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, rewrite, "crag_ms")
