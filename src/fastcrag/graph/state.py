"""Graph state: a narrow input, the full internal state, a narrow output, and the typed decision trace."""

from __future__ import annotations

import copy
from typing import Annotated, Literal, NotRequired

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict  # pydantic (server schemas) needs it on Python < 3.12

from fastcrag.generation.flare import Sentence
from fastcrag.grading.bands import Band

Action = Literal["generate", "refine", "rewrite", "abstain", "disabled", "plain"]
FlareAction = Literal["add", "refine", "drop"]
"""What an active retrieval did: CORRECT evidence added, AMBIGUOUS evidence refined and added, or INCORRECT (or a
failed search): the sentence dropped, never asserted."""
Stage = Literal["retrieve_ms", "rerank_ms", "crag_ms", "generate_ms", "flare_ms"]
FailureCode = Literal["settings", "question", "retrieval", "grading", "rewrite", "generation", "unsupported", "run"]
"""Why a run cannot answer, by kind: its settings, the question, a part that failed, FLARE's refusal, the server."""


class Failure(TypedDict):
    """A failure: its kind, which routing reads, and the message the trace carries (`crag.failure`)."""

    code: FailureCode
    message: str


class Candidate(TypedDict):
    """A retrieved chunk with its reranker score."""

    chunk_id: str
    """The chunk's key: the same text from the same source has the same id."""
    source: str
    """Where the chunk came from (a file or page)."""
    text: str
    """The chunk's text."""
    score: float
    """The grader's score against the user's question (0 when `ungraded`)."""
    ungraded: NotRequired[bool]
    """Grading stopped before this chunk (`FASTRAG_GRADE_BATCH`): it never reaches the generator."""
    unmet: NotRequired[list[str]]
    """Conditions the question names (a year, an edition) that the chunk states in no form: it was scored down."""
    copies: NotRequired[list[str]]
    """Other sources of the same text (a page repeated in the corpus): one candidate stands for all of them."""


class Passage(TypedDict, total=False):
    """What the generator sees: a chunk, or a sentence strip of one."""

    chunk_id: str
    """The chunk the passage comes from."""
    source: str
    """Where that chunk came from."""
    text: str
    """The passage's text: the whole chunk, or one strip of it."""
    score: float
    """The grader's score of this text."""
    strip: bool
    """True for a sentence strip kept by `refine`."""
    section: str
    """A strip's section: its chunk's title ("" for an untitled chunk)."""
    whole: bool
    """True for a chunk `refine` kept whole, none of its strips passing alone: read for an explanation, not a fact."""


class Citation(TypedDict):
    """A passage an answer rests on."""

    chunk_id: str
    """The cited chunk."""
    source: str
    """Where it came from."""
    score: float
    """The grader's score of the passage cited."""


class Verdict(TypedDict):
    """One candidate's grade, as the trace lists it."""

    chunk_id: str
    """The candidate."""
    source: str
    """Where it came from."""
    score: float | None
    """Its grader score (None: ungraded)."""
    verdict: str
    """Its band by the same rule as the run's band, or `UNGRADED`."""
    unmet: NotRequired[list[str]]
    """Conditions the question names that the chunk does not state (why it was scored down)."""


class Thresholds(TypedDict):
    """The calibrated values a run graded with."""

    reranker_threshold: float
    """Below it: INCORRECT."""
    crag_upper: float
    """At or above it: CORRECT."""
    condition_factor: float
    """The score factor for a chunk lacking a condition the question names."""


class FlareTimings(TypedDict):
    """Milliseconds of one active retrieval, by step (0: the step did not run)."""

    query_ms: float
    """Forming the query: masking the sentence, or the chat model's question."""
    retrieve_ms: float
    """The search."""
    rerank_ms: float
    """The grader scoring what the search found."""
    refine_ms: float
    """Refining AMBIGUOUS evidence into strips."""
    generate_ms: float
    """Writing the sentence again with the evidence added."""


