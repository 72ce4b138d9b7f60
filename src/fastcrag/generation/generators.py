"""Generators: answer from graded passages and rewrite queries; a chat-model one and an extractive one."""

from __future__ import annotations

import concurrent.futures
import contextvars
import itertools
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field

from fastcrag.generation import prompts
from fastcrag.grading.reader import Span, is_reader
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.retrieval.blocks import FENCE
from fastcrag.retrieval.lexical import terms
from fastcrag.retrieval.sections import (
    FetchChunks,
    Part,
    chunk_number,
    fetched_id,
    numbered_chunks,
    part_holding,
    parts,
    section_before,
    section_onward,
    section_opening,
)
from fastcrag.retrieval.structure import prose, without_label
from fastcrag.retrieval.text import TITLE_JOINER, sectioned, split_sentences, split_title, titled, unfinished

log = logging.getLogger(__name__)

Schema = TypeVar("Schema", bound=BaseModel)
NOSTREAM = "nostream"
"""The run tag LangGraph's `messages` stream mode leaves out: a structured call's JSON is no answer to stream."""


class StandaloneQuestion(BaseModel):
    """The standalone question's JSON schema."""

    question: str = Field(min_length=1, max_length=600, description="The last message as a standalone question.")


class RewrittenQuery(BaseModel):
    """The rewrite's JSON schema."""

    query: str = Field(min_length=1, max_length=400, description="The rewritten search query.")


@dataclass(frozen=True)
class Answer:
    """Generated text, the indices of the passages it rests on, and the chat model's message id (when streamed).

    The reply to a chat carries `message_id`, so a client that streamed the model's tokens under that id sees them
    become the final message (with its sources) instead of a second one. `read` holds the chunks the answer read
    beyond the passages it was given (`chunk_id`, `source`, `score`); in `used` they follow the passages (index
    `len(passages) + j` is `read[j]`).
    """

    text: str
    used: list[int]
    message_id: str | None = None
    read: tuple[Mapping[str, Any], ...] = field(default=())


class Generator(Protocol):
    """Turns passages into an answer, and rewrites queries (raising when it cannot)."""

    name: str

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]]) -> Answer:
        """Answer `question` from `passages` (dicts with `text`, `source`, `score`)."""
        ...

    def rewrite(self, question: str) -> str:
        """A better search query for `question`."""
        ...

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """`question` made understandable without `history` ((role, text) turns before it)."""
        ...


def structured_call(llm: BaseChatModel, schema: type[Schema], messages: list[Any], timeout: float | None) -> Schema:
    """One chat-model call under a JSON schema, validated against it whatever the model returns.

    Raises:
        TimeoutError: no reply within `timeout` seconds (None: no limit).
        ValueError: the reply does not parse or does not fit the schema.
    """
    runnable = llm.with_structured_output(schema).with_config(tags=[NOSTREAM])
    result = runnable.invoke(messages) if timeout is None else with_timeout(lambda: runnable.invoke(messages), timeout)
    if isinstance(result, dict) and "parsed" in result:  # include_raw-style output
        if result.get("parsing_error") is not None:
            raise ValueError(f"structured output did not parse: {result['parsing_error']}")
        result = result["parsed"]
    if isinstance(result, BaseModel):
        result = result.model_dump()
    return schema.model_validate(result)


def with_timeout(fn: Any, timeout: float) -> Any:
    """Run `fn()` on a worker thread and give up after `timeout` seconds (raising TimeoutError).

    The thread runs in a copy of the caller's context, so the run's callbacks (LangGraph's token stream, tracing)
    see the call.
    """
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(contextvars.copy_context().run, fn).result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise TimeoutError(f"chat model gave no answer within {timeout:g} s") from None
    finally:
        pool.shutdown(wait=False)


class ChatGenerator:
    """Any LangChain chat model: a grounded answer prompt, and a JSON-schema rewrite."""

    def __init__(self, llm: BaseChatModel, timeout: float = 120.0, name: str | None = None) -> None:
        """Wrap `llm`; each call is abandoned after `timeout` seconds."""
        self.llm = llm
        self.timeout = timeout
        self.name = name or getattr(llm, "model_path", None) or type(llm).__name__

    def generate(self, question: str, passages: Sequence[Mapping[str, Any]]) -> Answer:
        """Answer from the delimited passages; all passages are cited."""
        messages = prompts.answer_messages(question, passages)
        reply = with_timeout(lambda: self.llm.invoke(messages), self.timeout)
        text = reply.content if isinstance(reply.content, str) else str(reply.content)
        return Answer(text.strip(), list(range(len(passages))), reply.id)

    def rewrite(self, question: str) -> str:
        """Rewrite under the `RewrittenQuery` schema (validated whatever the model does)."""
        messages = prompts.rewrite_messages(question)
        return structured_call(self.llm, RewrittenQuery, messages, self.timeout).query

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """One structured call: the last message as a standalone question, from the last `HISTORY_TURNS` turns."""
        messages = prompts.standalone_messages(history, question)
        return structured_call(self.llm, StandaloneQuestion, messages, self.timeout).question


EXPLAIN_SENTENCES, EXPLAIN_WORDS = 3, 90
"""An answer to a how / why / what-is question: at most this many sentences of the best passage, this many words."""
_QUANTITY = re.compile(r"^how\s+(many|much|long|old|far|tall|big|large|high|often|fast|deep|wide|heavy)\b")
_EXPLAIN = re.compile(
    r"^(how|why|explain|describe)\b|^what\s+(is|are|does|do)\s+(an?\s+|the\s+)?\S+(\s+\S+)?\s*\??$"
    r"|^what\s+(does|do)\b.*\b(mean|do|work)\s*\??$"
)
_FACT = re.compile(
    r"^(who|whom|whose|where)\b|^when\s+(did|was|were|will|had|has)\b"
    r"|^(what|which)\s+(year|date|day|month|time|percentage|number|name|colou?r|country|city|person)\b"
    r"|^what\s+(is|was|are|were)\s+the\s+(name|number|date|year|population|percentage)\s+of\b"
)
_REFERENCE = re.compile(
    r"^(see( also)?|further reading|references|related (topics|links)|external links)\b",
    re.IGNORECASE,
)


