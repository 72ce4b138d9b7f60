"""Node `generate`: answer from the graded (or refined) passages, with citations and the decision trace."""

from __future__ import annotations

from typing import Any

from fastcrag import metrics
from fastcrag.components import Components
from fastcrag.generation.generators import generate_answer
from fastcrag.grading.relevance import answer_cosine
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, reply, stage, trace
from fastcrag.graph.state import Citation, State


def generate(state: State, run: Run) -> State:
    """Generate; a generator failure, an empty answer or an off-question one becomes a `failure` (to abstain).

    An answer is off the question when its cosine with it is below the calibration's `answer_floor`
    (`grading.relevance`); plain RAG never checks.
    """
    cfg = run.cfg
    passages = list(state.get("context") or [])
    try:
        if not passages:
            raise ValueError("retrieval returned no passage" if cfg.plain_rag else "no passage passed grading")
        answer = generate_answer(
            run.parts.generator(),
            str(state["question"]),
            passages,
            abstain=not cfg.plain_rag,
            ambiguous=cfg.crag_enabled and state.get("band") == "AMBIGUOUS",  # the refine path's floor
        )
        text = answer.text.strip()
        if not text:
            raise ValueError("the generator returned an empty answer")
        if cfg.answer_floor is not None and not cfg.plain_rag:
            cosine = answer_cosine(run.parts.embedder(), str(state["question"]), text)
            if cosine < cfg.answer_floor:
                raise ValueError(
                    f"the answer's meaning is not the question's (cosine {cosine:.3f}, below the calibrated "
                    f"answer_floor {cfg.answer_floor:g})"
                )
        citations = _citations(answer.used, [*passages, *answer.read])
    except Exception as exc:  # never an answer without grounding: abstain with the reason
        return {"failure": {"code": "generation", "message": f"generation failed: {type(exc).__name__}: {exc}"}}
    run.charge("generate_ms", run.ms())  # before the trace, which reports it
    timings = run.timings()
    action = state.get("action") or "generate"
    metrics.record(action, timings)
    out: State = {"answer": text, "citations": citations, "crag": trace(state, action, timings, run.parts, cfg)}
    return out | reply(
        state,
        text,
        [c["source"] for c in citations],
        quoted=getattr(run.parts.generator(), "extractive", False),
        message_id=answer.message_id,
    )


def _citations(used: list[int], cited: list[Any]) -> list[Citation]:
    """The passages an answer rests on, each chunk once, in the order it used them.

    `cited` is the passages, then the chunks the answer read beyond them (a section's lead): index `len(passages) + j`
    is the j-th of those. An index or a field missing is the generator's error: generation fails (and abstains).
    """
    citations: list[Citation] = []
    for i in used:
        p = cited[i]
        if all(c["chunk_id"] != p["chunk_id"] for c in citations):
            citations.append({"chunk_id": p["chunk_id"], "source": p["source"], "score": round(p["score"], 6)})
    return citations


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, generate, "generate_ms")
