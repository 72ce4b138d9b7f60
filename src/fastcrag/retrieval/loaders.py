"""Document loaders: .txt, .md, .html, .pdf files and BEIR-style corpora (.jsonl, .jsonl.gz, .parquet).

`read_file` reads one file; `load_documents` reads files one after another, and the distributed build
(`fastcrag.retrieval.raybuild`) calls `read_file` on many files at once, so both see the same documents.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastcrag.retrieval.text import clean_text

log = logging.getLogger(__name__)

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
MARKUP_SUFFIXES = HTML_SUFFIXES | {".md", ".markdown", ".rst"}
"""Documents written with headings: their chunks are documentation sections, titled or not."""
CORPUS_SUFFIXES = {".jsonl", ".jsonl.gz", ".parquet"}
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | CORPUS_SUFFIXES | {".pdf"}
#: Rows of a Parquet corpus read at a time.
PARQUET_BATCH_ROWS = 4096


@dataclass(frozen=True)
class SourceDocument:
    """One document to index: a stable source key, a title and its text."""

    source: str
    title: str
    text: str


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return ".jsonl.gz" if name.endswith(".jsonl.gz") else path.suffix.lower()


def markup_source(source: str) -> bool:
    """Whether a chunk's source (a path, perhaps with a `#` fragment) is a markup document: HTML, Markdown, reST."""
    return Path(source.partition("#")[0]).suffix.lower() in MARKUP_SUFFIXES


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%s is not valid UTF-8; undecodable bytes replaced", path)
        return data.decode("utf-8", errors="replace")


