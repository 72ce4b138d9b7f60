"""Text units: cleaning (control characters, markup that is not text), sentence strips, token-budgeted chunks."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from fastcrag.retrieval.embeddings import packaged_minilm_path

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before whitespace and an
# upper-case letter, digit or opening quote; common abbreviations and initials do not end a sentence.
_ABBREVIATIONS = {
    "e.g",
    "i.e",
    "etc",
    "vs",
    "mr",
    "mrs",
    "ms",
    "dr",
    "prof",
    "st",
    "no",
    "fig",
    "al",
    "approx",
    "jr",
    "sr",
    "inc",
    "ltd",
    "co",
    "u.s",
    "u.k",
    "cf",
    "ca",
    "vol",
    "pp",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
}
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FOOTNOTE_MARK = re.compile(r"^\[\d{1,3}\](?:\s+(?=[A-Z\"'(])|$)")
"""A footnote's mark after a full stop ("... is saved. [5] A class object is ..."): it opens no sentence."""


def clean_text(text: str) -> str:
    """Normalise text for indexing and prompting: NFC, no control characters or lone surrogates."""
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    return _CONTROL.sub(" ", unicodedata.normalize("NFC", text))


# Markup that is not text: reST heading under/overlines and Markdown rules (a line of one repeated mark), reST
# directives and comments, roles and inline literals, Markdown heading marks, and runs of one punctuation mark.
_RULE_LINE = re.compile(r"^[ \t]*([-=~^*#+_.:'\"`<>|])\1{3,}[ \t]*$", re.MULTILINE)
_DIRECTIVE = re.compile(r"^[ \t]*\.\.[ \t]+[\w-]+::.*\n?(?:[ \t]+:[\w -]+:.*\n?)*", re.MULTILINE)  # and its options
_COMMENT = re.compile(r"^[ \t]*\.\.(?:[ \t].*)?$", re.MULTILINE)  # comments, targets, substitutions
_ROLE = re.compile(r":(?:[\w-]+:)?[\w-]+:`([^`<\n]*?)(?:\s*<[^>\n]*>)?`")
_SHORT_TARGET = re.compile(r"^[!~]([\w.]+)$")  # :class:`~a.b.C` shows C; `!` shows its target unlinked
_LINK = re.compile(r"`([^`<\n]+?)\s*<[^>\n]*>`_{1,2}")
_REFERENCE = re.compile(r"`([^`<\n]+)`_{1,2}(?!\w)")  # `blinker`_: a link to a target defined elsewhere
_LITERAL = re.compile(r"``([^`\n]+)``")
_BOLD = re.compile(r"(?<![\w*])\*\*([^\s*](?:[^*\n]*?[^\s*])?)\*\*(?![\w*])")  # not x**2, not **kwargs
_MD_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+", re.MULTILINE)
_PUNCT_RUN = re.compile(r"([^\w\s])\1{3,}")


def strip_markup(text: str) -> str:
    """Remove markup that is not text, keeping the words it decorates; loaders apply it before chunking.

    Heading under/overlines and rules become blank lines (so a heading stays its own strip), directives and
    comments go, `:role:`text`` (as Sphinx shows it: `~a.b.C` gives C), a link's `text <url>`_ or `text`_,
    ``literal`` and **bold** keep their text, and a run of four or more of one punctuation mark becomes a space.
    """
    text = _RULE_LINE.sub("", text)
    text = _DIRECTIVE.sub("", text)
    text = _COMMENT.sub("", text)
    text = _ROLE.sub(_role_text, text)
    text = _LINK.sub(r"\1", text)
    text = _REFERENCE.sub(r"\1", text)
    text = _LITERAL.sub(r"\1", text)
    text = _BOLD.sub(r"\1", text)
    text = _MD_HEADING.sub("", text)
    text = _PUNCT_RUN.sub(" ", text)
    return re.sub(r"\n{3,}", "\n\n", text)


