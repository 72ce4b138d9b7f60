"""Index-time structure: sections, titles, table rows, code blocks, and chunks that keep them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastcrag.graph.nodes.retrieve import collapse_copies
from fastcrag.graph.state import Candidate
from fastcrag.retrieval.blocks import CODE, PROSE, TABLE, chunk_sections, sections
from fastcrag.retrieval.loaders import load_documents
from fastcrag.retrieval.sections import parts
from fastcrag.retrieval.structure import fragment
from fastcrag.retrieval.text import TITLE_JOINER, body_sentences, is_heading, sectioned, split_title

RST = """The "frob" statement
********************

The "frob" statement turns widgets into gadgets. It is fast.

   frob_stmt ::= "frob" expression

Note:

  Widgets must be dry.

Options
=======

+------------+-------------------+-------+
| Option     | Meaning           | Notes |
|============|===================|=======|
| "-v"       | verbose output,   | (1)   |
|            | twice as long     |       |
+------------+-------------------+-------+
| "-q"       | quiet             |       |
+------------+-------------------+-------+

It is equivalent to:

   if widget:
       gadget()

object.__frob__(self)

   Called to frob an object. It returns nothing.
"""


def _kinds(text: str) -> list[tuple[str, list[str]]]:
    return [(s.title, [b.kind for b in s.blocks]) for s in sections(text)]


def test_sections_read_headings_tables_grammar_notes_code_and_entries() -> None:
    parts = sections(RST)
    assert [s.title for s in parts] == [
        'The "frob" statement',
        f'The "frob" statement{TITLE_JOINER}Options',
        f'The "frob" statement{TITLE_JOINER}Options{TITLE_JOINER}object.__frob__(self)',
    ]
    first, options, entry = parts
    assert [b.kind for b in first.blocks] == [PROSE, CODE, PROSE]
    assert first.blocks[0].text.startswith('The "frob" statement turns')  # the heading is not glued to it
    assert first.blocks[1].text == '```\nfrob_stmt ::= "frob" expression\n```'
    assert first.blocks[2].text == "Note: Widgets must be dry."  # the label and its text are one block
    rows = [b.text for b in options.blocks if b.kind == TABLE]
    assert rows == ['Option: "-v"; Meaning: verbose output, twice as long; Notes: (1)', 'Option: "-q"; Meaning: quiet']
    assert options.blocks[-1] == options.blocks[-1].__class__(CODE, "```\nif widget:\n    gadget()\n```")
    assert [b.text for b in entry.blocks] == ["Called to frob an object. It returns nothing."]


def test_markdown_headings_pipe_and_simple_tables_and_fences() -> None:
    text = (
        "# Tool\n\nThe tool cuts.\n\n## Flags\n\n| Flag | Use |\n|---|---|\n| -a | all |\n\n"
        "```\nrun --all\n\nrun -a\n```\n\n"
        "=====  =======\nName   Value\n=====  =======\nx      1\ny      2\n=====  =======\n"
    )
    parts = sections(text)
    assert [s.title for s in parts] == ["Tool", f"Tool{TITLE_JOINER}Flags"]
    flags = parts[1].blocks
    assert [(b.kind, b.text) for b in flags] == [
        (TABLE, "Flag: -a; Use: all"),
        (CODE, "```\nrun --all\n\nrun -a\n```"),
        (TABLE, "Name: x; Value: 1"),
        (TABLE, "Name: y; Value: 2"),
    ]


def test_prose_without_structure_chunks_as_before() -> None:
    """Running text (SQuAD paragraphs, abstracts) gets no title and is packed sentence by sentence as ever."""
    text = " ".join(f"Sentence number {i} says a thing about widgets." for i in range(40))
    chunks = chunk_sections(sections(text), 64, 12)
    assert len(chunks) > 2 and all(title == "" for title, _ in chunks)
    assert all(split_title(body) == ("", body) for _, body in chunks)
    assert chunks[1][1].startswith("Sentence number")  # overlap carries whole sentences


def test_chunks_keep_titles_rows_apart_and_code_whole() -> None:
    rows = "\n".join(f"| op{i} | does thing {i} to the widget |" for i in range(30))
    text = (
        "Widgets\n=======\n\nWidgets are small. " + "They are useful. " * 20 + "\n\n| Op | Effect |\n|---|---|\n" + rows
    )
    text += "\n\nMore prose follows the table.\n\n```\ndef f():\n    return 1\n```\n"
    chunks = chunk_sections(sections(text), 64, 12)
    titles = [split_title(body)[0] for _, body in chunks]
    assert titles[0] == "Widgets" and all(t == "Widgets (continued)" for t in titles[1:])
    assert parts(chunks[0][1])[0].opens and not parts(chunks[1][1])[0].opens
    for _, body in chunks:
        kinds = {fragment(s) == "table" for s in body_sentences(body)}
        assert len(kinds) == 1, body  # a chunk holds table rows or prose, never both
    assert any("```\ndef f():\n    return 1\n```" in body for _, body in chunks)
    assert all(body.count("```") % 2 == 0 for _, body in chunks)


def test_a_heading_never_makes_a_chunk_alone() -> None:
    code = "\n".join(f"    value_{i} = compute_something({i}, {i + 1}, {i + 2}, {i + 3})" for i in range(4))
    text = f"Frob widgets\n============\n\n```\n{code}\n```\n\nFrob turns widgets into gadgets.\n"
    chunks = chunk_sections(sections(text), 16, 4)  # a code line of 16 tokens fills a chunk: the heading joins it
    assert chunks[0][1].startswith("Frob widgets\n\n```\nvalue_0 = ")
    assert all(split_title(body)[1].strip() for _, body in chunks)  # every chunk has a body under its title


def test_a_heading_never_ends_a_chunk_it_opens_the_next() -> None:
    text = "Alpha\n=====\n\n" + " ".join(f"Alpha says thing number {i} about alpha." for i in range(4))
    text += "\n\nBeta\n----\n\nBeta opens with a sentence long enough that it cannot share the chunk with alpha's."
    chunks = [body for _, body in chunk_sections(sections(text), 48, 12)]
    assert len(chunks) == 2 and chunks[0].endswith("Alpha says thing number 3 about alpha.")
    # Beta's heading moves on with its first sentence: the next chunk opens the section (its lead is found there)
    assert split_title(chunks[1]) == (
        f"Alpha{TITLE_JOINER}Beta",
        "Beta opens with a sentence long enough that it cannot share the chunk with alpha's.",
    )
    assert parts(chunks[1])[0].opens


def test_a_long_code_block_is_cut_between_lines_into_fenced_pieces() -> None:
    code = "\n".join(f"value_{i} = compute_something({i}, other_argument)" for i in range(60))
    chunks = chunk_sections(sections(f"```\n{code}\n```\n"), 64, 12)
    assert len(chunks) > 2
    pieces = [body for _, body in chunks]
    assert all(p.startswith("```\n") and p.endswith("\n```") for p in pieces)
    assert "\n".join(p[4:-4] for p in pieces) == code


def test_html_keeps_headings_tables_code_and_lists(tmp_path: Path) -> None:
    html = (
        '<html><head><title>T</title></head><body><nav>menu</nav><div role="navigation"><ul><li>index</li></ul></div>'
        "<h1>frob(1)</h1><h2>NAME</h2>"
        "<p>frob - turn <code>widgets</code> into gadgets.</p><table><tr><th>Option</th><th>Meaning</th></tr>"
        "<tr><td>-v</td><td>verbose</td></tr></table><pre>frob -v x\n  done</pre><ul><li>one</li><li>two</li>"
        "<li><p><strong>three</strong> (<em>str</em>) \u2013 the item's words in a paragraph</p><p>More.</p></li></ul>"
        "</body></html>"
    )
    (tmp_path / "frob.html").write_text(html)
    (doc,) = load_documents([tmp_path])
    parts = sections(doc.text)
    assert [s.title for s in parts] == [f"frob(1){TITLE_JOINER}NAME"]
    assert [(b.kind, b.text) for b in parts[0].blocks] == [
        (PROSE, "frob - turn widgets into gadgets."),
        (TABLE, "Option: -v; Meaning: verbose"),
        (CODE, "```\nfrob -v x\n  done\n```"),
        (PROSE, "* one"),
        (PROSE, "* two"),
        (PROSE, "* three (str) \u2013 the item's words in a paragraph"),  # the bullet on the line of its words
        (PROSE, "More."),
    ]
    assert "menu" not in doc.text and "T" not in doc.text.split() and "index" not in doc.text  # furniture, by role too


def test_a_documentation_builds_copy_of_a_pages_source_is_not_indexed_again(tmp_path: Path) -> None:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "cache.html").write_text("<h1>Caching</h1><p>Caching keeps results.</p>")
    (tmp_path / "_sources" / "guide").mkdir(parents=True)
    (tmp_path / "_sources" / "guide" / "cache.rst.txt").write_text("Caching\n=======\n\nCaching keeps results.\n")
    (tmp_path / "_sources" / "notes.txt").write_text("Notes built into no page are read.\n")
    assert [doc.source.rpartition("/")[2] for doc in load_documents([tmp_path])] == ["notes.txt", "cache.html"]
    # read on its own, the copy is what was asked for
    assert len(list(load_documents([tmp_path / "_sources"]))) == 2


def test_html_definition_terms_head_their_definitions(tmp_path: Path) -> None:
    html = (
        "<h1>frob(1)</h1><h2>OPTIONS</h2><p>Options:</p><dl><dt>-v</dt><dt>--verbose</dt><dd><p>Print more.</p></dd>"
        "<dt>-q</dt><dd>Print less. Rarely useful.</dd></dl><h2>FAQ</h2><dl><dt>Why is frob slow?</dt>"
        "<dd>It frobs every widget.</dd></dl>"
    )
    (tmp_path / "frob.html").write_text(html)
    (doc,) = load_documents([tmp_path])
    got = [(s.title.split(TITLE_JOINER), [b.text for b in s.blocks]) for s in sections(doc.text)]
    assert got == [
        (["frob(1)", "OPTIONS"], ["Options:"]),
        (["frob(1)", "OPTIONS", "-v, --verbose"], ["Print more."]),  # the terms of one definition: one heading
        (["frob(1)", "OPTIONS", "-q"], ["Print less. Rarely useful."]),
        (["frob(1)", "FAQ", "Why is frob slow?"], ["It frobs every widget."]),
    ]


def test_an_api_entrys_parameters_and_methods_are_sections_within_it(tmp_path: Path) -> None:
    params = ", ".join(f'<em class="sig-param">p{i}=None</em>' for i in range(8))
    html = (
        '<h1>Frob</h1><h2>API</h2><dl class="py class"><dt class="sig sig-object py"><em class="property">'
        '<span class="pre">class</span><span class="w"> </span></em><span class="pre">frob.</span>'
        f'<span class="pre">Widget</span><span class="sig-paren">(</span>{params}<span class="sig-paren">)</span>'
        '<a class="headerlink">\u00b6</a></dt><dd><p>Represents a widget.</p><dl class="field-list simple">'
        '<dt class="field-odd">Parameters<span class="colon">:</span></dt><dd class="field-odd"><ul class="simple">'
        "<li><p><strong>p0</strong> (<em>str</em>) \u2013 The first.</p></li></ul></dd></dl>"
        '<dl class="py method"><dt class="sig sig-object py"><span class="pre">turn</span>'
        '<span class="sig-paren">(</span><em class="sig-param">x</em><span class="sig-paren">)</span></dt>'
        "<dd><p>Turn it.</p></dd></dl></dd></dl>"
    )
    (tmp_path / "frob.html").write_text(html)
    (doc,) = load_documents([tmp_path])
    got = [(s.title.split(TITLE_JOINER), [b.text for b in s.blocks]) for s in sections(doc.text)]
    # the signature as written, its long parameter list shortened; what the entry holds is a level below it
    assert got == [
        (["Frob", "API", "class frob.Widget(...)"], ["Represents a widget."]),
        (["Frob", "API", "class frob.Widget(...)", "Parameters"], ["* p0 (str) \u2013 The first."]),
        (["Frob", "API", "class frob.Widget(...)", "turn(x)"], ["Turn it."]),
    ]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('Operation: "s[i] = x"; Result: item i of s is replaced by x', "table"),
        ("Option: -v; Meaning: verbose output; Notes: (1)", "table"),
        ("The value of the widget is: three; the other one is: four.", None),
        ("Widgets are small; gadgets are large: both are useful.", None),
    ],
)
def test_a_table_row_is_a_fragment(text: str, kind: str | None) -> None:
    assert fragment(text) == kind


def test_a_title_line_is_not_a_sentence_and_a_sentence_is_not_a_title() -> None:
    assert body_sentences(f"Widgets{TITLE_JOINER}Flags\n\nFlags change things. They are optional.") == [
        "Flags change things.",
        "They are optional.",
    ]
    assert body_sentences("Flags change things.\n\nThey are optional.")[0] == "Flags change things."
    inside = f"Widgets\n\nWidgets are small.\n\nWidgets{TITLE_JOINER}Flags\n\nFlags change things."
    assert body_sentences(inside) == ["Widgets are small.", "Flags change things."]  # a heading inside a chunk
    assert split_title("```\ncode\n```\n\nProse.") == ("", "```\ncode\n```\n\nProse.")
    # each strip with its section: the chunk's (without the continued mark) until a heading inside it
    assert sectioned(inside.replace("Widgets\n", "Widgets (continued)\n", 1)) == [
        ("Widgets", "Widgets are small."),
        (f"Widgets{TITLE_JOINER}Flags", "Flags change things."),
    ]
    assert sectioned("Flags change things.") == [("", "Flags change things.")]  # an untitled chunk
    # a heading path with a numbered heading inside a chunk is one heading, not a sentence "Chapter 11." and a rest
    glossary = (
        f"Chapter 11. Glossary{TITLE_JOINER}clone\n\nA copy.\n\nChapter 11. Glossary{TITLE_JOINER}commit\n\nA snapshot."
    )
    assert sectioned(glossary) == [
        (f"Chapter 11. Glossary{TITLE_JOINER}clone", "A copy."),
        (f"Chapter 11. Glossary{TITLE_JOINER}commit", "A snapshot."),
    ]
    # a footnote's mark after a full stop opens no sentence, and alone is none
    assert body_sentences("Classes\n\nIts namespace is saved. [5] A class is made. [6]\n\n[1] + [2] is a list.") == [
        "Its namespace is saved.",
        "A class is made.",
        "[1] + [2] is a list.",
    ]
    # a list's bullet an HTML page set on a line of its own is no sentence
    assert body_sentences("Commands\n\nThere are two.\n\n*\n\nfrob turns widgets.\n\n*") == [
        "There are two.",
        "frob turns widgets.",
    ]


def test_a_question_can_be_a_heading() -> None:
    faq = "# FAQ\n\n## How do I frob a widget?\n\nRun frob on it. It takes a second.\n"
    [(title, text)] = chunk_sections(sections(faq))
    assert title == f"FAQ{TITLE_JOINER}How do I frob a widget?"
    assert split_title(text) == (title, "Run frob on it. It takes a second.")
    assert is_heading(f"FAQ{TITLE_JOINER}Why?") and not is_heading(f"FAQ{TITLE_JOINER}It runs.")
    assert split_title("Is it a question?\n\nYes.") == ("Is it a question?", "Yes.")
    assert split_title("It is a sentence.\n\nYes.") == ("", "It is a sentence.\n\nYes.")


def test_copies_take_one_candidate_slot_and_name_every_source() -> None:
    def cand(cid: str, source: str, text: str) -> Candidate:
        return {"chunk_id": cid, "source": source, "text": text, "score": 0.0}

    out = collapse_copies(
        [
            cand("a", "p:one", f"Seq{TITLE_JOINER}Ops\n\nThe same  text."),
            cand("b", "p:two", f"Mutable{TITLE_JOINER}Ops\n\nthe same text."),
            cand("c", "p:three", "Other text."),
            cand("d", "p:two", f"Seq{TITLE_JOINER}Ops\n\nThe same text."),
        ]
    )
    assert [c["chunk_id"] for c in out] == ["a", "c"]
    assert out[0]["copies"] == ["p:two"] and "copies" not in out[1]


CLASS_ENTRY = """Mapping Types
*************

