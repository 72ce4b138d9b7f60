"""A document's structure at index time: titled sections of prose paragraphs, table rows and code blocks.

Documentation is not running prose. `sections` reads a cleaned document (`clean_text`, before `strip_markup`) and
recognises:

- headings: reST titles (a line under- or overlined by one repeated mark), Markdown `#` headings, and API entries
  (a signature line such as `object.__init__(self[, ...])` over an indented description); a heading becomes the
  title of the section it opens and is never glued to its first sentence;
- tables: ASCII grids (`+----+`), Markdown pipe tables and reST simple tables (`=====  =====`); each row becomes a
  line a reader can read (`Operation: "s[i]"; Result: ith item of s`);
- code and grammar: fenced blocks, interactive sessions (`>>>`), grammar productions (`::=`) and indented blocks
  that do not read as prose; each stays whole, as a fenced block;
- everything else is prose, split into paragraphs, with markup that is not text removed (`strip_markup`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fastcrag.retrieval.text import TITLE_JOINER, count_tokens, split_long, split_sentences, strip_markup, titled

PROSE, TABLE, CODE, HEADING = "prose", "table", "code", "heading"
FENCE = "```"

_UNDERLINE = re.compile(r"^[ \t]*([=*\-~^#+\"'`])\1{2,}[ \t]*$")
_MD_HEADING = re.compile(r"^[ \t]{0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE_LINE = re.compile(r"^[ \t]*(```|~~~)")
_GRID_RULE = re.compile(r"^[ \t]*[+|](?:[-=:]+[+|])+[ \t]*$")
_GRID_HEADER_RULE = re.compile(r"^[ \t]*[+|](?:=+[+|])+[ \t]*$")
_PIPE_RULE = re.compile(r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$")
_SIMPLE_RULE = re.compile(r"^[ \t]*={2,}(?:[ \t]+={2,})+[ \t]*$")
_SIGNATURE = re.compile(
    r"^(?:(?:class|exception|function|method|attribute|data|classmethod|staticmethod|abstractmethod|async)\s+)?[A-Za-z_][\w.]*(?:\(.*\)|\[.*\])(?:\s*->\s*\S+)?$|^[A-Za-z_][\w]*\.[\w.]+$"
)
_PLAIN_WORD = re.compile(r"[\"'\u201c(]*[A-Za-z][a-z'\u2019-]*[\"'\u201d)]*[.,;:!?]?")
_PROSE_SHARE = 0.6
"""An indented block is prose when at least this share of its words are plain words (code has symbols)."""
_MAX_HEADING_CHARS = 100
_ENTRY = "entry"
"""The style of an API entry's heading (with its indent: `entry0`, `entry3`): deeper than any other heading."""
_LABEL = re.compile(r"^(?:note|warning|caution|tip|important|see also|example|examples)\s*:$", re.IGNORECASE)
"""A paragraph that only labels the next one ("Note:"): the two are one block."""


@dataclass(frozen=True)
class Block:
    """One unit of a section: a prose paragraph, a table row, or a code block (fenced)."""

    kind: str
    text: str


@dataclass
class Section:
    """A heading (the chunk title; "" before the first heading) and the blocks under it."""

    title: str
    blocks: list[Block] = field(default_factory=list)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _row(header: list[str], cells: list[str]) -> str:
    """A table row as a line: `Header: cell; Header: cell` (cells alone where the table has no header)."""
    cells = [" ".join(strip_markup(c).split()) for c in cells]
    if header and len(header) == len(cells):
        pairs = [f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c]
        return "; ".join(pairs)
    return "; ".join(c for c in cells if c)


def _grid(lines: list[str]) -> list[str]:
    """Rows of an ASCII grid table (`+---+` rules, `|` cells; a `+===+` rule ends the header)."""
    rows: list[list[str]] = []
    header: list[str] = []
    current: list[list[str]] = []
    for line in lines:
        if _GRID_RULE.match(line):
            if current:
                merged = [" ".join(part for part in col if part) for col in zip(*current, strict=False)]
                if _GRID_HEADER_RULE.match(line) and not rows and not header:
                    header = merged
                else:
                    rows.append(merged)
            current = []
        else:
            current.append(_cells(line))
    return [text for cells in rows if (text := _row(header, cells))]


