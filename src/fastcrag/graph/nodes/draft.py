"""Node `draft` (FLARE mode): write the answer's next sentences with token probabilities, keep the confident ones."""

from __future__ import annotations

import time

from fastcrag.components import Components
from fastcrag.generation.flare import uncertain
from fastcrag.graph.nodes import Node
from fastcrag.graph.nodes.stage import Run, stage
from fastcrag.graph.state import ActiveRetrieval, FlareState
from fastcrag.retrieval.text import normalise


def draft(state: FlareState, run: Run) -> FlareState:
    """Keep drafted sentences while all their word tokens reach `flare_threshold`; the first that does not waits.

    The chat model drafts when no drafted sentence is left to check (`ahead` is None: the first draft, or evidence
    was just added). A draft made after evidence was added for the `pending` sentence opens with that sentence
    written again, and it is kept: its one active retrieval found evidence that passed grading. A drafted sentence
    repeating a kept or a dropped one is skipped; no more than `flare_max_sentences` are kept. A generator that
    cannot draft (no token log-probabilities) or a failed draft is a `failure` (routed to abstain).
    """
    cfg = run.cfg
    if why := run.parts.flare_unsupported():
        return {"failure": {"code": "unsupported", "message": why}}
    passages = list(state.get("context") or [])
    sentences = list(state.get("sentences") or [])
    ahead = state.get("ahead")
    pending = state.get("pending")
    retrievals: list[ActiveRetrieval] = list(state.get("flare") or [])
    ms = 0.0
    try:
        if not passages:
            raise ValueError("no passage passed grading")
        if ahead is None:
            started = time.perf_counter()
            ahead = run.parts.writer().draft(str(state["question"]), passages, sentences)
            ms = (time.perf_counter() - started) * 1000
    except Exception as exc:  # never an answer without grounding: abstain with the reason
        return {"failure": {"code": "generation", "message": f"generation failed: {type(exc).__name__}: {exc}"}}
    # a sentence kept, or dropped after its evidence graded INCORRECT, is never taken again
    seen = {normalise(s) for s in sentences} | {normalise(r["sentence"]) for r in retrievals if r["action"] == "drop"}
    fresh = [s for s in ahead if normalise(s["text"]) not in seen]
    if pending is not None and retrievals:  # this draft writes the pending sentence again, on the added evidence
        again = fresh.pop(0) if fresh else None
        entry = retrievals[-1]
        retrievals[-1] = {
            **entry,
            "rewritten": again["text"] if again else None,
            "timings": {**entry["timings"], "generate_ms": round(ms, 3)},
        }
        if again is not None:
            sentences.append(again["text"])
            seen.add(normalise(again["text"]))
        pending = None
    while fresh and len(sentences) < cfg.flare_max_sentences:
        sentence = fresh.pop(0)
        if normalise(sentence["text"]) in seen:
            continue
        if uncertain(sentence, cfg.flare_threshold):
            pending = sentence
            break
        sentences.append(sentence["text"])
        seen.add(normalise(sentence["text"]))
    return {"sentences": sentences, "ahead": fresh, "pending": pending, "flare": retrievals}


def make(parts: Components) -> Node:
    """Build the node over `parts`."""
    return stage(parts, draft, "generate_ms")
