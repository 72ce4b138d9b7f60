"""Node `retrieve`: fetch candidates for the question (or its rewrite) and score them with the reranker."""

from __future__ import annotations

import time
from typing import Any

from fastcrag.components import Components
from fastcrag.grading.conditions import named_conditions, unmet_conditions
from fastcrag.grading.reranker import scores_until
from fastcrag.graph.state import Candidate, State, earlier_turns, fresh_question, question_of
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.retrieval.hybrid import HybridRetriever, Mode, chunk_key, fused_order
from fastcrag.retrieval.text import clean_text


def _candidate(doc: Any) -> Candidate:
    meta = doc.metadata or {}
    text = str(doc.page_content)
    return {"chunk_id": chunk_key(text, meta), "source": str(meta.get("source", "")), "text": text, "score": 0.0}


def start(state: State) -> State:
    """Whatever follows: the retry flag cleared, and a fresh trace for a new question (a thread answers many)."""
    first: State = {"retry": False, "failure": None, "candidates": []}
    return first if state.get("retry") else first | fresh_question()


def standalone(state: State, run: Run, question: str) -> tuple[str, str | None]:
    """The question, made standalone from the conversation before it by the chat model, and how (None: no chat).

    One structured call; whatever fails, the last message is used as it is, and the trace says why.
    """
    history = earlier_turns(state)
    if not history or not question:
        return question, None
    try:
        made = clean_text(run.parts.generator().standalone(history, question)).strip()
    except NotImplementedError:
        return question, "last message as it is (no chat model to read the conversation)"
    except Exception as exc:  # never fatal: the question as asked is still a question
        return question, f"last message as it is (the chat model failed: {type(exc).__name__}: {exc})"
    if not made or len(made) > run.cfg.max_question_chars:
        return question, "last message as it is (the chat model gave no usable question)"
    return made, "standalone question by the chat model"


def retrieve(state: State, run: Run) -> dict[str, Any]:
    """Retrieve and rerank; failures and unusable questions become a traced `failure`."""
    retry = bool(state.get("retry"))
    question = clean_text(question_of(state)).strip()
    update: dict[str, Any] = {}
    if not retry:
        question, update["conversation"] = standalone(state, run, question)
    else:
        question = str(state.get("question") or question)
    update["question"] = question
    limit = run.cfg.max_question_chars
    if not question:
        return update | {"failure": "the question is empty"}
    if len(question) > limit:
        return update | {"failure": f"the question is longer than {limit} characters (FASTRAG_MAX_QUESTION_CHARS)"}
    query = str(state.get("rewritten_query") or question) if retry else question
    # The retry reaches past what the first pass graded: those passages keep their scores (they were graded
    # against the same question) and the reranker grades only passages it has not seen.
    graded = {c["chunk_id"]: c for c in state.get("candidates") or [] if not c.get("ungraded")} if retry else {}
    started = time.perf_counter()
    try:
        retriever = run.parts.retriever()
        if isinstance(retriever, HybridRetriever):
            # a keyword rewrite is a bag of search terms: it is searched lexically
            mode: Mode | None = "lexical" if retry and state.get("rewriter") == "keyword" else None
            docs, update["retrieval"] = retriever.search(query, mode, k=retriever.k + len(graded))
            depth = retriever.k
        else:
            docs, update["retrieval"] = retriever.invoke(query), type(retriever).__name__
            depth = len(docs)
    except Exception as exc:  # a retriever failure abstains with the reason in the trace
        return update | {"failure": f"retriever raised {type(exc).__name__}: {exc}"}
    fresh = [c for c in map(_candidate, docs) if c["chunk_id"] not in graded][:depth]
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
        return update | {"failure": str(exc)}
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
    # a second retrieval is part of the correction's cost
    timings = (
        {"crag_ms": (reranked - started) * 1000}
        if retry
        else {"retrieve_ms": (fetched - started) * 1000, "rerank_ms": (reranked - fetched) * 1000}
    )
    return update | {"candidates": candidates, "timings": timings}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, retrieve, None, on_start=start)