def asks_for_explanation(question: str) -> bool:
    """Whether a question asks how, why or what something is (answered by a few sentences), not for one fact."""
    q = " ".join(question.casefold().split())
    return not _QUANTITY.match(q) and bool(_EXPLAIN.match(q))


def asks_for_fact(question: str) -> bool:
    """Whether a question asks for one fact: a person, a place, a time, a quantity, a name."""
    q = " ".join(question.casefold().split())
    return bool(_QUANTITY.match(q) or _FACT.match(q))


def answers_with_sentences(question: str, documentation: bool) -> bool:
    """Whether the extractive generator answers with sentences, not a reader's span (no `reader_threshold` then).

    A question asking how, why or what something is; over documentation (`documentation`: the best passage is a
    titled chunk, or a strip of one), every question not asking for one fact.
    """
    return asks_for_explanation(question) or (documentation and not asks_for_fact(question))


def is_reference_line(sentence: str) -> bool:
    """Whether a line points elsewhere instead of saying something.

    A see-also or references line, a bare heading (a few words, no closing punctuation), or a list of links.
    """
    text = sentence.strip()
    if _REFERENCE.match(text) or text.count("http") >= 2:
        return True
    words = text.split()
    return len(words) <= 5 and not text.endswith((".", "!", "?", ":"))


class Led(NamedTuple):
    """A section's lead as an explain answer opens with it, and where it was read."""

    text: str
    used: list[int]
    """The passages it stands in (`len(passages) + j`: the j-th chunk of `read`)."""
    section: Part
    """The section support is drawn from: its title, its sentences in the chunks read."""
    read: list[dict[str, Any]]
    """The chunks read by id that the passages do not hold, to cite."""
    where: dict[str, int | Document]
    """Each sentence read: the passage it stands in, or the chunk read by id."""