def _pipe(lines: list[str]) -> list[str]:
    """Rows of a Markdown pipe table (the line before the `|---|` rule is the header)."""
    rule = next((i for i, line in enumerate(lines) if _PIPE_RULE.match(line)), None)
    header = _cells(lines[rule - 1]) if rule else []
    body = lines[rule + 1 :] if rule is not None else lines
    return [text for line in body if (text := _row(header, _cells(line)))]


def _simple(lines: list[str]) -> list[str]:
    """Rows of a reST simple table: columns where the first `=====  =====` rule puts them."""
    spans = [m.span() for m in re.finditer(r"=+", lines[0])]
    rules = [i for i, line in enumerate(lines) if _SIMPLE_RULE.match(line)]

    def cut(line: str) -> list[str]:
        starts = [s for s, _ in spans] + [len(line) + 1]
        return [line[starts[k] : starts[k + 1]].strip() for k in range(len(spans))]

    header = cut(lines[1]) if len(rules) >= 3 and rules[1] == 2 else []
    body = [line for i, line in enumerate(lines) if i not in rules and not (header and i == 1)]
    return [text for line in body if line.strip() and (text := _row(header, cut(line)))]


def _reads_as_prose(text: str) -> bool:
    words = text.split()
    return bool(words) and sum(bool(_PLAIN_WORD.fullmatch(w)) for w in words) >= _PROSE_SHARE * len(words)


def _nested(lines: list[str]) -> bool:
    """Whether a line ending in a colon is followed by a deeper-indented one (a block of code)."""
    depth = [len(line) - len(line.lstrip()) for line in lines]
    return any(a.rstrip().endswith(":") and depth[k + 1] > depth[k] for k, a in enumerate(lines[:-1]))


def _is_code(lines: list[str]) -> bool:
    text = "\n".join(lines)
    return "::=" in text or text.lstrip().startswith(">>>") or _nested(lines) or not _reads_as_prose(text)


def _dedent(lines: list[str]) -> list[str]:
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return [line[indent:].rstrip() for line in lines]


def _heading(lines: list[str], i: int) -> tuple[str, int, str] | None:
    """The heading at line `i`, the number of lines it takes and its style (what ranks it), or None."""
    line = lines[i]
    if m := _MD_HEADING.match(line):
        return m.group(2).strip(), 1, m.group(1)
    text = line.strip()
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    if _UNDERLINE.match(line) and i + 2 < len(lines) and _UNDERLINE.match(lines[i + 2]) and lines[i + 1].strip():
        return lines[i + 1].strip(), 3, "over" + line.strip()[0]  # an overlined title
    if (
        text
        and not line[0].isspace()
        and len(text) <= _MAX_HEADING_CHARS
        and _UNDERLINE.match(nxt)
        and len(nxt.strip()) >= len(text) * 0.8
        and not _GRID_RULE.match(nxt)
    ):
        return text, 2, "under" + nxt.strip()[0]
    following = lines[i + 2] if i + 2 < len(lines) else ""
    indent = _indent(line)
    if (  # an API entry: a signature line over a description indented deeper (a method's under its class's)
        text
        and _SIGNATURE.match(text)
        and not nxt.strip()
        and following.strip()
        and _indent(following) > indent
        and (indent == 0 or i == 0 or not lines[i - 1].strip())
    ):
        return text, 1, f"{_ENTRY}{indent}"
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _paragraph_blocks(lines: list[str]) -> list[Block]:
    """Prose paragraphs and indented code of a run of lines without headings, tables or fences."""
    blocks: list[Block] = []
    para: list[str] = []

    def flush() -> None:
        if not any(line.strip() for line in para):
            para.clear()
            return
        body = _dedent(para)
        if (para[0][:1].isspace() and _is_code(body)) or "::=" in "\n".join(body):
            blocks.append(Block(CODE, f"{FENCE}\n" + "\n".join(body).strip("\n") + f"\n{FENCE}"))
        else:
            text = " ".join(strip_markup("\n".join(body)).split())
            if text:
                blocks.append(Block(PROSE, text))
        para.clear()

    for line in lines:
        if not line.strip():
            flush()
        else:
            # an indented block under a paragraph line starts a block of its own
            if para and line[:1].isspace() and not para[-1][:1].isspace():
                lead = line[: len(line) - len(line.lstrip())]
                if len(lead) >= 2 and (para[-1].rstrip().endswith(":") or ">>>" in line or "::=" in line):
                    flush()
            para.append(line)
    flush()
    merged: list[Block] = []
    for block in blocks:
        if merged and merged[-1].kind == PROSE and _LABEL.match(merged[-1].text):
            merged[-1] = Block(block.kind, f"{merged[-1].text} {block.text}" if block.kind == PROSE else block.text)
        else:
            merged.append(block)
    return merged


