"""FLARE's use of a chat model: drafts with token probabilities, split into sentences, and the queries they become.

A draft is one non-streamed completion with log-probabilities (servers return them only then, and LangGraph's
`messages` mode must not stream a draft that may be written again), cut into sentences that each carry their
tokens. A sentence is uncertain when one of its word tokens falls below the confidence threshold; it is then
searched for as the sentence with those words masked, or as a question the chat model writes for them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field

from fastcrag.generation import prompts
from fastcrag.generation.chat import LlamaCppChat
from fastcrag.generation.generators import NOSTREAM, ChatBacked, structured_call, with_timeout

MODE = "mode flare (FASTRAG_MODE=flare)"
LOGPROB_PROVIDERS = ("openai", "llamacpp")
"""The `provider:model` specs whose chat models fastcrag reads token log-probabilities from."""
EXTRACTIVE = (
    f"{MODE}: the extractive generator has no FLARE mode (it writes no tokens, so it has no token log-probabilities);"
    " set FASTRAG_LLM to a chat model that returns them: openai:MODEL (OpenAI, or a server that speaks its API) or "
    "llamacpp:SmolLM2-135M-Instruct"
)
_WORD = re.compile(r"\w")
_MARKUP = re.compile(r"</?[A-Za-z_]+>")
"""A tag like the prompt's own delimiters (`<passages>`, `</answer>`): a small model echoes them as a "sentence"."""
_BOUNDARY = re.compile(r"[.!?][\"')\]]*(?=\s)|\n|</?[A-Za-z_]+>")
_TERMINAL = (".", "!", "?")


class Sentence(TypedDict):
    """One drafted sentence with its tokens, each token's probability and where it starts in the sentence."""

    text: str
    """The sentence."""
    tokens: list[str]
    """Its tokens as the chat model wrote them."""
    probs: list[float]
    """Each token's probability under the chat model."""
    starts: list[int]
    """Each token's offset in `text` (a token before the text's first character starts at 0)."""


class SpanQuestion(BaseModel):
    """The JSON schema of the question written for a sentence's uncertain words."""

    question: str = Field(min_length=1, max_length=400, description="A search question for the uncertain words.")


def unsupported(llm: Any) -> str | None:
    """Why `llm` (a `provider:model` spec, a generator or a chat model) cannot write FLARE drafts; None if it can.

    Read from the spec or the object, without loading a model, so that a graph built for FLARE mode can refuse it
    at build time. A chat model qualifies when it has a `logprobs` option (ChatOpenAI and its kin, LlamaCppChat).
    """
    if isinstance(llm, str):
        if llm == "extractive":
            return EXTRACTIVE
        provider = llm.partition(":")[0]
        if provider in LOGPROB_PROVIDERS:
            return None
        return (
            f"{MODE} needs a chat model that returns token log-probabilities, and provider {provider!r} "
            f"(FASTRAG_LLM={llm}) returns none that fastcrag reads; use openai:MODEL (OpenAI, or a server that speaks "
            "its API and returns `logprobs`) or llamacpp:GGUF"
        )
    if getattr(llm, "extractive", False):  # a generator that declares it quotes: it writes no tokens
        return EXTRACTIVE
    if isinstance(llm, ChatBacked):
        llm = llm.llm
    if isinstance(llm, BaseChatModel):
        if "logprobs" in type(llm).model_fields:
            return None
        return (
            f"{MODE} needs a chat model that returns token log-probabilities, and {type(llm).__name__} has no "
            "`logprobs` option (ChatOpenAI and fastcrag's LlamaCppChat have one)"
        )
    name = getattr(llm, "name", type(llm).__name__)
    return (
        f"{MODE}: the generator {name!r} has no FLARE mode (FLARE drafts with a chat model's token log-probabilities)"
    )


def token_probs(message: Any) -> list[tuple[str, float]]:
    """(token, probability) of each token of a reply, from its OpenAI-style `response_metadata["logprobs"]`.

    Raises:
        ValueError: the reply carries none.
    """
    meta = getattr(message, "response_metadata", None) or {}
    content = (meta.get("logprobs") or {}).get("content")
    if not content:
        raise ValueError("the chat model returned no token log-probabilities")
    return [(str(t.get("token") or ""), math.exp(min(0.0, float(t["logprob"])))) for t in content]


def _spans(text: str) -> list[tuple[int, int]]:
    """Sentence spans of `text`.

    A sentence ends at . ! or ? before a space (not before a lower-case word) or at a line break; a tag is a span of
    its own.
    """
    spans, start = [], 0
    for m in _BOUNDARY.finditer(text):
        if _MARKUP.fullmatch(m.group()):  # a tag stands alone, between the sentences around it
            spans += [(start, m.start()), (m.start(), m.end())]
            start = m.end()
            continue
        rest = text[m.end() :].lstrip()
        if m.group() != "\n" and rest and rest[0].islower():  # "e.g. the": no sentence end
            continue
        spans.append((start, m.end()))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if s < e:
            out.append((s, e))
    return out


