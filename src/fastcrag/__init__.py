"""fastcrag: Corrective RAG as a LangGraph state machine, graded by a cross-encoder reranker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["as_tool", "build_graph"]

if TYPE_CHECKING:
    from fastcrag.agents import as_tool
    from fastcrag.graph.builder import build_graph


def __getattr__(name: str) -> Any:
    if name == "build_graph":
        from fastcrag.graph.builder import build_graph

        return build_graph
    if name == "as_tool":
        from fastcrag.agents import as_tool

        return as_tool
    raise AttributeError(f"module 'fastcrag' has no attribute {name!r}")
