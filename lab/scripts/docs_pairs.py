"""Grader training pairs from a documentation corpus: a section's lead answers the questions its heading asks.

    python -m lab.scripts.docs_pairs CORPUS --out PAIRS.jsonl [--details] [--max-sections N] [--seed 13]

CORPUS is a folder of documentation pages (HTML, Markdown, text) that is neither evaluation set: the training
corpus is PostgreSQL's manual as Debian ships it (`bash scripts/fetch_docs_corpus.sh --corpus postgresql DIR`).
Each page is read by fastcrag's own loaders and cut into its titled sections (`fastcrag.retrieval.blocks`), as the
index does. A section whose heading names a subject (not "Notes", "Examples" ...) gives one question a newcomer
asks of that subject ("What does CREATE TABLE do?", "What is the UNLOGGED parameter in CREATE TABLE?"), made from
templates, and passages read as the graph reads them (the section's title on its own line, then the text):

| passage | label |
|---|---|
| the section's lead (its first prose sentences, as the extractive generator's explain answer opens) | 1 |
| the section's opening as a chunk holds it (the lead with what follows it, rows and code included) | 1 |
| one of the section's later sentences: on topic, a side case or a detail, not what the subject is | `SIDE_LABEL` |
| a table row or a code block of the section | 0 |
| the lead of another section whose subject shares a word with this one ("CREATE INDEX" for "CREATE TABLE") | 0 |
| the lead of a section of another page, drawn at random | 0 |

With `--details`, each section with later sentences also asks of one of them (a detail: "When does CREATE TABLE ...
temporary dropped?", the subject and the sentence's rarest words, from `_DETAIL_TEMPLATES`):

| passage | label |
|---|---|
| that sentence | 1 |
| the section's text around it as a chunk holds it (code and rows included) | 1 |
| the section's lead: on topic, but not the detail asked | `SIDE_LABEL` |
| a later sentence of another page's section that shares one of the words asked | 0 |

so that a question about a detail is answered by the sentence that holds it, not by the section's lead alone.

The JSONL rows (`question`, `passage`, `label`, `group` = the page) are what `python -m lab train-reranker
--user-data` mixes into the grader's pool; groups keep a page's pairs on one side of the dev split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fastcrag.fileio import write_text_atomic
from fastcrag.generation.extractive import is_reference_line
from fastcrag.retrieval.blocks import sections
from fastcrag.retrieval.loaders import load_documents
from fastcrag.retrieval.structure import prose
from fastcrag.retrieval.text import TITLE_JOINER, split_sentences, titled, unfinished

SIDE_LABEL = 0.3
"""A later sentence of the right section: on topic, but not what the question asks first (below any lead)."""
CHUNK_WORDS = 90
"""The words of a section's opening taken as a chunk-level positive (about a 128-token chunk)."""
_GENERIC = {
    "description", "synopsis", "parameters", "parameter", "arguments", "outputs", "output", "notes", "note",
    "examples", "example", "compatibility", "see also", "tip", "warning", "caution", "important", "overview",
    "introduction", "options", "usage", "return value", "returns", "diagnostics", "environment", "files", "bugs",
    "author", "authors", "history", "prev", "next", "home", "up", "contents", "table of contents", "summary",
}  # fmt: skip
"""Headings that name a part of a page, not a subject: their subject is the page's."""
_NUMBERING = re.compile(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.\s+")
_SOURCE_LINK = re.compile(r"\s*(?:\[source\]|¶)\s*$")
_DOTTED = re.compile(r"(\w)\. (\w)")
_QUALIFIER = re.compile(r"\s*\([^()]*\)$")
"""A trailing parenthesis ("(optional)", "( boolean )"): a detail of the heading, not of its subject."""
_OPENS_PAGE = {"description", "overview", "introduction", "summary"}
"""Generic headings whose section says what the page's subject is: the page's subject is theirs."""
_TEMPLATES = (
    "What is {s}?",
    "What does {s} do?",
    "How does {s} work?",
    "What is {s} used for?",
    "Explain {s}.",
    "{s}",
)
_PART_TEMPLATES = ("What is {s} in {p}?", "What does {s} mean in {p}?", "{p} {s}")
_ACTIVITY_TEMPLATES = ("{s}", "Explain {s}.", "How is {s} done?")
"""For a heading that names an activity ("Importing a Large Object"): "What is importing ...?" is not asked."""
_MAX_SUBJECT_WORDS = 8
_DETAIL_TEMPLATES = (
    "What about {w} in {s}?",
    "How does {s} handle {w}?",
    "When does {s} {w}?",
    "What happens with {w} in {s}?",
    "{s}: {w}?",
    "{s} {w}",
)
"""A question about one later sentence of a section: its subject and the sentence's rarest words (`{w}`)."""
_STOPWORDS = frozenset(
    "about above after again against also although another because been before being below between both cannot "
    "could does doing down during each either else every from further have having here however into itself just "
    "least less made make many might more most much must neither never none only other otherwise over same should "
    "since some still such than that their them then there these they this those through thus under until upon used "
    "uses using very were what when where whether which while will with within without would your".split()
)


@dataclass(frozen=True)
class Topic:
    """A titled section with a lead: what a question about its subject should be answered with."""

    page: str
    title: str
    subject: str
    part_of: str
    lead: str
    opening: str
    side: tuple[str, ...]
    fragments: tuple[str, ...]
    body: str = ""


_LEAD_SENTENCES, _LEAD_WORDS, _LEAD_MIN_WORDS = 2, 90, 3
_LEAD_IN = re.compile(r"^(\S+\s+){0,3}\S+:$")
_LIST_ITEM = re.compile(r"^(?:[*\u2022-]|\d{1,2}[.)]|\([a-z0-9]\))\s")
_RESTRICTS = re.compile(
    r"\b(?:may|can)\s+only\s+(?:occur|appear|be\s+(?:used|given|specified|called|combined))\b"
    r"|\bis\s+only\s+(?:allowed|valid|permitted|meaningful)\b",
    re.IGNORECASE,
)
_CUT_REST = re.compile(r"[a-z)\]\"'\u201d\u2019,.;:]")


def _lead(sentences: Sequence[str]) -> list[tuple[str, str]]:
    """A section's lead as the v4 pairs were made from it: its first two prose sentences, as (prose, source).

    No code, row, note, reference line, list item or lead-in; no rule of where the subject may stand; a sentence the
    chunker cut is read whole; a colon that introduces no prose line becomes a full stop.
    """
    whole: list[tuple[str, str]] = []
    for sentence in sentences:
        if whole and unfinished(whole[-1][0]) and _CUT_REST.match(sentence):
            cut, start = whole[-1]
            joiner = "" if cut.endswith(("(", "[", '"', "'")) or not sentence[0].isalpha() else " "
            whole[-1] = (f"{cut}{joiner}{sentence}", start)
        else:
            whole.append((sentence, sentence))
    lead: list[tuple[str, str]] = []
    for (sentence, source), (following, _) in zip(whole, [*whole[1:], ("", "")], strict=False):
        text = prose(sentence) if not is_reference_line(sentence) else None
        if text is None or len(text.split()) < _LEAD_MIN_WORDS or _LEAD_IN.match(text) or _LIST_ITEM.match(text):
            continue
        if _RESTRICTS.search(text):
            continue
        if lead and len(" ".join([*(t for t, _ in lead), text]).split()) > _LEAD_WORDS:
            break
        after = prose(following)
        if text.endswith(":") and (after is None or _LIST_ITEM.match(after)):
            text = f"{text[:-1]}."
        lead.append((text, source))
        if len(lead) == _LEAD_SENTENCES:
            break
    return lead


def subject_of(heading: str) -> str:
    """A heading as a subject: no section number ("9.4.1. format" -> "format"), no "(optional)", no API signature.

    An API entry's heading as Sphinx renders it ("HttpResponse. get ( header , alternate = None ) [source]") is
    its name ("HttpResponse.get").
    """
    text = _SOURCE_LINK.sub("", _NUMBERING.sub("", heading.strip()))
    return _QUALIFIER.sub("", _DOTTED.sub(r"\1.\2", text)).strip()


def _generic(heading: str) -> bool:
    return subject_of(heading).casefold().rstrip(":") in _GENERIC


def page_topics(page: str, text: str) -> Iterator[Topic]:
    """The topics of one page: its sections that have a subject and a prose lead."""
    found = [s for s in sections(text) if s.title]
    page_subject = next((subject_of(s.title.split(TITLE_JOINER)[0]) for s in found if not _generic(s.title)), "")
    for section in found:
        last = subject_of(section.title.split(TITLE_JOINER)[-1]).casefold()
        if _generic(last) and last not in _OPENS_PAGE:
            continue  # notes, examples, warnings: what their section says is not what the subject is
        heads = [h for h in section.title.split(TITLE_JOINER) if not _generic(h)]
        subject = subject_of(heads[-1]) if heads else page_subject
        part_of = subject_of(heads[-2]) if len(heads) > 1 else ""
        if not subject or len(subject.split()) > _MAX_SUBJECT_WORDS:
            continue
        prose_text = "\n\n".join(b.text for b in section.blocks if b.kind == "prose")
        sentences = split_sentences(prose_text)
        lead = _lead(sentences)
        if not lead:
            continue
        read = {s for _, s in lead}
        after = sentences[sentences.index(lead[-1][1]) + 1 :]
        side = tuple(
            t for s in after[1:] if s not in read and (t := prose(s)) and len(t.split()) >= 6 and t[0] not in "[("
        )
        fragments = tuple(b.text for b in section.blocks if b.kind != "prose" and len(b.text.split()) >= 3)
        words = " ".join(b.text for b in section.blocks).split()
        yield Topic(
            page=page,
            title=section.title,
            subject=subject,
            part_of=part_of if part_of != subject else "",
            lead=" ".join(t for t, _ in lead),
            opening=" ".join(words[:CHUNK_WORDS]),
            side=side,
            fragments=fragments,
            body=" ".join(words),
        )


def question_for(topic: Topic, rng: random.Random) -> str:
    """One question a newcomer asks of the topic's subject, from the templates."""
    if topic.part_of and rng.random() < 0.5:
        return rng.choice(_PART_TEMPLATES).format(s=topic.subject, p=topic.part_of)
    if topic.subject.split()[0].casefold().endswith("ing"):
        return rng.choice(_ACTIVITY_TEMPLATES).format(s=topic.subject)
    return rng.choice(_TEMPLATES).format(s=topic.subject)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9_]+", text.casefold()) if len(w) > 2}


