"""Test doubles: a scripted reranker, a fixed retriever, a chat model with structured output, a tiny embedder, and a
document whose section runs over several chunks."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda
from pydantic import Field

from fastcrag.config.calibration import Calibration
from fastcrag.retrieval.loaders import SourceDocument

LOWER, UPPER = 0.3, 0.7
CALIBRATION = Calibration(reranker_model="scripted", reranker_threshold=LOWER, crag_upper=UPPER)


class ScriptedReranker:
    """Scores each text by the first keyword it contains (else `default`); can be told to misbehave."""

    name = "scripted"

    def __init__(self, scores: dict[str, float], default: float = 0.05) -> None:
        self.scores = scores
        self.default = default
        self.calls: list[tuple[str, list[str]]] = []
        self.behaviour: Callable[[list[float]], Any] | None = None

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        out = [next((v for k, v in self.scores.items() if k in t), self.default) for t in texts]
        return self.behaviour(out) if self.behaviour else out


class ListRetriever(BaseRetriever):
    """Returns fixed documents; a different list for queries containing a key of `by_query`."""

    docs: list[Document]
    by_query: dict[str, list[Document]] = Field(default_factory=dict)
    queries: list[str] = Field(default_factory=list)
    error: str | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        self.queries.append(query)
        if self.error:
            raise RuntimeError(self.error)
        for key, docs in self.by_query.items():
            if key in query:
                return docs
        return self.docs


def doc(text: str, chunk_id: str, source: str = "doc.txt") -> Document:
    return Document(page_content=text, metadata={"chunk_id": chunk_id, "source": source})


class FakeChat(BaseChatModel):
    """Answers with `answer`; structured output returns `rewrite` (a dict), or raises when it is an exception."""

    answer: str = "The answer is 42."
    rewrite: Any = None
    answer_error: str | None = None
    rewrite_calls: int = 0
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "fake"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.prompts.append("\n".join(str(m.content) for m in messages))
        if self.answer_error:
            raise RuntimeError(self.answer_error)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.answer))])

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        def run(messages: Any) -> Any:
            self.rewrite_calls += 1
            self.prompts.append("\n".join(str(m.content) for m in messages))
            if isinstance(self.rewrite, BaseException):
                raise self.rewrite
            return schema.model_validate(self.rewrite)

        return RunnableLambda(run)


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings (no model): texts sharing words are close."""

    name = "hash-embeddings"
    dimension = 64

    def encode(self, texts: list[str], show_progress_bar: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.encode([text])[0].tolist()


class ScriptedChat(BaseChatModel):
    """Structured output answers each call with the next scripted reply, returned as it is (a dict, unvalidated).

    A reply that is an exception is raised; a callable is called with the call's prompt and its result used.
    Past the end of the script, the last reply repeats.
    """

    replies: list[Any] = Field(default_factory=list)
    prompts: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        raise NotImplementedError("ScriptedChat answers structured calls only")

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        def run(messages: Any) -> Any:
            prompt = "\n".join(str(m.content) for m in messages)
            self.prompts.append(prompt)
            reply = self.replies[min(len(self.prompts), len(self.replies)) - 1]
            if callable(reply):
                reply = reply(prompt)
            if isinstance(reply, BaseException):
                raise reply
            return reply

        return RunnableLambda(run)


def tokens(text: str, low: Sequence[str] = (), prob: float = 0.9, low_prob: float = 0.05) -> list[tuple[str, float]]:
    """`text` as word tokens (each with its leading space) at `prob`; words named in `low` at `low_prob`."""
    out = []
    for i, word in enumerate(text.split(" ")):
        token = word if i == 0 else " " + word
        out.append((token, low_prob if word.strip(".,!?") in low or word in low else prob))
    return out


class LogprobChat(BaseChatModel):
    """A chat model that returns token log-probabilities (OpenAI's format) when asked: each call writes the next draft.

    A draft is a list of (token, probability) pairs, or a callable given the prompt that returns one; past the end of
    the script the last draft repeats. Structured output returns `question` (a dict), or raises it when it is an
    exception. `calls` records each call's keyword arguments.
    """

    drafts: list[Any] = Field(default_factory=list)
    question: Any = None
    logprobs: bool | None = None
    prompts: list[str] = Field(default_factory=list)
    calls: list[dict[str, Any]] = Field(default_factory=list)
    structured: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "logprob-scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        prompt = "\n".join(str(m.content) for m in messages)
        self.prompts.append(prompt)
        self.calls.append(dict(kwargs))
        draft = self.drafts[min(len(self.prompts), len(self.drafts)) - 1]
        if callable(draft):
            draft = draft(prompt)
        meta: dict[str, Any] = {"finish_reason": "stop"}
        if kwargs.get("logprobs", self.logprobs):
            meta["logprobs"] = {
                "content": [{"token": t, "logprob": math.log(p) if p > 0 else -9999.0} for t, p in draft]
            }
        message = AIMessage(content="".join(t for t, _ in draft), response_metadata=meta)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        def run(messages: Any) -> Any:
            self.structured.append("\n".join(str(m.content) for m in messages))
            if isinstance(self.question, BaseException):
                raise self.question
            return schema.model_validate(self.question)

        return RunnableLambda(run)


# A guide whose section Alpha runs over several chunks at 32 tokens; Beta opens inside its last one.
SECTIONED = SourceDocument(
    "guide.md",
    "Guide",
    "# Guide\n\n## Alpha\n\n"
    + " ".join(f"Alpha sentence number {i} says something about the alpha topic." for i in range(12))
    + "\n\n## Beta\n\nBeta is another topic. It has its own lead.",
)
ALPHA, BETA = "Guide \u203a Alpha", "Guide \u203a Beta"
