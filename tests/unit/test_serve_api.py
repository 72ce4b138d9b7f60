"""`fastcrag serve`'s app over a scripted graph (no models): auth, limits, validation, threads, failures."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_sdk.client import SyncLangGraphClient
from starlette.testclient import TestClient

from fastcrag import build_graph
from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.server.app import Server
from fastcrag.server.assistants import ASSISTANT_ID
from fastcrag.server.cli import is_loopback
from fastcrag.server.limits import ServeSettings
from fastcrag.server.records import SqliteThreadRecords
from fastcrag.server.service import Service

from fakes import CALIBRATION, FakeChat, ListRetriever, LogprobChat, ScriptedReranker, doc, tokens

KEY = "unit-test-key-0123456789"
SECRET_URL = "postgresql://app:s3cret-password@db.internal/fastcrag"
GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."


class FailingSaver(InMemorySaver):
    """A checkpointer whose database went away: every write raises with the URL in the message."""

    async def aput(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError(f"connection to {SECRET_URL} lost")


def make_client(
    tmp_path: Path, *, key: str | None = KEY, saver: Any = None, timeout_s: float = 30.0, llm: Any = None
) -> TestClient:
    reranker = ScriptedReranker({"Eiffel": 0.95})
    settings = Settings(checkpoints=SECRET_URL, api_key=key)
    retriever = ListRetriever(docs=[doc(GOOD, "c1")])
    calibration = CALIBRATION.model_copy(update={"flare_threshold": 0.5})  # FLARE mode: words below 0.5 are unsure
    parts = Components(settings, retriever=retriever, reranker=reranker, llm=llm or FakeChat(), calibration=calibration)

    async def start(stack: AsyncExitStack) -> Service:
        conn = await aiosqlite.connect(str(tmp_path / "threads.sqlite"))
        stack.push_async_callback(conn.close)
        threads = SqliteThreadRecords(conn, asyncio.Lock())
        await threads.setup()
        checkpointer = saver if saver is not None else InMemorySaver()
        graph = build_graph(parts=parts, checkpointer=checkpointer)
        stateless = build_graph(parts=parts)
        limits = ServeSettings(run_timeout_s=timeout_s)
        return Service(parts, graph, stateless, checkpointer, threads, limits)

    client = TestClient(Server(start, key), raise_server_exceptions=False)
    client.reranker = reranker  # type: ignore[attr-defined]
    return client


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with make_client(tmp_path) as c:
        c.headers["Authorization"] = f"Bearer {KEY}"
        yield c


GOOD_Q = "Where is the Eiffel Tower?"
RUN = {"assistant_id": "crag", "input": {"question": GOOD_Q}}


def test_key_is_required_everywhere_but_ok_and_the_console(client: TestClient) -> None:
    anonymous = {"Authorization": ""}
    for headers in (anonymous, {"Authorization": "Bearer nope"}, {"Authorization": KEY}):
        assert client.post("/runs/wait", json=RUN, headers=headers).status_code == 401
        assert client.get("/metrics", headers=headers).status_code == 401
        assert client.get(f"/assistants/{ASSISTANT_ID}", headers=headers).status_code == 401
    assert client.post("/runs/wait", json=RUN, headers={"Authorization": "", "x-api-key": KEY}).status_code == 200
    assert client.get("/ok", headers=anonymous).json() == {"ok": True}
    assert client.get("/console", headers=anonymous).status_code == 200
    assert client.get("/console/console.js", headers=anonymous).status_code == 200
    assert client.reranker.calls == [(RUN["input"]["question"], [GOOD])]  # type: ignore[attr-defined]  # one run


def test_runs_answer_and_validate(client: TestClient) -> None:
    out = client.post("/runs/wait", json=RUN).json()
    assert out["citations"][0]["chunk_id"] == "c1" and out["crag"]["action"] == "generate"
    assert client.post("/runs/wait", json={**RUN, "assistant_id": ASSISTANT_ID}).status_code == 200
    assert client.post("/runs/wait", json={**RUN, "assistant_id": "other"}).status_code == 404
    assert client.post("/runs/wait", json={**RUN, "input": {"query": "x"}}).status_code == 422
    assert client.post("/runs/wait", json={**RUN, "context": {"top_n": "many"}}).status_code == 422
    assert client.post("/runs/wait", json={**RUN, "context": {"nope": 1}}).status_code == 422
    assert client.post("/runs/wait", json={**RUN, "command": {"resume": 1}}).status_code == 422
    assert client.post("/runs/wait", content=b"[1, 2]").status_code == 422
    assert client.post("/runs/wait", content=b"{not json").status_code == 422
    big = {**RUN, "input": {"question": "x" * 70_000}}
    assert client.post("/runs/wait", json=big).status_code == 413
    tuned = client.post("/runs/wait", json={**RUN, "context": {"crag_enabled": False}}).json()
    assert tuned["crag"]["action"] == "disabled"


def test_threads_keep_history_and_unknown_threads_are_404(client: TestClient) -> None:
    assert client.post("/threads/nope/runs/wait", json=RUN).status_code == 404
    assert client.post("/threads/new-one/runs/wait", json={**RUN, "if_not_exists": "create"}).status_code == 200
    tid = client.post("/threads", json={"metadata": {"a": 1}}).json()["thread_id"]
    assert client.post("/threads", json={"thread_id": tid}).status_code == 409
    assert client.post("/threads", json={"thread_id": tid, "if_exists": "do_nothing"}).json()["metadata"] == {"a": 1}
    turn = {**RUN, "input": {"messages": [{"role": "user", "content": "Where is the Eiffel Tower?"}]}}
    client.post(f"/threads/{tid}/runs/wait", json=turn)
    second = client.post(f"/threads/{tid}/runs/wait", json=turn).json()
    assert [m["type"] for m in second["messages"]] == ["human", "ai", "human", "ai"]
    state = client.get(f"/threads/{tid}/state").json()
    assert len(state["values"]["messages"]) == 4 and state["checkpoint"]["checkpoint_id"]
    at = client.post(f"/threads/{tid}/state/checkpoint", json={"checkpoint": state["parent_checkpoint"]}).json()
    assert at["checkpoint"]["checkpoint_id"] == state["parent_checkpoint"]["checkpoint_id"]
    assert client.get("/threads/bad%20id/state").status_code == 422


def test_a_run_starts_from_a_checkpoint_and_tags_its_thread_as_a_chat_ui_expects(client: TestClient) -> None:
    tid = client.post("/threads", json={"metadata": {}}).json()["thread_id"]
    assert client.post("/threads/search", json={"metadata": {"graph_id": "crag"}}).json() == []
    turn = {**RUN, "input": {"messages": [{"type": "human", "content": [{"type": "text", "text": GOOD_Q}]}]}}
    first = client.post(f"/threads/{tid}/runs/stream", json={**turn, "stream_mode": ["values"]})
    assert first.headers["content-location"].startswith(f"/threads/{tid}/runs/")
    head = client.get(f"/threads/{tid}/state").json()["checkpoint"]
    # the next turn names the thread's head, as the Agent Chat UI does; then a regeneration forks from before it
    second = client.post(f"/threads/{tid}/runs/wait", json={**turn, "checkpoint": head}).json()
    assert [m["type"] for m in second["messages"]] == ["human", "ai", "human", "ai"]
    start = client.post(f"/threads/{tid}/history", json={"limit": 100}).json()[-1]["checkpoint"]
    fork = client.post(f"/threads/{tid}/runs/wait", json={**turn, "checkpoint_id": start["checkpoint_id"]}).json()
    assert [m["type"] for m in fork["messages"]] == ["human", "ai"]  # the state before the first turn, run on
    assert [m["type"] for m in client.get(f"/threads/{tid}/state").json()["values"]["messages"]] == ["human", "ai"]
    found = client.post("/threads/search", json={"metadata": {"graph_id": "crag"}}).json()
    assert [t["thread_id"] for t in found] == [tid] and found[0]["metadata"]["assistant_id"] == ASSISTANT_ID
    missing = "1f000000-0000-6000-8000-000000000000"
    assert client.post(f"/threads/{tid}/runs/wait", json={**turn, "checkpoint_id": missing}).status_code == 404
    for bad in ({"checkpoint_id": "nope"}, {"checkpoint": {"checkpoint_ns": ""}}, {"checkpoint": "x"}):
        assert client.post(f"/threads/{tid}/runs/wait", json={**turn, **bad}).status_code == 422, bad
    assert client.post("/runs/wait", json={**RUN, "checkpoint_id": missing}).status_code == 422  # no thread


def test_browser_pages_of_listed_origins_may_call_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastcrag.server.app import create_app

    ui = "http://localhost:3000"
    preflight = {"Origin": ui, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"}
    with make_client(tmp_path) as closed:
        assert "access-control-allow-origin" not in closed.options("/threads/search", headers=preflight).headers
    monkeypatch.setenv("FASTRAG_CORS_ORIGINS", f"{ui}, https://chat.example.com")
    app = create_app(make_client(tmp_path).app.start, Settings(api_key=KEY))  # type: ignore[attr-defined]
    with TestClient(app) as open_:
        answer = open_.options("/threads/search", headers=preflight)  # answered before the key is asked for
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ui
        run = open_.post("/runs/wait", json=RUN, headers={"Origin": ui, "x-api-key": KEY})
        assert run.status_code == 200 and run.headers["access-control-allow-origin"] == ui
        assert "content-location" in run.headers["access-control-expose-headers"].lower()
        other = open_.options("/threads/search", headers={**preflight, "Origin": "http://evil.example"})
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
        assert open_.post("/runs/wait", json=RUN, headers={"Origin": ui}).status_code == 401  # still needs the key


def test_threads_search_count_update_and_delete(client: TestClient) -> None:
    ids = [
        client.post("/threads", json={"metadata": {"user": u, "n": i}}).json()["thread_id"] for i, u in enumerate("aab")
    ]
    assert client.post(f"/threads/{ids[0]}/runs/wait", json=RUN).status_code == 200
    found = client.post("/threads/search", json={"metadata": {"user": "a"}, "sort_by": "created_at"}).json()
    assert [t["thread_id"] for t in found] == [ids[1], ids[0]]  # newest first by default
    assert found[1]["values"]["answer"] and found[1]["status"] == "idle"
    oldest = client.post("/threads/search", json={"sort_order": "asc", "limit": 1, "offset": 1}).json()
    assert [t["thread_id"] for t in oldest] == [ids[1]]
    only = client.post("/threads/search", json={"ids": [ids[2]], "select": ["thread_id", "metadata"]}).json()
    assert only == [{"thread_id": ids[2], "metadata": {"user": "b", "n": 2}}]
    assert client.post("/threads/search", json={"status": "busy"}).json() == []
    assert client.post("/threads/count", json={"metadata": {"user": "a"}}).json() == 2
    patched = client.patch(f"/threads/{ids[2]}", json={"metadata": {"user": "a", "tag": True}}).json()
    assert patched["metadata"] == {"user": "a", "n": 2, "tag": True}
    minimal = client.patch(f"/threads/{ids[2]}", json={"metadata": {}}, headers={"Prefer": "return=minimal"})
    assert minimal.status_code == 204
    assert client.post("/threads/count", json={"metadata": {"tag": True}}).json() == 1
    for bad in (
        {"limit": 0},
        {"sort_by": "values"},
        {"sort_order": "up"},
        {"status": "asleep"},
        {"metadata": [1]},
        {"values": {"answer": "x"}},
        {"ids": "t1"},
    ):
        resp = client.post("/threads/search", json=bad)
        assert resp.status_code == 422 and resp.json()["detail"], bad
    assert client.patch(f"/threads/{ids[0]}", json={"metadata": {}, "ttl": {"ttl": 5}}).status_code == 422
    assert client.patch("/threads/nope", json={"metadata": {}}).status_code == 404
    assert client.delete(f"/threads/{ids[0]}").status_code == 204
    assert client.get(f"/threads/{ids[0]}").status_code == 404
    assert client.get(f"/threads/{ids[0]}/state").status_code == 404  # its checkpoints went with it
    assert client.delete(f"/threads/{ids[0]}").status_code == 404
    assert client.post("/threads/count", json={}).json() == 2


def test_history_update_state_and_copy(client: TestClient) -> None:
    tid = client.post("/threads", json={"metadata": {"user": "a"}}).json()["thread_id"]
    for _ in range(2):
        client.post(f"/threads/{tid}/runs/wait", json=RUN)
    history = client.post(f"/threads/{tid}/history", json={"limit": 100}).json()
    assert len(history) > 4 and history[0]["values"]["answer"]
    stamps = [h["created_at"] for h in history]
    assert stamps == sorted(stamps, reverse=True)  # newest first
    assert len(client.get(f"/threads/{tid}/history", params={"limit": 2}).json()) == 2
    older = client.post(f"/threads/{tid}/history", json={"before": history[0]["checkpoint"], "limit": 100}).json()
    assert [h["checkpoint_id"] for h in older] == [h["checkpoint_id"] for h in history[1:]]
    as_config = {"before": {"configurable": {"checkpoint_id": history[0]["checkpoint_id"]}}, "limit": 100}
    assert client.post(f"/threads/{tid}/history", json=as_config).json() == older  # as langgraph dev takes it
    written = client.post(f"/threads/{tid}/state", json={"values": {"answer": "edited"}, "as_node": "generate"})
    assert written.status_code == 200
    state = client.get(f"/threads/{tid}/state").json()
    assert state["values"]["answer"] == "edited"
    assert state["checkpoint"]["checkpoint_id"] == written.json()["checkpoint"]["checkpoint_id"]
    assert client.post(f"/threads/{tid}/state", json={"values": {"answer": "x"}, "as_node": "nope"}).status_code == 422
    assert client.post(f"/threads/{tid}/state", json={"values": [1]}).status_code == 422
    assert client.post(f"/threads/{tid}/history", json={"limit": "many"}).status_code == 422
    assert client.post("/threads/nope/history", json={}).status_code == 404
    copy = client.post(f"/threads/{tid}/copy").json()
    tagged = {"user": "a", "graph_id": "crag", "assistant_id": ASSISTANT_ID}  # runs tag their thread, as LangGraph
    assert copy["thread_id"] != tid and copy["metadata"] == tagged and copy["values"]["answer"] == "edited"
    copied = client.post(f"/threads/{copy['thread_id']}/history", json={"limit": 100}).json()
    assert [h["values"] for h in copied] == [
        h["values"] for h in client.post(f"/threads/{tid}/history", json={"limit": 100}).json()
    ]
    again = client.post(f"/threads/{copy['thread_id']}/runs/wait", json=RUN)  # the copy is a usable thread
    assert again.status_code == 200 and again.json()["answer"] != "edited"


def test_routes_not_served_answer_501_naming_themselves(client: TestClient) -> None:
    calls = [
        ("POST", "/runs"),
        ("POST", "/threads/t1/runs/crons"),
        ("POST", "/runs/crons"),
        ("GET", "/store/items"),
        ("POST", "/assistants"),
        ("DELETE", "/assistants/crag"),
    ]
    for method, path in calls:
        resp = client.request(method, path, json={})
        assert resp.status_code == 501 and "not served by fastcrag serve" in resp.json()["detail"], (method, path)


def _until(check: Any, seconds: float = 20.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def test_background_runs_queue_join_list_cancel_and_delete(client: TestClient) -> None:
    tid = client.post("/threads", json={}).json()["thread_id"]
    created = client.post(f"/threads/{tid}/runs", json={**RUN, "metadata": {"from": "test"}})
    assert created.status_code == 200
    run = created.json()
    assert run["status"] in ("pending", "running") and run["thread_id"] == tid and run["metadata"] == {"from": "test"}
    values = client.get(f"/threads/{tid}/runs/{run['run_id']}/join").json()
    assert values["answer"] and values["crag"]["action"] == "generate"
    assert client.get(f"/threads/{tid}/runs/{run['run_id']}").json()["status"] == "success"
    second = client.post(f"/threads/{tid}/runs", json={**RUN, "multitask_strategy": "enqueue"}).json()
    with client.stream("GET", f"/threads/{tid}/runs/{second['run_id']}/stream") as resp:
        events = [line for line in resp.iter_lines() if line.startswith("event:")]
    assert events == ["event: metadata", "event: values"]
    listed = client.get(f"/threads/{tid}/runs").json()
    assert [r["run_id"] for r in listed] == [second["run_id"], run["run_id"]]
    assert [r["run_id"] for r in client.get(f"/threads/{tid}/runs", params={"limit": 1}).json()] == [second["run_id"]]
    history = client.post(f"/threads/{tid}/history", json={"limit": 100}).json()
    assert len([h for h in history if h["metadata"].get("source") == "input"]) == 2  # both runs wrote the thread
    assert client.delete(f"/threads/{tid}/runs/{run['run_id']}").status_code == 204
    assert client.get(f"/threads/{tid}/runs/{run['run_id']}").status_code == 404
    # refusals: unknown thread or run, bad bodies, a busy thread under `reject`
    assert client.post("/threads/nope/runs", json=RUN).status_code == 404
    assert client.post("/threads/made/runs", json={**RUN, "if_not_exists": "create"}).status_code == 200
    assert client.get(f"/threads/{tid}/runs/no-such-run").status_code == 404
    assert client.post(f"/threads/{tid}/runs", json={**RUN, "input": {"query": 1}}).status_code == 422
    assert client.post(f"/threads/{tid}/runs", json={**RUN, "stream_resumable": True}).status_code == 422
    assert client.get(f"/threads/{tid}/runs", params={"status": "asleep"}).status_code == 422


def test_a_background_run_is_cancelled_and_a_lost_one_taken_up_again(tmp_path: Path) -> None:
    import sqlite3
    import uuid

    with make_client(tmp_path) as c:
        c.headers["Authorization"] = f"Bearer {KEY}"
        reranker = c.reranker  # type: ignore[attr-defined]
        tid = c.post("/threads", json={}).json()["thread_id"]
        reranker.behaviour = lambda out: (time.sleep(1.0), out)[1]  # still going when it is cancelled
        slow = c.post(f"/threads/{tid}/runs", json=RUN).json()
        _until(lambda: c.get(f"/threads/{tid}/runs/{slow['run_id']}").json()["status"] == "running")
        assert c.post(f"/threads/{tid}/runs", json=RUN).status_code == 409  # reject: the thread is busy
        assert c.post(f"/threads/{tid}/runs/{slow['run_id']}/cancel", params={"wait": 1}).status_code == 202
        ended = c.get(f"/threads/{tid}/runs/{slow['run_id']}").json()
        assert ended["status"] == "interrupted" and "cancelled" in ended["error"]
        reranker.behaviour = None
        # runs whose worker died mid-run: `running`, their lease run out; one was started once, one twice already
        db = sqlite3.connect(tmp_path / "threads.sqlite")
        once, twice = str(uuid.uuid4()), str(uuid.uuid4())
        for run_id, attempts in ((once, 1), (twice, 2)):
            db.execute(
                "INSERT INTO fastcrag_runs (run_id, thread_id, status, body, metadata, multitask, created, updated, "
                "attempts, owner, lease_until) VALUES (?, ?, 'running', ?, '{}', 'enqueue', ?, ?, ?, 'gone', ?)",
                (run_id, tid, json.dumps(RUN), time.time(), time.time(), attempts, time.time() - 1),
            )
        db.commit()
        db.close()
        retried = _until(lambda: (r := c.get(f"/threads/{tid}/runs/{once}").json())["status"] != "running" and r)
        assert retried["status"] == "success"
        given_up = _until(lambda: (r := c.get(f"/threads/{tid}/runs/{twice}").json())["status"] != "running" and r)
        assert given_up["status"] == "error" and "worker stopped" in given_up["error"]
        assert c.post(f"/threads/{tid}/runs/wait", json=RUN).status_code == 200  # the thread stays usable
        assert c.delete(f"/threads/{tid}").status_code == 204


def test_a_worker_shutting_down_gives_its_runs_back_to_the_queue(tmp_path: Path) -> None:
    import sqlite3

    with make_client(tmp_path) as c:
        c.headers["Authorization"] = f"Bearer {KEY}"
        c.reranker.behaviour = lambda out: (time.sleep(0.5), out)[1]  # type: ignore[attr-defined]
        tid = c.post("/threads", json={}).json()["thread_id"]
        run_id = c.post(f"/threads/{tid}/runs", json=RUN).json()["run_id"]
        _until(lambda: c.get(f"/threads/{tid}/runs/{run_id}").json()["status"] == "running")
    db = sqlite3.connect(tmp_path / "threads.sqlite")
    status, attempts, owner = db.execute(
        "SELECT status, attempts, owner FROM fastcrag_runs WHERE run_id = ?", (run_id,)
    ).fetchone()
    db.close()
    assert (status, attempts, owner) == ("pending", 0, None)  # the next worker runs it from the start
    with make_client(tmp_path) as c:  # a new worker over the same database takes it up
        c.headers["Authorization"] = f"Bearer {KEY}"
        assert c.get(f"/threads/{tid}/runs/{run_id}/join").status_code == 200
        assert c.get(f"/threads/{tid}/runs/{run_id}").json()["status"] == "success"


def test_json_containment_follows_postgres() -> None:
    from fastcrag.server.records import contains

    doc_ = {"user": "a", "tags": ["x", "y"], "n": 1, "flag": True, "nested": {"k": 1, "j": 2}}
    assert contains(doc_, {}) and contains(doc_, {"user": "a", "nested": {"k": 1}}) and contains(doc_, {"tags": ["y"]})
    assert contains(doc_, {"n": 1.0}) and not contains(doc_, {"flag": 1}) and not contains(doc_, {"n": True})
    assert (
        not contains(doc_, {"user": "b"})
        and not contains(doc_, {"missing": None})
        and not contains(doc_, {"tags": "x"})
    )


def test_stream_sends_metadata_then_graph_events(client: TestClient) -> None:
    with client.stream("POST", "/runs/stream", json={**RUN, "stream_mode": ["updates", "values"]}) as resp:
        lines = [line for line in resp.iter_lines() if line.startswith("event:")]
    events = [line.removeprefix("event: ") for line in lines]
    assert events[0] == "metadata" and "updates" in events and events[-1] == "values"


def test_a_failing_checkpointer_abstains_without_the_password(tmp_path: Path) -> None:
    with make_client(tmp_path, saver=FailingSaver()) as client:
        client.headers["Authorization"] = f"Bearer {KEY}"
        tid = client.post("/threads", json={}).json()["thread_id"]
        resp = client.post(f"/threads/{tid}/runs/wait", json=RUN)
        assert resp.status_code == 200
        out = resp.json()
        assert out["answer"] == "I don't know." and out["citations"] == [] and out["crag"]["action"] == "abstain"
        assert out["crag"]["failure"].startswith("the run failed: ConnectionError")
        assert out["crag"]["failure_code"] == "run"
        assert "s3cret-password" not in resp.text and "***" in out["crag"]["failure"]
        assert client.post("/runs/wait", json=RUN).json()["crag"]["action"] == "generate"  # still serving
        metrics = client.get("/metrics").text
        assert 'fastcrag_run_failures_total{reason="error"}' in metrics and "s3cret" not in metrics


def test_a_slow_run_abstains_at_the_time_limit(tmp_path: Path) -> None:
    with make_client(tmp_path, key=None, timeout_s=0.2) as client:
        client.reranker.behaviour = lambda out: (time.sleep(1.0), out)[1]  # type: ignore[attr-defined]
        out = client.post("/runs/wait", json=RUN).json()
        assert out["crag"]["action"] == "abstain" and "took longer than 0.2 s" in out["crag"]["failure"]
        with client.stream("POST", "/runs/stream", json=RUN) as resp:
            data = [json.loads(line[5:]) for line in resp.iter_lines() if line.startswith("data:")]
        assert data[-1]["crag"]["action"] == "abstain"


def test_loopback_detection() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.com"))


def _concurrent(client: TestClient, path: str, body: dict[str, Any], n: int) -> list[Any]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: client.post(path, json=body), range(n)))


def test_runs_on_one_thread_never_overlap(tmp_path: Path) -> None:
    """`enqueue` runs take turns (each sees the one before); `reject` refuses a busy thread with 409."""
    with make_client(tmp_path, key=None) as client:
        client.reranker.behaviour = lambda out: (time.sleep(0.3), out)[1]  # type: ignore[attr-defined]
        tid = client.post("/threads", json={}).json()["thread_id"]
        turn = {"assistant_id": "crag", "input": {"messages": [{"role": "user", "content": "Where is the tower?"}]}}
        queued = _concurrent(client, f"/threads/{tid}/runs/wait", {**turn, "multitask_strategy": "enqueue"}, 3)
        assert [r.status_code for r in queued] == [200] * 3
        assert sorted(len(r.json()["messages"]) for r in queued) == [2, 4, 6]  # one after another
        rejected = _concurrent(client, f"/threads/{tid}/runs/wait", turn, 3)
        codes = sorted(r.status_code for r in rejected)
        assert codes.count(200) >= 1 and 409 in codes, codes
        assert "multitask_strategy=enqueue" in next(r for r in rejected if r.status_code == 409).json()["detail"]
        assert client.post(f"/threads/{tid}/runs/wait", json=turn).status_code == 200  # the lease was given back
        bad = client.post(f"/threads/{tid}/runs/wait", json={**turn, "multitask_strategy": "interrupt"})
        assert bad.status_code == 422


def test_a_lease_expires_and_only_its_holder_releases_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with aiosqlite.connect(str(tmp_path / "leases.sqlite")) as conn:
            threads = SqliteThreadRecords(conn, asyncio.Lock())
            await threads.setup()
            assert await threads.claim("t", "r1", 0.2)
            assert not await threads.claim("t", "r2", 10)
            await asyncio.sleep(0.3)  # r1's worker died: its lease runs out
            assert await threads.claim("t", "r2", 10)
            await threads.release("t", "r1")  # not r1's any more: nothing happens
            assert not await threads.claim("t", "r3", 10)
            await threads.release("t", "r2")
            assert await threads.claim("t", "r3", 10)

    asyncio.run(scenario())


def test_assistant_count_and_subgraphs(client: TestClient) -> None:
    assert client.post("/assistants/count", json={}).json() == 1
    assert client.post("/assistants/count", json={"graph_id": "other"}).json() == 0
    flare = client.get(f"/assistants/{ASSISTANT_ID}/subgraphs").json()["flare"]  # FLARE mode's subgraph
    assert flare["state_schema"]["title"] == "FlareState" and {"sentences", "pending"} <= set(
        flare["state_schema"]["properties"]
    )
    assert {"answer", "failure"} <= set(flare["output_schema"]["properties"]) and flare["context_schema"]
    assert client.get(f"/assistants/{ASSISTANT_ID}/subgraphs/flare?recurse=true").json() == {"flare": flare}
    assert client.get(f"/assistants/{ASSISTANT_ID}/subgraphs/nope").json() == {}
    assert client.get(f"/assistants/{ASSISTANT_ID}/schemas").json()["state_schema"]["title"] == "State"
    assert client.get("/assistants/nope/subgraphs").status_code == 404


def test_a_flare_run_streams_its_subgraphs_events_when_asked(tmp_path: Path) -> None:
    """`stream_subgraphs`: the FLARE subgraph's node updates and `flare` events, named `mode|flare:<task>` (as
    LangGraph names them, and the SDK reads them); without it only the graph's own events, as before."""
    drafts = [tokens("The tower is in Paris. It was built in 1999.", low=["1999"]), tokens("It was completed in 1889.")]
    with make_client(tmp_path, llm=LogprobChat(drafts=drafts)) as client:
        sdk = SyncLangGraphClient(client)
        client.headers["Authorization"] = f"Bearer {KEY}"
        run = {"input": RUN["input"], "context": {"mode": "flare"}, "stream_mode": ["updates", "custom"]}
        parts = list(sdk.runs.stream(None, "crag", **run, stream_subgraphs=True))  # type: ignore[arg-type]
        plain = [p.event for p in sdk.runs.stream(None, "crag", **run)]  # type: ignore[arg-type]
        assert sdk.assistants.get_subgraphs("crag", namespace="flare").keys() == {"flare"}
        assert client.post("/runs/wait", json={**RUN, "stream_subgraphs": "yes"}).status_code == 422
    inner = [(p.event.split("|"), p.data) for p in parts if "|" in p.event]
    assert {where[1].split(":")[0] for where, _ in inner} == {"flare"}  # `flare:<task id>`
    nodes = [next(iter(data)) for (mode, _), data in inner if mode == "updates"]
    assert nodes == ["draft", "lookup", "admit", "draft", "compose"]
    (event,) = [data for (mode, _), data in inner if mode == "custom"]
    assert event["event"] == "flare" and event["sentence"] == "It was built in 1999." and event["band"] == "CORRECT"
    assert [p.event for p in parts if "|" not in p.event] == plain  # the graph's own events, unchanged
    assert plain[0] == "metadata" and "custom" in plain and not any("|" in e for e in plain)
    assert [next(iter(p.data)) for p in parts if p.event == "updates"][-1] == "flare"


