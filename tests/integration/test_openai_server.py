"""`--llm openai:MODEL` through langchain-openai, against llama.cpp's OpenAI-compatible server (marked `integration`).

`python -m llama_cpp.server` (llama-cpp-python's `server` extra) serves the packaged SmolLM2-135M-Instruct GGUF on a
free loopback port for the module; fastcrag reaches it as users reach theirs, through `OPENAI_BASE_URL` and
`OPENAI_API_KEY`. A 135M model writes poor text: these tests check the path (the requests made, the schema honoured
or the documented fallback taken, citations given, tokens streamed), not the answers. A server that is down (a port
nothing listens on) or slow (one that accepts and never answers) must end in an abstention or the keyword rewrite
within `llm_timeout_s`, never a hang.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, HumanMessage

from fastcrag import build_graph
from fastcrag.cli import main
from fastcrag.config.settings import Context, Settings
from fastcrag.evaluation import launch
from fastcrag.evaluation.launch import ServerProcess, ServerStartError, free_port
from sse import sse_events
from timing import bound

from fakes import CALIBRATION, ListRetriever, ScriptedReranker, doc

pytestmark = pytest.mark.integration

#: What llama-cpp-python's `server` extra and langchain-openai bring; without them the tests skip (CI has them).
NEEDED = ("langchain_openai", "llama_cpp", "fastapi", "sse_starlette", "starlette_context", "uvicorn")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if MISSING:
    pytest.skip(f"needs the `openai` and `llamacpp` extras (missing {', '.join(MISSING)})", allow_module_level=True)

MODEL = "SmolLM2-135M-Instruct"
SPEC = f"openai:{MODEL}"
TIMEOUT_S = 60.0
#: Enough for a structured reply; keeps each answer to a few seconds on one thread.
MAX_TOKENS = 96
ABSTAIN = "I don't know."
COMPLETIONS = '"POST /v1/chat/completions HTTP/1.1" 200'
HISTORY_OK = "standalone question by the chat model"


def requests_made(server: ServerProcess) -> int:
    """Chat completions the llama.cpp server has answered so far (its access log; refusals not counted)."""
    return server.log_text().count(COMPLETIONS)


def _models_ok(server: ServerProcess) -> bool:
    try:
        return httpx.get(f"{server.url}/v1/models", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`python -m llama_cpp.server` on the packaged GGUF (one thread: steady on a busy 2-core machine)."""
    from fastcrag.generation.chat import packaged_smollm2

    port = free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(packaged_smollm2()), "--model_alias", MODEL,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "1", "--n_threads_batch", "1",
        "--use_mlock", "False", "--seed", "0",
    ]  # fmt: skip
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    try:
        env = {**os.environ, **launch.OFFLINE_ENV}
        with launch.launch(cmd, port, log, env=env, ready=_models_ok, timeout_s=120) as server:
            yield server
    except ServerStartError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def openai_env(llama_server: ServerProcess) -> Iterator[dict[str, str]]:
    """OPENAI_BASE_URL and OPENAI_API_KEY naming the llama.cpp server, set for the module."""
    env = {"OPENAI_BASE_URL": f"{llama_server.url}/v1", "OPENAI_API_KEY": "none"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        mp.delenv("OPENAI_API_BASE", raising=False)
        yield env


@pytest.fixture(scope="module")
def graph(openai_env: dict[str, str]) -> Any:
    """The default graph (the packaged corpus and grader) with the served chat model."""
    return build_graph(settings=Settings(llm=SPEC, llm_timeout_s=TIMEOUT_S, max_new_tokens=MAX_TOKENS))


def test_generation_with_citations(graph: Any, llama_server: ServerProcess) -> None:
    before = requests_made(llama_server)
    out = graph.invoke({"question": "How does the with statement work?"})
    crag = out["crag"]
    assert crag["action"] in {"generate", "refine"} and not crag["failure"], crag
    assert out["answer"].strip() and out["citations"], out
    assert all(c["chunk_id"] and c["source"] for c in out["citations"])
    assert requests_made(llama_server) == before + 1


def test_json_schema_rewrite(openai_env: dict[str, str], graph: Any, llama_server: ServerProcess) -> None:
    from fastcrag.generation.chat import load_chat_model
    from fastcrag.generation.generators import ChatGenerator
    from fastcrag.generation.openai_chat import OpenAICompatibleChat

    model = load_chat_model(SPEC, MAX_TOKENS, TIMEOUT_S)
    assert isinstance(model, OpenAICompatibleChat) and model.structured_method == "json_schema"
    query = ChatGenerator(model, TIMEOUT_S).rewrite("what is gil in cpython")
    assert isinstance(query, str) and query.strip() and len(query) <= 400  # RewrittenQuery, validated
    # llama-cpp-python's server takes no JSON-schema response_format: the model moved to a forced tool call
    assert model.structured_method == "function_calling"
    # in the graph: an off-corpus question grades INCORRECT and is rewritten (by the model, or by keywords)
    out = graph.invoke({"question": "Who won the 2018 FIFA World Cup?"})
    assert out["crag"]["rewriter"] in {"llm", "keyword"} and out["crag"]["rewritten_query"], out["crag"]
    assert out["answer"] == ABSTAIN


def test_follow_up_condensation(graph: Any, llama_server: ServerProcess) -> None:
    before = requests_made(llama_server)
    turns = [
        HumanMessage("What is a generator function?"),
        AIMessage("A function whose body contains a yield expression."),
        HumanMessage("What does calling it return?"),
    ]
    out = graph.invoke({"messages": turns})
    conversation = out["crag"]["conversation"]
    # the model's standalone question, or the documented fallback for output outside the schema (never an error
    # of the connection)
    assert conversation == HISTORY_OK or "ValidationError" in conversation or "no usable" in conversation, out["crag"]
    assert out["crag"]["question"].strip()
    assert [m.type for m in out["messages"]] == ["human", "ai", "human", "ai"]
    assert requests_made(llama_server) == before + 2  # the condensation, then the answer


def test_fit_generate_and_judge(
    tmp_path: Path,
    openai_env: dict[str, str],
    llama_server: ServerProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rivers = [
        "Aldon",
        "Brisk",
        "Calder",
        "Dunmore",
        "Elwy",
        "Ferren",
        "Glass",
        "Hollow",
        "Isker",
        "Juno",
        "Kell",
        "Lune",
    ]
    towns = [f"{river}ford" for river in rivers]
    corpus = tmp_path / "towns"
    corpus.mkdir()
    for i, (town, river) in enumerate(zip(towns, rivers, strict=True)):
        (corpus / f"{town}.md").write_text(
            f"# {town}\n\n{town} is a market town on the river {river}. It was founded in {1650 + 13 * i} by wool "
            "merchants. Its market is famous for salt, traded there every Thursday since the charter.\n",
            encoding="utf-8",
        )
    index = tmp_path / "index"
    assert main(["index", str(corpus), "--index", str(index), "--quiet"]) == 0
    monkeypatch.setenv("FASTRAG_TOP_K", "4")  # the judge makes one call per candidate
    monkeypatch.setenv("FASTRAG_MAX_NEW_TOKENS", "160")  # room for the three fields of a fit question
    args = ["fit", "--index", str(index), "--no-train", "--quiet", "--llm", SPEC]

    # --generate: one structured call per chunk; three chunks give too few questions to fit on, which is said plainly
    generated = tmp_path / "generated.jsonl"
    before = requests_made(llama_server)
    code = main([*args, "--out", str(tmp_path / "fit-g"), "--questions", str(generated), "--generate", "3"])
    out, err = capsys.readouterr()
    stats = next(line for line in out.splitlines() if "asked about 3 chunks" in line)
    assert "3 calls failed" not in stats, stats  # at least one structured reply came back inside the schema
    assert requests_made(llama_server) - before == 3
    rows = [json.loads(line) for line in generated.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["question"].strip() for r in rows), rows
    assert code == 2 and "labelled questions; fitting needs at least" in err and "Traceback" not in err, err

    # --judge: the model labels each candidate of the questions without `sources` (two here: 2 x top_k calls);
    # whatever it says, the `sources` questions leave enough to calibrate on
    founded = [
        {"question": f"In which year was {t} founded?", "answers": [str(1650 + 13 * i)]} for i, t in enumerate(towns)
    ]
    sources = [{"sources": [str((corpus / f"{t}.md").resolve())]} for t in towns]
    rows = founded[:2] + [{"question": f"On which river is {t}?", **s} for t, s in zip(towns, sources, strict=True)]
    rows += [
        {"question": f"What is the market of {t} famous for?", **s} for t, s in zip(towns[:6], sources, strict=False)
    ]
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    before = requests_made(llama_server)
    code = main([*args, "--out", str(tmp_path / "fit-j"), "--questions", str(labelled), "--judge"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (tmp_path / "fit-j" / "calibration.json").is_file()
    assert requests_made(llama_server) - before == 2 * 4


def test_tokens_stream_through_fastcrag_serve(tmp_path: Path, openai_env: dict[str, str]) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"FASTRAG_API_KEY", "PROMETHEUS_MULTIPROC_DIR"}},
        **launch.OFFLINE_ENV,
        **openai_env,
        "FASTRAG_LLM": SPEC,
        "FASTRAG_LLM_TIMEOUT_S": str(TIMEOUT_S),
        "FASTRAG_MAX_NEW_TOKENS": str(MAX_TOKENS),
        "FASTRAG_CHECKPOINTS": str(tmp_path / "checkpoints.sqlite"),
    }
    body = {
        "assistant_id": "crag",
        "input": {
            "messages": [
                {"role": "user", "content": "What is a generator function?"},
                {"role": "assistant", "content": "A function whose body contains a yield expression."},
                {"role": "user", "content": "How does the with statement work?"},
            ]
        },
        "stream_mode": ["messages-tuple", "values"],
    }
    try:
        with launch.serve(tmp_path, env, workers=1) as served:
            chunks: list[dict[str, Any]] = []
            nodes: set[str] = set()
            last: dict[str, Any] = {}
            started = time.perf_counter()
            first_token_s = None
            with httpx.stream("POST", f"{served.url}/runs/stream", json=body, timeout=TIMEOUT_S * 3) as resp:
                assert resp.status_code == 200
                for event, data in sse_events(resp):
                    if event == "messages":
                        message, meta = data
                        chunks.append(message)
                        nodes.add(meta.get("langgraph_node", ""))
                        first_token_s = first_token_s or time.perf_counter() - started
                    elif event == "values":
                        last = data
            total_s = time.perf_counter() - started
    except ServerStartError as exc:
        pytest.fail(str(exc))
    assert last["crag"]["action"] in {"generate", "refine"} and not last["crag"]["failure"], last["crag"]
    # the answer came token by token from the generate node; the condensation's JSON was not streamed
    assert len(chunks) >= 2 and nodes == {"generate"}, (nodes, chunks[:3])
    assert {c["type"] for c in chunks} == {"AIMessageChunk"}
    streamed = "".join(c["content"] for c in chunks).strip()
    reply = last["messages"][-1]
    assert reply["type"] == "ai" and reply["id"] == chunks[0]["id"]  # the streamed message becomes the reply
    assert streamed and reply["content"].startswith(streamed)
    assert first_token_s is not None and first_token_s < total_s


def test_flare_mode_reads_the_servers_log_probabilities(
    openai_env: dict[str, str], llama_server: ServerProcess
) -> None:
    """FLARE through the server, under LangGraph's `messages` stream mode (which would stream, and lose logprobs).

    At threshold 1 every sentence is uncertain: the first is searched (the scripted corpus grades it CORRECT), written
    again, and the retrieval cap ends the answer there: two completions, neither streamed as the answer.
    """
    graph = build_graph(
        retriever=ListRetriever(docs=[doc("The Eiffel Tower is in Paris. It was completed in 1889.", "c1")]),
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=SPEC,
        calibration=CALIBRATION.model_copy(update={"flare_threshold": 0.5}),
        settings=Settings(llm=SPEC, llm_timeout_s=TIMEOUT_S, max_new_tokens=MAX_TOKENS, mode="flare"),
    )
    before = requests_made(llama_server)
    events = list(
        graph.stream(
            {"messages": [HumanMessage("Where is the Eiffel Tower, and when was it completed?")]},
            context=Context(flare_threshold=1.0, flare_max_retrievals=1),
            stream_mode=["messages", "values"],
        )
    )
    out = [data for mode, data in events if mode == "values"][-1]
    crag = out["crag"]
    assert not crag["failure"], crag  # the replies carried token log-probabilities
    (entry,) = crag["flare"]
    assert entry["uncertain"] and entry["query"], entry  # read from the server's logprobs
    assert entry["band"] == "CORRECT" and entry["action"] == "add" and entry["rewritten"], entry
    assert out["answer"] == entry["rewritten"] and crag["flare_stop"] in {"retrieval cap", "end"}, crag
    assert requests_made(llama_server) == before + 2
    streamed = [data[0] for mode, data in events if mode == "messages"]
    assert not any(m.type == "AIMessageChunk" for m in streamed), streamed  # no draft streamed as the answer


# ------------------------------------------------------------------------------------ a server down or slow


class _Stalling(BaseHTTPRequestHandler):
    """Accepts a request, reads it, and answers nothing until the test ends."""

    release = threading.Event()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.release.wait(60)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stalling_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        _Stalling.release.set()
        server.shutdown()
        server.server_close()
        _Stalling.release.clear()


def _fake_graph(timeout_s: float) -> Any:
    from fastcrag.generation.chat import load_chat_model

    return build_graph(
        retriever=ListRetriever(
            docs=[doc("The Eiffel Tower is in Paris. It was completed in 1889.", "c1")],
            by_query={"FIFA": [doc("Bananas are yellow fruit grown in the tropics.", "c2")]},
        ),
        reranker=ScriptedReranker({"Eiffel": 0.9}),
        llm=load_chat_model(SPEC, MAX_TOKENS, timeout_s),
        calibration=CALIBRATION,
        settings=Settings(llm_timeout_s=timeout_s),
    )


def _client_overshoot(timeout_s: float, tries: int = 2) -> float:
    """The most seconds past `timeout_s` that a bare `openai` client call to `OPENAI_BASE_URL` took to fail."""
    import openai

    client = openai.OpenAI(timeout=timeout_s, max_retries=0)
    worst = 0.0
    for _ in range(tries):
        started = time.perf_counter()
        with pytest.raises(openai.APIError):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1)
        worst = max(worst, time.perf_counter() - started - timeout_s)
    return worst


