"""Node `refine`: split the best chunks into sentence strips, re-score them, keep the strips that pass."""

from __future__ import annotations

from collections.abc import Sequence

from fastcrag.components import Components
from fastcrag.config.settings import RunConfig
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import Candidate, Passage, State
from fastcrag.retrieval.text import count_tokens, sectioned, titled


def _passage(c: Candidate) -> Passage:
    return {"chunk_id": c["chunk_id"], "source": c["source"], "text": c["text"], "score": c["score"]}


def usable(candidates: Sequence[Candidate], threshold: float) -> list[Passage]:
    """The candidates graded at or above `threshold`, as passages, in their order."""
    return [_passage(c) for c in candidates if c["score"] >= threshold]


def readable(candidates: Sequence[Candidate], cfg: RunConfig) -> list[Passage]:
    """The chunks refinement splits: the usable ones and the graph's first `top_n`, in their order; `2 * top_n` at most.

    A chunk's grade is one reading of all of it: a grammar block, a table or a side case beside the sentence that
    answers pulls it down ("Await expression: Suspend the execution of coroutine ..." 0.40 for "What does await
    do?"). The graph still ranks such a chunk among its best (the first pass's order mixed in), so its strips are
    graded alone; only strips reaching `reranker_threshold` are kept, never the chunk.
    """
    first = {c["chunk_id"] for c in candidates[: cfg.top_n] if not c.get("ungraded")}
    chosen = [c for c in candidates if c["score"] >= cfg.reranker_threshold or c["chunk_id"] in first]
    return [_passage(c) for c in chosen[: 2 * cfg.top_n]]


def strips(
    reranker: Reranker, query: str, candidates: Sequence[Candidate], cfg: RunConfig
) -> tuple[list[Passage], int]:
    """The passages refinement keeps of the `readable` candidates, scored against `query`, and the strips kept.

    Strips scoring >= reranker_threshold are kept, recomposed in reading order (the best-ranked chunk's strips first);
    a kept strip that is too short keeps its whole chunk, unless that chunk graded below reranker_threshold (then
    the strip is dropped: such a chunk never reaches the generator). A chunk graded at or above it none of whose strips
    reaches it alone stands whole (`whole`) in its place. No passage: nothing survived.

    Raises:
        RerankerError: the reranker failed.
    """
    chunks = readable(candidates, cfg)
    pieces = [(s, k, section) for k, c in enumerate(chunks) for section, s in sectioned(c["text"])]
    # a strip is read under its section's title, as its chunk was
    scores = checked_scores(reranker, query, [titled(section, s) for s, _, section in pieces])
    threshold = cfg.reranker_threshold
    kept = [(score, *p) for score, p in zip(scores, pieces, strict=True) if score >= threshold]
    strips_kept, held = len(kept), {k for _, _, k, _ in kept}  # a passing chunk with none: related across sentences
    kept += [(c["score"], "", k, "") for k, c in enumerate(chunks) if k not in held and c["score"] >= threshold]
    kept.sort(key=lambda t: t[2])  # in the graph's order, each chunk's strips in reading order (a stable sort)
    lengths = count_tokens([s for _, s, _, _ in kept])
    context: list[Passage] = []
    stood_in: set[int] = set()  # chunks standing in for a strip too short
    for (score, strip, k, section), n in zip(kept, lengths, strict=True):
        chunk = chunks[k]
        if not strip:
            context.append(chunk | {"whole": True})
        elif n >= cfg.crag_strip_min_tokens:
            passage: Passage = {"chunk_id": chunk["chunk_id"], "source": chunk["source"], "text": strip, "score": score}
            context.append(passage | {"strip": True, "section": section})
        elif k not in stood_in and chunk["score"] >= threshold:  # too short to stand alone: its chunk stands in
            stood_in.add(k)
            context.append({**chunk, "score": score})
    return context, strips_kept


def refine(state: State, run: Run) -> State:
    """Keep strips scoring >= reranker_threshold; a passing chunk with none, or with a strip too short, stands whole."""
    cfg = run.cfg
    # after a rewrite, the path stays `rewrite`: the first corrective action names it
    update: State = {"action": state.get("action") or "refine"}
    try:
        context, kept = strips(run.parts.reranker(), str(state["question"]), state.get("candidates") or [], cfg)
    except Exception as exc:
        return update | {"failure": {"code": "grading", "message": f"refinement failed: {exc}"}, "strips_kept": 0}
    update["strips_kept"] = kept
    if context:  # nothing survived: the graded ranking is used unchanged
        update["context"] = context[: cfg.top_n * 3]
    return update


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, refine, "crag_ms")
