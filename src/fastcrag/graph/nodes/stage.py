"""What every node shares: the wrapper that resolves the run's settings and times the node, and the trace.

Timing, the one protocol: `timings` holds this question's milliseconds per stage. A node's whole time goes to its
stage (`timed`), unless its body charges stages itself with `Run.charge` (retrieve splits its time between
retrieval and reranking; generate charges before it writes the trace). The wrapper then writes the totals so far
to `timings`: the state's, or none at a new question (intake sets them to `{}`), plus this node's charges.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.runtime import Runtime

from fastcrag.components import Components
from fastcrag.config.settings import Context, RunConfig
from fastcrag.graph.nodes import Node
from fastcrag.graph.state import Action, Stage, State, Trace


@dataclass
class Run:
    """One node's run: the parts, the run's resolved settings, the node's clock and the stage times it charged."""

    parts: Components
    cfg: RunConfig
    started: float
    base: dict[str, float]
    """The question's stage times before this node."""
    charged: dict[str, float] = field(default_factory=dict)
    """The milliseconds this node charged, by stage."""

    def ms(self) -> float:
        """Milliseconds since the node started."""
        return (time.perf_counter() - self.started) * 1000

    def charge(self, stage: Stage, ms: float) -> None:
        """Add `ms` to `stage`."""
        self.charged[stage] = self.charged.get(stage, 0.0) + ms

    def timings(self) -> dict[str, float]:
        """The question's stage times so far: the state's plus this node's charges."""
        totals = dict(self.base)
        for stage, ms in self.charged.items():
            totals[stage] = round(totals.get(stage, 0.0) + ms, 3)
        return totals


Body = Callable[[State, Run], dict[str, Any]]


def stage(parts: Components, body: Body, timed: Stage | None) -> Node:
    """A node running `body` with the run's settings, its time charged to the `timed` stage.

    Settings that cannot be resolved (an invalid calibration, an override out of bounds) become a `failure`, which
    routes to abstain, the same way in every node.

    Args:
        parts: The components.
        body: The node's work: `(state, run) -> partial update`.
        timed: The stage the node's time counts to when the body charges none itself, or None.
    """

    def node(state: State, *, runtime: Runtime[Context]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            cfg = parts.run_config(runtime.context)
        except Exception as exc:  # the reason travels in the trace; abstain needs no settings to answer
            return {"failure": str(exc)}
        run = Run(parts, cfg, started, dict(state.get("timings") or {}))
        update = body(state, run)
        if timed and not run.charged:
            run.charge(timed, run.ms())
        return update | ({"timings": run.timings()} if run.charged else {})

    node.__name__ = getattr(body, "__name__", "node")
    return node


def trace(state: State, action: Action, timings: dict[str, float], parts: Components, cfg: RunConfig | None) -> Trace:
    """The `crag` decision trace returned with every answer: what the run did, with which grader and thresholds.

    Args:
        state: The run's state.
        action: The path's action.
        timings: The question's stage times.
        parts: The components (the grader's name).
        cfg: The run's settings (its thresholds), or None where they could not be resolved.
    """
    try:
        reranker: str | None = parts.reranker().name
    except Exception:  # the failure itself is already in the trace
        reranker = None
    return {
        "action": action,
        "band": state.get("band"),
        "top_score": state.get("top_score"),
        "strips_kept": state.get("strips_kept") or 0,
        "rewritten_query": state.get("rewritten_query"),
        "rewriter": state.get("rewriter"),
        "retrieval": state.get("retrieval"),
        "verdicts": state.get("verdicts") or [],
        "timings": {
            "retrieve_ms": round(timings.get("retrieve_ms", 0.0), 3),
            "rerank_ms": round(timings.get("rerank_ms", 0.0), 3),
            "crag_ms": round(timings.get("crag_ms", 0.0), 3),
            "generate_ms": round(timings.get("generate_ms", 0.0), 3),
        },
        "failure": state.get("failure"),
        "question": state.get("question"),
        "conversation": state.get("conversation"),
        "reranker": reranker,
        "thresholds": (
            {
                "reranker_threshold": cfg.reranker_threshold,
                "crag_upper": cfg.crag_upper,
                "condition_factor": cfg.condition_factor,
            }
            if cfg
            else None
        ),
    }


def reply(state: State, answer: str) -> dict[str, Any]:
    """The AI message to append when the question came as chat messages (nothing otherwise): `chat_message`."""
    return {"messages": [AIMessage(content=chat_message(answer))]} if state.get("messages") else {}


_CODE = re.compile(
    r"`[^`\n]+`"  # already inline code
    r"|(?P<open>[\"“]?)(?P<code>(?<![\w*\\])\*{1,2}[A-Za-z_]\w*(?![^*\n]*\*(?![\w*]))"  # *args, not *term*
    r"|(?<![\w.])[\w.]+(?:\|[\w.]+)+"  # a|b
    r"|(?<![\w.])[A-Za-z_][\w.]*_[\w.]*(?:\(\))?)"  # __enter__(), obj.__dict__, snake_case
    r"(?P<close>[\"”]?)"
)
_MARKDOWN = re.compile(r"([\\`*_\[\]<>#|~])")
_LINE_START = re.compile(r"(?m)^(\s*)(\d+\.|[-+>])(?=\s|$)")


def chat_message(answer: str, sources: Sequence[str] = ()) -> str:
    """The answer as a chat message that renders as Markdown without changing what it says.

    Names read as code (dunder names such as `__enter__()`, `*args`, `a|b`, snake_case identifiers) become inline
    code, quotes around them giving way to the backticks; every other Markdown mark is escaped, and so are list
    and quote marks opening a line. Given `sources`, the message ends with them as a numbered list, once each,
    a URL or file path as a link.
    """

    def code(match: re.Match[str]) -> str:
        name = match.group("code")
        if name is None:
            return match.group()
        name, dots = name.rstrip("."), name[len(name.rstrip(".")) :]
        quoted = bool(match.group("open")) and bool(match.group("close")) and not dots
        opened = "" if quoted else _MARKDOWN.sub(r"\\\1", match.group("open"))
        closed = "" if quoted else dots + match.group("close")
        return f"{opened}`{name}`{closed}"

    pieces, last = [], 0
    for match in _CODE.finditer(answer):
        pieces += [_MARKDOWN.sub(r"\\\1", answer[last : match.start()]), code(match)]
        last = match.end()
    text = _LINE_START.sub(
        lambda m: m.group(1) + (m.group(2)[:-1] + "\\." if m.group(2)[0].isdigit() else "\\" + m.group(2)),
        "".join([*pieces, _MARKDOWN.sub(r"\\\1", answer[last:])]),
    )
    names = list(dict.fromkeys(s for s in sources if s))
    if not names:
        return text
    lines = [text, "", "Sources:", ""]
    for n, source in enumerate(names, 1):
        lines.append(f"{n}. {_link(source)}")
    return "\n".join(lines)


def _link(source: str) -> str:
    """A source as Markdown: a link where it is a URL or a file path, else its escaped name."""
    label = _MARKDOWN.sub(r"\\\1", source)
    if re.match(r"https?://\S+$", source):
        return f"[{label}](<{source}>)"
    if "/" in source or "\\" in source or re.search(r"\.\w{1,5}$", source):
        return f"[{label}](<{source}>)"
    return label