_HEADING_TAGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
SIGNATURE_PARAMETERS = 40
"""Characters of an API signature's parameters a heading keeps whole; a longer list reads `name(...)`."""
_FURNITURE_TAGS = frozenset(
    {"head", "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "button"}
)
_DRAWING_TAGS = frozenset({"svg", "map", "area", "object", "canvas", "embed"})
"""Drawings whose text is no prose: a syntax diagram's or chart's labels (SVG, canvas, plug-ins), image maps."""
_FURNITURE_CLASSES = frozenset({"navheader", "navfooter", "nav-panel", "topNav", "subNav", "bottomNav"})
"""Classes documentation generators give their page navigation: DocBook XSL's, Texinfo's, Javadoc's."""
_FURNITURE_ROLES = frozenset({"navigation", "search", "banner", "contentinfo", "complementary"})
"""ARIA landmark roles of page furniture: the roles of `nav`, a search form, `header`, `footer` and `aside` (Sphinx's
related links and sidebar)."""
_PAGING_RELS = ["next", "prev", "previous", "up"]
PANEL_WORDS = 40
"""Words of a block holding a link to the next, previous or parent page (`rel`) up to which it is a paging panel."""
_LEVEL = "data-heading-level"
"""Marks a definition list with the heading level its terms were given (a nested list's terms go a level below)."""
_BLOCK_TAGS = ["p", "div", "li", "dd", "dt", "blockquote", "section", "article", "main", "br", "tr", "ul", "ol", "dl"]
MAIN_SHARE = 0.95
"""Share of the words the extractor kept that the main-content element must hold: the smallest such element is it."""
MAIN_TEXT_SHARE = 0.5
"""Share of the page's text (after its furniture) the main-content element (marked, or found with the extractor's
help) must hold to be taken for the page."""
_WORD = re.compile(r"\w+")


def _html(path: Path) -> str:
    """An HTML page as structured text (`html_text`); its main content only with `FASTRAG_HTML_MAIN_CONTENT`."""
    from fastcrag.config.settings import Settings

    return html_text(_read_text(path), main_content=Settings().html_main_content)


def html_text(html: str, *, main_content: bool = False) -> str:
    """An HTML page as structured text: the whole page less its furniture, or with `main_content` its main content.

    Furniture is what tags, ARIA roles and documentation generators' classes mark as navigation, headers, footers
    and sidebars, paging panels and drawings' text. Where the page marks its main content (one `main` element or
    ARIA `role="main"`) and it holds at least half of the page's text, that is what is read. With `main_content`, a
    boilerplate extractor (trafilatura) says which words are the page's content; the smallest element that holds
    nearly all of them is the main content: banners, navigation bars, sidebars and footers around it go. It is
    converted here, whole (the extractor's own text loses structure and, at times, a paragraph), so headings,
    tables, code and definition lists keep their structure. The page's title heading (its first `h1`) stays even
    where the main content starts below it; where none is found, the whole page is read.
    """
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning  # heavy (about 0.1 s): loaded only when HTML is read

    with warnings.catch_warnings():  # an XHTML page (`<?xml ...?>` first) is read as HTML, as browsers read it
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(html, "lxml")  # lxml: as fast as the extractor's parser, and closes `p` as browsers do
    _drop(soup, _furniture)
    for link in soup.find_all("a", rel=_PAGING_RELS):  # a "Next: / Previous: / Up:" panel, wherever the page puts it
        panel = link.find_parent(["p", "div", "table", "ul", "td"])
        if panel is not None and not panel.decomposed and len(panel.get_text(" ").split()) <= PANEL_WORDS:
            panel.decompose()
    landmark = soup.find_all(lambda tag: tag.name == "main" or tag.get("role") == "main")
    if len(landmark) == 1 and _words(landmark[0]) >= MAIN_TEXT_SHARE * _words(soup):
        _reduce_to(soup, landmark[0])
    elif main_content:
        kept = _extracted_trigrams(html)
        if kept:
            _keep_main_content(soup, kept)
    return _structured_text(soup)


def _words(tag: Any) -> int:
    return len(_WORD.findall(tag.get_text(" ")))


def _reduce_to(soup: Any, main: Any) -> None:
    """Reduce the page to its element `main`, with the page's title (its first `h1`) where `main` has none."""
    title = soup.find("h1")
    if title is not None and main.find("h1") is None and not any(p is main for p in title.parents):
        main.insert(0, title.extract())
    main.extract()
    soup.clear()
    soup.append(main)


def _drop(soup: Any, predicate: Any) -> None:
    """Remove every element the predicate picks (and what it holds)."""
    for tag in soup.find_all(predicate):
        if not tag.decomposed:  # (not inside an element gone already)
            tag.decompose()


def _furniture(tag: Any) -> bool:
    """Whether an element is page furniture or a drawing: by its tag, ARIA role or documentation generator's class."""
    marked = tag.get("role") in _FURNITURE_ROLES or _FURNITURE_CLASSES.intersection(tag.get("class") or ())
    return tag.name in _FURNITURE_TAGS or tag.name in _DRAWING_TAGS or bool(marked)


def _trigrams(text: str) -> list[tuple[str, ...]]:
    words = _WORD.findall(text.casefold())
    return [tuple(words[i : i + 3]) for i in range(len(words) - 2)]


def _extracted_trigrams(html: str) -> set[tuple[str, ...]]:
    """The word trigrams of the text trafilatura extracts as the page's content; empty where it finds none or fails."""
    try:
        import trafilatura  # heavy (about 0.3 s): loaded only when an HTML file is read

        text = trafilatura.extract(
            html,
            output_format="txt",
            include_tables=True,
            include_comments=False,
            include_images=False,
            include_links=False,
            deduplicate=False,
            favor_recall=True,
        )
    except Exception as exc:  # an extractor's failure must not lose the page: the whole page is read instead
        log.debug("main-content extraction failed (%s: %s); the whole page is read", type(exc).__name__, exc)
        return set()
    return set(_trigrams(text or ""))


def _keep_main_content(soup: Any, kept: set[tuple[str, ...]]) -> None:
    """Reduce the page to its main content: the smallest element holding nearly all the extracted words.

    Each text's trigrams the extractor kept count for every element above it.
    """
    from bs4.element import NavigableString

    hits: dict[int, int] = {}  # per element (by id): its text's trigrams the extractor kept
    grams: dict[int, int] = {}  # per element: its text's trigrams
    for string in soup.find_all(string=True):
        if type(string) is not NavigableString:  # comments, doctype
            continue
        own = _trigrams(str(string))
        if not own:
            continue
        hit = sum(g in kept for g in own)
        for parent in string.parents:
            hits[id(parent)] = hits.get(id(parent), 0) + hit
            grams[id(parent)] = grams.get(id(parent), 0) + len(own)
    total = hits.get(id(soup), 0)
    if not total:  # none of the extracted words are in the page's text: read the whole page
        return
    main = soup
    while True:
        child = next(
            (c for c in main.find_all(True, recursive=False) if hits.get(id(c), 0) >= MAIN_SHARE * total), None
        )
        if child is None:
            break
        main = child
    listing = main.find_parents(["dl", "ul", "ol", "table"])
    if listing:  # content inside a list or table (a definition without its term): the element around the list is
        main = listing[-1].parent
    if main is soup or grams.get(id(main), 0) < MAIN_TEXT_SHARE * grams.get(id(soup), 0):
        return  # (the extractor kept a part of the content only: the whole page is read rather than lose the rest)
    _reduce_to(soup, main)


def _structured_text(soup: Any) -> str:
    """A page's elements as text: `#` headings, pipe tables, fenced code, definition terms as headings, paragraphs."""
    for pre in soup("pre"):
        pre.replace_with(f"\n\n```\n{pre.get_text().strip(chr(10))}\n```\n\n")
    for table in soup("table"):
        rows = [
            [" ".join(cell.get_text(" ").split()).replace("|", "/") for cell in tr(["th", "td"])] for tr in table("tr")
        ]
        rows = [r for r in rows if any(r)]
        if not rows:
            table.decompose()
            continue
        width = max(len(r) for r in rows)
        lines = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
        lines.insert(1, "|" + "---|" * width)
        table.replace_with("\n\n" + "\n".join(lines) + "\n\n")
    above: dict[int, int] = {}  # per term (by id): the level of the heading before it (0: none), in one pass
    level = 0
    for tag in soup.find_all([*_HEADING_TAGS, "dt"]):
        if tag.name == "dt":
            above[id(tag)] = level
        else:
            level = int(tag.name[1])
    for dl in soup("dl"):  # a definition list's terms head their definitions (options, glossary, FAQ, API entries)
        run: list[Any] = []  # consecutive terms of one definition make one heading
        for child in list(dl.find_all(["dt", "dd"], recursive=False)):
            if child.name == "dt":
                run.append(child)
                continue
            _term_heading(run, above)
            run = []
        _term_heading(run, above)
    for level in range(1, 7):
        for heading in soup(f"h{level}"):
            text = " ".join(heading.get_text(" ").split()).rstrip("¶#").strip()
            heading.replace_with(f"\n\n{'#' * level} {text}\n\n" if text else "")
    for tag in soup(_BLOCK_TAGS):
        tag.insert_before("\n\n" if tag.name not in ("li", "dt", "br", "tr") else "\n")
        if tag.name == "li":
            _opening_block(tag).insert(0, "* ")
        tag.insert_after("\n\n" if tag.name != "br" else "\n")
    return str(soup.get_text(""))


def _opening_block(item: Any) -> Any:
    """Where a list item's bullet goes: into the paragraph its words open with (`<li><p>...`).

    The bullet then stands on the line of the item's first words, not on a line of its own before them.
    """
    while True:
        first = next((c for c in item.contents if not isinstance(c, str) or c.strip()), None)
        if first is None or isinstance(first, str) or first.name not in ("p", "div"):
            return item
        item = first


def _term_heading(terms: list[Any], above: dict[int, int]) -> None:
    """Definition-list terms (`dt`) as one Markdown heading, a level below the heading above them.

    A list within a definition (an API entry's parameters, a class's methods) goes a level below that definition's
    terms; `above` gives the level of the heading before each term. An API signature (Sphinx's `dt.sig`) is read
    as written, its parameters shortened where they would fill the heading every chunk of the entry opens with.
    """
    if not terms:
        return
    text = ", ".join(t for t in (_term_text(d) for d in terms) if t).removesuffix(":").rstrip()  # "Parameters:"
    outer = terms[0].parent.find_parent("dl", attrs={_LEVEL: True})
    if outer is not None:  # a definition list within a definition: a level below that definition's terms
        level = min(int(outer[_LEVEL]) + 1, 6)
    else:
        heading = above.get(id(terms[0]), 0)  # the heading before the term (`above`), 0 where none is
        level = min(heading + 1, 6) if heading else 2
    terms[0].parent[_LEVEL] = str(level)
    for extra in terms[1:]:
        extra.decompose()
    terms[0].replace_with(f"\n\n{'#' * level} {text}\n\n" if text else "")


def _term_text(term: Any) -> str:
    """A term's words; an API signature as written (Sphinx spells its own spaces), a long parameter list `(...)`."""
    signature = "sig" in (term.get("class") or [])
    text = " ".join(term.get_text("" if signature else " ").split()).rstrip("¶#").strip()
    if signature:
        name, paren, rest = text.partition("(")
        if paren and len(rest) > SIGNATURE_PARAMETERS:
            text = f"{name}(...){rest[rest.rfind(')') + 1 :]}"
    return text


def _pdf(path: Path) -> str:
    from pypdf import PdfReader  # heavy (about 0.25 s): loaded only when a PDF is read

    reader = PdfReader(str(path))
    return "\n\n".join(page.extract_text() or "" for page in reader.pages)


def _beir_document(path: Path, row: Any) -> SourceDocument | None:
    """One BEIR corpus row ({_id, title, text}) as a document; None when it is not one."""
    try:
        doc_id = str(row["_id"])
    except (KeyError, TypeError):
        return None
    title = str(row.get("title") or "")
    text = str(row.get("text") or "")
    return SourceDocument(f"{path.name}#{doc_id}", title, f"{title}\n\n{text}" if title else text)


def _beir(path: Path) -> Iterator[SourceDocument]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                doc = _beir_document(path, json.loads(line))
            except ValueError:
                doc = None
            if doc is None:
                log.warning("%s:%d is not a BEIR corpus line ({_id, title, text}); skipped", path, n)
                continue
            yield doc


def _parquet(path: Path) -> Iterator[SourceDocument]:
    """A BEIR corpus stored as Parquet: columns `_id`, `text` and optionally `title`."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install 'fastcrag[ray]')") from None
    columns = [c for c in ("_id", "title", "text") if c in pq.read_schema(path).names]
    if "_id" not in columns or "text" not in columns:
        raise ValueError(f"{path}: a Parquet corpus needs the columns _id and text (and optionally title)")
    for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        for row in batch.to_pylist():
            doc = _beir_document(path, row)
            if doc is not None:
                yield doc


def iter_files(paths: list[Path]) -> Iterator[Path]:
    """Every supported file under the given files and folders, in a stable order."""
    for path in paths:
        if path.is_dir():
            yield from (
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and _suffix(p) in SUFFIXES and not _source_copy(p, path)
            )
        elif path.is_file():
            if _suffix(path) in SUFFIXES:
                yield path
            else:
                log.warning("%s: unsupported file type; supported: %s", path, ", ".join(sorted(SUFFIXES)))
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")


def _source_copy(path: Path, root: Path) -> bool:
    """Whether `path` is a documentation build's copy of a page's source whose built page is under `root` too.

    Sphinx keeps the text each HTML page was built from under `_sources/` (`_sources/patterns/caching.rst.txt` beside
    `patterns/caching.html`): the same page again, with its markup. The built page is indexed, once.
    """
    parts = path.relative_to(root).parts
    if "_sources" not in parts[:-1]:
        return False
    at = parts.index("_sources")
    name = parts[-1].removesuffix(".txt")
    if Path(name).suffix.lower() in TEXT_SUFFIXES:
        name = Path(name).stem
    return root.joinpath(*parts[:at], *parts[at + 1 : -1], f"{name}.html").is_file()


def read_file(path: Path) -> Iterator[SourceDocument]:
    """The cleaned documents of one supported file: a corpus's rows, else the file as one document.

    An unreadable or empty file is skipped with a warning; a corpus without the BEIR fields is a `ValueError`.
    """
    suffix = _suffix(path)
    if suffix in CORPUS_SUFFIXES:
        for doc in _parquet(path) if suffix == ".parquet" else _beir(path):
            if doc.text.strip():
                yield SourceDocument(doc.source, doc.title, clean_text(doc.text))
        return
    try:
        text = _html(path) if suffix in HTML_SUFFIXES else _pdf(path) if suffix == ".pdf" else _read_text(path)
    except Exception as exc:  # a damaged file must not stop the whole build
        log.warning("%s could not be read (%s: %s); skipped", path, type(exc).__name__, exc)
        return
    text = clean_text(text)
    if not text.strip():
        log.warning("%s is empty; skipped", path)
        return
    yield SourceDocument(str(path.resolve()), path.stem, text)


def load_documents(paths: list[Path]) -> Iterator[SourceDocument]:
    """Read documents from files and folders; unreadable or empty files are skipped with a warning."""
    for path in iter_files(paths):
        yield from read_file(path)


def python_reference() -> Iterator[SourceDocument]:
    """Python's own language reference, which ships with every Python as `pydoc_data.topics`."""
    from pydoc_data.topics import topics  # a megabyte of text, read only to build the default index

    for name in sorted(topics):
        text = clean_text(topics[name])
        if text.strip():
            yield SourceDocument(f"pydoc:{name}", name, text)
