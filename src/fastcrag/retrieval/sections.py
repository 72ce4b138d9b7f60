"""A chunk's sections, and where a section opens: chunk ids number a document's chunks in reading order.

A chunk opens with the title of the section it starts in (marked continued when the section opened in an earlier
chunk, `fastcrag.retrieval.text.CONTINUED`); a section that starts inside a chunk stands under its heading path
there (`is_heading`). So the chunks before a chunk, fetched by id (LangChain's `VectorStore.get_by_ids`), say where
its section opens and what its lead is, in any store that numbers chunks as the index does (`chunk_id`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from fastcrag.retrieval.text import CONTINUED, TITLE_JOINER, sectioned, split_title

SECTION_REACH = 8
"""How many chunks before a chunk are looked at for the opening of the section it continues."""
ONWARD_REACH = 3
"""How many chunks after a chunk are read for the rest of its section (`section_onward`)."""

FetchChunks = Callable[[Sequence[str]], Sequence[Document]]
"""Chunks by id, as LangChain's `VectorStore.get_by_ids`: the ids found, unknown ones left out."""


@dataclass(frozen=True)
class Part:
    """One section's part of a chunk: the section's title, its sentence strips there, whether it opens there."""

    title: str
    sentences: tuple[str, ...]
    opens: bool


def chunk_id(digest: str, number: int) -> str:
    """The id of a document's chunk `number` (from 0): its content hash's first 16 characters, a dash, the number."""
    return f"{digest[:16]}-{number}"


def chunk_number(chunk: str) -> int | None:
    """A chunk's place in its document, read from its id (`chunk_id`); None for an id that carries none."""
    head, _, tail = chunk.rpartition("-")
    return int(tail) if head and tail.isdigit() else None


def parts(text: str) -> list[Part]:
    """A titled chunk's sections in reading order (none for an untitled chunk), from its sentence strips.

    The first part opens in the chunk unless the chunk's title is marked continued; a later one opens under its
    heading there, unless an earlier part of the chunk stands under it: then its heading resumes it after a
    sub-section (`__slots__` again after the entry `object.__slots__`), and it opened before.
    """
    title = split_title(text)[0]
    if not title:
        return []
    found: list[tuple[str, list[str]]] = []
    for section, strip in sectioned(text):
        if not found or found[-1][0] != section:
            found.append((section, []))
        found[-1][1].append(strip)
    first = title.removesuffix(CONTINUED)
    found = found or [(first, [])]  # a chunk of its title alone (its heading before a block too long to join)
    result: list[Part] = []
    for k, (t, s) in enumerate(found):
        if k == 0:
            opens = not title.endswith(CONTINUED) or t != first
        else:
            opens = not any(p.title == t or p.title.startswith(t + TITLE_JOINER) for p in result)
        result.append(Part(t, tuple(s), opens))
    return result


def part_holding(text: str, sentence: str) -> Part | None:
    """The part of a chunk's `text` whose sentences hold `sentence` (None when no part does)."""
    want = " ".join(sentence.split())
    return next((p for p in parts(text) if any(want in s or s in want for s in p.sentences if s)), None)


def fetched_id(doc: Document) -> str:
    """The chunk id of a chunk fetched by id (`Document.id`, else its `chunk_id` metadata)."""
    return str(doc.id or doc.metadata.get("chunk_id"))


def numbered_chunks(
    fetch: FetchChunks, chunk: str, numbers: Callable[[int], range]
) -> list[tuple[int, Document | None]]:
    """The chunks `numbers(n)` of chunk `chunk`'s document (n: its number), in that order, fetched in one call.

    Each as (number, chunk); a chunk not found is None. None at all when the id carries no number or `fetch` cannot
    fetch by id.
    """
    number = chunk_number(chunk)
    if number is None:
        return []
    prefix = chunk.rpartition("-")[0]
    wanted = numbers(number)
    try:
        found = {fetched_id(d): d for d in fetch([f"{prefix}-{n}" for n in wanted])}
    except NotImplementedError:
        return []
    return [(n, found.get(f"{prefix}-{n}")) for n in wanted]


def _looking_back(fetch: FetchChunks, chunk: str, reach: int, *, itself: bool) -> list[tuple[int, Document | None]]:
    """Chunk `chunk` (with `itself`) and the `reach` before it, nearest first (`numbered_chunks`)."""
    return numbered_chunks(fetch, chunk, lambda n: range(n if itself else n - 1, max(-1, n - 1 - reach), -1))


def section_before(fetch: FetchChunks, chunk: str, title: str, reach: int = SECTION_REACH) -> list[Document]:
    """The chunks before chunk `chunk` that hold section `title`, from the one where it opens, in reading order.

    Looks back at most `reach` chunks (one `fetch`), through chunks that continue the section; none when the id
    carries no number, the section's opening is out of reach, the chain breaks (a chunk missing, or one outside the
    section) or `fetch` cannot fetch by id.
    """
    chain: list[Document] = []
    for _, doc in _looking_back(fetch, chunk, reach, itself=False):
        held = [p for p in parts(doc.page_content) if p.title == title] if doc is not None else []
        if doc is None or not held:
            return []
        chain.insert(0, doc)
        if any(p.opens for p in held):
            return chain
    return []


def section_opening(fetch: FetchChunks, chunk: str, title: str, reach: int = SECTION_REACH) -> int | None:
    """The number of the chunk, chunk `chunk` or one of the `reach` before it, where section `title` opens.

    None when the id carries no number, a chunk on the way is missing, or the opening is out of reach. The chunks
    between may hold the section's sub-sections only (a section above the one `chunk` stands in).
    """
    for n, doc in _looking_back(fetch, chunk, reach, itself=True):
        if doc is None:
            return None
        if any(p.title == title and p.opens for p in parts(doc.page_content)):
            return n
    return None


def section_onward(fetch: FetchChunks, chunk: str, title: str, reach: int = ONWARD_REACH) -> list[Document]:
    """Chunk `chunk` and the chunks after it that continue section `title`, in reading order (one `fetch`).

    At most `reach` chunks after it; the chain ends at a chunk missing or one where the section does not go on. None
    when the id carries no number, `chunk` holds no part of the section, or `fetch` cannot fetch by id.
    """
    chain: list[Document] = []
    for _, doc in numbered_chunks(fetch, chunk, lambda n: range(n, n + reach + 1)):
        held = [p for p in parts(doc.page_content) if p.title == title] if doc is not None else []
        if doc is None or not held or (chain and held[0].opens):
            break
        chain.append(doc)
    return chain