class ActiveRetrieval(TypedDict):
    """One FLARE active retrieval, as `crag.flare` lists it."""

    sentence: str
    """The sentence as the chat model first wrote it, uncertain."""
    uncertain: list[str]
    """Its words holding a token below `flare_threshold`."""
    query: str
    """What was searched."""
    query_by: str
    """How the query was formed: `masked`, `question`, or `masked` with why the question failed."""
    band: Band | None
    """The band of the best grader score of what the search found (None: the search or the grader failed)."""
    top_score: float | None
    """That score."""
    action: FlareAction | None
    """What was done with it (None only while it is being decided)."""
    added: list[str]
    """The chunks added to the context."""
    rewritten: str | None
    """The sentence as written again with the evidence added (None: dropped, or the model wrote nothing)."""
    failure: str | None
    """Why the search or the grading failed (the sentence is then dropped)."""
    timings: FlareTimings
    """Its milliseconds by step."""


class Timings(TypedDict):
    """Milliseconds per stage; a stage the run did not pass through is 0."""

    retrieve_ms: float
    """Embedding and the first-pass search."""
    rerank_ms: float
    """The grader scoring the first pass's candidates."""
    crag_ms: float
    """Everything the correction adds: grading, refinement, the rewrite and the second retrieval."""
    generate_ms: float
    """The generator (FLARE: every draft, and every sentence written again)."""
    flare_ms: NotRequired[float]
    """FLARE mode only: the active retrievals (forming queries, searching, grading, refining)."""


class Trace(TypedDict):
    """The `crag` decision trace returned with every answer (`fastcrag ask --json` prints the same fields)."""

    action: Action
    """The path taken: generate, refine, rewrite, abstain, or disabled / plain with CRAG off."""
    band: Band | None
    """The band of the top score (None when the run failed before grading)."""
    top_score: float | None
    """The best grader score."""
    strips_kept: int
    """Sentence strips that passed refinement (0 off the refine path)."""
    rewritten_query: str | None
    """The rewrite searched on the retry."""
    rewriter: str | None
    """Which rewrite ran: `llm` or `keyword`."""
    retrieval: str | None
    """The route of the last retrieval: hybrid, dense, lexical, or a fallback with its reason."""
    verdicts: list[Verdict]
    """Every candidate's grade, best first."""
    timings: Timings
    """Stage times of this question."""
    failure: str | None
    """Why the run abstained without grading or answering (a fault, an unusable question), else None."""
    failure_code: FailureCode | None
    """That failure's kind (`FailureCode`), else None."""
    question: str | None
    """The question graded and answered (standalone, for a chat turn)."""
    conversation: str | None
    """For chat input with earlier turns: how the question was made standalone, or why it was not."""
    reranker: str | None
    """The grader's name."""
    thresholds: Thresholds | None
    """The thresholds the run used (None where the settings could not be resolved)."""
    flare: NotRequired[list[ActiveRetrieval]]
    """FLARE mode only: each active retrieval, in the order the sentences were written."""
    flare_stop: NotRequired[str | None]
    """FLARE mode only: why writing stopped: `end` (the model finished), `sentence cap`, or `retrieval cap` (an
    uncertain sentence was left unsearched, and not asserted); None when the run did not reach the answer."""


class InputState(TypedDict, total=False):
    """What a caller sends: a `question`, or chat `messages` whose last human message is the question."""

    question: str
    """The question; intake replaces it with the cleaned (and, for a chat turn, standalone) question."""
    messages: Annotated[list[AnyMessage], add_messages]
    """The chat, when the question comes as messages; the answer is appended to it (merged by `add_messages`)."""


class OutputState(TypedDict, total=False):
    """What a caller gets back: the same fields as `fastcrag ask --json` (and the AI reply, for chat input)."""

    messages: Annotated[list[AnyMessage], add_messages]
    """The chat with the answer appended as an AI message (chat input only)."""
    answer: str
    """The answer, or the abstention message."""
    citations: list[Citation]
    """The passages the answer rests on (none for an abstention)."""
    crag: Trace
    """The decision trace."""


