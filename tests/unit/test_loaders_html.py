"""The HTML loader's main content: a boilerplate extractor picks it, the loader keeps its structure."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastcrag.retrieval.blocks import CODE, PROSE, TABLE, sections
from fastcrag.retrieval.loaders import html_text, load_documents
from fastcrag.retrieval.text import TITLE_JOINER

PROSE_A = (
    "The frob statement turns widgets into gadgets, one widget at a time, and leaves the widgets it cannot turn as "
    "they were, so that a second run finds them again and tries once more."
)
PROSE_B = (
    "A frob statement may name a table of widgets; each row is turned in the order the table gives, and a row that "
    "fails stops the statement with an error that names the row and the reason it failed."
)
BANNER = (
    '<div class="banner"><a href="index.html"><img src="logo.png" alt="Frob"></a>'
    '<div class="tagline">Small. Fast. Reliable. Choose any three.</div>'
    '<div class="menu"><a href="index.html">Home</a> <a href="menu.html">Menu</a> <a href="about.html">About</a> '
    '<a href="docs.html">Documentation</a> <a href="download.html">Download</a></div></div>'
)
ARTICLE = (
    '<div class="article"><h1>The FROB statement</h1>'
    '<svg width="400" height="60"><text x="5" y="20">FROB</text><text x="60" y="20">widget-name</text>'
    '<text x="160" y="20">INTO</text><text x="220" y="20">gadget-name</text></svg>'
    '<map name="diagram"><area shape="rect" coords="0,0,50,20" href="#widget" alt="widget">'
    '<a href="#widget">widget-name clause</a></map>'
    f"<p>{PROSE_A}</p><h2>Options</h2><p>{PROSE_B}</p>"
    "<table><tr><th>Option</th><th>Meaning</th></tr><tr><td>FAST</td><td>skip the checks</td></tr></table>"
    "<pre>FROB w1 INTO g1;\n  FROB w2 INTO g2;</pre>"
    "<dl><dt>QUIET</dt><dd><p>Print nothing while frobbing the widgets, even where a widget fails to turn.</p></dd>"
    "</dl>"
    "</div>"
)
FOOTER = (
    '<div class="footer">This page was last updated on 2026-01-01. Copyright the Frob authors, all rights kept.</div>'
)
NAV = '<nav><a href="a.html">Previous page</a> <a href="b.html">Next page</a></nav>'


def test_main_content_keeps_structure_and_drops_banner_navigation_and_diagrams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "frob.html").write_text(f"<html><body>{BANNER}{NAV}{ARTICLE}{FOOTER}</body></html>")
    (doc,) = load_documents([tmp_path])  # by default: the whole page less its furniture and drawings
    assert "Small. Fast." in doc.text and "last updated" in doc.text  # a banner and a footer no tag or role marks
    assert "Next page" not in doc.text and "widget-name" not in doc.text and PROSE_A in doc.text
    monkeypatch.setenv("FASTRAG_HTML_MAIN_CONTENT", "1")
    (doc,) = load_documents([tmp_path])
    for furniture in ("Small. Fast.", "Home", "Download", "Next page", "last updated", "widget-name", "INTO g"):
        assert furniture not in doc.text.replace("INTO g1", "").replace("INTO g2", ""), furniture
    got = [(s.title.split(TITLE_JOINER), [(b.kind, b.text) for b in s.blocks]) for s in sections(doc.text)]
    assert got == [
        (["The FROB statement"], [(PROSE, PROSE_A)]),  # the page's title, then its words, not the banner's
        (
            ["The FROB statement", "Options"],
            [
                (PROSE, PROSE_B),
                (TABLE, "Option: FAST; Meaning: skip the checks"),
                (CODE, "```\nFROB w1 INTO g1;\n  FROB w2 INTO g2;\n```"),
            ],
        ),
        (
            ["The FROB statement", "Options", "QUIET"],
            [(PROSE, "Print nothing while frobbing the widgets, even where a widget fails to turn.")],
        ),
    ]


def test_a_page_without_main_content_keeps_its_text() -> None:
    html = "<html><body><ul><li>alpha</li><li>beta gamma</li></ul><table><tr><td>x</td><td>y</td></tr></table></body>"
    text = html_text(html, main_content=True)
    assert all(w in text for w in ("alpha", "beta gamma", "| x | y |"))
    assert html_text("<html><body><p>Only this.</p></body></html>", main_content=True).strip() == "Only this."
    assert html_text("", main_content=True).strip() == ""  # nothing to read is no failure


def test_docbook_navigation_header_and_footer_are_dropped() -> None:
    nav = (
        '<div class="navheader"><table width="100%" summary="Navigation header"><tr><th colspan="5" align="center">'
        'FROB</th></tr><tr><td><a accesskey="p" href="sql-fetch.html" title="FETCH">Prev</a></td>'
        '<td><a accesskey="u" href="sql-commands.html" title="SQL Commands">Up</a></td><th>SQL Commands</th>'
        '<td><a accesskey="h" href="index.html" title="Frob Manual">Home</a></td>'
        '<td><a accesskey="n" href="sql-grant.html" title="GRANT">Next</a></td></tr></table><hr></div>'
    )
    footer = nav.replace("navheader", "navfooter").replace("Navigation header", "Navigation footer")
    body = f'<div class="refentry" id="SQL-FROB"><h2>FROB</h2><p>{PROSE_A}</p><p>{PROSE_B}</p></div>'
    for main_content in (False, True):  # by its class, or as no part of the main content
        text = html_text(f"<html><body>{nav}{body}{footer}</body></html>", main_content=main_content)
        assert "## FROB" in text and PROSE_B in " ".join(text.split())
        assert not any(w in text.split() for w in ("Prev", "Up", "Home", "Next"))


def test_the_main_landmark_is_read_where_a_page_marks_it() -> None:
    header = '<div id="docs-header"><h1>Frob 1.4 Documentation</h1><p>Release: 1.4.46 | Release Date: 2023</p></div>'
    toc = '<div id="docs-sidebar"><h3>Frob Core</h3><ul><li><a href="a.html">Widgets API</a></li></ul></div>'
    paging = (
        '<div id="docs-bottom-navigation">Previous: <a href="ddl.html">Customizing DDL</a> Next: '
        '<a href="types.html">The Type Hierarchy</a><div id="docs-copyright">&copy; Copyright 2007-2023.</div></div>'
    )
    body = f"<h2>The frob statement</h2><p>{PROSE_A}</p><p>{PROSE_B}</p>"
    text = html_text(f'<html><body>{header}{toc}<div role="main">{body}</div>{paging}</body></html>')
    words = " ".join(text.split())
    assert PROSE_A in words and PROSE_B in words and "## The frob statement" in text
    assert not any(w in words for w in ("Release", "Widgets API", "Customizing DDL", "Copyright"))
    assert "# Frob 1.4 Documentation" in text  # the page's title, where the main content has no h1 of its own
    own_title = html_text(f"<html><body>{header}<main><h1>Frob</h1>{body}</main>{paging}</body></html>")
    assert "Frob 1.4 Documentation" not in own_title and "# Frob" in own_title
    for whole in (  # two landmarks, or one holding less than half the page: the whole page is read
        f'<html><body>{toc}<div role="main">{body}</div><main><p>{PROSE_A}</p></main>{paging}</body></html>',
        f"<html><body><p>{PROSE_A}</p><p>{PROSE_B}</p><main><p>Only this.</p></main>{paging}</body></html>",
    ):
        assert "Customizing DDL" in html_text(whole)
