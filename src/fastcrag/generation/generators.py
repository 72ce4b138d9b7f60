"""Generators: answer from graded passages and rewrite queries; a chat model's here, the extractive one apart."""

from __future__ import annotations

import concurrent.futures
import contextvars
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field

from fastcrag.generation import prompts

Schema = TypeVar("Schema", bound=BaseModel)
NOSTREAM = "nostream"
"""The run tag LangGraph's `messages` stream mode leaves out: a structured call's JSON is no answer to stream."""


class StandaloneQuestion(BaseModel):
    """The standalone question's JSON schema."""

    question: str = Field(min_length=1, max_length=600, description="The last message as a standalone question.")


class RewrittenQuery(BaseModel):
    """The rewrite's JSON schema."""

    query: str = Field(min_length=1, max_length=400, description="The rewritten search query.")


@dataclass(frozen=True)
class Answer:
    """Generated text, the indices of the passages it rests on, and the chat model's message id (when streamed).

    The reply to a chat carries `message_id`, so a client that streamed the model's tokens under that id sees them
    become the final message (with its sources) instead of a second one. `read` holds the chunks the answer read
    beyond the passages it was given (`chunk_id`, `source`, `score`); in `used` they follow the passages (index
    `len(passages) + j` is `read[j]`).
    """

    text: str
    used: list[int]
    message_id: str | None = None
    read: tuple[Mapping[str, Any], ...] = field(default=())


class Generator(Protocol):
    """Turns passages into an answer, and rewrites queries (raising when it cannot)."""

    name: str

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]]) -> Answer:
        """Answer `question` from `passages` (dicts with `text`, `source`, `score`)."""
        ...

    def rewrite(self, question: str) -> str:
        """A better search query for `question`."""
        ...

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """`question` made understandable without `history` ((role, text) turns before it)."""
        ...


@runtime_checkable
class ChatBacked(Protocol):
    """A generator that writes with a LangChain chat model, `llm`: FLARE drafts with it (`ChatGenerator` is one)."""

    llm: BaseChatModel


def structured_call(llm: BaseChatModel, schema: type[Schema], messages: list[Any], timeout: float | None) -> Schema:
    """One chat-model call under a JSON schema, validated against it whatever the model returns.

    Raises:
        TimeoutError: no reply within `timeout` seconds (None: no limit).
        ValueError: the reply does not parse or does not fit the schema.
    """
    runnable = llm.with_structured_output(schema).with_config(tags=[NOSTREAM])
    result = runnable.invoke(messages) if timeout is None else with_timeout(lambda: runnable.invoke(messages), timeout)
    if isinstance(result, dict) and "parsed" in result:  # include_raw-style output
        if result.get("parsing_error") is not None:
            raise ValueError(f"structured output did not parse: {result['parsing_error']}")
        result = result["parsed"]
    if isinstance(result, BaseModel):
        result = result.model_dump()
    return schema.model_validate(result)


def with_timeout(fn: Any, timeout: float) -> Any:
    """Run `fn()` on a worker thread and give up after `timeout` seconds (raising TimeoutError).

    The thread runs in a copy of the caller's context, so the run's callbacks (LangGraph's token stream, tracing)
    see the call.
    """
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(contextvars.copy_context().run, fn).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"chat model gave no answer within {timeout:g} s") from None
    finally:
        pool.shutdown(wait=False)


class ChatGenerator:
    """Any LangChain chat model: a grounded answer prompt, and a JSON-schema rewrite."""

    def __init__(self, llm: BaseChatModel, timeout: float = 120.0, name: str | None = None) -> None:
        """Wrap `llm`; each call is abandoned after `timeout` seconds."""
        self.llm = llm
        self.timeout = timeout
        self.name = name or getattr(llm, "model_path", None) or type(llm).__name__

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]]) -> Answer:
        """Answer from the delimited passages; all passages are cited."""
        messages = prompts.answer_messages(question, passages)
        reply = with_timeout(lambda: self.llm.invoke(messages), self.timeout)
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        return Answer(text.strip(), list(range(len(passages))), reply.id)

    def rewrite(self, question: str) -> str:
        """Rewrite under the `RewrittenQuery` schema (validated whatever the model does)."""
        messages = prompts.rewrite_messages(question)
        return structured_call(self.llm, RewrittenQuery, messages, self.timeout).query

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """One structured call: the last message as a standalone question, from the last `HISTORY_TURNS` turns."""
        messages = prompts.standalone_messages(history, question)
        return structured_call(self.llm, StandaloneQuestion, messages, self.timeout).question


def generate_answer(
    generator: Generator,
    question: str,
    passages: Sequence[Mapping[str, Any]],
    *,
    abstain: bool = True,
    ambiguous: bool = False,
) -> Answer:
    """Run `generator` on `passages`.

    A generator that declares itself `extractive` holds `ambiguous` evidence (AMBIGUOUS band, CRAG on) to its
    `refine_reader_threshold`; with `abstain` false (plain RAG) it answers even below its floor.
    """
    if getattr(generator, "extractive", False):
        return generator.generate(question, passages, abstain=abstain, ambiguous=ambiguous)  # type: ignore[call-arg]
    return generator.generate(question, passages)
