"""The extractive generator: no LLM; the answer is quoted from the passages, the sentences chosen by the grader."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.documents import Document

from fastcrag.generation.generators import Answer
from fastcrag.grading.reader import Span, is_reader
from fastcrag.grading.reranker import Reranker, checked_scores
from fastcrag.retrieval.lexical import terms
from fastcrag.retrieval.loaders import markup_source
from fastcrag.retrieval.sections import (
    SECTION_REACH,
    FetchChunks,
    Part,
    chunk_number,
    fetched_id,
    numbered_chunks,
    part_holding,
    section_before,
    section_onward,
    section_opening,
)
from fastcrag.retrieval.structure import prose, without_label
from fastcrag.retrieval.text import TITLE_JOINER, sectioned, split_sentences, split_title, titled, unfinished

log = logging.getLogger(__name__)

EXPLAIN_SENTENCES, EXPLAIN_WORDS = 3, 90
"""An answer to a how / why / what-is question: at most this many sentences, this many words."""
LEAD_MIN_WORDS = 3
"""A sentence shorter than this (a list number, "See step 7 below") does not open an answer."""
PAGE_START = 2
"""How many chunks holding prose from where a page or section opens make its opening (`_opening`)."""
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
    r"^(see( also)?|further reading|references|related (topics|links)|external links)\b", re.IGNORECASE
)
_BREADCRUMB = re.compile(r"(?:[A-Z0-9](?:[^>\u00bb]{0,40}\S)? [>\u00bb] ){2,}")
"""A site's breadcrumb trail, each place named in capitals ("Apache > HTTP Server > ..."): navigation."""
_LIST_ITEM = re.compile(r"^(?:[*\u2022-]|\d{1,2}[.)]|\([a-z0-9]\))\s")
"""A list item ("* ...", "1. ...", "(a) ..."): it may follow an answer's opening, never make it."""
_LEAD_IN = re.compile(r"^(\S+\s+){0,3}\S+:$")
"""A short line that only introduces what follows ("The syntax is:", "For example:")."""
_POINTS_BACK = re.compile(r"^(this|these|it|they)\s", re.IGNORECASE)
"""A sentence that opens by pointing back to what it speaks of ("This is the default ...", "It terminates ...")."""
_CLOSERS = ")]\"'\u201d\u2019"
_CUT_REST = re.compile(f"[a-z{re.escape(_CLOSERS)},.;:]")
"""How the rest of a sentence the chunker cut opens: in lower case, or with a closing mark (`y)".`)."""
_QUALIFIER = re.compile(r"\(|:| [-\u2013\u2014] ")
"""Where a heading turns from what it is about to a qualifier: a manual section, a subtitle."""
_KIND = re.compile(
    r"^(?:(?:abstract|async|static)\s+)*"
    r"(?:class|classmethod|staticmethod|method|property|exception|function|attribute|data|decorator)\s+"
    r"(?=[^\W\d][\w.]*(?:\(|\s*$))"
)
"""The kind an API reference's heading gives before an entry's name (`class tuple([iterable])`)."""
_IDENTIFIER = re.compile(r"(?=\S+$)(?:[^A-Z].*|.*[._/\-].*|.*[a-z][A-Z].*)")
"""A heading that names a thing, not a topic: one token, lower-case first, dotted, dashed or camel-cased."""
_ENTRY = re.compile(r"(?<![\w\-])(?:[^\W\d][\w\-]*[._][\w.\-]*\w|_\w*|--?[^\W\d][\w\-]*)")
"""A name of an API entry or an option: dotted or with an underscore (`str.find`, `__init__`), or led by a dash
(`--abort`); not a hyphenated word (`fast-forward`) or a number (`3.14`)."""


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

    A question asking how, why or what something is; over documentation (`documentation`: a passage is a section of
    a markup document or a titled chunk, or a strip of one: `is_documentation`), every question not asking for one
    fact.
    """
    return asks_for_explanation(question) or (documentation and not asks_for_fact(question))


def reader_declines(question: str, documentation: bool) -> bool:
    """Whether an answer is declined where no reader span reaches `reader_threshold` (else sentences answer).

    Over running text, a question not asking for an explanation: its answer is the span. Over documentation a fact
    the reader finds below its floor (drawn on SQuAD's factoid spans) is answered by the sentences the grader
    chooses, as every other question there: the grade and `answer_floor` decline, not the span.
    """
    return not documentation and not asks_for_explanation(question)


def is_reference_line(sentence: str) -> bool:
    """Whether a line points elsewhere instead of saying something.

    A see-also or references line, a bare heading (a few words, no closing punctuation), links, a breadcrumb trail.
    """
    text = sentence.strip()
    if _REFERENCE.match(text) or text.count("http") >= 2 or _BREADCRUMB.match(text):
        return True
    words = text.split()
    return len(words) <= 5 and not text.endswith((".", "!", "?", ":"))


class Strip(NamedTuple):
    """A sentence graded against the question: (score, sentence, passage index, position, its section's title)."""

    score: float
    text: str
    passage: int
    position: int
    title: str


class Candidate(NamedTuple):
    """A sentence an explain answer may quote, graded under its section's title, and where it stands."""

    score: float
    text: str
    title: str
    where: int | Document
    """The passage it stands in, or the chunk read by id."""
    order: tuple[int, int]
    """Its place in reading order: its chunk's number in the document, its position there."""


class ExtractiveGenerator:
    """No LLM: the answer is read from the passages, verbatim, with its citations.

    A factoid question gets, with a grader that reads (a reader head), the best answer span and the sentence it
    stands in (when no span reaches `reader_threshold` the generator raises, and the graph abstains; over
    documentation the sentences below answer instead: `reader_declines`); with a grader that only scores, the
    best-scoring prose sentence.

    A question asking how, why or what something is (over documentation: every question not asking for one fact)
    gets the sentences the grader grades highest against it, in reading order, within `EXPLAIN_SENTENCES` and
    `EXPLAIN_WORDS` (`_explain`). Structure decides only what may never stand in an answer (a table row, code, a
    grammar production, a reference or navigation line) or open it (a list item, a lead-in, a note's label), and
    the heading that names what an answer speaks of where its sentences do not.
    """

    name = "extractive"
    extractive = True
    """Its answers quote the passages; `generate` takes the graph's `abstain` and `ambiguous` (`generate_answer`)."""

    def __init__(
        self,
        reranker: Reranker,
        reader_threshold: float | None = None,
        refine_reader_threshold: float | None = None,
        chunks: FetchChunks | None = None,
    ) -> None:
        """Read or score strips with `reranker` (the grader).

        Args:
            reranker: The grader; when it reads spans, they answer.
            reader_threshold: Calibrated minimum span score (calibration.json `reader_threshold`); 0 when None.
            refine_reader_threshold: The minimum for AMBIGUOUS evidence (`refine_reader_threshold`); when None,
                `reader_threshold`.
            chunks: Chunks by id from the store (`VectorStore.get_by_ids`), where an explain answer reads the rest
                of its section and the page's opening; None: only the passages are read.
        """
        self.reranker = reranker
        self.chunks = chunks
        self.reader_threshold = reader_threshold or 0.0
        self.refine_reader_threshold = (
            self.reader_threshold if refine_reader_threshold is None else refine_reader_threshold
        )

    def generate(
        self, question: str, passages: Sequence[Mapping[str, Any]], *, abstain: bool = True, ambiguous: bool = False
    ) -> Answer:
        """The best span and its sentence (a reader), else the best sentences; refined strips keep their scores.

        Args:
            question: The user's question.
            passages: Dicts with `text` (and `score`, `strip` for refined strips).
            abstain: False for plain RAG: answer with the best span even below `reader_threshold`.
            ambiguous: The evidence graded AMBIGUOUS: the span must reach `refine_reader_threshold` instead.
        """
        if not passages:
            raise ValueError("no passage text to extract from")
        documentation = any(_documentation(p) for p in passages)
        explain = answers_with_sentences(question, documentation)
        if is_reader(self.reranker) and not explain:
            floor = self.refine_reader_threshold if ambiguous else self.reader_threshold
            try:
                return self._read(question, passages, floor if abstain else 0.0)
            except ValueError:  # no span reaches the floor
                if reader_declines(question, documentation):
                    raise  # the graph abstains
                explain = True  # over documentation a fact stands in sentences the grader chooses
        strips = self._sentences(question, passages)
        if not strips:
            raise ValueError("no passage text to extract from")
        explained = self._explain(question, strips, passages) if explain else None
        if explained:
            return explained
        best = max(strips)  # prose where it is, else the first from its passage on; with none, as it stands
        if _reads_as_prose(best.text):
            return Answer(best.text, [best.passage])
        found = first_prose(passages, _reading_order(passages, best.passage))
        return Answer(found[0], [found[1]]) if found else Answer(best.text, [best.passage])

    def _explain(self, question: str, strips: list[Strip], passages: Sequence[Mapping[str, Any]]) -> Answer | None:
        """A section's lead, then the sentences of it the grader grades highest, in reading order.

        The answer is read in the best-ranked chunk whose best sentence is prose (`_anchor`; an entry the question
        names first), in the section its best sentence stands in: that section's sentences there, and those it holds
        in the chunks before (back to where it opened) and the one after; a section of one line (a manual page's
        summary) is read with the rest of its chunk and the next. Its lead is its first sentence that may open an
        answer, where the section's opening was read. A section above it, to the page (`_opening`), answers instead
        where the grader grades its lead above the section's (its best sentence, without a lead): "What is a tuple?"
        from `Tuples`' lead, not from the entry `class tuple([iterable])` that ranked best. None: no prose to read.
        """
        entries = _entries_named(question, passages)
        anchor = _anchor(passages, strips, entries)
        anchored = [t for t in strips if t.passage in anchor]
        best = max([t for t in anchored if (t.passage, t.position) in entries] or anchored or strips)
        chunk, held, text = self._held(passages, best)
        number = chunk_number(chunk) or 0
        order = {s: k for k, (_, s) in enumerate(sectioned(text))}
        own = [
            Candidate(t.score, t.text, t.title, t.passage, (number, order.get(t.text, t.position)))
            for t in anchored
            if held is None or t.text in held.sentences
        ]
        lead = None
        if held is not None and chunk:
            before = section_before(self._fetch, chunk, held.title) if not held.opens else []
            onward = section_onward(self._fetch, chunk, held.title, reach=1)
            doc = Document(text, id=chunk, metadata={"source": passages[best.passage].get("source", "")})
            found = [f for d in [*before, doc, *onward[1:]] for f in _sentences_of(d) if f[0] == held.title]
            if sum(prose(f[1]) is not None for f in found) < 2:  # a section of one line: its chunk and the next
                near = numbered_chunks(self._fetch, chunk, lambda n: range(n + 1, n + 2))
                found = [f for d in [doc, *(d for _, d in near if d is not None)] for f in _sentences_of(d)]
            own += self._graded(question, found, passages, own)
            lead = _lead(own) if held.opens or before else None
            headings = held.title.split(TITLE_JOINER)
            for depth in range(len(headings) - 1, 0, -1):  # the sections above, nearest first, to the page
                above = TITLE_JOINER.join(headings[:depth])
                opening = self._graded(question, self._opening(chunk, above, depth == 1), passages, [])
                first = _lead(opening)
                if first is not None and first.score > (lead or max(own, default=first)).score:
                    own, lead = opening, first
        return self._chosen(own, passages, lead)

    def _chosen(
        self, candidates: Sequence[Candidate], passages: Sequence[Mapping[str, Any]], lead: Candidate | None = None
    ) -> Answer | None:
        """`lead`, then the best prose candidates within the explain limits, in reading order; None with none.

        The best is always taken; one a list item, a lead-in or too short opens yields the opening to the next.
        A sentence the chunker cut where a chunk ended is read whole; one whose colon introduces what the answer
        does not show ends with a full stop.
        """
        ranked: list[tuple[Candidate, str]] = []
        words = 0
        seen: set[str] = set()
        for c in [*([lead] if lead else []), *sorted(candidates, key=lambda c: -c.score)]:
            text = prose(without_label(c.text))
            if text is None or text in seen or is_reference_line(text):
                continue
            if ranked and (len(ranked) == EXPLAIN_SENTENCES or words + len(text.split()) > EXPLAIN_WORDS):
                break
            seen.add(text)
            ranked.append((c, text))
            words += len(text.split())
        ranked.sort(key=lambda r: r[0].order)
        while ranked and not _may_open(ranked[0][1]):
            ranked.pop(0)
        if not ranked:
            return None
        in_order = sorted(candidates, key=lambda c: c.order)
        after = {c.order: n.text for c, n in itertools.pairwise(in_order)}
        rests = {after[c.order] for c, _ in ranked if unfinished(c.text) and _CUT_REST.match(after.get(c.order, ""))}
        ranked = [r for r in ranked if r[0].text not in rests]
        texts = []
        for k, (c, text) in enumerate(ranked):
            rest = after.get(c.order, "")
            if rest in rests:  # a sentence the chunker cut: its rest, with no space after an opening mark
                text += ("" if text.endswith(("(", "[", '"', "'")) or not rest[0].isalpha() else " ") + rest
            shown_next = k + 1 < len(ranked) and after.get(c.order) == ranked[k + 1][0].text
            if text.endswith(":") and not shown_next:
                text = f"{text[:-1]}."  # it introduces what the answer does not show
            elif k + 1 < len(ranked) and text.rstrip(_CLOSERS)[-1:] not in tuple(".!?:;"):
                text += "."  # a line that ends unpunctuated (a manual page's summary) before another
            texts.append(text)
        read: list[dict[str, Any]] = []
        used: list[int] = []
        for c, _ in ranked:
            at = c.where if isinstance(c.where, int) else _placed(c.where, passages, read)
            if at >= len(passages):  # a chunk read by id: graded as its best sentence quoted
                entry = read[at - len(passages)]
                read[at - len(passages)] = {**entry, "score": max(float(entry.get("score", 0.0)), c.score)}
            used += [] if at in used else [at]
        return Answer(_named(" ".join(texts), ranked[0][0].title), used, read=tuple(read))

    def _graded(
        self,
        question: str,
        found: Sequence[tuple[str, str, Document, tuple[int, int]]],
        passages: Sequence[Mapping[str, Any]],
        have: Sequence[Candidate],
    ) -> list[Candidate]:
        """Sentences read by id (title, sentence, chunk, order) graded under their titles; those not had already.

        A sentence a passage holds stands in that passage.
        """
        known = {c.text for c in have}
        found = [f for f in found if f[1] not in known and prose(f[1]) is not None]
        if not found:
            return []
        scores = checked_scores(self.reranker, question, [titled(title, s) for title, s, _, _ in found])
        held = {str(p.get("chunk_id")): i for i, p in enumerate(passages) if p.get("chunk_id") is not None}
        return [
            Candidate(score, s, title, held.get(fetched_id(doc), doc), where)
            for score, (title, s, doc, where) in zip(scores, found, strict=True)
        ]

    def _opening(self, chunk: str, title: str, page: bool) -> list[tuple[str, str, Document, tuple[int, int]]]:
        """The sentences of section `title` (or `page`) and its sub-sections in its first chunks holding prose.

        Read from where it opens (`section_opening`; a page at its first chunk) up to chunk `chunk`, at most
        `PAGE_START` chunks holding prose among `SECTION_REACH`: a synopsis of code alone is passed over. None where
        it opens in chunk `chunk` (its reading is the section's).
        """
        number = chunk_number(chunk) or 0
        opened = 0 if page else section_opening(self._fetch, chunk, title)
        if opened is None or opened >= number:
            return []
        found: list[tuple[str, str, Document, tuple[int, int]]] = []
        prose_chunks = 0
        for _, doc in numbered_chunks(self._fetch, chunk, lambda n: range(opened, min(n + 1, opened + SECTION_REACH))):
            sentences = [
                f
                for f in (_sentences_of(doc) if doc is not None else [])
                if page or f[0] == title or f[0].startswith(title + TITLE_JOINER)
            ]
            if any(prose(s) for _, s, _, _ in sentences):
                found += sentences
                prose_chunks += 1
                if prose_chunks == PAGE_START:
                    break
        return found

    def _held(self, passages: Sequence[Mapping[str, Any]], best: Strip) -> tuple[str, Part | None, str]:
        """The best sentence's chunk id, the section part of that chunk it stands in (None: none), the chunk's text."""
        passage = passages[best.passage]
        chunk = str(passage.get("chunk_id") or "")
        text = str(passage.get("text") or "")
        if passage.get("strip"):
            fetched = self._fetch([chunk]) if chunk else []
            text = fetched[0].page_content if fetched else ""
        return chunk, part_holding(text, best.text), text

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

    def _sentences(self, question: str, passages: Sequence[Mapping[str, Any]]) -> list[Strip]:
        """Every sentence that says something, graded against the question.

        Refined strips keep the scores refinement gave them; other passages are split and scored here, each sentence
        read under its section's title as refinement reads it.
        """
        strips: list[Strip] = []
        to_score: list[tuple[str, str, int, int]] = []
        for i, p in enumerate(passages):
            if p.get("strip"):
                section = str(p.get("section") or "")
                strips.extend(Strip(float(p["score"]), s, i, 0, section) for s in passage_sentences(p))
            else:
                to_score.extend((section, s, i, k) for k, (section, s) in enumerate(_sectioned(p)))
        if to_score:
            scores = checked_scores(self.reranker, question, [titled(section, s) for section, s, _, _ in to_score])
            strips.extend(Strip(score, s, i, k, t) for score, (t, s, i, k) in zip(scores, to_score, strict=True))
        return strips

    def _read(self, question: str, passages: Sequence[Mapping[str, Any]], threshold: float) -> Answer:
        # a fact stands in one sentence: a chunk refinement kept `whole` (none graded as answering) is read only alone
        texts = [split_title(str(p["text"]))[1] for p in passages]  # a title line is no answer
        read = [i for i, p in enumerate(passages) if not p.get("whole")] or list(range(len(passages)))
        spans = dict(zip(read, self.reranker.read(question, [texts[i] for i in read]), strict=True))  # type: ignore[attr-defined]
        found = [(s, i) for i, s in spans.items() if isinstance(s, Span) and s.text.strip()]
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
        return Answer(lead[0], [lead[1]]) if lead else Answer(answer_with_sentence(span, texts[index]), [index])

    def rewrite(self, question: str) -> str:
        """The extractive generator has no language model to rewrite with."""
        raise NotImplementedError("the extractive generator cannot rewrite queries (no language model)")

    def standalone(self, history: Sequence[tuple[str, str]], question: str) -> str:
        """The extractive generator has no language model to read a conversation with."""
        raise NotImplementedError("no chat model to make the question standalone")


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


def _lead(candidates: Sequence[Candidate]) -> Candidate | None:
    """The first candidate in reading order that is prose and may open an answer (`_may_open`)."""
    return next((c for c in sorted(candidates, key=lambda c: c.order) if _may_open(prose(c.text) or "")), None)


def _may_open(text: str) -> bool:
    """Whether a prose sentence may open an answer: no list item, no lead-in, no pointer, long enough."""
    return len(text.split()) >= LEAD_MIN_WORDS and not _LIST_ITEM.match(text) and not _LEAD_IN.match(text)


def _sentences_of(doc: Document) -> list[tuple[str, str, Document, tuple[int, int]]]:
    """A chunk read by id: its sentences that say something, each as (title, sentence, chunk, order)."""
    number = chunk_number(fetched_id(doc)) or 0
    return [(title, s, doc, (number, k)) for k, (title, s) in enumerate(_sectioned({"text": doc.page_content}))]


def _placed(doc: Document, passages: Sequence[Mapping[str, Any]], read: list[dict[str, Any]]) -> int:
    """Where a chunk read by id stands among the passages, then the chunks `read` (added to them when new)."""
    chunk = fetched_id(doc)
    at = [i for i, p in enumerate([*passages, *read]) if str(p.get("chunk_id")) == chunk]
    if at:
        return at[-1]
    read.append({"chunk_id": chunk, "source": str(doc.metadata.get("source", ""))})
    return len(passages) + len(read) - 1


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
        if not is_reference_line(s) and not (next_section == section and next_s.startswith("```") and unfinished(s))
    ]


def first_prose(passages: Sequence[Mapping[str, Any]], order: Sequence[int]) -> tuple[str, int, int] | None:
    """The first prose sentence of the first passage in `order` that has one: (its prose, passage, position)."""
    for i in order:
        for k, sentence in enumerate(passage_sentences(passages[i])):
            text = prose(sentence)
            if text is not None and len(text.split()) >= LEAD_MIN_WORDS:
                return text, i, k
    return None


def _named(answer: str, title: str) -> str:
    """An answer after the name of what it speaks of, where its first sentence does not name it.

    A definition, an option, an API entry or a manual page may leave its subject to its heading ("Called when the
    instance is about to be destroyed") or speak of it as "this"; the subject is named first, with a dash
    ("object.__del__ \u2014 Called when ..."). The subject is the nearest heading that is not a manual page's section
    name (upper case), up to a qualifier. An answer that points back ("This ...", "It ...") is named unless it holds
    all of the subject's words; any other only when the heading names a thing (`_IDENTIFIER`) and the answer's first
    sentence holds none of its words.
    """
    for heading in reversed(title.split(TITLE_JOINER)):
        name = _name(heading)
        if name and not name.isupper():
            said = set(terms(split_sentences(answer)[0]))
            if _POINTS_BACK.match(answer):
                named = set(terms(name)) <= said
            else:  # an entry's owner is no part of its name: "this object" does not name `object.__enter__`
                named = not _IDENTIFIER.fullmatch(name) or bool(set(terms(name.rpartition(".")[2])) & said)
            return answer if named else f"{name} \u2014 {answer}"
    return answer


def _name(heading: str) -> str:
    """What a heading names: up to a qualifier, without an API entry's kind or a bracket left open (`--fixup=[`)."""
    return _QUALIFIER.split(_KIND.sub("", heading.strip()), maxsplit=1)[0].rstrip(" [{<=").strip()


def _entry_names(text: str) -> set[str]:
    """The entry names in `text` (`_ENTRY`), case-folded, each also by its last dotted part (`str.find` gives find)."""
    names = {m.casefold().strip(".") for m in _ENTRY.findall(text)}
    return names | {n.rpartition(".")[2] for n in names}


def _entries_named(question: str, passages: Sequence[Mapping[str, Any]]) -> set[tuple[int, int]]:
    """(passage index, position) of the sentences standing in an entry the question names: `str.find`, `--abort`.

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
    passages: Sequence[Mapping[str, Any]], strips: Sequence[Strip], entries: Collection[tuple[int, int]] = ()
) -> set[int]:
    """The passages of the chunk an explain answer is read from: the best-ranked one whose best sentence has prose.

    Refined strips of one chunk share its id. A chunk whose best sentence says nothing in prose (a table row, a
    grammar production) yields to the next one ranked that does. A chunk holding an entry the question names
    (`entries`) comes before all others. With none, the best-ranked chunk (the first passage's) stands.
    """
    chunks: dict[object, set[int]] = {}
    for i, p in enumerate(passages):
        chunks.setdefault(p.get("chunk_id") if p.get("chunk_id") is not None else f"#{i}", set()).add(i)
    for pool in ([t for t in strips if (t.passage, t.position) in entries], strips):
        for indices in chunks.values():
            mine = [t for t in pool if t.passage in indices]
            if mine and prose(without_label(max(mine).text)) is not None:
                return indices
    return next(iter(chunks.values()), {0})


def is_documentation(text: str, source: str = "") -> bool:
    """Whether a chunk is a documentation section: from a markup document (HTML, Markdown, reST), or titled."""
    return markup_source(source) or bool(split_title(text)[0])


def _documentation(passage: Mapping[str, Any]) -> bool:
    """Whether a passage comes from a documentation section (`is_documentation`), or is a strip of one."""
    source = str(passage.get("source") or "")
    if passage.get("strip"):
        return markup_source(source) or bool(passage.get("section"))
    return is_documentation(str(passage.get("text") or ""), source)


def _reading_order(passages: Sequence[Mapping[str, Any]], start: int) -> list[int]:
    """Passage indices to look for prose in: `start`, then the others in rank order."""
    return [start] + [i for i in range(len(passages)) if i != start]
