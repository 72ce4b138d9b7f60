"""`openai:MODEL`: loading and its errors, the JSON-schema refusal and tool-call fallback, `max_tokens` off OpenAI.

The server is an `httpx.MockTransport` that records each request body; the real server runs in
tests/integration/test_openai_server.py.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from fastcrag.generation import chat


def test_openai_without_the_extra_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastcrag.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "langchain_openai" else real(name))
    with pytest.raises(
        ValueError, match=r"needs the `openai` extra \(langchain-openai\): pip install 'fastcrag\[openai\]'"
    ):
        chat.load_chat_model("openai:gpt-4o-mini")
    assert main(["ask", "--llm", "openai:gpt-4o-mini", "What is a list?"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "fastcrag[openai]" in err


def test_openai_without_a_key_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("langchain_openai")
    from fastcrag.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match=r"needs OPENAI_API_KEY \(the server is http://127.0.0.1:9/v1"):
        chat.load_chat_model("openai:SmolLM2-135M-Instruct")
    assert main(["ask", "--llm", "openai:SmolLM2-135M-Instruct", "What is a list?"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "OPENAI_API_KEY" in err and "Traceback" not in err


def test_openai_model_takes_the_environment_timeout_and_no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    model = chat.load_chat_model("openai:my-model", max_tokens=77, timeout=3.5)
    assert model.model_name == "my-model" and model.max_tokens == 77  # type: ignore[attr-defined]
    client = model.root_client  # type: ignore[attr-defined]
    assert str(client.base_url) == "http://127.0.0.1:9/v1/" and client.max_retries == 0 and client.timeout == 3.5


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def _model(base_url: str, reply: Callable[[dict[str, Any]], httpx.Response]) -> tuple[Any, list[dict[str, Any]]]:
    pytest.importorskip("langchain_openai")
    from fastcrag.generation.openai_chat import OpenAICompatibleChat

    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        return reply(body)

    model = OpenAICompatibleChat(
        model="m",
        base_url=base_url,
        api_key="k",
        max_tokens=50,
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    return model, bodies


def _llama_cpp_python(body: dict[str, Any]) -> httpx.Response:
    """What llama-cpp-python's server answers: a 500 for a JSON-schema response_format, a forced tool call else."""
    if body.get("response_format", {}).get("type") == "json_schema":
        detail = "{'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}"
        return httpx.Response(500, json={"error": {"message": detail, "type": "internal_server_error"}})
    name = body["tool_choice"]["function"]["name"]
    call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": '{"query": "CPython GIL"}'}}
    return httpx.Response(200, json=_completion({"content": None, "tool_calls": [call]}))


def test_a_refused_json_schema_falls_back_to_a_forced_tool_call_for_good() -> None:
    from fastcrag.generation.generators import ChatGenerator

    model, bodies = _model("http://127.0.0.1:9/v1", _llama_cpp_python)
    generator = ChatGenerator(model, timeout=5.0)
    assert model.structured_method == "json_schema"
    assert generator.rewrite("what is gil in cpython") == "CPython GIL"
    assert model.structured_method == "function_calling"
    assert generator.rewrite("what is gil in pypy") == "CPython GIL"
    # one refusal, then tool calls only; the tool's parameters carry the schema
    assert [b.get("response_format", {}).get("type") for b in bodies] == ["json_schema", None, None]
    assert bodies[1]["tool_choice"]["function"]["name"] == "RewrittenQuery"
    assert bodies[1]["tools"][0]["function"]["parameters"]["properties"]["query"]["maxLength"] == 400


def test_json_schema_is_kept_where_the_server_takes_it() -> None:
    def json_schema_server(body: dict[str, Any]) -> httpx.Response:
        assert body["response_format"]["type"] == "json_schema"
        return httpx.Response(200, json=_completion({"content": '{"query": "CPython GIL"}'}))

    model, bodies = _model("http://127.0.0.1:9/v1", json_schema_server)
    from fastcrag.generation.generators import ChatGenerator

    assert ChatGenerator(model, timeout=5.0).rewrite("what is gil") == "CPython GIL"
    assert model.structured_method == "json_schema" and len(bodies) == 1


def test_another_server_error_is_no_refusal() -> None:
    from fastcrag.generation.generators import ChatGenerator

    def failing(body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(500, json={"error": {"message": "out of memory", "type": "internal_server_error"}})

    model, bodies = _model("http://127.0.0.1:9/v1", failing)
    with pytest.raises(Exception, match="out of memory"):
        ChatGenerator(model, timeout=5.0).rewrite("what is gil")
    assert model.structured_method == "json_schema" and len(bodies) == 1


@pytest.mark.parametrize(
    ("base_url", "sent"),
    [("http://127.0.0.1:9/v1", {"max_tokens": 50, "max_completion_tokens": 50}), (None, {"max_completion_tokens": 50})],
    ids=["compatible-server", "openai"],
)
def test_the_length_limit_reaches_servers_that_read_max_tokens(
    base_url: str | None, sent: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)

    def answer(body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200, json=_completion({"content": "Paris."}))

    model, bodies = _model(base_url, answer)  # type: ignore[arg-type]
    assert model.invoke("Where is the Eiffel Tower?").content == "Paris."
    assert {k: v for k, v in bodies[0].items() if k in {"max_tokens", "max_completion_tokens"}} == sent
