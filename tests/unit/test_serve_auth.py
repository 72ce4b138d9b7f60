"""Per-user access on `fastcrag serve` over a scripted graph (no models): LangGraph's own `Auth` handlers, in-process.

The app runs the `auth.py` of `auth_users` (the real `langgraph_sdk.Auth`), with SQLite thread records, and the real
`langgraph_sdk` client talks to it through Starlette's TestClient. The auth filters' SQL is checked against the
in-Python matcher on SQLite here and on Postgres in tests/integration/test_serve_auth.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
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
from fastcrag.server.access import Access, AuthLoadError, FilterError, auth_spec, checked_filter, load_auth, matches
from fastcrag.server.app import Server, create_app
from fastcrag.server.assistants import ASSISTANT_ID
from fastcrag.server.cli import cmd_serve
from fastcrag.server.limits import ServeSettings
from fastcrag.server.records import SQLITE, SqliteThreadRecords
from fastcrag.server.service import Service, configured_secrets

from auth_users import ALICE, BOB, BROKEN, CRASH, FILTERS, ROWS, SECRET_ENV, check_isolation, write_project
from fakes import CALIBRATION, FakeChat, ListRetriever, ScriptedReranker, doc

SECRET_URL = "postgresql://app:s3cret-password@db.internal/fastcrag"
GOOD = "The Eiffel Tower is in Paris. It was completed in 1889 for the World's Fair."
QUESTION = "Where is the Eiffel Tower?"
RUN = {"assistant_id": "crag", "input": {"question": QUESTION}}


def make_app(tmp_path: Path, auth_file: Path | None, seen: list[dict[str, Any]] | None = None) -> Server:
    """The app over SQLite records and a scripted graph; `seen` collects the config of each run on a thread."""
    settings = Settings(checkpoints=SECRET_URL)
    parts = Components(
        settings,
        retriever=ListRetriever(docs=[doc(GOOD, "c1")]),
        reranker=ScriptedReranker({"Eiffel": 0.95}),
        llm=FakeChat(),
        calibration=CALIBRATION,
    )

    async def start(stack: AsyncExitStack) -> Service:
        conn = await aiosqlite.connect(str(tmp_path / "threads.sqlite"))
        stack.push_async_callback(conn.close)
        threads = SqliteThreadRecords(conn, asyncio.Lock())
        await threads.setup()
        saver = InMemorySaver()
        graph = build_graph(parts=parts, checkpointer=saver)
        if seen is not None:
            invoke = graph.ainvoke

            async def spied(state: Any, config: Any, **kwargs: Any) -> Any:
                seen.append(config)
                return await invoke(state, config, **kwargs)

            graph.ainvoke = spied  # type: ignore[method-assign]
        return Service(parts, graph, build_graph(parts=parts), saver, threads, ServeSettings(run_timeout_s=30))

    access = None
    if auth_file is not None:
        spec = auth_spec(auth_file)
        assert spec is not None
        access = Access(load_auth(spec), configured_secrets(settings))
    return Server(start, None, None, access)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[TestClient]:
    with TestClient(make_app(tmp_path, write_project(tmp_path / "project")), raise_server_exceptions=False) as c:
        yield c


def sdk(client: TestClient, token: str) -> SyncLangGraphClient:
    """The real SDK client, over the in-process app, sending `token`."""
    client.headers["Authorization"] = f"Bearer {token}"
    return SyncLangGraphClient(client)


def test_two_users_each_see_only_their_own_threads(tmp_path: Path) -> None:
    project = write_project(tmp_path / "project")
    app = make_app(tmp_path, project)
    with TestClient(app, raise_server_exceptions=False) as a, TestClient(app, raise_server_exceptions=False) as b:
        check_isolation(sdk(a, ALICE), sdk(b, BOB), QUESTION)


def test_a_bad_or_missing_token_is_401_and_health_stays_open(app: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": ALICE}, {"x-api-key": ALICE}):
        for method, path in (("POST", "/runs/wait"), ("POST", "/threads/search"), ("GET", "/metrics")):
            resp = app.request(method, path, json=RUN, headers=headers)
            assert resp.status_code == 401, (headers, path)
            assert resp.json() == {"detail": "invalid or missing token"}
            assert resp.headers["www-authenticate"] == "Bearer"
    assert app.get("/ok").json() == {"ok": True} and app.get("/console").status_code == 200


def test_a_raising_handler_is_a_clear_error_without_traceback_or_secret(
    app: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET_URL)
    caplog.set_level(logging.INFO, logger="fastcrag")
    crashed = app.post("/threads/search", json={}, headers={"Authorization": f"Bearer {CRASH}"})
    assert crashed.status_code == 401 and crashed.json() == {"detail": "authentication failed"}
    broken = {"Authorization": f"Bearer {BROKEN}"}
    failed = [app.post("/threads", json={}, headers=broken), app.post("/runs/wait", json=RUN, headers=broken)]
    for resp in failed:
        assert resp.status_code == 500
        assert re.fullmatch(
            r"the server's auth handler for threads\.\w+ failed \(RuntimeError\)", resp.json()["detail"]
        )
    everything = caplog.text + "".join(r.text for r in [crashed, *failed])
    for secret in (CRASH, BROKEN, SECRET_URL, "s3cret-password", "Traceback"):
        assert secret not in everything, secret
    assert "crashed the lookup" in caplog.text and "the token store at *** is unreachable" in caplog.text


def test_the_run_carries_the_user_and_the_trace_no_token(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    app = make_app(tmp_path, write_project(tmp_path / "project"), seen)
    with TestClient(app, raise_server_exceptions=False) as c:
        c.headers["Authorization"] = f"Bearer {ALICE}"
        out = c.post("/threads/t1/runs/wait", json={**RUN, "if_not_exists": "create"}).json()
        streamed = c.post("/runs/stream", json={**RUN, "stream_mode": ["values", "updates"]})
        history = c.get("/threads/t1/history").text
    configurable = seen[0]["configurable"]
    user = configurable["langgraph_auth_user"]
    assert (user.identity, user["identity"], user.permissions, user.display_name) == (
        "alice",
        "alice",
        ("chat",),
        "alice",
    )
    assert configurable["langgraph_auth_user_id"] == "alice" and configurable["langgraph_auth_permissions"] == ["chat"]
    assert out["crag"]["action"] == "generate" and streamed.status_code == 200
    for text in (json.dumps(out), streamed.text, history, repr(configurable)):
        assert ALICE not in text  # neither the crag trace nor the checkpoints carry the token


def test_assistants_follow_their_handlers(tmp_path: Path) -> None:
    hidden = write_project(
        tmp_path / "owned",
        """