def _rank(style: str, styles: list[str]) -> int:
    """A heading's depth: Markdown by its `#` count, reST by when its style first appeared, API entries deepest."""
    if style.startswith("#"):
        return len(style)
    if style.startswith(_ENTRY):  # `entry<indent>`: an entry nested in another's description is deeper
        return (1 << 10) + int(style[len(_ENTRY) :])
    if style not in styles:
        styles.append(style)
    return styles.index(style) + 1


def sections(text: str) -> list[Section]:
    """The titled sections of a document, each a list of prose paragraphs, table rows and code blocks."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out = [Section("")]
    run: list[str] = []
    styles: list[str] = []  # reST heading styles in the order they first appear: the first is the outermost
    path: list[tuple[int, str, int]] = []  # the open headings: (rank, text, an entry's description indent)

    def flush_run() -> None:
        out[-1].blocks.extend(_paragraph_blocks(run))
        run.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() and path and _indent(line) < path[-1][2]:  # an API entry's description has ended
            flush_run()
            while path and _indent(line) < path[-1][2]:
                path.pop()
            out.append(Section(TITLE_JOINER.join(t for _, t, _ in path if t)))
        if _FENCE_LINE.match(line):
            mark = _FENCE_LINE.match(line).group(1)  # type: ignore[union-attr]
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(mark)), len(lines))
            flush_run()
            body = "\n".join(_dedent(lines[i + 1 : end])).strip("\n")
            if body.strip():
                out[-1].blocks.append(Block(CODE, f"{FENCE}\n{body}\n{FENCE}"))
            i = end + 1
            continue
        table: list[str] | None = None
        end = i
        if _GRID_RULE.match(line):
            end = i
            while end < len(lines) and lines[end].strip()[:1] in ("+", "|"):
                end += 1
            table = _grid(lines[i:end])
        elif line.strip().startswith("|") and i + 1 < len(lines) and _PIPE_RULE.match(lines[i + 1]):
            end = i
            while end < len(lines) and lines[end].strip().startswith("|"):
                end += 1
            table = _pipe(lines[i:end])
        elif _SIMPLE_RULE.match(line):
            rules = 0
            end = i
            while end < len(lines) and (lines[end].strip() or rules == 1):
                rules += bool(_SIMPLE_RULE.match(lines[end]))
                end += 1
                if rules == 3 or (rules == 2 and end < len(lines) and not lines[end].strip()):
                    break
            table = _simple(lines[i:end])
        if table is not None and end > i + 1:
            flush_run()
            out[-1].blocks.extend(Block(TABLE, row) for row in table)
            i = end
            continue
        heading = _heading(lines, i)
        if heading is not None:
            flush_run()
            text, taken, style = heading
            rank = _rank(style, styles)
            while path and path[-1][0] >= rank:
                path.pop()
            depth = _indent(lines[i + 2]) if style.startswith(_ENTRY) else -1  # `_heading` saw that line
            path.append((rank, " ".join(strip_markup(text).split()), depth))
            out.append(Section(TITLE_JOINER.join(t for _, t, _ in path if t)))
            i += taken
            continue
        run.append(line)
        i += 1
    flush_run()
    return [s for s in out if s.blocks]


def _units(section: Section, size: int) -> list[tuple[str, int, str, str]]:
    """A section's packing units: (text, tokens, kind, separator before it): sentences, table rows, code pieces."""
    texts: list[tuple[str, str, str]] = []
    for block in section.blocks:
        if block.kind == PROSE:
            texts.extend((s, PROSE, " " if k else "\n\n") for k, s in enumerate(split_sentences(block.text)))
        elif block.kind == TABLE:
            texts.append((block.text, TABLE, "\n\n"))
        else:
            texts.extend((piece, CODE, "\n\n") for piece in _code_pieces(block.text, size))
    units: list[tuple[str, int, str, str]] = []
    for (text, kind, sep), n in zip(texts, count_tokens([t for t, _, _ in texts]), strict=True):
        if n > size and kind != CODE:
            units.extend((piece, m, kind, sep if i == 0 else " ") for i, (piece, m) in enumerate(_windows(text, size)))
        else:
            units.append((text, n, kind, sep))
    return units


