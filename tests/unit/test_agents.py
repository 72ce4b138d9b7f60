"""fastcrag in chat agents: `as_tool` under `create_agent`, and the graph as a subgraph of an agent-style parent."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pydantic import Field

from fastcrag import build_graph
from fastcrag.agents import NOT_FOUND, as_tool, format_result
from fastcrag.config.settings import Context, Settings

from fakes import CALIBRATION, FakeChat, ListRetriever, ScriptedReranker, doc

GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."
BAD = "Bananas are yellow fruit grown in the tropics."


def crag(scores: dict[str, float], answer: str = "It is in Paris.") -> Any:
    return build_graph(
        retriever=ListRetriever(docs=[doc(GOOD, "c1", "eiffel.txt"), doc(BAD, "c2", "fruit.txt")]),
        reranker=ScriptedReranker(scores),
        llm=FakeChat(answer=answer),
        calibration=CALIBRATION,
        settings=Settings(),
    )


class ToolCallingChat(BaseChatModel):
    """A tool-calling chat model: calls the first bound tool with the user's question, then answers from the
    tool's result (saying plainly when the knowledge base had nothing)."""

    tool_names: list[str] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        names = [getattr(t, "name", None) or t["function"]["name"] for t in tools]
        return self.model_copy(update={"tool_names": names, "seen": self.seen})

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            text = str(last.content)
            reply = (
                "That is not in my knowledge base, so I won't guess."
                if text.startswith(NOT_FOUND)
                else f"According to the knowledge base: {text}"
            )
            message = AIMessage(content=reply)
        else:
            question = str(last.content)
            message = AIMessage(
                content="",
                tool_calls=[{"name": self.tool_names[0], "args": {"question": question}, "id": "call_1"}],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def agent_for(tool: Any) -> tuple[Any, ToolCallingChat]:
    from langchain.agents import create_agent

    model = ToolCallingChat()
    return create_agent(model, [tool], system_prompt="Use the knowledge base for facts."), model


def test_tool_answers_with_citations_inside_create_agent() -> None:
    tool = as_tool(crag({"Eiffel": 0.9}))
    agent, _model = agent_for(tool)
    out = agent.invoke({"messages": [HumanMessage("Where is the Eiffel Tower?")]})
    types = [m.type for m in out["messages"]]
    assert types == ["human", "ai", "tool", "ai"]
    tool_message = out["messages"][2]
    assert tool_message.name == "search_knowledge_base"
    assert tool_message.content.startswith("It is in Paris.")
    assert "[1] eiffel.txt (chunk c1, score 0.900)" in tool_message.content
    assert tool_message.artifact["crag"]["action"] == "generate"  # the whole result, for the application
    assert tool_message.artifact["citations"] == [{"chunk_id": "c1", "source": "eiffel.txt", "score": 0.9}]
    assert out["messages"][-1].content.startswith("According to the knowledge base: It is in Paris.")


def test_tool_says_not_in_knowledge_base_and_the_agent_acts_on_it() -> None:
    tool = as_tool(crag({}))  # every candidate scores below the lower threshold: abstain after the rewrite cap
    agent, _model = agent_for(tool)
    out = agent.invoke({"messages": [HumanMessage("Who won the 2018 FIFA World Cup?")]})
    tool_message = out["messages"][2]
    assert tool_message.content.startswith(f"{NOT_FOUND}:")
    assert "It is in Paris" not in tool_message.content
    assert tool_message.artifact["crag"]["action"] == "abstain"
    assert out["messages"][-1].content == "That is not in my knowledge base, so I won't guess."


def test_tool_async_path_and_per_run_context() -> None:
    # crag_upper raised above the top score: the same evidence is refined instead of generated at once.
    tool = as_tool(crag({"Eiffel": 0.9}), context=Context(crag_upper=0.95), name="kb", max_citations=1)
    assert tool.name == "kb"
    agent, _model = agent_for(tool)
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Where is the Eiffel Tower?")]}))
    assert out["messages"][2].artifact["crag"]["band"] == "AMBIGUOUS"
    assert out["messages"][2].artifact["crag"]["action"] == "refine"


def test_tool_schema_and_build_kwargs() -> None:
    tool = as_tool(
        retriever=ListRetriever(docs=[doc(GOOD, "c1")]),
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=FakeChat(answer="Paris."),
        calibration=CALIBRATION,
    )
    assert set(tool.get_input_jsonschema()["properties"]) == {"question"}
    assert "NOT_IN_KNOWLEDGE_BASE" in tool.description
    call = {"name": tool.name, "args": {"question": "Where is the Eiffel Tower?"}, "id": "x", "type": "tool_call"}
    message = tool.invoke(call)
    assert isinstance(message, ToolMessage) and message.content.startswith("Paris.")
    with pytest.raises(TypeError):
        as_tool(crag({}), llm="extractive")


def test_format_result_of_a_failure_names_the_reason() -> None:
    text = format_result({"answer": "I don't know.", "citations": [], "crag": {"action": "abstain", "failure": "x"}})
    assert text.startswith(NOT_FOUND) and "(x)" in text


class Chat(MessagesState):
    """The parent agent's state: the conversation and the router's decision."""

    route: str


def router(state: Chat) -> dict[str, Any]:
    text = str(state["messages"][-1].content).lower()
    return {"route": "smalltalk" if text.startswith(("hi", "thanks")) else "crag"}


def pick(state: Chat) -> Literal["crag", "smalltalk"]:
    return "smalltalk" if state["route"] == "smalltalk" else "crag"


def smalltalk(state: Chat) -> dict[str, Any]:
    return {"messages": [AIMessage("Hello! Ask me about the knowledge base.")]}


def test_subgraph_of_an_agent_style_parent_across_turns() -> None:
    """A router (the agent) sends factual turns to the CRAG subgraph and small talk elsewhere; a checkpointer keeps
    the conversation, and each turn's question is that turn's last human message."""
    parent = StateGraph(Chat)
    parent.add_node("router", router)
    retriever = ListRetriever(docs=[doc(GOOD, "c1", "eiffel.txt")])
    subgraph = build_graph(
        retriever=retriever,
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=FakeChat(answer="It is in Paris."),
        calibration=CALIBRATION,
        settings=Settings(),
    )
    parent.add_node("crag", subgraph)
    parent.add_node("smalltalk", smalltalk)
    parent.add_edge(START, "router")
    parent.add_conditional_edges("router", pick)
    parent.add_edge("crag", END)
    parent.add_edge("smalltalk", END)
    app = parent.compile(checkpointer=InMemorySaver())
    cfg: Any = {"configurable": {"thread_id": "t1"}}

    app.invoke({"messages": [HumanMessage("hi there")]}, cfg)
    out = app.invoke({"messages": [HumanMessage("Where is the Eiffel Tower?")]}, cfg)
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
    # the chat reply ends with the sources it rests on (the `answer` field stays plain)
    assert out["messages"][-1].content == "It is in Paris.\n\nSources:\n\n1. [eiffel.txt](<eiffel.txt>)"
    assert retriever.queries == ["Where is the Eiffel Tower?"]  # small talk never reached retrieval
    out = app.invoke({"messages": [HumanMessage("When was the Eiffel Tower completed?")]}, cfg)
    assert retriever.queries[-1] == "When was the Eiffel Tower completed?"  # each turn's own question
    assert [m.type for m in out["messages"]] == ["human", "ai"] * 3
    assert "crag" not in out  # the parent keeps its own schema; the trace stays inside the subgraph
