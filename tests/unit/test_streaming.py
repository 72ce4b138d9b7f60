"""Streaming, async and persistence: node updates, the early `graded` event, ainvoke/astream, SQLite threads."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from fastcrag import build_graph
from fastcrag.config.settings import Settings

from fakes import CALIBRATION, FakeChat, ListRetriever, ScriptedReranker, doc

REPLY = "Paris.\n\nSources:\n\n1. [doc.txt](<doc.txt>)"  # the chat reply ends with its sources
GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."
MIXED = "Paris has many museums. The Eiffel Tower is 330 metres tall. Bread is sold daily."
BAD = "Bananas are yellow fruit grown in the tropics."
TESTS = Path(__file__).resolve().parents[1]


class SlowChat(FakeChat):
    """A chat model that takes `delay` seconds per answer."""

    delay: float = 0.4

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        time.sleep(self.delay)
        return super()._generate(messages, stop, run_manager, **kwargs)


def graph_for(scores: dict[str, float], docs: list[Any] | None = None, **kwargs: Any) -> Any:
    return build_graph(
        retriever=ListRetriever(docs=docs or [doc(GOOD, "c1"), doc(BAD, "c2")]),
        reranker=ScriptedReranker(scores),
        llm=kwargs.pop("llm", None) or FakeChat(rewrite={"query": "Eiffel Tower location Paris"}),
        calibration=CALIBRATION,
        settings=Settings(),
        **kwargs,
    )


@pytest.mark.parametrize(
    ("scores", "docs", "path"),
    [
        ({"Eiffel": 0.9}, None, ["retrieve", "grade", "generate"]),
        ({"330 metres": 0.6, "Eiffel": 0.5}, [doc(MIXED, "m1")], ["retrieve", "grade", "refine", "generate"]),
        ({}, None, ["retrieve", "grade", "rewrite", "retrieve", "grade", "abstain"]),
    ],
    ids=["correct", "ambiguous", "incorrect"],
)
def test_updates_stream_shows_each_node(scores: dict[str, float], docs: Any, path: list[str]) -> None:
    graph = graph_for(scores, docs)
    chunks = list(graph.stream({"question": "How tall is the Eiffel Tower?"}, stream_mode="updates"))
    assert [next(iter(c)) for c in chunks] == path
    grade = next(c["grade"] for c in chunks if "grade" in c)
    assert grade["band"] in {"CORRECT", "AMBIGUOUS", "INCORRECT"} and grade["verdicts"]
    last = chunks[-1][path[-1]]
    assert last["crag"]["action"] in {"generate", "refine", "abstain"}


@pytest.mark.load
def test_graded_event_arrives_before_generation_finishes() -> None:
    graph = graph_for({"Eiffel": 0.9}, llm=SlowChat(delay=0.5))
    started = time.perf_counter()
    seen: list[tuple[float, str, Any]] = []
    for mode, payload in graph.stream({"question": "Where is the Eiffel Tower?"}, stream_mode=["custom", "updates"]):
        seen.append((time.perf_counter() - started, mode, payload))
    graded = [(t, p) for t, m, p in seen if m == "custom"]
    assert len(graded) == 1
    at, event = graded[0]
    assert event == {"event": "graded", "band": "CORRECT", "top_score": 0.9, "scores": [0.9, 0.05]}
    finished = seen[-1][0]
    assert seen[-1][1] == "updates" and "generate" in seen[-1][2]
    assert finished - at >= 0.4, f"graded at {at:.3f}s, finished at {finished:.3f}s"  # not held back to the end


def test_ainvoke_and_astream() -> None:
    graph = graph_for({"Eiffel": 0.9})

    async def run() -> tuple[dict[str, Any], list[tuple[str, Any]]]:
        out = await graph.ainvoke({"question": "Where is the Eiffel Tower?"})
        chunks = [c async for c in graph.astream({"question": "Where is it?"}, stream_mode=["updates", "custom"])]
        return out, chunks

    out, chunks = asyncio.run(run())
    assert out["crag"]["action"] == "generate" and out["citations"][0]["chunk_id"] == "c1"
    modes = [m for m, _ in chunks]
    assert modes.index("custom") < len(modes) - 1
    assert [next(iter(p)) for m, p in chunks if m == "updates"] == ["retrieve", "grade", "generate"]


def test_astream_values_ends_with_the_output() -> None:
    graph = graph_for({"Eiffel": 0.9})

    async def run() -> list[dict[str, Any]]:
        return [v async for v in graph.astream({"question": "Where is the Eiffel Tower?"}, stream_mode="values")]

    values = asyncio.run(run())
    assert values[-1]["answer"] == "The answer is 42."


def test_two_graphs_share_a_sqlite_thread(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "threads.sqlite"
    cfg: Any = {"configurable": {"thread_id": "alice"}}
    with SqliteSaver.from_conn_string(str(path)) as saver:
        first = graph_for({"Eiffel": 0.9}, checkpointer=saver)
        first.invoke({"messages": [HumanMessage("Where is the Eiffel Tower?")]}, cfg)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        second = graph_for({"Eiffel": 0.9}, checkpointer=saver)
        out = second.invoke({"messages": [HumanMessage("When was it completed?")]}, cfg)
        assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
        assert out["crag"]["action"] == "generate"
        history = list(second.get_state_history(cfg))
        assert len(history) >= 8  # both runs' checkpoints


def test_async_sqlite_checkpointer(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async def run() -> dict[str, Any]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.sqlite")) as saver:
            graph = graph_for({"Eiffel": 0.9}, checkpointer=saver)
            cfg: Any = {"configurable": {"thread_id": "bob"}}
            await graph.ainvoke({"messages": [HumanMessage("Where is the Eiffel Tower?")]}, cfg)
            return dict(await graph.ainvoke({"messages": [HumanMessage("And when was it built?")]}, cfg))

    out = asyncio.run(run())
    assert len(out["messages"]) == 4


CHILD = textwrap.dedent(
    """
    import json, sys
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from fakes import CALIBRATION, FakeChat, ListRetriever, ScriptedReranker, doc
    from fastcrag import build_graph
    from fastcrag.config.settings import Settings

    path, question = sys.argv[1], sys.argv[2]
    with SqliteSaver.from_conn_string(path) as saver:
        graph = build_graph(
            retriever=ListRetriever(docs=[doc("The Eiffel Tower is in Paris.", "c1")]),
            reranker=ScriptedReranker({"Eiffel": 0.9}),
            llm=FakeChat(answer="Paris."),
            calibration=CALIBRATION,
            settings=Settings(),
            checkpointer=saver,
        )
        out = graph.invoke({"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": "carol"}})
    print(json.dumps({"messages": [[m.type, m.content] for m in out["messages"]], "action": out["crag"]["action"]}))
    """
)


def test_thread_history_survives_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}

    def child(question: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, path, question], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    first = child("Where is the Eiffel Tower?")
    assert first["messages"] == [["human", "Where is the Eiffel Tower?"], ["ai", REPLY]]
    second = child("Is it in France?")
    assert second["messages"] == [
        ["human", "Where is the Eiffel Tower?"],
        ["ai", REPLY],
        ["human", "Is it in France?"],
        ["ai", REPLY],
    ]
    assert second["action"] == "generate"


class TokenChat(FakeChat):
    """Streams its answer word by word; its structured output is a chat call of its own that replies `rewrite`."""

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        for i, word in enumerate(self.answer.split(" ")):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else f" {word}"))
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
        from langchain_core.runnables import RunnableLambda

        def run(messages: Any) -> Any:
            self.invoke(messages)  # a chat-model run, as a real structured call makes
            return schema.model_validate(self.rewrite)

        return RunnableLambda(run)


def test_messages_stream_carries_the_answer_tokens_and_the_reply_takes_their_id() -> None:
    from langchain_core.messages import AIMessage

    llm = TokenChat(answer="It stands in Paris.", rewrite={"question": "Where is the Eiffel Tower?"})
    graph = graph_for({"Eiffel": 0.9}, llm=llm)
    turns = [HumanMessage("Tell me about the Eiffel Tower."), AIMessage("It is a tower."), HumanMessage("Where is it?")]
    chunks, last = [], {}
    for mode, payload in graph.stream({"messages": turns}, stream_mode=["messages", "values"]):
        if mode == "messages":
            chunks.append(payload)
        else:
            last = payload
    assert last["crag"]["conversation"] == "standalone question by the chat model"  # a structured call was made
    # only the answer streams, token by token (the standalone question's call is tagged `nostream`)
    assert {meta["langgraph_node"] for _, meta in chunks} == {"generate"} and len(chunks) >= 4
    assert "".join(str(m.content) for m, _ in chunks) == "It stands in Paris."
    reply = last["messages"][-1]
    assert reply.id == chunks[0][0].id and reply.content.startswith("It stands in Paris.\n\nSources:")
