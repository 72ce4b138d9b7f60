"""Routing: the only place that decides the path, as conditional-edge functions returning node names."""

from __future__ import annotations

from typing import Literal

from fastcrag.config.settings import RunConfig
from fastcrag.graph.state import State


def after_grade(state: State, cfg: RunConfig) -> Literal["generate", "refine", "rewrite", "abstain"]:
    """CORRECT generates, AMBIGUOUS refines, INCORRECT rewrites while the cap allows, else abstains.

    With CRAG disabled: plain RAG generates whatever the band; threshold-only abstains on INCORRECT. A
    `failure` abstains on every path.
    """
    band = state.get("band")
    if state.get("failure") or band is None:
        return "abstain"
    if cfg.plain_rag:
        return "generate"
    if not cfg.crag_enabled:
        return "abstain" if band == "INCORRECT" else "generate"
    if band == "CORRECT":
        return "generate"
    if band == "AMBIGUOUS":
        return "refine"
    return "rewrite" if state.get("rewrites", 0) < cfg.crag_max_rewrites else "abstain"


def after_refine(state: State) -> Literal["generate", "abstain"]:
    """Refinement that failed (the reranker raised) abstains."""
    return "abstain" if state.get("failure") else "generate"


def after_rewrite(state: State) -> Literal["retrieve", "abstain"]:
    """A rewrite that raised, came back empty or unchanged abstains; otherwise retrieve again."""
    return "abstain" if state.get("failure") else "retrieve"


def after_generate(state: State) -> Literal["abstain", "__end__"]:
    """Generation that failed abstains instead of returning an ungrounded or empty answer."""
    return "abstain" if state.get("failure") else "__end__"