class ExtractiveGenerator:
    """No LLM: the answer is read from the passages, verbatim, with its citations.

    A question asking how, why or what something is gets the best few sentences of the best passage, in their
    order (`EXPLAIN_SENTENCES`, `EXPLAIN_WORDS`); the reader's floor does not apply to it, since its answer is no
    short span. A factoid question gets, with a grader that reads (a reader head), the best answer span and the
    sentence it stands in (when no span reaches `reader_threshold` the generator raises, and the graph abstains);
    with a grader that only scores, the best-scoring sentence. Reference and
    navigation lines (see-also lines, bare headings, lists of links) never stand as the answer.

    Over documentation (a titled chunk, or a strip of one) every question not asking for one fact is answered so.
    An explain answer from a documentation section opens with the section's lead (`LEAD_SENTENCES`, read back
    through `chunks` to where the section opened, and cited), then that section's best sentences; a question
    about what a page or a parent section is about, asked from one of its sub-sections, gets that page's or
    section's opening instead (`_ancestor_lead`).

    A documentation fragment (a note or version line, a keyword list, a table row, a grammar production, a title
    run into a grammar block) never opens an answer: where it would, an explain answer opens with its section's
    lead, or in untitled text with the page's (the first prose sentence of the earliest passage of that page),
    supported by its passage's best prose sentences and the best passage's; a factoid keeps its span where the
    sentence around it is prose, else gets the passage's first prose sentence (the next passage's when it has
    none). With no prose anywhere the answer is the one above; whether the generator answers or raises never
    depends on it.
    """

    name = "extractive"

    def __init__(
        self,
        reranker: Reranker,
        reader_threshold: float | None = None,
        refine_reader_threshold: float | None = None,
        chunks: FetchChunks | None = None,
        idf: Callable[[str], float | None] | None = None,
    ) -> None:
        """Read or score strips with `reranker` (the grader).

        Args:
            reranker: The grader; when it reads spans, they answer.
            reader_threshold: Calibrated minimum span score (calibration.json `reader_threshold`); 0 when None.
            refine_reader_threshold: The minimum for AMBIGUOUS evidence (`refine_reader_threshold`); when None,
                `reader_threshold`.
            chunks: Chunks by id from the store (`VectorStore.get_by_ids`), where an explain answer finds the lead
                of a section that opened before its passage; None: only the passages are read.
            idf: A word's inverse document frequency in the index (None: not known), where a page's subject loses
                the words nearly every chunk holds (`_telling`); None: every word of it counts.
        """
        self.reranker = reranker
        self.chunks = chunks
        self.idf = idf
        self.reader_threshold = reader_threshold or 0.0
        self.refine_reader_threshold = (
            self.reader_threshold if refine_reader_threshold is None else refine_reader_threshold
        )

    def generate(
        self, question: str, passages: Sequence[Mapping[str, Any]], *, abstain: bool = True, ambiguous: bool = False
    ) -> Answer:
        """The best span and its sentence (a reader), else the best strip; refined strips keep their scores.

        Args:
            question: The user's question.
            passages: Dicts with `text` (and `score`, `strip` for refined strips).
            abstain: False for plain RAG: answer with the best span even below `reader_threshold`.
            ambiguous: The evidence graded AMBIGUOUS: the span must reach `refine_reader_threshold` instead.
        """
        if not passages:
            raise ValueError("no passage text to extract from")
        # documentation answers with what a section says, unless one fact is asked for
        explain = answers_with_sentences(question, _documentation(passages[0]))
        if is_reader(self.reranker) and not explain:
            floor = self.refine_reader_threshold if ambiguous else self.reader_threshold
            return self._read(question, passages, floor if abstain else 0.0)  # raises below it
        strips = self._sentences(question, passages)
        if not strips:
            raise ValueError("no passage text to extract from")
        best = max(strips, key=lambda t: t[0])
        if not explain:
            if _reads_as_prose(best[1]):
                return Answer(best[1], [best[2]])
            found = first_prose(passages, _reading_order(passages, best[2]))
            return Answer(found[0], [found[1]]) if found else Answer(best[1], [best[2]])
        return self._explain(question, strips, passages)

    def _explain(
        self,
        question: str,
        strips: list[tuple[float, str, int, int]],
        passages: Sequence[Mapping[str, Any]],
    ) -> Answer:
        """The lead of the best sentence's section, then that section's best sentences; never a fragment first.

        The best sentence is the best-ranked chunk's that says it in prose (`_anchor`). Without a documentation section
        (an untitled chunk), that chunk's best sentences in reading order, led by the page's first prose where a
        fragment would open them.
        """
        entries = _entries_named(question, passages)
        anchor = _anchor(passages, strips, entries)
        anchored = [t for t in strips if t[2] in anchor]
        anchored = [t for t in anchored if (t[2], t[3]) in entries] or anchored  # an entry named: its sentences
        best = max(anchored, key=lambda t: t[0], default=max(strips, key=lambda t: t[0]))
        chunk, held = self._held(passages, best)  # the section part of the chunk the best sentence stands in
        led = (
            (self._ancestor_lead(question, passages, chunk, held) or self._section_lead(passages, best[2], chunk, held))
            if held is not None
            else None
        )
        if led is not None:
            lead, used, section, read, where = led
            steps = self._with_steps(lead, section.title, passages, used, read) if asks_how_it_works(question) else None
            lead = steps or lead
            if read:  # chunks the passages do not hold: cited, with the lead graded under its title
                score = checked_scores(self.reranker, question, [titled(section.title, lead)])[0]
                read = [{**r, "score": score} for r in read]
            if steps:
                return Answer(lead, used, read=tuple(read))
            support = [t for t in strips if _normalised(t[1]) in section.sentences]
            support += self._read_back(question, section, where, strips, passages, read)
            answer = self._led((lead, used[0], 0), sorted(support, key=lambda t: -t[0]), used)
            return Answer(answer.text, answer.used, read=tuple(read))
        chosen = _best_of(strips, anchor if best[2] in anchor else {best[2]})
        if _reads_as_prose(chosen[0][1]):
            chosen = [chosen[0], *(t for t in chosen[1:] if _reads_as_prose(t[1]))]  # no code, row or note after it
            return Answer(" ".join(t[1] for t in chosen), sorted({t[2] for t in chosen}))
        # a fragment would open the answer: the page's lead instead, then its passage's best prose sentences
        found = first_prose(passages, _reading_order(passages, best[2], page_first=True))
        if found is None:
            return Answer(" ".join(t[1] for t in chosen), sorted({t[2] for t in chosen}))
        _, index, position = found
        support = [
            (score, text, i, k)
            for score, sentence, i, k in strips
            if i == index and k > position and (text := prose(sentence)) is not None
        ]
        rest = _best_of(support, {index}, EXPLAIN_SENTENCES - 1, EXPLAIN_WORDS - len(found[0].split()), first=False)
        return self._led(found, [*rest, *(t for t in chosen if t[2] != index)], [index])

    def _section_lead(self, passages: Sequence[Mapping[str, Any]], index: int, chunk: str, held: Part) -> Led | None:
        """The lead of the section `held` that the best sentence stands in; None without one.

        The best sentence is in passage `index`, chunk `chunk` (for a refined strip, the chunk fetched by id).

        The lead is the section's first `LEAD_SENTENCES` prose sentences (what its subject is and does: the
        context the best sentence is read in), from the best sentence's chunk (the passage, or for a refined strip
        its chunk fetched by id) or, where the section opened in an earlier chunk, from the chunks since its
        opening (`section_before`).
        """
        before = section_before(self._fetch, chunk, held.title) if not held.opens else []
        if not held.opens and not before:
            return None
        ordered: dict[str, int | Document] = {}  # sentence -> where it stands: a passage, or a chunk read by id
        coded = _before_code(held.sentences)
        for doc in before:
            for part in parts(doc.page_content):
                if part.title == held.title:
                    ordered.update((s, doc) for s in part.sentences if s not in ordered)
                    coded |= _before_code(part.sentences)
        ordered.update((s, index) for s in held.sentences if s not in ordered)
        lead = _lead(list(ordered), coded)
        if not lead:
            return None
        used, read = _cited(lead, ordered, passages)
        return Led(_named(_joined(lead), held.title), used, Part(held.title, tuple(ordered), True), read, ordered)

    def _ancestor_lead(
        self, question: str, passages: Sequence[Mapping[str, Any]], chunk: str, held: Part
    ) -> Led | None:
        """The lead of a page or section above the best sentence's whose subject the question names.

        A sub-section is an option, an example, a special case, an API entry. The sections above the best
        sentence's (its heading path's ancestors) are tried nearest first; one answers when the question's terms
        hold its subject (its heading up to a qualifier: `git-revert(1) Manual Page` gives git, revert; `Tuples`
        gives tuple) and everything else the question asks (besides the subject's words, a suite's name it need not
        say among them) is in its lead. The best sentence standing in a page's opening section too short to make a
        lead alone (a manual page's one-line summary), the page's lead answers whatever the question names. None
        when no ancestor does, or the lead found is the best sentence's own section's.

        "What does git revert do?" is answered by the page git-revert's opening (its one-line summary and its
        description), not by the example or option that ranked best; "What is a tuple?" by the section Tuples'
        lead, not by its entry `class tuple([iterable])`. An ancestor's lead is its first `LEAD_SENTENCES` prose
        sentences over the first `PAGE_START` chunks holding prose (of the `PAGE_REACH` from where it opens: a page at
        its first chunk, a section where `section_opening` finds it; a long synopsis of code alone is passed over),
        fetched by id; the section returned holds the sentences of the sections the lead stands in (where support is
        drawn from).
        """
        number = chunk_number(chunk)
        headings = held.title.split(TITLE_JOINER)
        if len(headings) < 2 or number is None:
            return None
        asked = set(terms(question))
        for depth in range(len(headings) - 1, 0, -1):
            ancestor = TITLE_JOINER.join(headings[:depth])
            whole = _subject(headings[depth - 1])
            subject = self._telling(whole)
            named = bool(subject) and subject <= asked
            if not named and not (depth == 1 and number < PAGE_START):
                continue
            opened = 0 if depth == 1 else section_opening(self._fetch, chunk, ancestor)
            if opened is None:
                continue
            ordered: dict[str, int | Document] = {}
            section_of: dict[str, str] = {}
            coded: set[str] = set()
            prose_chunks = 0
            wanted = range(opened, opened + PAGE_REACH)
            for _, doc in numbered_chunks(self._fetch, chunk, lambda _: wanted):
                if prose_chunks == PAGE_START:
                    break
                if doc is None:
                    continue
                chunk_parts = parts(doc.page_content)
                prose_chunks += any(not s.startswith(FENCE) for part in chunk_parts for s in part.sentences)
                for part in chunk_parts:
                    if part.title != ancestor and not part.title.startswith(ancestor + TITLE_JOINER):
                        continue  # a section after the ancestor's end
                    coded |= _before_code(part.sentences)
                    for sentence in part.sentences:
                        if sentence not in ordered:
                            ordered[sentence], section_of[sentence] = doc, part.title
            lead = _lead(list(ordered), coded)
            own = [section_of[sentence] == held.title for _, sentence in lead]
            if not lead or all(own):
                continue  # the best sentence's own section makes the lead: it is the section's
            if not own[0] and (not named or not asked - whole <= set(terms(_joined(lead)))):
                continue  # not named, or asked about more than this lead says (one clause of a statement)
            sections = {section_of[sentence] for _, sentence in lead}
            used, read = _cited(lead, ordered, passages)
            title = section_of[lead[-1][1]]
            return Led(
                _named(_joined(lead), section_of[lead[0][1]]),
                used,
                Part(title, tuple(s for s in ordered if section_of[s] in sections), True),
                read,
                ordered,
            )
        return None

    def _with_steps(
        self,
        lead: str,
        title: str,
        passages: Sequence[Mapping[str, Any]],
        used: list[int],
        read: list[dict[str, Any]],
    ) -> str | None:
        """The lead's first sentence, then the steps its section goes on to, within `EXPLAIN_WORDS`; None without.

        The chunks the steps stand in are added to `used` (and to `read` when the passages do not hold them).
        """
        opened = str([*passages, *read][used[0]].get("chunk_id") or "")  # where the lead stands
        steps = self._procedure(opened, title)
        if not steps:
            return None
        first = split_sentences(lead)[0]
        opening = [] if steps[0][0].rstrip(":") in first else [first]  # the lead may be what introduces the steps
        taken = _within([*opening, *(text for text, _ in steps)], EXPLAIN_WORDS)
        for _, doc in steps[: len(taken) - len(opening)]:
            where = _placed(doc, passages, read)
            used += [] if where in used else [where]
        return _joined([(text, text) for text in taken])

    def _read_back(
        self,
        question: str,
        section: Part,
        where: Mapping[str, int | Document],
        strips: Sequence[tuple[float, str, int, int]],
        passages: Sequence[Mapping[str, Any]],
        read: list[dict[str, Any]],
    ) -> list[tuple[float, str, int, int]]:
        """The section's sentences that stand in chunks read by id, graded under its title, to support its lead.

        Retrieval may have returned a later chunk of a long section, and the sentence that answers stands in one
        before it (the section's lead is read back through them): "The "%" (modulo) operator yields the remainder
        ..." stands two chunks before the binary operations' chunk that ranked. Each as (score, sentence, where it
        stands, position); its chunk is added to `read` (graded as its best sentence) and cited when it is kept.
        """
        have = {_normalised(t[1]) for t in strips}
        fetched = [
            (s, doc)
            for s, doc in where.items()
            if isinstance(doc, Document) and s in section.sentences and _normalised(s) not in have and prose(s)
        ]
        if not fetched:
            return []
        scores = checked_scores(self.reranker, question, [titled(section.title, s) for s, _ in fetched])
        found = []
        for k, (score, (sentence, doc)) in enumerate(zip(scores, fetched, strict=True)):
            at = _placed(doc, passages, read)
            if at >= len(passages):  # a chunk read by id: graded as its best sentence, where the lead's is not higher
                entry = read[at - len(passages)]
                read[at - len(passages)] = {**entry, "score": max(float(entry.get("score", 0.0)), score)}
            found.append((score, sentence, at, k))
        return found

    def _procedure(self, chunk: str, title: str) -> list[tuple[str, Document]]:
        """The steps section `title` goes on to from chunk `chunk`: a line introducing them, then the numbered steps.

        Read through the chunks that continue the section (`section_onward`): the first prose sentence ending in a
        colon that a numbered step follows ("The execution of the with statement proceeds as follows:"), then the
        steps after it (a step's first sentence), each with the chunk it stands in. None when the section describes no
        steps there.
        """
        ordered: dict[str, Document] = {}
        for doc in section_onward(self._fetch, chunk, title):
            for part in parts(doc.page_content):
                if part.title == title:
                    for sentence in part.sentences:
                        ordered.setdefault(sentence, doc)
        sentences = list(ordered)
        for i, sentence in enumerate(sentences[:-1]):
            intro = prose(sentence)
            if intro is None or not intro.endswith(":") or not _STEP.match(sentences[i + 1].strip()):
                continue
            steps, number = [(intro, ordered[sentence])], ""
            for later in sentences[i + 1 :]:
                text = prose(later)
                if text is None:
                    break  # code or a table: the steps' prose ends
                if _STEP.fullmatch(text.strip()):
                    number = text.strip()  # a step's number stands alone: it goes before the step's sentence
                elif number or _STEP.match(text):
                    steps.append((f"{number} {text}" if number else text, ordered[later]))
                    number = ""
                else:
                    break  # the steps end: what follows speaks of them, or of something else
            return steps if len(steps) > 1 else []
        return []

    def _telling(self, subject: set[str]) -> set[str]:
        """A subject's words less those nearly every chunk of the index holds (below `COMMON_IDF`).

        A suite's name stands in every page's heading (`git` in `git-cherry-pick(1) Manual Page`) and a question
        need not say it ("What does cherry-picking a commit do?"). Every word counts when none would be left, or the
        index's word weights are not known.
        """
        if self.idf is None:
            return subject
        try:
            weights = {t: self.idf(t) for t in subject}
        except Exception as exc:  # the words' weights are a refinement: without them the subject stands whole
            log.warning("reading word weights failed: %s: %s", type(exc).__name__, exc)
            return subject
        return {t for t, w in weights.items() if not w or w >= COMMON_IDF} or subject  # 0: a word it does not hold

    def _held(
        self, passages: Sequence[Mapping[str, Any]], best: tuple[float, str, int, int]
    ) -> tuple[str, Part | None]:
        """The best sentence's chunk id, and the section part of that chunk it stands in (None: no section)."""
        passage = passages[best[2]]
        chunk = str(passage.get("chunk_id") or "")
        text = str(passage.get("text") or "")
        if passage.get("strip"):
            fetched = self._fetch([chunk]) if chunk else []
            text = fetched[0].page_content if fetched else ""
        return chunk, part_holding(text, best[1])

    def _fetch(self, ids: Sequence[str]) -> Sequence[Document]:
        """Chunks by id from the store; none without one, or when it fails (the answer reads the passages alone)."""
        if self.chunks is None:
            return []
        try:
            return self.chunks(ids)
        except NotImplementedError:  # a store that cannot fetch by id
            return []
        except Exception as exc:
            log.warning("fetching chunks %s failed: %s: %s", list(ids)[:3], type(exc).__name__, exc)
            return []

    @staticmethod
    def _led(lead: tuple[str, int, int], support: Sequence[tuple[float, str, int, int]], used: list[int]) -> Answer:
        """`lead`, then the `support` sentences that are prose and fit the explain limits, in their reading order.

        `support` comes best first: the best are kept when not all fit.
        """
        texts, kept = [lead[0]], []
        words, count = len(lead[0].split()), len(split_sentences(lead[0]))
        for t in support:
            text = prose(without_label(t[1]))
            if text is None or text.rstrip(":") in lead[0] or lead[0] in text or text in texts:
                continue  # (a lead's sentence may have given its colon for a full stop)
            if text.endswith(":") or _LIST_ITEM.match(text):
                continue  # it introduces what the answer does not show ("Notes on using __slots__:"), or is one item
            n = len(text.split())
            if count >= EXPLAIN_SENTENCES or words + n > EXPLAIN_WORDS:
                break
            count += 1
            texts.append(text)
            kept.append((t[2], t[3], text))
            words += n
        kept.sort()
        used = [lead[1], *(i for i in used if i != lead[1])]
        used += [i for i, _, _ in kept if i not in used]
        return Answer(" ".join([lead[0], *(text for _, _, text in kept)]), used)

    def _sentences(self, question: str, passages: Sequence[Mapping[str, Any]]) -> list[tuple[float, str, int, int]]:
        """(score, sentence, passage index, position) of every sentence that says something.

        Refined strips keep the scores refinement gave them; other passages are split and scored here, each sentence
        read under its section's title as refinement reads it.
        """
        strips: list[tuple[float, str, int, int]] = []
        to_score: list[tuple[str, str, int, int]] = []
        for i, p in enumerate(passages):
            if p.get("strip"):
                strips.extend((float(p["score"]), s, i, 0) for s in passage_sentences(p))
            else:
                to_score.extend((section, s, i, k) for k, (section, s) in enumerate(_sectioned(p)))
        if to_score:
            scores = checked_scores(self.reranker, question, [titled(section, s) for section, s, _, _ in to_score])
            strips.extend((score, s, i, k) for score, (_, s, i, k) in zip(scores, to_score, strict=True))
        return strips

    def _read(self, question: str, passages: Sequence[Mapping[str, Any]], threshold: float) -> Answer:
        texts = [split_title(str(p["text"]))[1] for p in passages]  # a title line is no answer
        spans = self.reranker.read(question, texts)  # type: ignore[attr-defined]
        found = [(s, i) for i, s in enumerate(spans) if isinstance(s, Span) and s.text.strip()]
        if not found:
            raise ValueError("the reader found no answer span in the passages")
        span, index = max(found, key=lambda t: t[0].score)
        if span.score < threshold:
            raise ValueError(f"no answer span reaches the reader threshold ({span.score:.3f} < {threshold:.3f})")
        phrase, sentence = span_sentence(span, texts[index])
        if sentence is None or _reads_as_prose(sentence):
            return Answer(answer_with_sentence(span, texts[index]), [index])
        part = prose(sentence)
        if part is not None and phrase.lower() in part.lower():  # the span stands in the prose a fragment runs into
            return Answer(phrase if part.strip(" .") == phrase.strip(" .") else f"{phrase}\n\n{part}", [index])
        lead = first_prose(passages, _reading_order(passages, index))
        if lead is None:
            return Answer(answer_with_sentence(span, texts[index]), [index])
        return Answer(lead[0], [lead[1]])

    def rewrite(self, question: str) -> str:
        """The extractive generator has no language model to rewrite with."""
        raise NotImplementedError("the extractive generator cannot rewrite queries (no language model)")

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """The extractive generator has no language model to read a conversation with."""
        raise NotImplementedError("no chat model to make the question standalone")