class frobdict(**kwargs)

   Return a new frob dictionary.

   get(key[, default])

      Return the value for *key* if *key* is in the dictionary, else
      *default*.

   classmethod fromkeys(iterable)

      Create a new frob dictionary with keys from *iterable*.

   Frob dictionaries compare equal if they have the same items.

See also: the widget types.
"""


def test_an_entry_nested_in_an_entry_is_a_section_of_its_own_until_its_description_ends() -> None:
    got = [(s.title.split(TITLE_JOINER), [b.text for b in s.blocks]) for s in sections(CLASS_ENTRY)]
    assert got == [
        (["Mapping Types", "class frobdict(**kwargs)"], ["Return a new frob dictionary."]),
        (
            ["Mapping Types", "class frobdict(**kwargs)", "get(key[, default])"],
            ["Return the value for *key* if *key* is in the dictionary, else *default*."],
        ),
        (
            ["Mapping Types", "class frobdict(**kwargs)", "classmethod fromkeys(iterable)"],
            ["Create a new frob dictionary with keys from *iterable*."],
        ),
        # the class's description goes on after its methods; the page's after the class
        (
            ["Mapping Types", "class frobdict(**kwargs)"],
            ["Frob dictionaries compare equal if they have the same items."],
        ),
        (["Mapping Types"], ["See also: the widget types."]),
    ]


def test_a_chunk_is_marked_continued_wherever_its_section_opened_before_it() -> None:
    text = "Alpha\n=====\n\n" + " ".join(f"Alpha says thing number {i} about alpha." for i in range(6))
    text += "\n\nBeta\n----\n\n" + " ".join(f"Beta says thing number {i} about beta." for i in range(9))
    chunks = chunk_sections(sections(text), 40, 12)
    beta = f"Alpha{TITLE_JOINER}Beta"
    opened = next(k for k, (_, body) in enumerate(chunks) if f"\n\n{beta}\n\n" in body)
    assert split_title(chunks[opened][1])[0].startswith("Alpha")  # Beta opens inside a chunk titled Alpha
    after = chunks[opened + 1][1]
    # the next chunk opens with Beta's sentences carried over: Beta continued there, it does not open there
    assert split_title(after)[0] == f"{beta} (continued)" and not parts(after)[0].opens
    assert split_title(after)[1].startswith("Beta says thing number 0 about beta.")
    assert chunks[opened][1].endswith("Beta says thing number 0 about beta.")
