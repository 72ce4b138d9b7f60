"""OpenAI-compatible chat servers (OpenAI, llama.cpp's server, vLLM, Ollama) through langchain-openai.

Imported only for `openai:MODEL` (the optional `openai` extra). The base URL and key come from the environment, as
the `openai` client reads them (`OPENAI_BASE_URL`, `OPENAI_API_KEY`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

import openai
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_openai import ChatOpenAI
from pydantic import PrivateAttr

StructuredMethod = Literal["json_schema", "function_calling"]
OPENAI_HOST = "api.openai.com"
#: Status codes with which servers turn down a request they cannot serve as asked (llama-cpp-python answers 500).
_REFUSALS = frozenset({400, 404, 415, 422, 500, 501})


def refuses_json_schema(exc: BaseException) -> bool:
    """Whether a server turned a request down because it takes no JSON-schema `response_format`."""
    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in _REFUSALS:
        return False
    text = str(exc).casefold()
    return "response_format" in text or "json_schema" in text


class OpenAICompatibleChat(ChatOpenAI):
    """`ChatOpenAI` for OpenAI and the servers that speak its API.

    Structured output asks for a JSON schema (`response_format`: OpenAI, vLLM, Ollama and llama.cpp's `llama-server`
    constrain the reply to it). A server that refuses one (llama-cpp-python's server takes only `json_object`) gets a
    forced tool call instead, whose arguments it constrains to the same schema; the first refusal switches this model
    to tool calls for good. Off OpenAI's own API the length limit is sent as `max_tokens` too, which such servers
    read (langchain-openai sends only `max_completion_tokens`).
    """

    _method: StructuredMethod = PrivateAttr(default="json_schema")

    @property
    def structured_method(self) -> StructuredMethod:
        """How structured output is asked for: `json_schema` until the server refuses it, then `function_calling`."""
        return self._method

    def _on_openai(self) -> bool:
        return bool(self.root_client.base_url.host == OPENAI_HOST)

    def _get_request_payload(self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "max_completion_tokens" in payload and "max_tokens" not in payload and not self._on_openai():
            payload["max_tokens"] = payload["max_completion_tokens"]
        return payload

    def with_structured_output(
        self, schema: Any = None, *, method: StructuredMethod | Literal["json_mode"] | None = None, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """Structured output by `method`; unnamed, by JSON schema, or a forced tool call where that is refused."""
        if method is not None or schema is None:
            return super().with_structured_output(schema, method=method or "json_schema", **kwargs)
        by_schema = super().with_structured_output(schema, method="json_schema", **kwargs)
        by_tool = super().with_structured_output(schema, method="function_calling", **kwargs)

        def run(value: Any, config: RunnableConfig) -> Any:
            if self._method == "json_schema":
                try:
                    return by_schema.invoke(value, config)
                except openai.APIStatusError as exc:
                    if not refuses_json_schema(exc):
                        raise
                    self._method = "function_calling"
            return by_tool.invoke(value, config)

        async def arun(value: Any, config: RunnableConfig) -> Any:
            if self._method == "json_schema":
                try:
                    return await by_schema.ainvoke(value, config)
                except openai.APIStatusError as exc:
                    if not refuses_json_schema(exc):
                        raise
                    self._method = "function_calling"
            return await by_tool.ainvoke(value, config)

        return RunnableLambda(run, afunc=arun, name="structured_output")


def openai_chat_model(model: str, max_tokens: int, timeout: float | None) -> OpenAICompatibleChat:
    """`model` on OpenAI's API, or on the server `OPENAI_BASE_URL` names, at temperature 0.

    No retries, so `timeout` bounds a call.

    Raises:
        ValueError: no API key (`OPENAI_API_KEY`; any value for a local server that does not check it).
    """
    if not os.environ.get("OPENAI_API_KEY"):
        where = os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_BASE") or f"https://{OPENAI_HOST}/v1"
        raise ValueError(
            f"openai:{model} needs OPENAI_API_KEY (the server is {where}; a local server that checks no key takes "
            "any value, e.g. OPENAI_API_KEY=none)"
        )
    # temperature 0, as the in-process model: an answer grounded in passages is not a place for sampling
    return OpenAICompatibleChat(model=model, max_tokens=max_tokens, timeout=timeout, max_retries=0, temperature=0.0)