def generate_answer(
    generator: Generator,
    question: str,
    passages: Sequence[Mapping[str, Any]],
    *,
    abstain: bool = True,
    ambiguous: bool = False,
) -> Answer:
    """Run `generator` on `passages`.

    The extractive reader holds `ambiguous` evidence (AMBIGUOUS band, CRAG on) to its `refine_reader_threshold`; with
    `abstain` false (plain RAG) it answers even below its floor.
    """
    if isinstance(generator, ExtractiveGenerator):
        return generator.generate(question, passages, abstain=abstain, ambiguous=ambiguous)
    return generator.generate(question, passages)


def answer_with_sentence(span: Span, passage: str) -> str:
    """The answer phrase, then the passage sentence it stands in (the phrase alone when it is the sentence)."""
    phrase, sentence = span_sentence(span, passage)
    return phrase if sentence is None else f"{phrase}\n\n{sentence}"


def span_sentence(span: Span, passage: str) -> tuple[str, str | None]:
    """The answer phrase and the passage sentence it stands in (None when there is none, or it is the phrase)."""
    part = next((p for p in span.text.split("\n\n") if p.strip()), span.text)  # a span never crosses a paragraph
    phrase = " ".join(part.split()).strip(" ,;:")
    sentences = split_sentences(passage)
    # Sentence strips are whitespace-normalised: locate the span by its offset in the normalised passage.
    offset = len(" ".join(passage[: span.start].split()))
    pos, chosen = 0, None
    for sentence in sentences:
        end = pos + len(sentence) + 1
        if pos <= offset < end and phrase.lower() in sentence.lower():
            chosen = sentence
            break
        pos = end
    if chosen is None:
        chosen = next((t for t in sentences if phrase.lower() in t.lower()), None)
    if chosen is None or chosen.strip(" .") == phrase.strip(" ."):
        return phrase, None
    return phrase, chosen


