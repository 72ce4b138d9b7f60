"""Boilerplate removal on documentation HTML: the loader against hand-written furniture rules and libraries.

    python -m lab.scripts.boilerplate_trial DIR [DIR...] [--pages N] [--methods rules,default,...]

Label-free measures, per corpus (a folder of HTML pages) and per method:

* `furn%`: share of extracted lines (whitespace-normalised, 3 words or more) that occur on 20% of the corpus's pages or
  more (at least 2), counted on the whole pages' text: site-wide repeated lines are navigation, banners, footers.
* `first%`: share of pages whose first 40 extracted words hold such a repeated line.
* `nav%`: share of pages with a line of the page's own navigation (two of next, previous, up, home).
* `words`: words extracted per page relative to the hand-written rules; `h`, `tab`, `code`: headings, tables and code
  blocks kept per page; `empty`: pages that came out empty.
* `gold`: for the folders tests/data/docs_devset_*.jsonl name by their name (git, flask), the share of the questions'
  `sentence` found in the extracted text of its page (case-folded substring, or 90% of its words in order).
* `pg/s`: pages read per second.

The corpora measured (Debian 12 packages, `apt-get download PKG && dpkg-deb -x PKG_*.deb OUT`, then the folder
named): Flask, Git and PostgreSQL as `scripts/fetch_docs_corpus.sh --corpus flask|git|postgresql DIR` fetches them;
`diffutils-doc` 1:3.8-4 (Texinfo 6: `usr/share/doc/diffutils`), `mkdocs-doc` 1.4.2+dfsg-2
(`usr/share/doc/mkdocs/html`), `python-markdown-doc` 3.4.1-2+deb12u1 (`usr/share/doc/python-markdown-doc/docs`),
`doxygen-doc` 1.9.4-4 (`usr/share/doc/doxygen/html`), `postfix-doc` 3.7.11-0+deb12u1 (`usr/share/doc/postfix/html`),
`lua5.2-doc` 5.2.4-3 (`usr/share/doc/lua5.2`); never the held-out corpora (Apache, Typer, Eigen, libssh).

Methods: `rules`, the hand-written furniture rules the loader had before it took a library (tags, ARIA roles, and
DocBook's, Texinfo's and Javadoc's navigation classes); `trafilatura`, `readability`, `justext` as they come (their
own text; trafilatura's Markdown); `readab+struct`, readability's main-content HTML through the loader's structure
conversion; `default`, the loader as it ships; `loader`, the loader with `FASTRAG_HTML_MAIN_CONTENT` (trafilatura
picks the main content, the loader converts it). `--methods` measures some of them (`rules` always: words are counted
against it).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastcrag.retrieval import loaders
from fastcrag.retrieval.text import clean_text

DEVSETS = Path(__file__).resolve().parents[2] / "tests" / "data"
REPEATED_SHARE = 0.2
FIRST_WORDS = 40
_REDIRECT = re.compile(r"http-equiv=[\"']?refresh", re.I)
_OLD_CLASSES = frozenset({"navheader", "navfooter", "nav-panel", "topNav", "subNav", "bottomNav"})


def _soup(html: str) -> Any:
    from bs4 import BeautifulSoup

    return BeautifulSoup(html, "lxml")


def rules(html: str) -> str:
    """The loader's hand-written furniture rules before this trial: tags, ARIA roles, generators' classes."""
    soup = _soup(html)

    def furniture(tag: Any) -> bool:
        return (
            tag.name in loaders._FURNITURE_TAGS
            or tag.get("role") in loaders._FURNITURE_ROLES
            or bool(_OLD_CLASSES.intersection(tag.get("class") or ()))
        )

    loaders._drop(soup, furniture)
    return loaders._structured_text(soup)


def whole(html: str) -> str:
    """The whole page's visible text (scripts and styles aside), for the repeated lines."""
    soup = _soup(html)
    loaders._drop(soup, lambda t: t.name in ("head", "script", "style", "noscript", "template"))
    return loaders._structured_text(soup)


def trafilatura_md(html: str) -> str:
    """The trafilatura library's own Markdown."""
    import trafilatura

    return (
        trafilatura.extract(
            html,
            output_format="markdown",
            include_tables=True,
            include_formatting=True,
            favor_recall=True,
            deduplicate=False,
        )
        or ""
    )


def readability_text(html: str) -> str:
    """The readability library's main-content element as text."""
    from readability import Document

    return str(_soup(Document(html).summary(html_partial=True)).get_text("\n"))


def readability_struct(html: str) -> str:
    """The readability library's main-content element through the loader's structure conversion."""
    from readability import Document

    return loaders._structured_text(_soup(Document(html).summary(html_partial=True)))


def justext_text(html: str) -> str:
    """The jusText library's paragraphs that are not boilerplate."""
    import justext

    paragraphs = justext.justext(html.encode("utf-8"), justext.get_stoplist("English"))
    return "\n\n".join(p.text for p in paragraphs if not p.is_boilerplate)


def default(html: str) -> str:
    """The loader as it ships: its furniture rules, paging panels and drawings, no main-content extraction."""
    return loaders.html_text(html)


