"""Node `refine`: split the usable chunks into sentence strips, re-score them, keep the strips that pass."""

from __future__ import annotations

from typing import Any

from fastcrag.components import Components
from fastcrag.grading.reranker import checked_scores
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import Passage, State
from fastcrag.retrieval.text import body_sentences, count_tokens, opens_section, split_title, titled


def refine(state: State, run: Run) -> dict[str, Any]:
    """Keep strips scoring >= reranker_threshold; a kept strip that is too short keeps its whole chunk."""
    cfg = run.cfg
    # after a rewrite, the path stays `rewrite`: the first corrective action names it
    update: dict[str, Any] = {"action": state.get("action") or "refine"}
    usable = [c for c in state.get("candidates") or [] if c["score"] >= cfg.reranker_threshold]
    chunks: list[Passage] = [
        {"chunk_id": c["chunk_id"], "source": c["source"], "text": c["text"], "score": c["score"]}
        for c in usable[: 2 * cfg.top_n]
    ]
    parts = [(c, split_title(c["text"])[0], body_sentences(c["text"])) for c in chunks]  # each chunk split once
    strips = [(s, c) for c, _, body in parts for s in body]
    leads = {id(c): body[0] for c, _, body in parts if body and opens_section(c["text"])}
    try:
        # a strip is read under its chunk's title, as the chunk was
        read = [titled(title, s) for _, title, body in parts for s in body]
        scores = checked_scores(run.parts.reranker(), str(state["question"]), read)
    except Exception as exc:
        return update | {"failure": f"refinement failed: {exc}", "strips_kept": 0}
    # Recomposed in reading order: the best-ranked chunk's strips first, each chunk's in the order it gives them.
    kept = [(score, s, c) for score, (s, c) in zip(scores, strips, strict=True) if score >= cfg.reranker_threshold]
    lengths = count_tokens([s for _, s, _ in kept])
    context: list[Passage] = []
    whole: set[str] = set()
    for (score, strip, chunk), n in zip(kept, lengths, strict=True):
        if n >= cfg.crag_strip_min_tokens:
            passage: Passage = {"chunk_id": chunk["chunk_id"], "source": chunk["source"], "text": strip, "score": score}
            context.append(passage | {"strip": True, "lead": leads.get(id(chunk)) == strip})
        elif chunk["chunk_id"] not in whole:  # too short to stand alone: its chunk stands in
            whole.add(chunk["chunk_id"])
            context.append({**chunk, "score": score})
    update["strips_kept"] = len(kept)
    if context:  # nothing survived: the graded ranking is used unchanged
        update["context"] = context[: cfg.top_n * 3]
    return update


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, refine, "crag_ms")