def test_assistant_search_filters_and_refuses_bad_metadata(client: TestClient) -> None:
    assert [a["graph_id"] for a in client.post("/assistants/search", json={}).json()] == ["crag"]
    assert client.post("/assistants/search", json={"graph_id": "other", "metadata": {"k": "v"}}).json() == []
    assert client.post("/assistants/search", json={"metadata": {"no-such-key": 1}}).json() == []
    bad = client.post("/assistants/search", json={"metadata": ["not", "an", "object"]})
    assert bad.status_code == 422 and "metadata" in bad.json()["detail"]


def test_a_lease_whose_release_failed_is_given_back_once_the_database_answers() -> None:
    import asyncio
    from types import SimpleNamespace

    from fastcrag.server import runs

    calls: list[str] = []

    class Records:
        async def release(self, thread_id: str, run_id: str) -> None:
            calls.append(run_id)
            if len(calls) < 3:  # the database is away for the first two tries
                raise ConnectionError("server closed the connection")

    service: Any = SimpleNamespace(
        threads=Records(), limits=SimpleNamespace(run_timeout_s=5.0), reason=lambda exc: str(exc)
    )
    plan: Any = SimpleNamespace(thread_id="t1", run_id="r1")

    async def main() -> None:
        await runs._release(service, plan)
        assert calls == ["r1"]
        while runs._RETRIES:
            await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(main(), 10))
    assert calls == ["r1", "r1", "r1"]
