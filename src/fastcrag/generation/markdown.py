"""The chat reply as Markdown: what the answer says, rendered as it reads, and the sources it rests on."""

from __future__ import annotations

import re
from collections.abc import Sequence

_CODE = re.compile(
    r"`[^`\n]+`"  # already inline code
    r"|(?P<open>[\"“]?)(?P<code>(?<![\w*\\])\*{1,2}[A-Za-z_]\w*(?![^*\n]*\*(?![\w*]))"  # *args, not *term*
    r"|(?<![\w.])[\w.]+(?:\|[\w.]+)+"  # a|b
    r"|(?<![\w.$/-])\$?[A-Za-z_][\w.]*_[\w./-]*(?:\(\))?)"  # __enter__(), obj.__dict__, snake_case, $GIT_DIR/hooks
    r"(?P<close>[\"”]?)"
)
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|~])")
_LINE_START = re.compile(r"(?m)^(\s*)(\d+\.|[-+>])(?=\s|$)")


def chat_message(answer: str, sources: Sequence[str] = (), escape: bool = True) -> str:
    """The answer as a chat message that renders as Markdown without changing what it says.

    Names read as code (dunder names such as `__enter__()`, `*args`, `a|b`, snake_case identifiers, a variable's
    path such as `$GIT_DIR/hooks`) become inline code, quotes around them giving way to the backticks; every other
    Markdown mark is escaped, and so are list and quote marks opening a line. Given `sources`, the message ends with
    them as a numbered list, once each, a URL or file path as a link.

    Args:
        answer: The answer, as plain text.
        sources: The sources to list after it.
        escape: Make the answer's own marks render as typed; False keeps Markdown the answer means as Markdown
            (a chat model's reply).
    """
    text = _escaped(answer) if escape else answer
    names = list(dict.fromkeys(s for s in sources if s))
    if not names:
        return text
    lines = [text, "", "Sources:", ""]
    for n, source in enumerate(names, 1):
        lines.append(f"{n}. {_link(source)}")
    return "\n".join(lines)


def _code(match: re.Match[str]) -> str:
    """A name read as code, in backticks (quotes around it give way to them); inline code as it is."""
    name = match.group("code")
    if name is None:
        return match.group()
    name, dots = name.rstrip("."), name[len(name.rstrip(".")) :]
    quoted = bool(match.group("open")) and bool(match.group("close")) and not dots
    opened = "" if quoted else _MARKDOWN.sub(r"\\\1", match.group("open"))
    closed = "" if quoted else dots + match.group("close")
    return f"{opened}`{name}`{closed}"


def _escaped(answer: str) -> str:
    """The answer with names as inline code and every other Markdown mark escaped."""
    pieces, last = [], 0
    for match in _CODE.finditer(answer):
        pieces += [_MARKDOWN.sub(r"\\\1", answer[last : match.start()]), _code(match)]
        last = match.end()
    return _LINE_START.sub(
        lambda m: m.group(1) + (m.group(2)[:-1] + "\\." if m.group(2)[0].isdigit() else "\\" + m.group(2)),
        "".join([*pieces, _MARKDOWN.sub(r"\\\1", answer[last:])]),
    )


def _link(source: str) -> str:
    """A source as Markdown: a link where it is a URL or a file path, else its escaped name."""
    label = _MARKDOWN.sub(r"\\\1", source)
    is_url = re.match(r"https?://\S+$", source) is not None
    is_file = "/" in source or "\\" in source or re.search(r"\.\w{1,5}$", source) is not None
    return f"[{label}](<{source}>)" if is_url or is_file else label
