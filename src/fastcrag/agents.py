"""fastcrag inside chat agents: the CRAG graph as a LangChain tool that answers with citations or says "not found"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

NOT_FOUND = "NOT_IN_KNOWLEDGE_BASE"
DEFAULT_NAME = "search_knowledge_base"
DEFAULT_DESCRIPTION = (
    "Answer a factual question from the knowledge base, with citations. The retrieved evidence is graded first: "
    f"when the knowledge base does not hold the answer, the result starts with {NOT_FOUND} and gives no answer; "
    "then tell the user it is not in the knowledge base (or rephrase the question once). Pass one self-contained "
    "question, not a conversation."
)


class QuestionInput(BaseModel):
    """The tool's arguments."""

    question: str = Field(description="One self-contained question, with the names it is about spelled out.")


def answered(result: Mapping[str, Any]) -> bool:
    """Whether a graph result is a grounded answer (not an abstention)."""
    crag = result.get("crag") or {}
    return crag.get("action") != "abstain" and bool(result.get("citations"))


def format_result(result: Mapping[str, Any], *, max_citations: int = 5) -> str:
    """The text a chat model reads: the answer and its numbered sources, or an explicit not-found notice.

    Args:
        result: The graph's output (`answer`, `citations`, `crag`).
        max_citations: Sources listed at most.
    """
    crag = result.get("crag") or {}
    if not answered(result):
        why = crag.get("failure") or (
            f"the best passage scored {crag['top_score']:.3f}, below the grounding threshold"
            if isinstance(crag.get("top_score"), float | int)
            else "no passage passed grading"
        )
        return (
            f"{NOT_FOUND}: the knowledge base holds no passage that answers this question ({why}). "
            "Do not make up an answer from it."
        )
    lines = [str(result.get("answer", "")).strip(), "", "Sources:"]
    for i, c in enumerate(list(result.get("citations") or [])[:max_citations], 1):
        lines.append(f"[{i}] {c['source']} (chunk {c['chunk_id']}, score {float(c['score']):.3f})")
    return "\n".join(lines)


def as_tool(
    graph: Any = None,
    *,
    name: str = DEFAULT_NAME,
    description: str = DEFAULT_DESCRIPTION,
    context: Any = None,
    max_citations: int = 5,
    **build_kwargs: Any,
) -> BaseTool:
    """The CRAG graph as a LangChain tool for `langchain.agents.create_agent` (or any tool-calling agent).

    The tool returns its text as the ToolMessage content (what the model reads) and the whole graph result
    (`answer`, `citations`, `crag`) as the ToolMessage artifact, for the application.

    Args:
        graph: A compiled fastcrag graph; built with `build_graph(**build_kwargs)` when None (loads no model yet).
        name: The tool name the model calls.
        description: What the model is told the tool does.
        context: Per-run overrides (`fastcrag.config.Context` or a mapping) applied to every call.
        max_citations: Sources listed in the tool's text at most.
        **build_kwargs: Passed to `build_graph` when no graph is given (retriever, reranker, llm, ...).

    Returns:
        A tool with sync and async entry points, taking `{"question": str}`.
    """
    if graph is None:
        from fastcrag.graph.builder import build_graph

        graph = build_graph(**build_kwargs)
    elif build_kwargs:
        raise TypeError(f"build_graph arguments given with a graph: {sorted(build_kwargs)}")

    def ask(question: str) -> tuple[str, dict[str, Any]]:
        result = dict(graph.invoke({"question": question}, context=context))
        result.pop("messages", None)
        return format_result(result, max_citations=max_citations), result

    async def aask(question: str) -> tuple[str, dict[str, Any]]:
        result = dict(await graph.ainvoke({"question": question}, context=context))
        result.pop("messages", None)
        return format_result(result, max_citations=max_citations), result

    return StructuredTool.from_function(
        func=ask,
        coroutine=aask,
        name=name,
        description=description,
        args_schema=QuestionInput,
        response_format="content_and_artifact",
    )