LEAD_MIN_WORDS = 3
"""A sentence shorter than this (a list number, "See step 7 below") does not lead an answer."""
PAGE_START = 2
"""How many chunks with prose from a page's start are read for the page's lead (`_ancestor_lead`)."""
PAGE_REACH = 10
"""... among its first chunks this many: those of code alone (a manual page's long synopsis: git-config's fills 7) are
passed over."""
_QUALIFIER = re.compile(r"\(|:| [-\u2013\u2014] ")
"""Where a page's heading turns from what it is about to a qualifier: a manual section, a subtitle."""
_KIND = re.compile(
    r"^(?:(?:abstract|async|static)\s+)*"
    r"(?:class|classmethod|staticmethod|method|property|exception|function|attribute|data|decorator)\s+"
    r"(?=[^\W\d][\w.]*(?:\(|\s*$))"
)
"""What kind of entry an API reference's heading names before its name (`class tuple([iterable])`, `property
flask.Flask.debug`): Sphinx's annotations."""
COMMON_IDF = 0.5
"""A word whose inverse document frequency is below this stands in nearly every chunk (BM25's idf: in ~60% of them)."""
LEAD_SENTENCES = 2
"""A section's lead: its first prose sentences, this many (what the section's subject is, and what it does)."""
_LEAD_IN = re.compile(r"^(\S+\s+){0,3}\S+:$")
"""A short line that only introduces what follows ("The syntax is:", "For example:"): no part of a lead."""
_IDENTIFIER = re.compile(r"(?=\S+$)(?:[^A-Z].*|.*[._/\-].*|.*[a-z][A-Z].*)")
"""A heading that names a thing, not a topic: one token, lower-case first, dotted, dashed or camel-cased
(`object.__del__`, `core.hooksPath`, `git-add`, `ort`), not a section's title (`Bugs`, `Binding of names`)."""
_POINTS_BACK = re.compile(r"^(this|these|it|they)\s", re.IGNORECASE)
"""A sentence that opens by pointing back to what it speaks of ("This is the default ...", "It terminates ...")."""
_LIST_ITEM = re.compile(r"^(?:[*\u2022-]|\d{1,2}[.)]|\([a-z0-9]\))\s")
"""A list item ("* ...", "1. ...", "(a) ..."): one step of what its lead-in introduces, no part of a lead."""
_RESTRICTS = re.compile(
    r"\b(?:may|can)\s+only\s+(?:occur|appear|be\s+(?:used|given|specified|called|combined))\b"
    r"|\bis\s+only\s+(?:allowed|valid|permitted|meaningful)\b",
    re.IGNORECASE,
)
"""A sentence that says where its subject may stand ("... may only occur syntactically nested in a function
definition"): a rule of use, not what the subject is or does, so no part of a lead (it may support one)."""


