"""Routing: the only place that decides the path, as conditional-edge functions returning node names."""

from __future__ import annotations

from typing import Literal

from fastcrag.config.settings import RunConfig
from fastcrag.graph.state import FailureCode, FlareState, State


def failed(state: State) -> FailureCode | None:
    """The kind of the state's failure, None when there is none: every route reads it here, and abstains on one."""
    failure = state.get("failure")
    return failure["code"] if failure else None


def answer(cfg: RunConfig) -> Literal["generate", "flare"]:
    """The node that writes the answer: `generate` (CRAG), or the `flare` subgraph (FLARE mode, by sentences)."""
    return "flare" if cfg.flare else "generate"


def after_grade(state: State, cfg: RunConfig) -> Literal["generate", "flare", "refine", "rewrite", "abstain"]:
    """CORRECT answers, AMBIGUOUS refines, INCORRECT rewrites while the cap allows, else abstains.

    With CRAG disabled: plain RAG generates whatever the band; threshold-only abstains on INCORRECT. A
    `failure` abstains on every path. The answer is written by `generate`, or by the `flare` subgraph in FLARE mode.
    """
    band = state.get("band")
    if failed(state) or band is None:
        return "abstain"
    if cfg.plain_rag:
        return "generate"
    if not cfg.crag_enabled:
        return "abstain" if band == "INCORRECT" else answer(cfg)
    if band == "CORRECT":
        return answer(cfg)
    if band == "AMBIGUOUS":
        return "refine"
    return "rewrite" if state.get("rewrites", 0) < cfg.crag_max_rewrites else "abstain"


def after_refine(state: State, cfg: RunConfig) -> Literal["generate", "flare", "abstain"]:
    """Refinement that failed (the reranker raised) abstains; otherwise the answer is written."""
    return "abstain" if failed(state) else answer(cfg)


def after_rewrite(state: State) -> Literal["retrieve", "abstain"]:
    """A rewrite that raised, came back empty or unchanged abstains; otherwise retrieve again."""
    return "abstain" if failed(state) else "retrieve"


def after_generate(state: State) -> Literal["abstain", "__end__"]:
    """Generation that failed (or, in FLARE mode, asserted no sentence) abstains instead of an ungrounded answer."""
    return "abstain" if failed(state) else "__end__"


def after_draft(state: FlareState, cfg: RunConfig) -> Literal["lookup", "compose", "abstain"]:
    """An uncertain sentence is searched for while the retrieval cap allows; otherwise the answer is composed.

    At the cap the uncertain sentence is left out (never asserted unsearched), and writing stops there.
    """
    if failed(state):
        return "abstain"
    if state.get("pending") is not None and len(state.get("flare") or []) < cfg.flare_max_retrievals:
        return "lookup"
    return "compose"


def after_lookup(state: FlareState) -> Literal["admit", "drop", "abstain"]:
    """By the band of what the active retrieval found: CORRECT or AMBIGUOUS evidence is admitted, INCORRECT dropped.

    A search or grading that failed has no band: its sentence is dropped too.
    """
    if failed(state):
        return "abstain"
    retrievals = state.get("flare") or []
    band = retrievals[-1]["band"] if retrievals else None
    return "admit" if band in ("CORRECT", "AMBIGUOUS") else "drop"


def after_admit(state: FlareState) -> Literal["draft", "abstain"]:
    """Evidence that could not be refined (the reranker raised) abstains; otherwise the sentence is written again."""
    return "abstain" if failed(state) else "draft"