def _detail_words(sentence: str) -> list[str]:
    """The words of a sentence a detail question may ask with: no stop words, no short ones, each once."""
    seen: dict[str, None] = {}
    for w in re.findall(r"[A-Za-z][A-Za-z0-9_]{3,}", sentence):
        if (low := w.casefold()) not in _STOPWORDS:
            seen.setdefault(low)
    return list(seen)


def detail_question(topic: Topic, sentence: str, frequency: Counter[str], rng: random.Random) -> tuple[str, list[str]]:
    """A question about one sentence of the topic: its subject and 2-3 of the sentence's rarest words, in their order.

    Empty when the sentence has fewer than two words its subject does not already name.
    """
    named = _words(topic.subject)
    words = [w for w in _detail_words(sentence) if w not in named]
    if len(words) < 2:
        return "", []
    rarest = set(sorted(words, key=lambda w: (frequency[w], words.index(w)))[: rng.choice((2, 3))])
    asked = [w for w in words if w in rarest]
    return rng.choice(_DETAIL_TEMPLATES).format(s=topic.subject, w=" ".join(asked)), asked


def _around(body: str, sentence: str) -> str:
    """The section's text around `sentence` as a chunk holds it (a few words before it, `CHUNK_WORDS` in all)."""
    words = body.split()
    head = sentence.split()[:6]
    for i in range(len(words) - len(head) + 1):
        if words[i : i + len(head)] == head:
            start = max(0, i - CHUNK_WORDS // 5)
            return " ".join(words[start : start + CHUNK_WORDS])
    return ""


def _detail_rows(topics: Sequence[Topic], rng: random.Random) -> list[dict[str, object]]:
    """The rows of a question about one later sentence of each topic (see the module's second table)."""
    frequency: Counter[str] = Counter()
    by_word: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for i, t in enumerate(topics):
        frequency.update(_detail_words(t.lead))
        for s in t.side:
            words = _detail_words(s)
            frequency.update(words)
            for w in words:
                by_word[w].append((i, s))
    rows: list[dict[str, object]] = []
    for topic in topics:
        if not topic.side:
            continue
        sentence = rng.choice(topic.side)
        q, asked = detail_question(topic, sentence, frequency, rng)
        if not q:
            continue

        def add(passage: str, label: float, kind: str, topic: Topic = topic, q: str = q) -> None:
            rows.append({"question": q, "passage": passage, "label": label, "group": topic.page, "kind": kind})

        add(titled(topic.title, sentence), 1.0, "detail")
        if chunk := _around(topic.body, sentence):
            add(titled(topic.title, chunk), 1.0, "detail-chunk")
        add(titled(topic.title, topic.lead), SIDE_LABEL, "detail-lead")
        elsewhere = [(j, s) for w in asked for j, s in by_word[w] if topics[j].page != topic.page]
        if elsewhere:
            j, s = rng.choice(elsewhere)
            add(titled(topics[j].title, s), 0.0, "detail-neighbour")
    return rows


def make_pairs(
    topics: Sequence[Topic],
    rng: random.Random,
    *,
    details: bool = False,
    ask: Callable[[Topic, random.Random], str | None] = question_for,
) -> list[dict[str, object]]:
    """The labelled rows of every topic (see the module's tables; the second with `details`).

    `ask` writes each topic's question (the templates by default; a topic it gives None is left out).
    """
    by_word: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(topics):
        for w in _words(t.subject):
            by_word[w].append(i)
    rows: list[dict[str, object]] = []
    for topic in topics:
        q = ask(topic, rng)
        if q is None:
            continue

        def add(passage: str, label: float, kind: str, topic: Topic = topic, q: str = q) -> None:
            rows.append({"question": q, "passage": passage, "label": label, "group": topic.page, "kind": kind})

        add(titled(topic.title, topic.lead), 1.0, "lead")
        if topic.opening != topic.lead:
            add(titled(topic.title, topic.opening), 1.0, "opening")
        if topic.side:
            add(titled(topic.title, rng.choice(topic.side)), SIDE_LABEL, "side")
        if topic.fragments:
            add(titled(topic.title, rng.choice(topic.fragments)), 0.0, "fragment")
        near = sorted(
            {
                j
                for w in _words(topic.subject)
                for j in by_word[w]
                if topics[j].page != topic.page
                and topic.subject.casefold() not in topics[j].subject.casefold()
                and topics[j].subject.casefold() not in topic.subject.casefold()
            }
        )
        if near:
            other = topics[rng.choice(near)]
            add(titled(other.title, other.lead), 0.0, "neighbour")
        other = topics[rng.randrange(len(topics))]
        if other.page != topic.page:
            add(titled(other.title, other.lead), 0.0, "random")
    if details:
        rows += _detail_rows(topics, rng)
    return rows


def collect(corpus: Path) -> list[Topic]:
    """Every topic of a corpus folder, page by page in path order."""
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.suffix.lower() in {".html", ".htm", ".md", ".txt"})
    topics: list[Topic] = []
    root = corpus.resolve()  # pages are named from the corpus folder, however it was reached (a link, a relative path)
    for doc in load_documents(files):
        page = Path(doc.source).resolve()
        name = page.relative_to(root).as_posix() if page.is_relative_to(root) else doc.source
        topics.extend(page_topics(name, doc.text))
    return topics


def main(argv: Sequence[str] | None = None) -> int:
    """Write the pairs of a corpus folder; 2 (and a one-line error) for a folder with no topic."""
    ap = argparse.ArgumentParser(prog="python -m lab.scripts.docs_pairs", description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="a documentation folder that is neither evaluation set")
    ap.add_argument("--out", required=True, help="the JSONL of pairs to write")
    ap.add_argument("--details", action="store_true", help="also ask of one later sentence of each section")
    ap.add_argument("--max-sections", type=int, default=0, help="sections drawn at random (0: all)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        print(f"error: {corpus} is not a folder", file=sys.stderr)
        return 2
    topics = collect(corpus)
    if not topics:
        print(f"error: no titled section with a prose lead under {corpus}", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    if args.max_sections and len(topics) > args.max_sections:
        topics = rng.sample(topics, args.max_sections)
    rows = make_pairs(topics, rng, details=args.details)
    digest = hashlib.sha1("".join(t.page + t.title for t in topics).encode("utf-8")).hexdigest()[:12]
    write_text_atomic(Path(args.out), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    kinds = Counter(str(r["kind"]) for r in rows)
    print(f"{len(rows)} pairs from {len(topics)} sections of {len({t.page for t in topics})} pages ({digest})")
    print("  " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