def _timed(graph: Any, run_input: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    out = graph.invoke(run_input)
    return out, time.perf_counter() - started


ASK = {"question": "Where is the Eiffel Tower?"}  # graded CORRECT: only generation calls the model
CHAT = {
    "messages": [
        HumanMessage("Tell me about Paris."),
        AIMessage("It is a city."),
        HumanMessage("Who won the 2018 FIFA World Cup in Russia?"),
    ]
}  # off the corpus: the condensation fails toward the last message, the rewrite toward keywords


@pytest.mark.load
@pytest.mark.parametrize("kind", ["down", "slow"])
def test_a_server_down_or_slow_abstains_within_the_timeout(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose chat model is down or stalls abstains within the model's timeout (once per call that waits on it).

    The time the same runs take around the model is measured first, in the same run: against a port where nothing
    listens (each call fails at once), after a first untimed pass. So is how far past its timeout the `openai` client
    itself returns from the same server (its timer wakes late on a busy core: 16 ms was seen where the runs' own work
    took 5 ms). A run may take the timeout per stalled call plus `LOAD_FACTOR` times its own work and the client's
    overshoot per stalled call.
    """
    timeout_s = 1.5
    monkeypatch.setenv("OPENAI_API_KEY", "none")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    refused = _fake_graph(timeout_s)
    for run_input in (ASK, CHAT):  # imports and first calls stay out of the measurement
        _timed(refused, run_input)
    (_, ask_s), (_, chat_s) = _timed(refused, ASK), _timed(refused, CHAT)
    url = f"http://127.0.0.1:{free_port()}/v1" if kind == "down" else request.getfixturevalue("stalling_url")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    overshoot_s = _client_overshoot(timeout_s)
    graph = _fake_graph(timeout_s)
    out, took = _timed(graph, ASK)
    assert out["answer"] == ABSTAIN and out["crag"]["action"] == "abstain", out["crag"]
    reason = out["crag"]["failure"]
    assert reason.startswith("generation failed:"), reason
    assert ("ConnectionError" in reason) if kind == "down" else ("Timeout" in reason), reason
    assert took < bound(ask_s + overshoot_s, limit_s=timeout_s), (took, ask_s, overshoot_s)
    out, took = _timed(graph, CHAT)  # two model calls wait: the condensation and the rewrite
    crag = out["crag"]
    assert crag["conversation"].startswith("last message as it is (the chat model failed"), crag
    assert crag["rewriter"] == "keyword" and out["answer"] == ABSTAIN, crag
    assert took < bound(chat_s + 2 * overshoot_s, limit_s=2 * timeout_s), (took, chat_s, overshoot_s)