def loader(html: str) -> str:
    """The loader with its main-content extraction on (`FASTRAG_HTML_MAIN_CONTENT`)."""
    return loaders.html_text(html, main_content=True)


METHODS: dict[str, Callable[[str], str]] = {
    "rules": rules,
    "trafilatura": trafilatura_md,
    "readability": readability_text,
    "justext": justext_text,
    "readab+struct": readability_struct,
    "default": default,
    "loader": loader,
}


def _norm(line: str) -> str:
    return " ".join(re.sub(r"^[#*>\s]+|[|`]", " ", line).split()).casefold()


def _lines(text: str) -> list[str]:
    return [n for n in (_norm(x) for x in text.splitlines()) if len(n.split()) >= 3]


_NAV = re.compile(r"\b(next|previous|prev|up|home)\b")


def _nav_line(line: str) -> bool:
    """A 'Next: / Previous: / Up:' line of a page's own navigation."""
    return len(line.split()) <= 30 and len(set(_NAV.findall(line))) >= 2


def _gold(folder: Path) -> list[dict[str, Any]]:
    path = DEVSETS / f"docs_devset_{folder.name}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _found(sentence: str, text: str) -> bool:
    sentence, text = " ".join(sentence.split()).casefold(), " ".join(text.split()).casefold()
    if sentence in text:
        return True
    want, have = re.findall(r"\w+", sentence), iter(re.findall(r"\w+", text))
    got = sum(1 for w in want if any(w == h for h in have))  # greedy, in order
    return got >= 0.9 * len(want)


def trial(folder: Path, pages: int, methods: list[str]) -> list[tuple[str, ...]]:
    """The table's rows for one corpus folder, one per method (`rules` first: words are counted against it)."""
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".html", ".htm") and "_sources" not in p.parts)
    files = [f for f in files if not _REDIRECT.search(loaders._read_text(f))]  # a moved page's stub is no page
    gold = _gold(folder)
    wanted = {s for g in gold for s in g["sources"]}
    if len(files) > pages:  # an even sample, plus every page a question names
        step = len(files) / pages
        sample = {files[int(i * step)] for i in range(pages)}
        files = sorted(sample | {f for f in files if str(f.relative_to(folder)) in wanted})
    htmls = {f: loaders._read_text(f) for f in files}
    seen: Counter[str] = Counter()
    for html in htmls.values():
        seen.update(set(_lines(whole(html))))
    repeated = {line for line, n in seen.items() if n >= max(2, REPEATED_SHARE * len(files))}
    rows = []
    base_words = 0
    for name in dict.fromkeys(["rules", *methods]):
        method = METHODS[name]
        texts: dict[Path, str] = {}
        start = time.perf_counter()
        for f, html in htmls.items():
            try:
                texts[f] = clean_text(method(html))
            except Exception:  # a library that fails on a page gives nothing for it
                texts[f] = ""
        rate = len(files) / (time.perf_counter() - start)
        lines = [line for t in texts.values() for line in _lines(t)]
        nav = sum(any(_nav_line(x) for x in _lines(t)) for t in texts.values())
        first = 0
        for t in texts.values():
            head, count = [], 0
            for line in (_norm(x) for x in t.splitlines()):
                if count >= FIRST_WORDS:
                    break
                head.append(line)
                count += len(line.split())
            first += any(line in repeated for line in head)
        words = sum(len(t.split()) for t in texts.values())
        base_words = base_words or words
        heads = sum(1 for t in texts.values() for x in t.splitlines() if x.startswith("#"))
        tables = sum(t.count("\n|---") for t in texts.values())
        code = sum(t.count("```") // 2 for t in texts.values())
        empty = sum(1 for t in texts.values() if not t.strip())
        by_page = {str(f.relative_to(folder)): t for f, t in texts.items()}
        found = [_found(g["sentence"], by_page.get(g["sources"][0], "")) for g in gold]
        n = len(files)
        rows.append(
            (
                folder.name,
                name,
                str(n),
                f"{100 * sum(x in repeated for x in lines) / max(1, len(lines)):.1f}",
                f"{100 * first / n:.0f}",
                f"{100 * nav / n:.0f}",
                f"{words / max(1, base_words):.2f}",
                f"{heads / n:.1f}",
                f"{tables / n:.2f}",
                f"{code / n:.1f}",
                str(empty),
                f"{sum(found)}/{len(found)}" if gold else "-",
                f"{rate:.0f}",
            )
        )
    return rows


def main() -> None:
    """Print the table for the folders given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--pages", type=int, default=250, help="pages sampled evenly from a larger folder")
    parser.add_argument("--methods", default=",".join(METHODS), help="the methods to measure, comma-separated")
    args = parser.parse_args()
    header = (
        "corpus",
        "method",
        "pages",
        "furn%",
        "first%",
        "nav%",
        "words",
        "h",
        "tab",
        "code",
        "empty",
        "gold",
        "pg/s",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for folder in args.folders:
        for row in trial(folder, args.pages, args.methods.split(",")):
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