class PerQuestion(TypedDict, total=False):
    """The fields of one question, each set to its `PER_QUESTION` default when a new question arrives.

    A thread keeps its state between questions: intake (`fastcrag.graph.intake`) starts each question from
    `fresh_question()`. A field added here needs its default in `PER_QUESTION` (a unit test holds the two to the
    same keys).
    """

    query: str | None
    """The query the next retrieval searches; None when no retrieval is pending.

    Intake sets it to the question, `rewrite` to its rewrite, and `retrieve` consumes it (sets None): a retrieval
    that finds no pending query starts a new question.
    """
    rewrites: int
    """Rewrites made for this question, capped by `FASTRAG_CRAG_MAX_REWRITES`."""
    rewritten_query: str | None
    """The last rewrite, for the trace."""
    rewriter: str | None
    """Which rewrite ran: `llm` (the chat model) or `keyword` (its terms are searched lexically)."""
    retrieval: str | None
    """The route of the last retrieval: hybrid, dense, lexical, or a fallback with its reason."""
    candidates: list[Candidate]
    """The graded candidates, best first."""
    band: Band | None
    """The band of the top score."""
    top_score: float | None
    """The best grader score among the graded candidates."""
    verdicts: list[Verdict]
    """Every candidate's grade, for the trace."""
    context: list[Passage]
    """The passages the generator reads: graded candidates, or refined strips."""
    strips_kept: int | None
    """Sentence strips that passed refinement."""
    action: Action | None
    """The path's action, recorded by the node that took it (grade with CRAG off, refine, rewrite)."""
    conversation: str | None
    """For chat input with earlier turns: how the question was made standalone, or why it was not."""
    failure: Failure | None
    """Why the run cannot answer (a fault, an unusable question); every route sends it to `abstain`."""
    timings: dict[str, float]
    """This question's milliseconds per stage so far: each timed node writes the totals with its own time added."""


PER_QUESTION: PerQuestion = {
    "query": None,
    "rewrites": 0,
    "rewritten_query": None,
    "rewriter": None,
    "retrieval": None,
    "candidates": [],
    "band": None,
    "top_score": None,
    "verdicts": [],
    "context": [],
    "strips_kept": None,
    "action": None,
    "conversation": None,
    "failure": None,
    "timings": {},
}
"""Each per-question field's value before the question's first step (`fresh_question` hands out a copy)."""


def fresh_question() -> PerQuestion:
    """Every per-question field at its default, in containers of its own (never shared between questions)."""
    return copy.deepcopy(PER_QUESTION)


class State(InputState, OutputState, PerQuestion, total=False):
    """Everything the nodes share; each node returns a partial update of it.

    The caller's input and the output it gets back, and the fields of the current question (`PerQuestion`).
    """


class FlareState(State, total=False):
    """FLARE mode's subgraph state: the graph's fields, and its own, which start empty at each answer it writes."""

    sentences: list[str]
    """The sentences kept for the answer so far (confident, or written again on graded evidence)."""
    ahead: list[Sentence] | None
    """Sentences the last draft wrote that are not checked yet; None: the next `draft` asks the chat model."""
    pending: Sentence | None
    """The uncertain sentence being searched for; after its evidence is added, `draft` writes it again."""
    found: list[Candidate]
    """What the current active retrieval found, graded, best first."""
    flare: list[ActiveRetrieval]
    """The active retrievals so far (their number is capped by `FASTRAG_FLARE_MAX_RETRIEVALS`)."""


class FlareOutput(OutputState, total=False):
    """What the FLARE subgraph hands back to the graph: the answer (or abstention) and the fields it changed."""

    context: list[Passage]
    failure: Failure | None
    timings: dict[str, float]
