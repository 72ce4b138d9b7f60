"""Node `retrieve`: fetch candidates for the question (or its rewrite) and score them with the reranker.

When a new question arrives (no retrieval pending), the node first runs intake (`fastcrag.graph.intake`), which
starts the question; `retrieve` itself only searches, grades and orders.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from langchain_core.retrievers import BaseRetriever
from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context
from fastcrag.grading.conditions import named_conditions, unmet_conditions
from fastcrag.grading.reranker import scores_until
from fastcrag.graph import intake
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import Candidate, State
from fastcrag.retrieval.hybrid import Mode, RoutedSearch, chunk_key, fused_order
from fastcrag.retrieval.text import normalise, split_title


def candidate_of(doc: Any) -> Candidate:
    """A retrieved document as an ungraded candidate."""
    meta = doc.metadata or {}
    text = str(doc.page_content)
    return {"chunk_id": chunk_key(text, meta), "source": str(meta.get("source", "")), "text": text, "score": 0.0}


def search(
    retriever: BaseRetriever | RoutedSearch, query: str, mode: Mode | None = None, extra: int = 0
) -> tuple[list[Any], str, int]:
    """The documents for `query`, the route taken, and how many of them to grade.

    A retriever searching by route (`RoutedSearch`, as `HybridRetriever`) searches in `mode` (its own when None)
    `extra` documents deeper than its `k`, and `k` are graded; any other retriever's documents are all graded.
    """
    if isinstance(retriever, RoutedSearch):
        docs, route = retriever.search(query, mode, k=retriever.k + extra)
        return docs, route, retriever.k
    docs = retriever.invoke(query)
    return docs, type(retriever).__name__, len(docs)


def collapse_copies(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per text, so copies of a page never take the grader's slots.

    A copy of an earlier candidate's body (the same words under any title) is dropped, and its source is listed in
    the earlier one's `copies`.
    """
    kept: dict[str, Candidate] = {}
    for c in candidates:
        key = normalise(split_title(c["text"])[1])
        if key not in kept:
            kept[key] = c
        elif c["source"] != kept[key]["source"] and c["source"] not in kept[key].get("copies", []):
            kept[key].setdefault("copies", []).append(c["source"])
    return list(kept.values())


def retrieve(state: State, run: Run) -> State:
    """Search the pending `query`, grade the candidates against the question and order them best first.

    A retriever or grader failure becomes a traced `failure`.
    """
    question = str(state.get("question") or "")
    query = str(state.get("query") or question)
    retry = state.get("rewrites", 0) > 0  # the query is a rewrite: this is the correction's second retrieval
    update: State = {}
    # The retry reaches past what the first pass graded: those passages keep their scores (they were graded
    # against the same question) and the reranker grades only passages it has not seen.
    graded = {c["chunk_id"]: c for c in state.get("candidates") or [] if not c.get("ungraded")} if retry else {}
    started = time.perf_counter()
    try:
        # a keyword rewrite is a bag of search terms: it is searched lexically
        mode: Mode | None = "lexical" if retry and state.get("rewriter") == "keyword" else None
        docs, update["retrieval"], depth = search(run.parts.retriever(), query, mode, len(graded))
    except Exception as exc:  # a retriever failure abstains with the reason in the trace
        return update | {"failure": {"code": "retrieval", "message": f"retriever raised {type(exc).__name__}: {exc}"}}
    fresh = [c for c in collapse_copies(map(candidate_of, docs)) if c["chunk_id"] not in graded][:depth]
    fetched = time.perf_counter()
    try:
        # Candidates are always graded against the user's question: a rewrite may widen recall,
        # but it can never make weak evidence look strong for a question nobody asked.
        # In first-pass order, a batch at a time: once one clears crag_upper the band is CORRECT, whatever the rest.
        # A chunk lacking a year, edition or quarter the question names is scored down (`condition_factor`).
        texts = [c["text"] for c in fresh]
        cfg = run.cfg
        scores = scores_until(
            run.parts.reranker(), question, texts, cfg.grade_batch, cfg.crag_upper, cfg.condition_factor
        )
    except Exception as exc:
        return update | {"failure": {"code": "grading", "message": str(exc)}}
    reranked = time.perf_counter()
    # Best first: the grader's order, mixed with the first pass's where the calibration says the corpus wants it.
    # Passages graded before the retry come after this retrieval's in the first-pass order; ungraded ones last.
    scored: list[Candidate] = [{**c, "score": s} for c, s in zip(fresh, scores, strict=False)]
    if cfg.condition_factor < 1.0 and (named := named_conditions(question)):
        for c in scored:  # the trace says why a chunk was scored down
            if unmet := unmet_conditions(named, c["text"]):
                c["unmet"] = unmet
    pool = [*scored, *graded.values()]
    candidates = [pool[i] for i in fused_order([c["score"] for c in pool], run.cfg.rerank_weight)]
    candidates += [{**c, "ungraded": True} for c in fresh[len(scores) :]]
    if retry:  # a second retrieval is part of the correction's cost
        run.charge("crag_ms", (reranked - started) * 1000)
    else:
        run.charge("retrieve_ms", (fetched - started) * 1000)
        run.charge("rerank_ms", (reranked - fetched) * 1000)
    return update | {"candidates": candidates}


def make(parts: Components) -> Node:
    """Build the node over `parts`: intake when a new question arrives, then `retrieve`."""
    search = stage(parts, retrieve, None)

    def retrieve_node(state: State, *, runtime: Runtime[Context]) -> State:
        """Start the question when none is pending, then search its `query` (consumed whatever the search does)."""
        start: State = {}
        if state.get("query") is None:  # no retrieval pending: a new question arrived
            start = intake.start(state, parts, runtime.context)
            if start.get("failure"):
                return start
        return {**start, **search({**state, **start}, runtime=runtime), "query": None}

    retrieve_node.__name__ = "retrieve"
    return retrieve_node