def _role_text(match: re.Match[str]) -> str:
    """What Sphinx shows for a role: its text; `~a.b.C` shows C, `!a.b` shows a.b."""
    text = match.group(1)
    short = _SHORT_TARGET.match(text)
    if short is None:
        return text
    return short.group(1).rpartition(".")[2] if text.startswith("~") else short.group(1)


def normalise(text: str) -> str:
    """Case- and whitespace-insensitive form of a text: for telling an unchanged rewrite, or finding an answer."""
    return " ".join(text.casefold().split())


_FENCED = re.compile(r"```.*?```", re.DOTALL)
_TITLE_MAX_WORDS = 32
"""A chunk's first line is its title when it stands alone, has no sentence end and at most this many words."""
_NO_TITLE_END = (".", "!", ":", ";", "```")
"""How a title line never ends (a question may: an FAQ's headings are questions)."""


_INLINE_CODE_CHARS = 80
"""A one-line code block at most this long, inside a sentence, is read as part of it (`split_sentences`)."""


def split_sentences(text: str) -> list[str]:
    """Split text into sentence strips; blank lines and line-broken blocks also separate strips.

    A fenced code block (```) is one strip, whatever blank lines it holds; a short one-line block that a sentence
    runs into (it stops unpunctuated: "... then run"; a heading never does) is part of that sentence, quoted, with the
    sentence's rest after it when that goes on in lower case and is no heading ('... then run "$ git commit --amend"
    which will replace the old commit ...').
    """
    strips: list[str] = []
    start = 0
    for match in _FENCED.finditer(text):
        strips.extend(_prose_strips(text[start : match.start()]))
        start = match.end()
        code = match.group()[3:-3].strip()
        if strips and unfinished(strips[-1]) and _inline(code):
            rest = _prose_strips(text[start:])
            strips[-1] += f' "{code}"'
            if rest and rest[0][:1].islower() and not is_heading(rest[0]):
                strips[-1] += f" {rest[0]}"
                start = _after(text, start, rest[0])
            continue
        strips.append(" ".join(match.group().split()))
    return strips + _prose_strips(text[start:])


def unfinished(strip: str) -> bool:
    """Whether a strip stops unpunctuated (closing quotes and brackets aside), as a sentence that goes on does.

    A heading is never unfinished.
    """
    return not is_heading(strip) and not strip.rstrip(")]\"'\u201d\u2019").endswith((".", "!", "?", ":", ";", "```"))


def _inline(code: str) -> bool:
    """Whether a code block is short enough to read inside a sentence: one line, at most `_INLINE_CODE_CHARS`."""
    return bool(code) and "\n" not in code and len(code) <= _INLINE_CODE_CHARS


def _after(text: str, start: int, strip: str) -> int:
    """Where in `text`, from `start`, the words of `strip` (whitespace as the text has it) end."""
    pos = start
    for word in strip.split():
        pos = text.index(word, pos) + len(word)
    return pos


TITLE_JOINER = " \u203a "
"""Between the headings of a section's title, outermost first: a single right-pointing angle quotation mark."""
CONTINUED = " (continued)"
"""Marks the title of a chunk that continues its section (the section's lead is in an earlier chunk)."""


def titled(title: str, body: str, continued: bool = False) -> str:
    """A chunk's text: its title on a line of its own, a blank line, then its body (the body alone untitled)."""
    return f"{title}{CONTINUED if continued else ''}\n\n{body}" if title else body


def split_title(text: str) -> tuple[str, str]:
    """A chunk's title line and its body (`fastcrag.retrieval.blocks.titled`); ("", text) when it has no title.

    The title is a first paragraph of one line, at most `_TITLE_MAX_WORDS` words, that does not end as a sentence
    does (`_NO_TITLE_END`; a question may be a title).
    """
    head, sep, body = text.lstrip().partition("\n\n")
    words = head.split()
    if sep and 0 < len(words) <= _TITLE_MAX_WORDS and "\n" not in head.strip():
        if not head.rstrip().endswith(_NO_TITLE_END):
            return head.strip(), body
    return "", text


def body_sentences(text: str) -> list[str]:
    """A chunk's sentence strips without its title line, or the heading of a section that starts inside it."""
    return [s for _, s in sectioned(text)]


