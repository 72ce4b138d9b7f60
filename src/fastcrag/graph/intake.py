"""Intake: how a new question starts, as one step that the `retrieve` node runs before its first search.

A thread keeps its state between questions, so intake sets every per-question field afresh, reads the question
(from `question`, or the last human message of a chat), makes a chat turn standalone and checks the question is
usable. It is not a node of its own: the graph keeps the nodes of its design, and `retrieve` runs intake when
no retrieval is pending (`query` is None).
"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.messages import AnyMessage

from fastcrag.components import Components
from fastcrag.config.settings import RunConfig
from fastcrag.graph.state import State, fresh_question
from fastcrag.retrieval.text import clean_text


def start(state: State, parts: Components, context: Any) -> State:
    """The update that starts a new question: every per-question field afresh (`PerQuestion`), and the question.

    An unusable question (empty, too long) or settings that cannot be resolved leave a `failure`, which routes to
    abstain; the per-question fields are fresh either way, so the abstention's trace is this question's.

    Args:
        state: The thread's state, holding the new input.
        parts: The components (the chat model makes a chat turn standalone).
        context: The run's context (`max_question_chars` comes from it).
    """
    fresh = cast(State, fresh_question())  # a part of State's fields, every one optional
    try:
        cfg = parts.run_config(context)
    except Exception as exc:  # the reason travels in the trace; abstain needs no settings to answer
        return fresh | {"failure": {"code": "settings", "message": str(exc)}}
    question, conversation = standalone(state, parts, cfg, clean_text(question_of(state)).strip())
    fresh |= {"question": question, "conversation": conversation}
    limit = cfg.max_question_chars
    if not question:
        return fresh | {"failure": {"code": "question", "message": "the question is empty"}}
    if len(question) > limit:
        why = f"the question is longer than {limit} characters (FASTRAG_MAX_QUESTION_CHARS)"
        return fresh | {"failure": {"code": "question", "message": why}}
    return fresh | {"query": question}


def standalone(state: State, parts: Components, cfg: RunConfig, question: str) -> tuple[str, str | None]:
    """The question, made standalone from the conversation before it by the chat model, and how (None: no chat).

    One structured call; whatever fails, the last message is used as it is, and the trace says why.
    """
    history = earlier_turns(state)
    if not history or not question:
        return question, None
    try:
        made = clean_text(parts.generator().standalone(history, question)).strip()
    except NotImplementedError:
        return question, "last message as it is (no chat model to read the conversation)"
    except Exception as exc:  # never fatal: the question as asked is still a question
        return question, f"last message as it is (the chat model failed: {type(exc).__name__}: {exc})"
    if not made or len(made) > cfg.max_question_chars:
        return question, "last message as it is (the chat model gave no usable question)"
    return made, "standalone question by the chat model"


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