from langgraph_sdk import Auth
auth = Auth()

@auth.authenticate
async def authenticate(headers: dict) -> str:
    return headers.get(b"x-user", b"").decode() or "nobody"

@auth.on.assistants
async def own_assistants(ctx, value):
    return {"owner": ctx.user.identity}

@auth.on.threads.create
async def no_threads(ctx, value):
    return False
""",
    )
    with TestClient(make_app(tmp_path, hidden), raise_server_exceptions=False) as c:
        assert c.get(f"/assistants/{ASSISTANT_ID}").status_code == 404  # the system's, not the caller's
        assert c.post("/assistants/search", json={}).json() == [] and c.post("/assistants/count", json={}).json() == 0
        assert c.post("/threads", json={}).status_code == 403
        assert c.post("/threads/search", json={}).json() == []  # no handler for threads.search: as today
        assert c.post("/runs/wait", json=RUN).json()["crag"]["action"] == "generate"  # nor for create_run


def test_the_shared_key_mode_runs_no_handler(tmp_path: Path) -> None:
    with TestClient(make_app(tmp_path, None), raise_server_exceptions=False) as c:
        tid = c.post("/threads", json={"metadata": {"owner": "x"}}).json()["thread_id"]
        assert c.get(f"/threads/{tid}").json()["metadata"] == {"owner": "x"}
        c.post(f"/threads/{tid}/runs/wait", json=RUN)
        assert "langgraph_auth_user_id" not in c.get(f"/threads/{tid}/history").json()[0]["metadata"]


def test_create_app_loads_the_auth_path_and_bad_paths_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = write_project(tmp_path / "project")
    spec = auth_spec(project)
    assert spec == f"{tmp_path / 'project' / 'auth.py'}:auth"
    monkeypatch.setenv("FASTRAG_AUTH", spec)
    assert create_app(settings=Settings()).app.access is not None  # type: ignore[attr-defined]
    for bad, why in (
        (f"{tmp_path}/missing.py:auth", "does not exist"),
        (f"{project.parent / 'auth.py'}:nope", "no langgraph_sdk.Auth named 'nope'"),
        ("json:loads", "no langgraph_sdk.Auth named 'loads'"),
        ("no_such_module_xyz:auth", "ModuleNotFoundError"),
    ):
        with pytest.raises(AuthLoadError, match=why):
            load_auth(bad)
    (tmp_path / "bad.json").write_text('{"auth": "./auth.py"}')
    with pytest.raises(AuthLoadError, match="must be"):
        auth_spec(tmp_path / "bad.json")
    (tmp_path / "none.json").write_text('{"graphs": {}}')
    assert auth_spec(tmp_path / "none.json") is None


def test_serve_refuses_a_broken_auth_file_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    project = write_project(tmp_path / "project", "raise ImportError('no jwt library here')\n")
    monkeypatch.setenv("FASTRAG_AUTH", "")  # recorded, so that the value `serve` sets is undone after the test
    monkeypatch.delenv("FASTRAG_API_KEY", raising=False)
    args = argparse.Namespace(
        workers=1,
        port=8000,
        host="0.0.0.0",
        run_timeout=None,
        cors_origins=None,
        local_postgres="",
        config=str(project),
    )
    assert cmd_serve(args) == 2
    err = capsys.readouterr().err
    assert "loading the auth file" in err and "ImportError: no jwt library here" in err and "Traceback" not in err
    args.config = str(tmp_path / "missing.json")
    assert cmd_serve(args) == 2 and "no such file" in capsys.readouterr().err


def test_filters_as_sqlite_sql_select_what_the_matcher_does() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE fastcrag_threads (id INTEGER, metadata TEXT)")
    db.executemany("INSERT INTO fastcrag_threads VALUES (?, ?)", [(i, json.dumps(r)) for i, r in enumerate(ROWS)])
    for raw in FILTERS:
        where = checked_filter(raw)
        sql, params = SQLITE.where(where)
        got = [i for (i,) in db.execute(f"SELECT id FROM fastcrag_threads WHERE {sql} ORDER BY id", params)]
        assert got == [i for i, r in enumerate(ROWS) if matches(r, where)], raw


def test_bad_filters_are_refused() -> None:
    for bad in (
        ["owner"],
        {"owner": {"$ne": "x"}},
        {"owner": {"$eq": 1, "$contains": 2}},
        {"$or": [{"a": 1}]},
        {"$nor": [{"a": 1}, {"b": 2}]},
        {'a"b': 1},
        {"$or": [{"$or": [{"$or": [{"a": 1}, {"b": 1}]}, {"c": 1}]}, {"d": 1}]},
        {"a": object()},
    ):
        with pytest.raises(FilterError):
            checked_filter(bad)


def test_the_deploy_docs_example_auth_py_isolates_two_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    docs = (Path(__file__).resolve().parents[2] / "docs" / "DEPLOY.md").read_text(encoding="utf-8")
    example = docs.split("An example `auth.py`", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    table = {hashlib.sha256(t.encode()).hexdigest(): user for t, user in ((ALICE, "alice"), (BOB, "bob"))}
    (tmp_path / "tokens.json").write_text(json.dumps(table))
    monkeypatch.setenv("AUTH_TOKENS_FILE", str(tmp_path / "tokens.json"))
    app = make_app(tmp_path, write_project(tmp_path / "docs-example", example))
    with TestClient(app, raise_server_exceptions=False) as a, TestClient(app, raise_server_exceptions=False) as b:
        assert a.post("/threads/search", json={}, headers={"Authorization": "Bearer guess"}).status_code == 401
        check_isolation(sdk(a, ALICE), sdk(b, BOB), QUESTION)
