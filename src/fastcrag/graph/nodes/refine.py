"""Node `refine`: split the usable chunks into sentence strips, re-score them, keep the strips that pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastcrag.components import Components
from fastcrag.config.settings import RunConfig
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import Candidate, Passage, State
from fastcrag.retrieval.text import count_tokens, sectioned, titled


def usable(candidates: Sequence[Candidate], threshold: float) -> list[Passage]:
    """The candidates graded at or above `threshold`, as passages, in their order."""
    return [
        {"chunk_id": c["chunk_id"], "source": c["source"], "text": c["text"], "score": c["score"]}
        for c in candidates
        if c["score"] >= threshold
    ]


def strips(
    reranker: Reranker, query: str, candidates: Sequence[Candidate], cfg: RunConfig
) -> tuple[list[Passage], int]:
    """The passages refinement keeps of the usable `candidates`, scored against `query`, and the strips kept.

    Strips scoring >= reranker_threshold are kept, recomposed in reading order (the best-ranked chunk's strips first);
    a kept strip that is too short keeps its whole chunk. No passage: nothing survived.

    Raises:
        RerankerError: the reranker failed.
    """
    chunks = usable(candidates, cfg.reranker_threshold)[: 2 * cfg.top_n]
    pieces = [(s, c, section) for c in chunks for section, s in sectioned(c["text"])]
    # a strip is read under its section's title, as its chunk was
    scores = checked_scores(reranker, query, [titled(section, s) for s, _, section in pieces])
    kept = [(score, *p) for score, p in zip(scores, pieces, strict=True) if score >= cfg.reranker_threshold]
    lengths = count_tokens([s for _, s, _, _ in kept])
    context: list[Passage] = []
    whole: set[str] = set()
    for (score, strip, chunk, section), n in zip(kept, lengths, strict=True):
        if n >= cfg.crag_strip_min_tokens:
            passage: Passage = {"chunk_id": chunk["chunk_id"], "source": chunk["source"], "text": strip, "score": score}
            context.append(passage | {"strip": True, "section": section})
        elif chunk["chunk_id"] not in whole:  # too short to stand alone: its chunk stands in
            whole.add(chunk["chunk_id"])
            context.append({**chunk, "score": score})
    return context, len(kept)


def refine(state: State, run: Run) -> dict[str, Any]:
    """Keep strips scoring >= reranker_threshold; a kept strip that is too short keeps its whole chunk."""
    cfg = run.cfg
    # after a rewrite, the path stays `rewrite`: the first corrective action names it
    update: dict[str, Any] = {"action": state.get("action") or "refine"}
    try:
        context, kept = strips(run.parts.reranker(), str(state["question"]), state.get("candidates") or [], cfg)
    except Exception as exc:
        return update | {"failure": f"refinement failed: {exc}", "strips_kept": 0}
    update["strips_kept"] = kept
    if context:  # nothing survived: the graded ranking is used unchanged
        update["context"] = context[: cfg.top_n * 3]
    return update


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, refine, "crag_ms")