def sectioned(text: str) -> list[tuple[str, str]]:
    """A chunk's sentence strips (`body_sentences`), each with the title of the section it stands in.

    A strip before any heading inside the chunk is in the chunk's section (its title without the continued mark;
    "" for an untitled chunk); one after such a heading is in that heading's section (the heading path). A strip
    without a letter or a digit (a list's bullet that an HTML page set on a line of its own) says nothing: none. A
    footnote's mark that opens a strip is left out of it (the chunk keeps it).
    """
    title, body = split_title(text)
    section = title.removesuffix(CONTINUED)
    out: list[tuple[str, str]] = []
    for strip in (_FOOTNOTE_MARK.sub("", s) for s in split_sentences(body)):
        if is_heading(strip):
            section = strip
        elif any(ch.isalnum() for ch in strip):
            out.append((section, strip))
    return out


def is_heading(strip: str) -> bool:
    """Whether a strip is a section's heading path (`TITLE_JOINER` between headings, no sentence end)."""
    return TITLE_JOINER in strip and not strip.rstrip().endswith(_NO_TITLE_END)


def _prose_strips(text: str) -> list[str]:
    strips: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        block = " ".join(block.split())
        if not block:
            continue
        if is_heading(block):  # a heading path is one strip: "Chapter 11. Glossary" in it is no sentence
            strips.append(block)
            continue
        start = 0
        for match in _BOUNDARY.finditer(block):
            candidate = block[start : match.start()].strip()
            last_word = candidate.rsplit(" ", 1)[-1].rstrip(".!?\"')]").lower()
            if last_word in _ABBREVIATIONS or (len(last_word) == 1 and last_word.isalpha()):
                continue
            if candidate:
                strips.append(candidate)
            start = match.end()
        tail = block[start:].strip()
        if tail:
            strips.append(tail)
    return strips


@cache
def _tokenizer(path: str) -> Any:
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def default_tokenizer() -> Any:
    """The embedder's WordPiece tokenizer (fast, no model load)."""
    return _tokenizer(str(Path(packaged_minilm_path()) / "tokenizer.json"))


def count_tokens(texts: list[str]) -> list[int]:
    """Number of embedder tokens in each text (no special tokens)."""
    if not texts:
        return []
    encodings = default_tokenizer().encode_batch(texts, add_special_tokens=False)
    return [len(e.ids) for e in encodings]


def split_long(sentence: str, size: int) -> list[str]:
    """Cut one over-long sentence into windows of at most `size` tokens, at token boundaries."""
    encoding = default_tokenizer().encode(sentence, add_special_tokens=False)
    offsets = encoding.offsets
    pieces = []
    for i in range(0, len(offsets), size):
        window = offsets[i : i + size]
        pieces.append(sentence[window[0][0] : window[-1][1]].strip())
    return [p for p in pieces if p]


def chunk_text(text: str, size: int = 128, overlap: int = 24) -> list[str]:
    """Pack whole sentences into chunks of at most `size` tokens, repeating about `overlap` tokens between chunks.

    Args:
        text: The document text.
        size: Token budget per chunk.
        overlap: Tokens (whole trailing sentences, when they fit) carried into the next chunk.
    """
    sentences: list[str] = []
    raw = split_sentences(text)
    for sentence, n in zip(raw, count_tokens(raw), strict=True):
        sentences.extend(split_long(sentence, size) if n > size else [sentence])
    counts = count_tokens(sentences)
    chunks: list[str] = []
    current: list[tuple[str, int]] = []
    used = 0
    for sentence, n in zip(sentences, counts, strict=True):
        if current and used + n > size:
            chunks.append(" ".join(s for s, _ in current))
            carried: list[tuple[str, int]] = []
            carried_tokens = 0
            for s, k in reversed(current):
                if carried_tokens + k > overlap or carried_tokens + k + n > size:
                    break
                carried.insert(0, (s, k))
                carried_tokens += k
            current, used = carried, carried_tokens
        current.append((sentence, n))
        used += n
    if current:
        chunks.append(" ".join(s for s, _ in current))
    return chunks