def _offsets(text: str, tokens: Sequence[str]) -> list[int]:
    """Where each token starts in `text`; a token the text does not spell (a partial character) starts where it is."""
    starts, pos = [], 0
    for token in tokens:
        at = text.find(token, pos) if token else -1
        if at < 0:
            starts.append(pos)
        else:
            starts.append(at)
            pos = at + len(token)
    return starts


def sentences_of(text: str, tokens: Sequence[tuple[str, float]], cut: bool = False) -> list[Sentence]:
    """`text` cut into sentences, each with the tokens whose first visible character stands in it.

    A "sentence" that is markup alone (the prompt's delimiters echoed back) or holds no letter or digit is left out.

    Args:
        text: The reply.
        tokens: (token, probability) pairs of the reply, in order.
        cut: The reply stopped at the length limit: a last sentence without its end is left out.
    """
    words = [t for t, _ in tokens]
    starts = _offsets(text, words)
    out: list[Sentence] = []
    for s, e in _spans(text):
        if not _WORD.search(_MARKUP.sub("", text[s:e])):  # markup alone (an echoed delimiter) says nothing
            continue
        inside = [i for i, at in enumerate(starts) if s <= at + len(words[i]) - len(words[i].lstrip()) < e]
        out.append(
            Sentence(
                text=text[s:e],
                tokens=[words[i] for i in inside],
                probs=[tokens[i][1] for i in inside],
                starts=[max(0, starts[i] - s) for i in inside],
            )
        )
    if cut and out and not out[-1]["text"].rstrip("\"')]").endswith(_TERMINAL):
        out.pop()
    return out


def uncertain(sentence: Sentence, threshold: float) -> list[int]:
    """The indices of the sentence's word tokens (holding a letter or digit) whose probability is below `threshold`.

    Punctuation and spaces never make a sentence uncertain (as LangChain's FlareChain rules).
    """
    return [
        i
        for i, (t, p) in enumerate(zip(sentence["tokens"], sentence["probs"], strict=True))
        if p < threshold and _WORD.search(t)
    ]


def _words(sentence: Sentence, threshold: float) -> list[tuple[str, bool]]:
    """The sentence's words, each with whether an uncertain token touches it."""
    low = [
        (sentence["starts"][i], sentence["starts"][i] + len(sentence["tokens"][i]))
        for i in uncertain(sentence, threshold)
    ]
    return [
        (m.group(), any(a < m.end() and b > m.start() for a, b in low)) for m in re.finditer(r"\S+", sentence["text"])
    ]


def uncertain_words(sentence: Sentence, threshold: float) -> list[str]:
    """The words holding an uncertain token."""
    return [w for w, low in _words(sentence, threshold) if low]


def masked_query(sentence: Sentence, threshold: float) -> str:
    """The sentence without its uncertain words (FLARE's masked query); the sentence itself when none is left."""
    kept = [w for w, low in _words(sentence, threshold) if not low]
    return " ".join(kept) if any(_WORD.search(w) for w in kept) else sentence["text"]


def marked(sentence: Sentence, threshold: float) -> str:
    """The sentence with each run of uncertain words in [[...]], for the chat model to ask about."""
    out: list[str] = []
    run: list[str] = []
    for word, low in _words(sentence, threshold):
        if low:
            run.append(word)
            continue
        if run:
            out.append(f"[[{' '.join(run)}]]")
            run = []
        out.append(word)
    if run:
        out.append(f"[[{' '.join(run)}]]")
    return " ".join(out)


class FlareWriter:
    """A chat model as FLARE uses it: drafts with token probabilities, and questions for uncertain words."""

    def __init__(self, llm: BaseChatModel, timeout: float = 120.0) -> None:
        """Wrap `llm` (one with a `logprobs` option); each call is abandoned after `timeout` seconds."""
        self.llm = llm
        self.timeout = timeout
        # Non-streamed (`stream=False`): servers return log-probabilities only then; tagged so that LangGraph's
        # `messages` mode does not stream a draft that may be dropped or written again. `top_logprobs`: without it
        # llama-cpp-python's server returns none. The in-process model stops at a line break (its answers are one
        # or two sentences); a draft is long-form, so its lines run on.
        options: dict[str, Any] = {"logprobs": True, "top_logprobs": 1, "stream": False}
        if isinstance(llm, LlamaCppChat):
            options["stop"] = []
        self._scored = llm.bind(**options).with_config(tags=[NOSTREAM])

    def draft(self, question: str, passages: Sequence[Mapping[str, Any]], prefix: Sequence[str]) -> list[Sentence]:
        """The answer's next sentences after the kept ones (`prefix`), each with its tokens' probabilities.

        Raises:
            TimeoutError: no reply within the timeout.
            ValueError: the reply carries no log-probabilities.
        """
        messages = prompts.draft_messages(question, passages, prefix)
        reply = with_timeout(lambda: self._scored.invoke(messages), self.timeout)
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        cut = (reply.response_metadata or {}).get("finish_reason") == "length"
        return sentences_of(text, token_probs(reply), cut)

    def span_question(self, question: str, marked_sentence: str) -> str:
        """A search question for the [[marked]] words of a sentence, under the `SpanQuestion` schema."""
        messages = prompts.span_question_messages(question, marked_sentence)
        return structured_call(self.llm, SpanQuestion, messages, self.timeout).question