_STEP = re.compile(r"\d{1,2}[.)](\s|$)")
"""A numbered step ("1. The context expression is evaluated ...")."""
_CLOSERS = ")]\"'\u201d\u2019"
"""Closing brackets and quotes a sentence may end with after its punctuation."""
_OPENERS = ("(", "[", '"', "'", "\u201c", "\u2018")
"""Opening brackets and quotes: a sentence cut right after one goes on with no space."""
_CUT_REST = re.compile(f"[a-z{re.escape(_CLOSERS)},.;:]")
"""How the rest of a cut sentence opens: in lower case, or with a closing mark (`y)".`)."""
_WORKS = re.compile(
    r"^how\s+(does|do|is|are)\b.*\b(works?|proceeds?|runs?|executes?|executed|happens?|carried out)\s*\??$"
)
"""A question asking how something works or proceeds (`asks_how_it_works`)."""


def asks_how_it_works(question: str) -> bool:
    """Whether a question asks how something works or proceeds ("How does the with statement work?")."""
    return bool(_WORKS.match(" ".join(question.casefold().split())))


def _within(texts: Sequence[str], words: int) -> list[str]:
    """The first of `texts` and as many after it, in order, as keep the total within `words` words."""
    kept, total = [texts[0]], len(texts[0].split())
    for text in texts[1:]:
        total += len(text.split())
        if total > words:
            break
        kept.append(text)
    return kept


def _placed(doc: Document, passages: Sequence[Mapping[str, Any]], read: list[dict[str, Any]]) -> int:
    """Where a chunk read by id stands among the passages, then the chunks `read` (added to them when new).

    Of several passages of one chunk (its refined strips), the last.
    """
    chunk_id = fetched_id(doc)
    at = [i for i, p in enumerate([*passages, *read]) if str(p.get("chunk_id")) == chunk_id]
    if at:
        return at[-1]
    read.append({"chunk_id": chunk_id, "source": str(doc.metadata.get("source", ""))})
    return len(passages) + len(read) - 1


def _normalised(text: str) -> str:
    return " ".join(text.split())


