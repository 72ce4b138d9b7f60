"""What kind of text a sentence is: prose, or a documentation fragment (table, grammar, keyword list, note, code)."""

from __future__ import annotations

import keyword
import re

from fastcrag.retrieval.text import is_heading

FRAGMENT_KINDS = ("table", "grammar", "keywords", "note")
"""What an answer must not open with or consist of: a table, a grammar production, a keyword list, a note or
version line."""

_OPENING_CHARS = 300
"""How much of a text counts as its opening when its first sentence runs on (tables and grammar have no stops)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)(?<!etc\.)(?<!vs\.)\s+(?=[\w\"'(*])")
_GRID = re.compile(r"\+(?:[ \t]*[-=]*[ \t]*\+){2,}")  # `+----+----+`, or `+ + +` once runs of a mark are cleaned
_PIPE_ROW = re.compile(r"(?m)^[ \t]*\|.*\|")
_SIMPLE_RULE = re.compile(r"(?:={2,}|-{3,})(?:[ \t]+(?:={2,}|-{3,}))+")  # reST simple table: `===== =====`
_QUOTED_MARK = re.compile(r"\"[^\"\s]{1,3}\"|'[^'\s]{1,3}'")  # `"|"`, `'^'`: an operator named in prose
_NOTE = re.compile(
    r"^[\s*]*(?:(?:note|warning|caution|see also)[ \t]*(?::|\n|$)|changed in version\b|new in version\b|"
    r"added in version\b|deprecated since\b|deprecated in version\b|cpython implementation detail\b)",
    re.IGNORECASE,
)
_ROW = re.compile(r"^[^:;\s]+(?: [^:;\s]+){0,2}: [^;\n]*(?:; [^:;\s]+(?: [^:;\s]+){0,2}: [^;\n]*)+$")
"""A table row as the index writes it (`Header: cell; Header: cell`; `fastcrag.retrieval.blocks`)."""
_KEYWORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_KEYWORD_RUN = 6
"""Consecutive language keywords that make a keyword list, not prose (prose rarely strings six together)."""
_LABEL = re.compile(r"^[\s*]*(?:note|warning|caution)[ \t]*:\s*", re.IGNORECASE)
_CODE = re.compile(r"^\s*(?:>>>|\.\.\.\s|\$ |```)")

_PLAIN = re.compile(r"[a-z][a-z'-]*[,;:]?")
"""A lower-case prose word: grammar symbols carry underscores, quotes or brackets, or stand alone."""
_QUOTED = re.compile(r"[\"“][\w-]+[\"”]")
_PROSE_START = re.compile(r"[A-Z][a-z]+[,:]?|" + _QUOTED.pattern)
"""A word that can open a prose sentence after a grammar block: a capitalised word or a quoted name."""
_LEAD_WORDS = frozenset({"A", "An", "The", "This", "These", "In", "Each", "When", "If"})
"""Words that open a definition after a heading glued to it ("Function definitions A function definition ...")."""
_MAX_TITLE_WORDS = 5


def opening(text: str) -> str:
    """A text's opening: its first sentence, at most `_OPENING_CHARS` characters."""
    text = text.strip()
    return _SENTENCE_END.split(text, maxsplit=1)[0][:_OPENING_CHARS]


def fragment(text: str) -> str | None:
    """The kind of documentation fragment a text opens with or consists of, None when it opens with prose.

    Kinds: `table` (an ASCII grid, pipe rows, a reST simple table's rules), `grammar` (a production, `::=`),
    `keywords` (a run of the language's keywords), `note` (a note, warning, version or implementation-detail line).
    """
    head = opening(text)
    if not head:
        return None
    if _NOTE.match(head):
        return "note"
    if "::=" in head:
        return "grammar"
    bare = _QUOTED_MARK.sub(" ", head)
    grid = _GRID.search(bare) or _PIPE_ROW.search(bare) or bare.count("|") >= 3 or _SIMPLE_RULE.search(bare)
    if grid or _ROW.match(" ".join(text.split())):
        return "table"
    run = 0
    for word in re.findall(r"\S+", head):
        run = run + 1 if word.strip(",;:.") in _KEYWORDS else 0
        if run >= _KEYWORD_RUN:
            return "keywords"
    return None


def sentence_kind(sentence: str) -> str:
    """`prose`, a `FRAGMENT_KINDS` kind, or `code` (an interactive prompt or a shell line)."""
    if _CODE.match(sentence):
        return "code"
    return fragment(sentence) or "prose"


def _after_grammar(text: str) -> str:
    """The prose that follows the last grammar production of a flattened text ("" when none follows)."""
    end = text.rfind("::=") + 3
    words = list(re.finditer(r"\S+", text[end:]))
    for i, word in enumerate(words[:-2]):
        if not _PROSE_START.fullmatch(word.group()):
            continue
        follow = [w.group() for w in words[i + 1 : i + 4]]
        plain = [bool(_PLAIN.fullmatch(w)) for w in follow]
        capital = word.group()[0].isupper()  # "The "nonlocal" statement causes ...": a name may follow it
        if all(plain[:2]) or (capital and len(follow) == 3 and _QUOTED.fullmatch(follow[0]) and all(plain[1:])):
            return text[end + word.start() :].strip()
    return ""


def _before_grammar(text: str) -> str:
    """What comes before the first production of a flattened text, when it reads as a sentence ("" otherwise)."""
    head = text[: text.find("::=")].rstrip()
    head = head[: head.rfind(" ")].rstrip() if " " in head else ""  # drop the production's name
    return head if head.endswith((":", ".")) and len(head.split()) > _MAX_TITLE_WORDS else ""


def without_label(sentence: str) -> str:
    """A note's or warning's text without its label ("Note: The statement ..." -> "The statement ...")."""
    return _LABEL.sub("", sentence, count=1)


def _without_repeat(text: str) -> str:
    """`text` without a heading said again as its first words ('The "with" statement The "with" statement is')."""
    words = text.split(" ")
    for k in range(_MAX_TITLE_WORDS, 0, -1):
        if len(words) > 2 * k and words[0][:1].isupper() and words[:k] == words[k : 2 * k]:
            return " ".join(words[k:])
    return text


def _without_heading(text: str) -> str:
    """`text` without a heading glued to its start: a phrase said twice, or a short title before a lead word."""
    text = _without_repeat(text)
    words = text.split(" ")
    for k in range(1, _MAX_TITLE_WORDS + 1):
        title = words[:k]
        if (
            len(words) > k + 2
            and title[0][:1].isupper()
            and words[k] in _LEAD_WORDS
            and not any(w.endswith((".", ",", ":", ";", "?", "!")) for w in title)
        ):
            return " ".join(words[k:])
    return text


def prose(sentence: str) -> str | None:
    """The prose of a sentence strip, None when it has none.

    A sentence that opens with a fragment is not prose. Where an index has flattened a page, a title, a grammar
    block and the first paragraph run together ('The "pass" statement pass_stmt ::= "pass" "pass" is a null
    operation ...'): the title and the grammar are dropped and the paragraph is the prose, or, where a sentence
    leads into the grammar ("... are used to bind names: assignment_stmt ::= ..."), that sentence is. A heading
    glued to a definition before a grammar block is dropped with it, and so is a heading said again as the
    sentence's first words.
    """
    text = " ".join(sentence.split())
    if "::=" in text:
        lead = _before_grammar(text)
        text = _without_heading(lead) if lead else _after_grammar(text)
    text = _without_repeat(text)
    if not text or sentence_kind(text) != "prose" or is_heading(text):
        return None
    return text
