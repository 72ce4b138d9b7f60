"""Two users with their own tokens, for the per-user access tests of `fastcrag serve`.

`write_project` writes an `auth.py` (a `langgraph_sdk.Auth` over an opaque-token table, with the owner-only
handlers of LangGraph's custom-auth guide) and the `langgraph.json` naming it; `check_isolation` holds two SDK
clients to their own threads. The unit tests run it in-process over SQLite, the integration tests against
`fastcrag serve` with 2 workers on Postgres and on SQLite.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ALICE = "tok-alice-7d1e9c0b55f3"
BOB = "tok-bob-2c8f4a6e91d0"
BROKEN = "tok-broken-5b3a0f77c2e1"
"""Authenticates as `broken`, whose every authorization handler raises (quoting `SECRET_ENV`'s value)."""
CRASH = "tok-crash-91aa0c3e4d6b"
"""Makes the authenticate handler itself raise, quoting the token."""
SECRET_ENV = "FASTCRAG_TEST_AUTH_SECRET"

AUTH_PY = f"""
import os

from langgraph_sdk import Auth

auth = Auth()
USERS = {{{ALICE!r}: "alice", {BOB!r}: "bob", {BROKEN!r}: "broken"}}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if token == {CRASH!r}:
        raise ValueError(f"token {{token}} crashed the lookup")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="invalid or missing token")
    return {{"identity": USERS[token], "permissions": ["chat"]}}


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType:
    if ctx.user.identity == "broken":
        raise RuntimeError("the token store at " + os.environ.get({SECRET_ENV!r}, "") + " is unreachable")
    if ctx.action in ("create", "create_run"):
        value.setdefault("metadata", {{}})["owner"] = ctx.user.identity
    return {{"owner": ctx.user.identity}}


@auth.on.assistants
async def assistants_readable(ctx: Auth.types.AuthContext, value: dict) -> None:
    return None
"""


#: Auth filters, and thread metadata to match them against: the SQL of both dialects must pick what `matches` does.
FILTERS: list[dict[str, Any]] = [
    {"owner": "alice"},
    {"owner": {"$eq": "alice"}},
    {"n": 1},
    {"n": 1.0},
    {"flag": True},
    {"none": None},
    {"obj": {"$eq": {"a": 1}}},
    {"tags": {"$contains": "x"}},
    {"tags": {"$contains": ["x", "y"]}},
    {"tags": {"$contains": 1}},
    {"owner": "alice", "tags": {"$contains": "y"}},
    {"$or": [{"owner": "bob"}, {"tags": {"$contains": "z"}}]},
    {"$and": [{"owner": "alice"}, {"$or": [{"n": 2}, {"flag": True}]}]},
    {"missing": None},
    {"weird key.with dots": "v"},
]
ROWS: list[dict[str, Any]] = [
    {"owner": "alice", "n": 1, "flag": True, "none": None, "tags": ["x", "y"], "obj": {"a": 1}},
    {"owner": "bob", "n": 2, "flag": False, "tags": ["z", 1], "weird key.with dots": "v"},
    {"owner": ["alice"], "n": "1", "flag": 1, "tags": "x"},
    {"owner": {"name": "alice"}, "tags": [["x"]], "obj": {"a": 1, "b": 2}},
    {},
]


def write_project(folder: Path, source: str = AUTH_PY) -> Path:
    """`auth.py` and a `langgraph.json` naming it (`./auth.py:auth`) in `folder`; the langgraph.json path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "auth.py").write_text(source, encoding="utf-8")
    config = {"dependencies": ["."], "graphs": {"crag": "fastcrag.graph.app:graph"}, "auth": {"path": "./auth.py:auth"}}
    (folder / "langgraph.json").write_text(json.dumps(config), encoding="utf-8")
    return folder / "langgraph.json"


def status_of(call: Callable[[], Any]) -> int:
    """The HTTP status an SDK call failed with (fails the test when it succeeded).

    The SDK raises its own `APIStatusError`s, or httpx's status error, which over Starlette's TestClient may be
    another httpx's: any exception with a response counts.
    """
    with pytest.raises(Exception) as failed:  # any error with a response: its status is checked below
        call()
    response = getattr(failed.value, "response", None)
    assert response is not None, repr(failed.value)
    return int(response.status_code)


def check_isolation(alice: Any, bob: Any, question: str) -> None:
    """Two SDK clients (`SyncLangGraphClient`, one token each): each reads, searches, runs on, updates and deletes
    only their own threads; the other's answer 404 (as if missing) and stay unchanged."""
    tag = uuid.uuid4().hex[:8]  # a server may be shared with other tests: this run's threads carry their own tag
    ask = {"question": question}
    mine = alice.threads.create(metadata={"tag": tag, "owner": "bob"})  # the handler stamps the real owner
    assert mine["metadata"]["owner"] == "alice"
    a = mine["thread_id"]
    out = alice.runs.wait(a, "crag", input=ask)
    assert out["answer"] and ALICE not in json.dumps(out)  # the crag trace never carries the token
    b = bob.threads.create(metadata={"tag": tag})["thread_id"]
    # the other's thread: 404 for every read, write and run, as if it did not exist
    calls: list[Callable[[], Any]] = [
        lambda: bob.threads.get(a),
        lambda: bob.threads.get_state(a),
        lambda: bob.threads.get_history(a),
        lambda: bob.threads.update(a, metadata={"owner": "bob"}),
        lambda: bob.threads.update_state(a, {"answer": "hijacked"}, as_node="generate"),
        lambda: bob.threads.copy(a),
        lambda: bob.threads.delete(a),
        lambda: bob.runs.wait(a, "crag", input=ask),
        lambda: bob.runs.wait(a, "crag", input=ask, if_not_exists="create"),
        lambda: bob.runs.create(a, "crag", input=ask),
        lambda: bob.runs.list(a),
    ]
    assert [status_of(call) for call in calls] == [404] * len(calls)
    assert [t["thread_id"] for t in alice.threads.search(metadata={"tag": tag})] == [a]
    assert [t["thread_id"] for t in bob.threads.search(metadata={"tag": tag})] == [b]
    assert bob.threads.search(ids=[a]) == [] and bob.threads.count(metadata={"tag": tag}) == 1
    # alice's thread is whole, and hers to use
    kept = alice.threads.get(a)
    assert kept["metadata"]["owner"] == "alice" and kept["values"]["answer"] == out["answer"]
    history = alice.threads.get_history(a, limit=20)
    assert history and history[0]["metadata"]["langgraph_auth_user_id"] == "alice"  # the run knew its user
    assert alice.threads.copy(a)["metadata"]["owner"] == "alice"
    # a thread a run creates belongs to its caller; a background run is the caller's only
    c = str(uuid.uuid4())
    alice.runs.wait(c, "crag", input=ask, if_not_exists="create")
    assert alice.threads.get(c)["metadata"]["owner"] == "alice" and status_of(lambda: bob.threads.get(c)) == 404
    run = alice.runs.create(a, "crag", input=ask, multitask_strategy="enqueue")
    assert status_of(lambda: bob.runs.get(a, run["run_id"])) == 404
    assert status_of(lambda: bob.runs.cancel(a, run["run_id"])) == 404
    alice.runs.join(a, run["run_id"])
    deadline = time.monotonic() + 120
    while alice.runs.get(a, run["run_id"])["status"] in ("pending", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alice.runs.get(a, run["run_id"])["status"] == "success"
    assert status_of(lambda: alice.threads.delete(b)) == 404
    bob.threads.delete(b)
    assert status_of(lambda: bob.threads.get(b)) == 404
