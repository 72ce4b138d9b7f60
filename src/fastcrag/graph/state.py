"""Graph state: a narrow input, the full internal state, a narrow output, and the decision trace."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict  # pydantic (server schemas) needs it on Python < 3.12

from fastcrag.grading.bands import Band

Action = Literal["generate", "refine", "rewrite", "abstain", "disabled", "plain"]
STAGES = ("retrieve_ms", "rerank_ms", "crag_ms", "generate_ms")
FRESH = "fresh"
"""A key of a `timings` update that starts the timings afresh (a new question) before adding the update's own."""


def add_timings(current: dict[str, float] | None, update: dict[str, float] | None) -> dict[str, float]:
    """Reducer of `timings`: each node's stage times add up over the run; an update holding `FRESH` starts anew."""
    totals = {} if not current or (update and FRESH in update) else dict(current)
    for stage, ms in (update or {}).items():
        if stage != FRESH:
            totals[stage] = round(totals.get(stage, 0.0) + ms, 3)
    return totals


class Candidate(TypedDict):
    """A retrieved chunk with its reranker score (`ungraded`: grading stopped before it; its score is 0)."""

    chunk_id: str
    source: str
    text: str
    score: float
    ungraded: NotRequired[bool]
    unmet: NotRequired[list[str]]  # conditions the question names that the chunk states in no form (scored down)


class Passage(TypedDict, total=False):
    """What the generator sees: a chunk, or a sentence strip of one (`strip` true)."""

    chunk_id: str
    source: str
    text: str
    score: float
    strip: bool


class Citation(TypedDict):
    """A passage an answer rests on."""

    chunk_id: str
    source: str
    score: float


class InputState(TypedDict, total=False):
    """What a caller sends: a `question`, or chat `messages` whose last human message is the question."""

    question: str
    messages: Annotated[list[AnyMessage], add_messages]


class OutputState(TypedDict, total=False):
    """What a caller gets back: the same fields as `fastcrag ask --json` (and the AI reply, for chat input)."""

    messages: Annotated[list[AnyMessage], add_messages]

    answer: str
    citations: list[Citation]
    crag: dict[str, Any]


class State(InputState, OutputState, total=False):
    """Everything the nodes share; each node returns a partial update of it."""

    retry: bool  # the next retrieval uses `rewritten_query` (set by rewrite, cleared by retrieve)
    rewrites: int
    rewritten_query: str | None
    rewriter: str | None  # which rewrite ran: "llm" (the chat model) or "keyword" (searched lexically)
    retrieval: str | None  # the route of the last retrieval: hybrid, dense, lexical, or a fallback with its reason
    candidates: list[Candidate]
    band: Band | None
    top_score: float | None
    verdicts: list[dict[str, Any]]
    context: list[Passage]
    strips_kept: int | None
    action: Action | None  # the path's action, recorded by the node that took it (grade, refine, rewrite)
    conversation: str | None  # chat input with earlier turns: how the question was made standalone (or why not)
    failure: str | None
    timings: Annotated[dict[str, float], add_timings]


def fresh_question() -> State:
    """The update that starts a new question's trace (a thread keeps its state between questions)."""
    return {
        "rewrites": 0,
        "rewritten_query": None,
        "rewriter": None,
        "retrieval": None,
        "strips_kept": None,
        "band": None,
        "top_score": None,
        "verdicts": [],
        "context": [],
        "action": None,
        "conversation": None,
        "timings": {FRESH: 0.0},
    }


def _text(message: AnyMessage) -> str:
    return str(message.text if hasattr(message, "text") else message.content)


def question_of(state: State) -> str:
    """The question: the last chat message when it is a human one, else the `question` field."""
    messages = state.get("messages") or []
    if messages and messages[-1].type == "human":
        return _text(messages[-1])
    return str(state.get("question") or "")


def earlier_turns(state: State) -> list[tuple[str, str]]:
    """The (role, text) turns of a chat before its last human message (none for a plain `question`)."""
    messages = state.get("messages") or []
    if len(messages) < 2 or messages[-1].type != "human":
        return []
    return [(m.type, _text(m)) for m in messages[:-1] if m.type in ("human", "ai")]


def reply(state: State, answer: str) -> dict[str, Any]:
    """The AI message to append when the question came as chat messages (nothing otherwise)."""
    return {"messages": [AIMessage(content=answer)]} if state.get("messages") else {}


def trace(state: State, action: Action, timings: dict[str, float], extra: dict[str, Any]) -> dict[str, Any]:
    """The `crag` decision trace returned with every answer."""
    return {
        "action": action,
        "band": state.get("band"),
        "top_score": state.get("top_score"),
        "strips_kept": state.get("strips_kept") or 0,
        "rewritten_query": state.get("rewritten_query"),
        "rewriter": state.get("rewriter"),
        "retrieval": state.get("retrieval"),
        "verdicts": state.get("verdicts") or [],
        "timings": {stage: round(timings.get(stage, 0.0), 3) for stage in STAGES},
        "failure": state.get("failure"),
        "question": state.get("question"),
        "conversation": state.get("conversation"),
        **extra,
    }
