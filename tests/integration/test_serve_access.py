"""Per-user access on `fastcrag serve` (langgraph.json's `auth` path), served for real: 2 workers, real models.

Two users with their own tokens (`auth_users`) hold the real `langgraph_sdk` client to their own threads on Postgres
and on SQLite; bad tokens and a raising handler answer cleanly; the auth filters' SQL agrees with the in-Python
matcher on a real Postgres; and the served cost of auth on `runs/wait` is measured against the shared-key mode.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_serve import KEY, PASSWORD, Served, run_serve, serve_env, with_password
from test_server import QUESTIONS, report

from fastcrag.server.access import checked_filter, matches
from fastcrag.server.records import POSTGRES

from auth_users import ALICE, BOB, BROKEN, CRASH, FILTERS, ROWS, SECRET_ENV, check_isolation, write_project

pytestmark = pytest.mark.integration

OVERHEAD_RUNS = 40
"""`runs/wait` calls per mode and side in the overhead measurement, after `WARM_UP` rounds."""
WARM_UP = 4
"""Rounds not measured: the question's grading, and each worker's first runs."""


def sdk(url: str, token: str) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=url, api_key=None, headers={"Authorization": f"Bearer {token}"})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def pg_url(postgres_url: str) -> str:
    return with_password(postgres_url)


@pytest.fixture(scope="module")
def pg_served(tmp_path_factory: pytest.TempPathFactory, pg_url: str, project: Path) -> Iterator[Served]:
    env = serve_env(FASTRAG_CHECKPOINTS=pg_url, **{SECRET_ENV: pg_url})
    with run_serve(tmp_path_factory.mktemp("serve-auth"), env, "--config", str(project)) as s:
        yield s


def test_two_users_on_two_workers_with_postgres(pg_served: Served) -> None:
    assert pg_served.log_text().count(" ready: graph crag, checkpoints postgres ") == 2
    check_isolation(sdk(pg_served.url, ALICE), sdk(pg_served.url, BOB), QUESTIONS[0])


def test_bad_tokens_are_401_and_a_raising_handler_is_clean(pg_served: Served, pg_url: str) -> None:
    seen: list[str] = []
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {CRASH}"}, {"x-api-key": KEY}):
        for path in ("/threads/search", "/runs/wait"):
            resp = httpx.post(f"{pg_served.url}{path}", json={}, headers=headers, timeout=60)
            assert resp.status_code == 401 and "detail" in resp.json(), (headers, resp.text)
            seen.append(resp.text)
    broken = httpx.post(f"{pg_served.url}/threads", json={}, headers={"Authorization": f"Bearer {BROKEN}"}, timeout=60)
    assert broken.status_code == 500
    assert broken.json() == {"detail": "the server's auth handler for threads.create failed (RuntimeError)"}
    assert httpx.get(f"{pg_served.url}/ok").json() == {"ok": True}
    text = pg_served.log_text() + broken.text + "".join(seen)
    for secret in (CRASH, BROKEN, pg_url, PASSWORD, "Traceback"):
        assert secret not in text, secret
    assert "the token store at *** is unreachable" in pg_served.log_text()


def test_two_users_on_two_workers_with_sqlite(tmp_path: Path, project: Path) -> None:
    env = serve_env(FASTRAG_CHECKPOINTS=str(tmp_path / "checkpoints.sqlite"))
    with run_serve(tmp_path, env, "--config", str(project)) as s:
        assert s.log_text().count(" ready: graph crag, checkpoints sqlite ") == 2
        check_isolation(sdk(s.url, ALICE), sdk(s.url, BOB), QUESTIONS[1])


def test_filters_as_postgres_sql_select_what_the_matcher_does(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TEMPORARY TABLE fastcrag_threads (id INTEGER, metadata JSONB)")
        for i, row in enumerate(ROWS):
            conn.execute("INSERT INTO fastcrag_threads VALUES (%s, %s::jsonb)", (i, json.dumps(row)))
        for raw in FILTERS:
            where = checked_filter(raw)
            sql, params = POSTGRES.where(where)
            rows = conn.execute(f"SELECT id FROM fastcrag_threads WHERE {POSTGRES.sql(sql)} ORDER BY id", params)
            assert [r[0] for r in rows] == [i for i, r in enumerate(ROWS) if matches(r, where)], raw


def _p50s(samples: list[tuple[float, dict[str, Any]]]) -> tuple[float, float]:
    """P50 of the whole call, and of the time outside the graph's own stages (what serving adds), in ms."""
    total = [ms for ms, _ in samples]
    outside = [ms - sum(out["crag"]["timings"].values()) for ms, out in samples]
    return statistics.median(total), statistics.median(outside)


def test_auth_overhead_on_runs_wait_p50(
    tmp_path: Path, project: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`POST /runs/wait` and `POST /threads/{id}/runs/wait`: the auth server (token, handlers, filtered SQL) against
    the shared-key server over the same Postgres, 2 workers each, interleaved with the order alternating, one
    question (graded in the warm-up rounds); each side on its own thread. Both servers start here, side by side."""
    with (
        run_serve(tmp_path, serve_env(FASTRAG_CHECKPOINTS=pg_url), "--config", str(project)) as auth_served,
        run_serve(tmp_path, serve_env(FASTRAG_API_KEY=KEY, FASTRAG_CHECKPOINTS=pg_url)) as keyed,
    ):
        authed = httpx.Client(base_url=auth_served.url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=120)
        sides = {"auth": authed, "key": keyed.client}
        paths = {
            name: ["/runs/wait", f"/threads/{c.post('/threads', json={}).json()['thread_id']}/runs/wait"]
            for name, c in sides.items()
        }
        samples: dict[tuple[str, int], list[tuple[float, dict[str, Any]]]] = {}
        body = {"assistant_id": "crag", "input": {"question": QUESTIONS[2]}}
        for i in range(OVERHEAD_RUNS + WARM_UP):
            for kind in (0, 1):
                for name in sorted(sides, reverse=bool(i % 2)):
                    start = time.perf_counter()
                    resp = sides[name].post(paths[name][kind], json=body)
                    ms = (time.perf_counter() - start) * 1000
                    assert resp.status_code == 200, resp.text
                    if i >= WARM_UP:
                        samples.setdefault((name, kind), []).append((ms, resp.json()))
        authed.close()
    lines = []
    for kind, what in ((0, "/runs/wait (no thread)"), (1, "/threads/{id}/runs/wait")):
        (auth_total, auth_out), (key_total, key_out) = _p50s(samples["auth", kind]), _p50s(samples["key", kind])
        lines.append(
            f"{what}: auth {auth_total:.1f} ms vs shared key {key_total:.1f} ms ({auth_total - key_total:+.1f} ms), "
            f"outside the graph's stages {auth_out:.1f} vs {key_out:.1f} ms ({auth_out - key_out:+.1f} ms)"
        )
        assert auth_out - key_out <= 25  # loose: a shared, noisy machine; the report carries the figure
    report(
        capsys,
        f"auth overhead, P50 of {OVERHEAD_RUNS} interleaved runs each, 2 workers each, Postgres (target <= +5 ms): "
        + "; ".join(lines),
    )