def _lead(sentences: Sequence[str], coded: set[str] | frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """A section's lead: its first `LEAD_SENTENCES` prose sentences (no code, row, note or reference line).

    Each as (its prose, the sentence it is read from); a sentence the chunker cut where a chunk ended is read whole
    (`_rejoined`). Of the sentences a code block follows (`coded`), one that runs into it unfinished ("... is
    equivalent to") is no part of a lead, nor is a rule of where the subject may stand (`_RESTRICTS`). A sentence
    whose colon introduces what a lead never shows (code, a list, a table) ends with a full stop instead ("... is
    executed in two steps."); one whose colon introduces a line of prose keeps it.
    """
    lead: list[tuple[str, str]] = []
    whole = _rejoined(sentences)
    for (sentence, source), (following, _) in zip(whole, [*whole[1:], ("", "")], strict=False):  # with the next
        text = prose(sentence) if not is_reference_line(sentence) else None
        if text is None or len(text.split()) < LEAD_MIN_WORDS or _LEAD_IN.match(text) or _LIST_ITEM.match(text):
            continue
        if _RESTRICTS.search(text):
            continue
        if source in coded and unfinished(sentence):
            continue
        if lead and len(" ".join([*(t for t, _ in lead), text]).split()) > EXPLAIN_WORDS:
            break
        if text.endswith(":") and not _says_on(following):  # it introduces code, a list or a table: no part of a lead
            text = f"{text[:-1]}."
        lead.append((text, source))
        if len(lead) == LEAD_SENTENCES:
            break
    return lead


def _rejoined(sentences: Sequence[str]) -> list[tuple[str, str]]:
    """Each sentence as it reads, with the sentence it starts at: one cut where a chunk ended is joined to its rest.

    A chunker cuts a sentence longer than a chunk at the chunk's end (`... and "x>=y" calls "x.__ge__(` | `y)".`): a
    sentence that stops unpunctuated, followed by one going on in lower case or with a closing mark, is one sentence.
    """
    whole: list[tuple[str, str]] = []
    for sentence in sentences:
        if whole and unfinished(whole[-1][0]) and _CUT_REST.match(sentence):
            cut, start = whole[-1]
            joiner = "" if cut.endswith(_OPENERS) or not sentence[0].isalpha() else " "  # a closing mark: no space
            whole[-1] = (f"{cut}{joiner}{sentence}", start)
        else:
            whole.append((sentence, sentence))
    return whole


def _says_on(sentence: str) -> bool:
    """Whether a sentence a colon introduces goes on in prose (an example line), not code, a list item or a row."""
    text = prose(sentence)
    return text is not None and not _LIST_ITEM.match(text)


def _before_code(sentences: Sequence[str]) -> set[str]:
    """The sentences of one section's part that a code block follows there."""
    return {s for s, after in itertools.pairwise(sentences) if after.startswith(FENCE)}


def _reads_as_prose(sentence: str) -> bool:
    """Whether a sentence strip is prose as it stands: no fragment opens it and no grammar block runs into it."""
    return prose(sentence) == " ".join(sentence.split())


def passage_sentences(passage: Mapping[str, Any]) -> list[str]:
    """The sentences of a passage that say something, in its order (a refined strip is one sentence)."""
    if passage.get("strip"):
        return [] if is_reference_line(str(passage["text"])) else [str(passage["text"])]
    return [s for _, s in _sectioned(passage)]


def _sectioned(passage: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A chunk passage's sentences that say something, each with its section's title (`sectioned`).

    A sentence that runs into the code block after it unfinished ("... is equivalent to") says nothing whole.
    """
    pieces = sectioned(str(passage["text"]))
    after = [*pieces[1:], ("", "")]
    return [
        (section, s)
        for (section, s), (next_section, next_s) in zip(pieces, after, strict=True)
        if not is_reference_line(s) and not (next_section == section and next_s.startswith(FENCE) and unfinished(s))
    ]


def first_prose(passages: Sequence[Mapping[str, Any]], order: Sequence[int]) -> tuple[str, int, int] | None:
    """The first prose sentence of the first passage in `order` that has one: (its prose, passage, position)."""
    for i in order:
        for k, sentence in enumerate(passage_sentences(passages[i])):
            text = prose(sentence)
            if text is not None and len(text.split()) >= LEAD_MIN_WORDS:
                return text, i, k
    return None


def _cited(
    lead: Sequence[tuple[str, str]], ordered: Mapping[str, int | Document], passages: Sequence[Mapping[str, Any]]
) -> tuple[list[int], list[dict[str, Any]]]:
    """Where a lead's sentences stand, and the chunks read to find them that the passages do not hold (to cite).

    A sentence stands in a passage (its index), or in the j-th chunk read by id (`len(passages) + j`).
    """
    used: list[int] = []
    read: list[dict[str, Any]] = []
    for _, sentence in lead:
        where = ordered[sentence]
        if isinstance(where, Document):
            where = _placed(where, passages, read)
        if where not in used:
            used.append(where)
    return used, read


def _joined(lead: Sequence[tuple[str, str]]) -> str:
    """A lead's sentences as one text: a line that ends unpunctuated (a manual page's summary) gets a full stop."""
    texts = [t for t, _ in lead]
    return " ".join(t if k == len(texts) - 1 or _ends_punctuated(t) else f"{t}." for k, t in enumerate(texts))


def _ends_punctuated(text: str) -> bool:
    """Whether a sentence ends with its punctuation, before any closing bracket or quote ("... a parent.)")."""
    return text.rstrip(_CLOSERS)[-1:] in tuple(".!?:;")


def _named(lead: str, title: str) -> str:
    """A lead after the name of what it speaks of, where its first sentence does not name it.

    A definition, an option, an API entry or a manual page may leave its subject to its heading ("Called when the
    instance is about to be destroyed", "By default Git will look for your hooks in $GIT_DIR/hooks") or speak of it
    as "this"; the subject is named first, with a dash ("object.__del__ \u2014 Called when ...", "core.hooksPath \u2014
    By default ...", "ort \u2014 This is the default strategy ...": a colon would read as a table row, `Header: cell;
    ...`) so that the answer says what it is about. The subject is the nearest heading that is not a manual page's
    section name (NAME, DESCRIPTION: upper case), up to a qualifier (`git-add(1) Manual Page` gives git-add). A lead
    that points back ("This ...", "These ...", "It ...") is named unless it holds all of the subject's words; any
    other only when the heading names a thing (`_IDENTIFIER`) and the lead holds none of its words.
    """
    back = bool(_POINTS_BACK.match(lead))
    for heading in reversed(title.split(TITLE_JOINER)):
        name = _name(heading)
        if name and not name.isupper():
            said = set(terms(split_sentences(lead)[0]))
            # pointing back, it must name all of it ("These ... of Joubert syndrome"); else one of its words will do
            if back:
                named = _subject(heading) <= said
            else:  # only a name of a thing (an API entry, an option) is given; a section's title is not ("Bugs")
                # an entry's owner is no part of its name: "this object" does not name `object.__enter__`
                named = not _IDENTIFIER.fullmatch(name) or bool(set(terms(name.rpartition(".")[2])) & said)
            return lead if named else f"{name} \u2014 {lead}"
    return lead


def _name(heading: str) -> str:
    """What a page or section is about, as its heading names it: the heading up to a qualifier.

    A bracket or an `=` the qualifier left open goes too (`--fixup=[(amend|reword):]<commit>` gives --fixup), and
    so does an API entry's kind (`classmethod object.__init_subclass__(cls)` gives object.__init_subclass__).
    """
    return _QUALIFIER.split(_KIND.sub("", heading.strip()), maxsplit=1)[0].rstrip(" [{<=").strip()


def _subject(heading: str) -> set[str]:
    """The terms of what a page or section is about (`_name`).

    "git-revert(1) Manual Page" gives git, revert; "Sequence Types — list, tuple, range" gives sequence, type.
    """
    return set(terms(_name(heading)))


def _chunk_number(passage: Mapping[str, Any]) -> int:
    """The chunk's place in its document (`<document>-<n>` ids), or a large number when the id has none."""
    tail = str(passage.get("chunk_id") or "").rpartition("-")[2]
    return int(tail) if tail.isdigit() else 1 << 30


_ENTRY = re.compile(r"(?<![\w\-])(?:[^\W\d][\w\-]*[._][\w.\-]*\w|_\w*|--?[^\W\d][\w\-]*)")
"""A name of an API entry or an option: dotted or with an underscore (`str.find`, `__init__`, `core.hooksPath`), or
led by a dash (`--abort`, `-n`); not a hyphenated word (`fast-forward`) or a number (`3.14`)."""


def _entry_names(text: str) -> set[str]:
    """The entry names in `text` (`_ENTRY`), case-folded, each also by its last dotted part (`str.find` gives find)."""
    names = {m.casefold().strip(".") for m in _ENTRY.findall(text)}
    return names | {n.rpartition(".")[2] for n in names}


def _entries_named(question: str, passages: Sequence[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """(passage index, position) of the sentences standing in an entry the question names: `str.find`, `--abort`.

    An entry's heading names it (`str.find(sub[, start[, end]])`, `--abort`, `get(key[, default])` for "dict.get").
    In an API reference, neighbouring entries speak of each other ("Like find(), but raise ValueError ..."), and the
    graph's order need not put the entry asked about first.
    """
    asked = _entry_names(question)
    if not asked:
        return set()
    found: set[tuple[int, int]] = set()
    for i, p in enumerate(passages):
        sections = [str(p.get("section") or "")] if p.get("strip") else [section for section, _ in _sectioned(p)]
        for k, section in enumerate(sections):
            name = _name(section.split(TITLE_JOINER)[-1]).casefold()
            if name and ({name} | _entry_names(name)) & asked:
                found.add((i, k))
    return found


def _anchor(
    passages: Sequence[Mapping[str, Any]],
    strips: Sequence[tuple[float, str, int, int]],
    entries: Collection[tuple[int, int]] = (),
) -> set[int]:
    """The passages of the chunk an explain answer is read from: the best-ranked one whose best sentence has prose.

    Refined strips of one chunk share its id. A chunk whose best sentence says nothing in prose (a table row, a
    grammar production, a version line: an operator table's row for "What do the in and not in operators do?")
    yields to the next one ranked that does; a note's words after its label are prose. With none, the best-ranked
    chunk (the first passage's) stands. A chunk holding an entry the question names (`entries`, by its sentences'
    places: `_entries_named`) comes before all others, read by that entry's sentences.
    """
    chunks: dict[object, set[int]] = {}
    for i, p in enumerate(passages):
        chunks.setdefault(p.get("chunk_id") if p.get("chunk_id") is not None else f"#{i}", set()).add(i)
    for pool in ([t for t in strips if (t[2], t[3]) in entries], strips):
        for indices in chunks.values():
            mine = [t for t in pool if t[2] in indices]
            if mine and prose(without_label(max(mine, key=lambda t: t[0])[1])) is not None:
                return indices
    return next(iter(chunks.values()), {0})


def _documentation(passage: Mapping[str, Any]) -> bool:
    """Whether a passage comes from a documentation section: a titled chunk, or a strip of one."""
    return bool(passage.get("section") if passage.get("strip") else split_title(str(passage.get("text") or ""))[0])


def _reading_order(passages: Sequence[Mapping[str, Any]], start: int, *, page_first: bool = False) -> list[int]:
    """Passage indices to look for prose in: `start`, then the others in rank order.

    With `page_first`, the passages of `start`'s source come first, from the page's start (where its lead is).
    """
    order = [start] + [i for i in range(len(passages)) if i != start]
    if page_first and passages[start].get("source"):
        page = [i for i in order if passages[i].get("source") == passages[start]["source"]]
        order = sorted(page, key=lambda i: _chunk_number(passages[i])) + [i for i in order if i not in page]
    return order


def _best_of(
    strips: Sequence[tuple[float, str, int, int]],
    indices: set[int],
    count: int = EXPLAIN_SENTENCES,
    words: int = EXPLAIN_WORDS,
    *,
    first: bool = True,
) -> list[tuple[float, str, int, int]]:
    """The best-scoring sentences of the passages `indices`, in reading order: at most `count` and `words` words.

    With `first`, the best sentence is taken whatever its length.
    """
    chosen: list[tuple[float, str, int, int]] = []
    total = 0
    for t in sorted((t for t in strips if t[2] in indices), key=lambda t: t[0], reverse=True)[:count]:
        n = len(t[1].split())
        if (chosen or not first) and total + n > words:
            break
        chosen.append(t)
        total += n
    return sorted(chosen, key=lambda t: (t[2], t[3]))