def _windows(text: str, size: int) -> list[tuple[str, int]]:
    pieces = split_long(text, size)
    return list(zip(pieces, count_tokens(pieces), strict=True))


def _code_pieces(fenced: str, size: int) -> list[str]:
    """A code block whole, or cut between lines into fenced pieces of at most about `size` tokens."""
    if count_tokens([fenced])[0] <= size:
        return [fenced]
    lines = fenced.split("\n")[1:-1]
    pieces: list[str] = []
    current: list[str] = []
    used = 0  # tokens in `current`: a line break adds none, so a piece's count is the sum of its lines'
    for line, n in zip(lines, count_tokens(lines), strict=True):
        if current and used + n > size:
            pieces.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += n
    if current:
        pieces.append("\n".join(current))
    return [f"{FENCE}\n{p}\n{FENCE}" for p in pieces if p.strip()]


def chunk_sections(parts: list[Section], size: int = 128, overlap: int = 24) -> list[tuple[str, str]]:
    """(title, text) chunks of at most about `size` tokens, each opening with its section's title.

    A chunk's text opens with the title of the section it starts in, as a line of its own (`titled`; marked
    continued where the section began in an earlier chunk), so the embedder, the lexical index and the grader read it.
    Sentences, table rows and code blocks are packed whole (a code block longer than `size` is cut between lines);
    table rows never share a chunk with prose; about `overlap` tokens of trailing prose sentences are repeated at
    the start of the next chunk. A heading inside a chunk stands on a line of its own, and never ends one: a heading
    that would moves on to the next chunk, which opens under it. Paragraphs, headings, rows and code blocks are
    separated by a blank line.
    """
    units: list[tuple[str, int, str, str, str]] = []
    for section in parts:
        heading = [(section.title, count_tokens([section.title])[0], HEADING, "\n\n")] if section.title else []
        units.extend((*u, section.title) for u in [*heading, *_units(section, size)])
    chunks: list[tuple[str, str]] = []
    current: list[tuple[str, int, str, str, str]] = []
    used = 0

    def emit() -> None:
        title = current[0][4]
        opens = current[0][2] == HEADING or not title  # a titled section's first unit is its heading
        body = current[1:] if current[0][2] == HEADING else current
        chunks.append((title, titled(title, _join(body), continued=not opens)))

    for unit in units:
        _, n, kind, _, _ = unit
        table_change = bool(current) and (kind == TABLE) != (current[-1][2] == TABLE) and kind != HEADING
        kept = len(current)  # a heading stays with what it heads: trailing headings move on to the next chunk
        while kept and current[kept - 1][2] == HEADING:
            kept -= 1
        if kept and (used + n > size or table_change):
            heads, current = current[kept:], current[:kept]
            emit()
            carried: list[tuple[str, int, str, str, str]] = []
            carried_tokens = 0  # no overlap into a section that opens here (a heading moved on, or a new one)
            for u in reversed(current if not heads and not table_change and kind != HEADING else []):
                if u[2] != PROSE or carried_tokens + u[1] > overlap or carried_tokens + u[1] + n > size:
                    break
                carried.insert(0, u)
                carried_tokens += u[1]
            current, used = heads + carried, sum(u[1] for u in heads) + carried_tokens
        current.append(unit)
        used += n
    if current:
        emit()
    return [c for c in chunks if c[1].strip()]


def _join(units: list[tuple[str, int, str, str, str]]) -> str:
    return "".join((u[3] if i else "") + u[0] for i, u in enumerate(units)).strip()
