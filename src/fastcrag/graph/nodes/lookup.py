"""Node `lookup` (FLARE mode): search for an uncertain sentence and grade what comes back with the same bands."""

from __future__ import annotations

import time
from collections.abc import Sequence

from langgraph.config import get_stream_writer

from fastcrag.components import Components
from fastcrag.generation.flare import marked, masked_query, uncertain_words
from fastcrag.grading.bands import band_of
from fastcrag.grading.reranker import Reranker, checked_scores, scores_until
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.retrieve import candidate_of, collapse_copies, search
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import ActiveRetrieval, Candidate, FlareState
from fastcrag.retrieval.hybrid import fused_order


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


class SentenceEvidence:
    """The grader as an active retrieval uses it: a text's score is the lower of its scores against query and question.

    Each is scored down by `condition_factor` for a condition it names that the text lacks. Evidence for a sentence
    must state what the sentence needs (the query) and still answer the question asked (as every grade in the graph
    does): a query with nothing left to ask (a masked "1." or "(1)") scores any passage high against itself, but not
    against the question.
    """

    def __init__(self, reranker: Reranker, question: str, condition_factor: float) -> None:
        self.reranker = reranker
        self.question = question
        self.condition_factor = condition_factor
        self.name = reranker.name

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """The lower of each text's two scores.

        Raises:
            RerankerError: as `checked_scores`.
        """
        factor = self.condition_factor
        against_query = checked_scores(self.reranker, query, texts, factor)
        against_question = checked_scores(self.reranker, self.question, texts, factor)
        return [min(a, b) for a, b in zip(against_query, against_question, strict=True)]


def lookup(state: FlareState, run: Run) -> FlareState:
    """Form the query (`flare_query`), search it, grade the results, and band the best score.

    The query is the pending sentence without its uncertain words (`masked`), or a question for them that the chat
    model writes under a JSON schema (`question`; the masked sentence when that call fails). What comes back is
    graded by the same grader, batches and thresholds as the first retrieval, against both the query and the
    question (`SentenceEvidence`). A search or grading that fails leaves no band (the sentence is then dropped).
    """
    cfg = run.cfg
    sentence = state.get("pending")
    if sentence is None:  # routing sends only a pending sentence here
        return {"failure": {"code": "generation", "message": "no uncertain sentence to search for"}}
    started = time.perf_counter()
    query, by = "", str(cfg.flare_query)
    if by == "question":
        try:
            query = run.parts.writer().span_question(str(state["question"]), marked(sentence, cfg.flare_threshold))
            query = " ".join(query.split())
            if not query:
                raise ValueError("it wrote an empty question")
        except Exception as exc:  # the masked sentence is always there to search
            query, by = "", f"masked (the question failed: {type(exc).__name__}: {exc})"
    query = query or masked_query(sentence, cfg.flare_threshold)
    entry: ActiveRetrieval = {
        "sentence": sentence["text"],
        "uncertain": uncertain_words(sentence, cfg.flare_threshold),
        "query": query,
        "query_by": by,
        "band": None,
        "top_score": None,
        "action": None,
        "added": [],
        "rewritten": None,
        "failure": None,
        "timings": {
            "query_ms": _ms(started),
            "retrieve_ms": 0.0,
            "rerank_ms": 0.0,
            "refine_ms": 0.0,
            "generate_ms": 0.0,
        },
    }
    found: list[Candidate] = []
    step = time.perf_counter()
    try:
        docs, _, depth = search(run.parts.retriever(), query)
        fresh = collapse_copies(map(candidate_of, docs))[:depth]
        entry["timings"]["retrieve_ms"], step = _ms(step), time.perf_counter()
        texts = [c["text"] for c in fresh]
        grader = SentenceEvidence(run.parts.reranker(), str(state["question"]), cfg.condition_factor)
        scores = scores_until(grader, query, texts, cfg.grade_batch, cfg.crag_upper)
        entry["timings"]["rerank_ms"] = _ms(step)
        scored: list[Candidate] = [{**c, "score": s} for c, s in zip(fresh, scores, strict=False)]
        found = [scored[i] for i in fused_order([c["score"] for c in scored], cfg.rerank_weight)]
        top = max(scores, default=0.0)
        entry["band"], entry["top_score"] = band_of(top, cfg.reranker_threshold, cfg.crag_upper), round(top, 6)
    except Exception as exc:  # the sentence cannot be checked: it is dropped, with the reason in the trace
        entry["failure"] = f"{type(exc).__name__}: {exc}"
    get_stream_writer()({"event": "flare", "sentence": entry["sentence"], "query": query, "band": entry["band"]})
    return {"found": found, "flare": [*(state.get("flare") or []), entry]}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, lookup, "flare_ms")
