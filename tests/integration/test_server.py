"""`langgraph dev` serving the `crag` graph offline: assistants, schemas, /runs/wait, /runs/stream, /metrics, console.

The server runs as a subprocess on a free loopback port (killed at the end), with the real default graph and
`FASTRAG_LLM=extractive` to keep it fast, CLI analytics and tracing off, and without `--allow-blocking`.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fastcrag.evaluation import launch
from fastcrag.evaluation.launch import ServerProcess, ServerStartError, langgraph_dev
from sse import sse_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OFFLINE_ENV = {**launch.OFFLINE_ENV, "FASTRAG_LLM": "extractive"}
QUESTIONS = [
    "How does the with statement work?",
    "What is a generator function?",
    "What does the global statement do?",
    "How is a class definition executed?",
    "What does the nonlocal statement do?",
    "How does the try statement handle exceptions?",
    "What is a lambda expression?",
    "How are decorators applied to a function definition?",
    "What does the assert statement do?",
    "How does the import statement find modules?",
    "What does the del statement do?",
    "What is an assignment expression?",
    "How does slicing work on sequences?",
    "What does the is operator compare?",
    "How do boolean operations evaluate their operands?",
    "What does the yield expression return?",
    "What is the async for statement?",
    "What does the await expression do?",
    "How does the for statement iterate?",
    "What does the return statement do?",
]
OFF_CORPUS = "Who won the 2018 FIFA World Cup?"
OUTPUT_KEYS = {"answer", "citations", "crag"}
CRAG_KEYS = {
    "action",
    "band",
    "top_score",
    "strips_kept",
    "rewritten_query",
    "rewriter",
    "retrieval",
    "verdicts",
    "timings",
    "failure",
    "failure_code",
    "question",
    "conversation",
    "reranker",
    "thresholds",
}


class Server:
    """A running `langgraph dev` subprocess."""

    def __init__(self, process: ServerProcess) -> None:
        self.process = process
        self.url = process.url
        self.start_s = process.start_s
        self.client = httpx.Client(base_url=process.url, timeout=300.0)

    def log_text(self) -> str:
        return self.process.log_text()

    def assistant_id(self) -> str:
        found = self.client.post("/assistants/search", json={"graph_id": "crag", "limit": 10}).json()
        assert found, "no assistant for graph `crag`"
        return str(found[0]["assistant_id"])

    def wait(self, question: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"assistant_id": "crag", "input": {"question": question}}
        if context:
            body["context"] = context
        resp = self.client.post("/runs/wait", json=body)
        assert resp.status_code == 200, resp.text
        out = resp.json()
        assert "__error__" not in out, out
        return out  # type: ignore[no-any-return]


@contextlib.contextmanager
def run_server(log_dir: Path) -> Iterator[Server]:
    """Start `langgraph dev` in the repository root on a free loopback port; yield once /ok answers; stop it."""
    try:
        with langgraph_dev(ROOT, log_dir, {**os.environ, **OFFLINE_ENV}) as process:
            server = Server(process)
            yield server
            server.client.close()
    except ServerStartError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with run_server(tmp_path_factory.mktemp("server")) as s:
        first = time.perf_counter()
        s.wait(QUESTIONS[0])  # the first run loads the models (in a worker thread, off the event loop)
        s.first_answer_s = time.perf_counter() - first  # type: ignore[attr-defined]
        yield s


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    with capsys.disabled():
        print(f"\n[fastcrag server] {line}")


def sdk_thread_and_run_calls(url: str, api_key: str | None) -> None:
    """The calls a chat UI and Studio make: list, restore, edit, fork, copy and delete threads; background runs.

    Shared by `fastcrag serve` (test_serve.py) and `langgraph dev` (below), so both servers are held to the same
    client behaviour.
    """
    import asyncio
    import uuid

    from langgraph_sdk import get_client, get_sync_client

    client = get_sync_client(url=url, api_key=api_key)
    user = f"user-{uuid.uuid4().hex[:8]}"  # the module's server is shared: this test's threads carry their own tag
    first = client.threads.create(metadata={"user": user, "topic": "with"})["thread_id"]
    second = client.threads.create(metadata={"user": user, "topic": "yield"})["thread_id"]
    client.runs.wait(first, "crag", input={"question": QUESTIONS[0]})
    # a run tags its thread with its graph: a chat UI lists its threads by it
    assert [t["thread_id"] for t in client.threads.search(metadata={"graph_id": "crag", "user": user})] == [first]
    listed = client.threads.search(metadata={"user": user}, sort_by="created_at", sort_order="asc", limit=10)
    assert [t["thread_id"] for t in listed] == [first, second]
    assert listed[0]["values"]["answer"] and listed[0]["status"] == "idle"
    assert client.threads.count(metadata={"user": user}) == 2
    assert client.threads.update(second, metadata={"pinned": True})["metadata"] == {
        "user": user,
        "topic": "yield",
        "pinned": True,
    }
    history = client.threads.get_history(first, limit=50)
    assert len(history) >= 4 and history[0]["values"]["answer"]
    assert len(client.threads.get_history(first, limit=2)) == 2
    # `before` as a checkpoint config: langgraph dev 0.16 answers 500 (KeyError 'configurable') for a bare Checkpoint
    before = {"configurable": {"checkpoint_id": history[0]["checkpoint_id"]}}
    earlier = client.threads.get_history(first, before=before, limit=50)  # type: ignore[arg-type]
    assert [h["checkpoint_id"] for h in earlier] == [h["checkpoint_id"] for h in history[1:]]
    edited = client.threads.update_state(first, {"answer": "edited"}, as_node="generate")
    assert client.threads.get_state(first)["checkpoint"]["checkpoint_id"] == edited["checkpoint"]["checkpoint_id"]
    assert client.threads.get_state(first)["values"]["answer"] == "edited"
    copy = client.threads.copy(first)
    assert client.threads.get_state(copy["thread_id"])["values"]["answer"] == "edited"
    assert client.threads.get(copy["thread_id"])["metadata"]["user"] == user
    assert len(client.threads.get_history(copy["thread_id"], limit=50)) == len(
        client.threads.get_history(first, limit=50)
    )
    assert client.runs.wait(copy["thread_id"], "crag", input={"question": QUESTIONS[1]})["answer"]
    # a run from an earlier checkpoint (a chat UI's "regenerate"): the thread goes on from that state
    start = client.threads.get_history(first, limit=50)[-1]["checkpoint"]
    forked = client.runs.wait(first, "crag", input={"question": QUESTIONS[1]}, checkpoint=start)
    assert forked["answer"] and client.threads.get_state(first)["values"]["answer"] == forked["answer"]

    async def from_async() -> None:
        aclient = get_client(url=url, api_key=api_key)
        found = await aclient.threads.search(metadata={"user": user, "pinned": True})
        assert [t["thread_id"] for t in found] == [second]
        await aclient.threads.delete(second)
        assert await aclient.threads.count(metadata={"user": user}) == 2  # first and its copy

    asyncio.run(from_async())
    with pytest.raises(Exception, match=r"404|not found"):
        client.threads.get(second)
    # background runs: created, then run by whichever of the two workers takes it, joined and listed
    runs = [
        client.runs.create(first, "crag", input={"question": q}, multitask_strategy="enqueue") for q in QUESTIONS[:3]
    ]
    assert all(r["status"] in ("pending", "running") for r in runs)
    for r in runs:
        joined = client.runs.join(first, r["run_id"])
        assert joined["answer"] and set(joined["crag"]) == CRAG_KEYS
        assert client.runs.get(first, r["run_id"])["status"] == "success"
    listed_runs = client.runs.list(first, limit=10)
    assert [r["run_id"] for r in listed_runs][:3] == [r["run_id"] for r in reversed(runs)]
    pending = client.runs.create(first, "crag", input={"question": QUESTIONS[0]}, multitask_strategy="enqueue")
    client.runs.cancel(first, pending["run_id"], wait=True)
    assert client.runs.get(first, pending["run_id"])["status"] in ("interrupted", "success")  # it may have finished
    for thread_id in (first, copy["thread_id"]):
        client.threads.delete(thread_id)
    assert client.threads.search(metadata={"user": user}) == []


def test_server_starts_offline_without_allow_blocking(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    report(
        capsys,
        f"start to /ok: {server.start_s:.2f} s; first answer (models load): {server.first_answer_s:.2f} s",  # type: ignore[attr-defined]
    )
    info = server.client.get("/info").json()
    assert "version" in info
    log = server.log_text()
    assert "allow-blocking" not in log  # blockbuster is on
    assert "BlockingError" not in log and "Blocking call" not in log
    assert "Failed to load graph" not in log


def test_assistant_schemas_are_the_narrow_ones(server: Server) -> None:
    schemas = server.client.get(f"/assistants/{server.assistant_id()}/schemas").json()
    assert schemas["graph_id"] == "crag"
    assert schemas["input_schema"] is not None, "input schema missing (see the server log's schema warning)"
    assert set(schemas["input_schema"]["properties"]) == {"question", "messages"}
    assert schemas["output_schema"] is not None, "output schema missing (see the server log's schema warning)"
    assert set(schemas["output_schema"]["properties"]) == {"messages", *OUTPUT_KEYS}
    context = schemas["context_schema"]["properties"]
    assert {"reranker_threshold", "crag_upper", "crag_enabled", "crag_max_rewrites", "top_n"} <= set(context)
    assert "Failed to get input schema" not in server.log_text()
    assert "Failed to get output schema" not in server.log_text()


def test_runs_wait_answers_with_the_trace(server: Server) -> None:
    out = server.wait("How does the with statement work?")
    assert OUTPUT_KEYS <= set(out)
    assert out["answer"] and out["answer"] != "I don't know."
    assert out["citations"] and all(c["source"].startswith("pydoc:") for c in out["citations"])
    crag = out["crag"]
    assert set(crag) == CRAG_KEYS
    assert crag["action"] in {"generate", "refine"} and crag["band"] in {"CORRECT", "AMBIGUOUS"}
    assert crag["retrieval"] == "hybrid" and crag["rewriter"] is None
    thresholds = crag["thresholds"]
    assert 0 <= thresholds["reranker_threshold"] <= thresholds["crag_upper"] <= 1
    # graded candidates come first, in the calibrated order (the grader's fused with the first pass: `rerank_weight`),
    # and the band reads the best score; those the early exit left ungraded follow, without a score
    graded = [v["score"] for v in crag["verdicts"] if v["verdict"] != "UNGRADED"]
    assert crag["top_score"] == pytest.approx(max(graded))
    ungraded = [v for v in crag["verdicts"] if v["verdict"] == "UNGRADED"]
    assert all(v["score"] is None for v in ungraded) and crag["verdicts"][len(graded) :] == ungraded
    assert not ungraded or crag["band"] == "CORRECT"  # grading stops early only once a batch cleared crag_upper
    assert set(crag["timings"]) == {"retrieve_ms", "rerank_ms", "crag_ms", "generate_ms"}


def test_runs_wait_abstains_off_corpus_and_takes_context(server: Server) -> None:
    out = server.wait(OFF_CORPUS)
    assert out["answer"] == "I don't know." and out["citations"] == []
    assert out["crag"]["action"] == "abstain" and out["crag"]["band"] == "INCORRECT"
    tuned = server.wait("How does the with statement work?", context={"crag_enabled": False})
    assert tuned["crag"]["action"] == "disabled"
    raised = server.wait("How does the with statement work?", context={"reranker_threshold": 0.99, "crag_upper": 1.0})
    assert raised["crag"]["action"] == "abstain"
    assert raised["crag"]["thresholds"] is not None


def test_runs_stream_shows_nodes_and_the_graded_event(server: Server) -> None:
    body = {
        "assistant_id": "crag",
        "input": {"question": "What is a generator function?"},
        "stream_mode": ["updates", "custom", "values"],
    }
    with server.client.stream("POST", "/runs/stream", json=body) as resp:
        assert resp.status_code == 200
        events = list(sse_events(resp))
    kinds = [e for e, _ in events]
    assert kinds[0] == "metadata" and "error" not in kinds, events[-3:]
    nodes = [next(iter(d)) for e, d in events if e == "updates"]
    assert nodes[:2] == ["retrieve", "grade"] and nodes[-1] in {"generate", "abstain"}
    graded = [d for e, d in events if e == "custom"]
    assert len(graded) == 1 and graded[0]["event"] == "graded"
    assert graded[0]["band"] in {"CORRECT", "AMBIGUOUS", "INCORRECT"} and graded[0]["scores"]
    assert kinds.index("custom") < max(i for i, k in enumerate(kinds) if k == "updates")  # before the answer
    final = [d for e, d in events if e == "values"][-1]
    assert final["answer"] and final["crag"]["band"] == graded[0]["band"]
    assert final["crag"]["top_score"] == pytest.approx(graded[0]["top_score"], abs=1e-6)


def test_metrics_count_actions_and_stage_latency(server: Server) -> None:
    server.wait(OFF_CORPUS)
    for path in ("/metrics", "/fastcrag/metrics"):
        text = server.client.get(path).text
        assert 'crag_actions_total{action="abstain"}' in text, path
        assert 'fastcrag_stage_seconds_bucket{le="0.1",stage="retrieve"}' in text, path
        assert 'fastcrag_stage_seconds_count{stage="generate"}' in text, path
    answered = sum(
        float(line.rsplit(" ", 1)[1])
        for line in server.client.get("/metrics").text.splitlines()
        if line.startswith("crag_actions_total{")
    )
    assert answered >= 3


def test_console_page_and_assets_are_served(server: Server) -> None:
    page = server.client.get("/console")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<script src="/console/console.js">' in page.text and "://" not in page.text  # nothing external
    js = server.client.get("/console/console.js")
    assert js.status_code == 200 and "/runs/wait" in js.text and "javascript" in js.headers["content-type"]
    assert server.client.get("/console/console.css").status_code == 200
    assert server.client.get("/console/..%2Fpyproject.toml").status_code == 404
    assert server.client.get("/fastcrag/health").json() == {"status": "ok"}


def test_runs_wait_latency_against_in_process(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    from fastcrag import build_graph
    from fastcrag.components import Components
    from fastcrag.config.settings import Settings

    parts = Components(Settings(llm="extractive"))
    parts.warm_up()
    graph = build_graph(parts=parts)
    graph.invoke({"question": QUESTIONS[0]})
    server_ms, local_ms = [], []
    for q in (f"{q}?" for q in QUESTIONS):  # interleaved: both see the same machine load
        # "?" makes each question new to both sides: the grader caches scores per (question, passage) in each
        # process, and earlier tests asked QUESTIONS of both, so a cached side would look falsely fast
        t = time.perf_counter()
        out = server.wait(q)
        server_ms.append((time.perf_counter() - t) * 1000)
        assert out["crag"]["action"] in {"generate", "refine", "rewrite", "abstain"}
        t = time.perf_counter()
        local = graph.invoke({"question": q})
        local_ms.append((time.perf_counter() - t) * 1000)
        assert local["crag"]["action"] == out["crag"]["action"]  # same graph, same decision
    p50_server, p50_local = statistics.median(server_ms), statistics.median(local_ms)
    report(
        capsys,
        f"/runs/wait P50 {p50_server:.0f} ms vs in-process P50 {p50_local:.0f} ms over {len(QUESTIONS)} questions "
        f"(overhead {p50_server - p50_local:+.0f} ms; server P90 {statistics.quantiles(server_ms, n=10)[-1]:.0f} ms)",
    )
    assert p50_server < 3 * p50_local + 1000  # the API adds transport and queueing, not another model pass


def test_fifty_runs_from_ten_clients(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    from lab.benchmarks.reliability import Report, load, server_invoker

    result = Report()
    load(result, server_invoker(server.url), runs=50, clients=10, target=server.url)
    report(
        capsys,
        f"load: 50 runs / 10 clients in {result.figures['load wall seconds']} s, failures {len(result.failures)}",
    )
    assert result.sections["runs under load"] == 50
    assert result.failures == []


def test_sdk_thread_management_matches_fastcrag_serve(server: Server) -> None:
    """The same SDK calls as `fastcrag serve`'s conformance test, against the stock in-memory server."""
    sdk_thread_and_run_calls(server.url, None)
