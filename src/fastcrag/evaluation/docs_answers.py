"""`fastcrag eval docs`: whether answers to documentation questions cite the right page and carry its substance."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastcrag.config.settings import Settings
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.configs import DocsConfig
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.evaluation.scoring import is_abstention
from fastcrag.retrieval.structure import fragment

VERSION = 1


@dataclass(frozen=True)
class DocsQuestion:
    """One question of a documentation set.

    Attributes:
        id: A stable id (the set's `id` field, else a hash of the question).
        question: What a reader asks.
        sources: The sources that answer it: the page, and any copies of the same text (any of them is right); a
            file may be named by its path relative to the corpus folder (`source_matches`).
        sentence: The page's defining sentence, as it stands in the page.
        key_terms: Words or names an answer with the substance contains (all of them).
        kind: explain, how, factoid, ... (free text, for the report).
        category: The part of the documentation (free text, for the report).
    """

    id: str
    question: str
    sources: tuple[str, ...]
    sentence: str = ""
    key_terms: tuple[str, ...] = ()
    kind: str = ""
    category: str = ""


def _strings(value: Any, field: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: `{field}` must be a string or a list of non-empty strings")
    return tuple(v.strip() for v in value)


def load_questions(path: Path) -> list[DocsQuestion]:
    """Read a documentation question set: JSON Lines, one object per question.

    Each object has `question`, `sources` (a source or a list of acceptable sources, as the index names them; a
    folder's files also by their paths relative to the folder, see `source_matches`),
    and `sentence` (the defining sentence) and/or `key_terms` (a list); `id`, `kind` and `category` are optional.

    Raises:
        ValueError: a line is not such an object, or two questions share an id.
        FileNotFoundError: no such file.
    """
    out: list[DocsQuestion] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(row, dict) or not str(row.get("question") or "").strip():
            raise ValueError(f"{where}: each line must be an object with a `question`")
        question = str(row["question"]).strip()
        sources = _strings(row.get("sources", row.get("source")), "sources", where)
        sentence = str(row.get("sentence") or "").strip()
        terms = _strings(row.get("key_terms"), "key_terms", where)
        if not sources:
            raise ValueError(f"{where}: `sources` names no source")
        if not sentence and not terms:
            raise ValueError(f"{where}: give the defining `sentence` or the `key_terms` (or both)")
        qid = str(row.get("id") or hashlib.sha256(question.encode()).hexdigest()[:12])
        out.append(
            DocsQuestion(
                qid, question, sources, sentence, terms, str(row.get("kind") or ""), str(row.get("category") or "")
            )
        )
    ids = Counter(q.id for q in out)
    if dup := [i for i, c in ids.items() if c > 1]:
        raise ValueError(f"{path}: ids used more than once: {', '.join(dup[:5])}")
    return out


def normalize(text: str) -> str:
    """Lower-case words (letters, digits, `_`) joined by single spaces: quotes, markup and line breaks do not count."""
    return " ".join(re.findall(r"\w+", text.lower()))


def _contains(haystack: str, needle: str) -> bool:
    """Whether the normalised `needle` occurs in the normalised `haystack` as whole words."""
    n = normalize(needle)
    return bool(n) and f" {n} " in f" {normalize(haystack)} "


def substance(answer: str, q: DocsQuestion) -> tuple[bool, list[str]]:
    """(whether the defining sentence is in the answer, the key terms the answer lacks)."""
    return (bool(q.sentence) and _contains(answer, q.sentence), [t for t in q.key_terms if not _contains(answer, t)])


def source_matches(cited: str, expected: str) -> bool:
    """Whether a cited source is the expected one: the same key, or a file path that ends with the expected path.

    An index names a folder's files by their absolute paths, which depend on where the corpus lies; a question set
    names them relative to the corpus folder (`git-stash.html`, `howto/new-command.html`) and a cited path matches
    when its last components are those (`/srv/docs/git-stash.html`, not `/srv/docs/old-git-stash.html`). Either
    side may use a backslash as the separator. An absolute or empty expected path matches only itself.
    """
    if cited == expected:
        return True
    want = expected.replace("\\", "/").removeprefix("./")
    if not want or want.startswith("/") or re.match(r"^[A-Za-z]:/", want):
        return False
    return cited.replace("\\", "/").endswith("/" + want)


def on_topic(source: str, q: DocsQuestion) -> bool:
    """Whether `source` is one of the pages the question accepts (`source_matches` one of `q.sources`)."""
    return any(source_matches(source, e) for e in q.sources)


def score_answer(
    q: DocsQuestion,
    answer: str,
    sources: Sequence[str],
    action: str | None = None,
    abstain_message: str = "I don't know.",
) -> dict[str, Any]:
    """The three checks for one answer, and whether it is answered with the substance (all three).

    Args:
        q: The question.
        answer: The answer's text.
        sources: The answer's cited sources, in citation order.
        action: The graph's `crag.action`, when known (an abstention is never answered).
        abstain_message: The configured abstention message.

    Returns:
        `topic_cited` (an acceptable source among the citations), `topic_first` (the first citation is one),
        `sentence` (the defining sentence is in the answer), `missing_terms`, `key_terms` (none missing),
        `fragment` (its kind or None), `abstained`, and `substance` (topic cited, sentence or key terms, no fragment).
    """
    cited = any(on_topic(s, q) for s in sources)
    first = bool(sources) and on_topic(sources[0], q)
    abstained = is_abstention(answer, action, abstain_message)
    has_sentence, missing = substance(answer, q) if not abstained else (False, list(q.key_terms))
    terms = bool(q.key_terms) and not missing
    frag = None if abstained else fragment(answer)
    return {
        "topic_cited": cited,
        "topic_first": first,
        "sentence": has_sentence,
        "key_terms": terms,
        "missing_terms": missing,
        "fragment": frag,
        "abstained": abstained,
        "substance": cited and (has_sentence or terms) and frag is None and not abstained,
    }


def why(record: Mapping[str, Any]) -> str:
    """What a record failed, in words."""
    if record.get("abstained"):
        return "abstained"
    reasons = []
    if record.get("fragment"):
        reasons.append(f"opens with a {record['fragment']} fragment")
    if not record.get("topic_cited"):
        reasons.append("right topic not cited")
    if not record.get("sentence") and not record.get("key_terms"):
        missing = record.get("missing_terms") or []
        reasons.append("no defining sentence" + (f", lacks {', '.join(missing)}" if missing else ""))
    return "; ".join(reasons) or "ok"


@dataclass(frozen=True)
class DocsSummary:
    """Counts over a set of scored answers."""

    n: int
    substance: int
    topic_cited: int
    topic_first: int
    sentence: int
    key_terms: int
    sentence_or_terms: int
    fragments: int
    fragment_kinds: dict[str, int]
    abstained: int

    def rate(self, count: int) -> float:
        """`count` as a share of the answers (0 when there are none)."""
        return count / self.n if self.n else 0.0


def summarize(records: Iterable[Mapping[str, Any]]) -> DocsSummary:
    """Counts of the three checks and of answers with the substance."""
    rows = list(records)
    kinds = Counter(str(r["fragment"]) for r in rows if r.get("fragment"))
    return DocsSummary(
        n=len(rows),
        substance=sum(bool(r["substance"]) for r in rows),
        topic_cited=sum(bool(r["topic_cited"]) for r in rows),
        topic_first=sum(bool(r["topic_first"]) for r in rows),
        sentence=sum(bool(r["sentence"]) for r in rows),
        key_terms=sum(bool(r["key_terms"]) for r in rows),
        sentence_or_terms=sum(bool(r["sentence"] or r["key_terms"]) for r in rows),
        fragments=sum(kinds.values()),
        fragment_kinds=dict(kinds),
        abstained=sum(bool(r["abstained"]) for r in rows),
    )


def ask(graph: Any, q: DocsQuestion, abstain_message: str = "I don't know.") -> dict[str, Any]:
    """Run one question through `graph` and score the response.

    Args:
        graph: A compiled graph, or anything whose `invoke({"question": ...})` returns `answer`, `citations` (each
            with `source`) and `crag`.
        q: The question.
        abstain_message: The configured abstention message.
    """
    t0 = time.perf_counter()
    result = graph.invoke({"question": q.question})
    crag = result.get("crag") or {}
    answer = str(result.get("answer") or "")
    sources = [str(c.get("source", "")) for c in result.get("citations") or []]
    return {
        "id": q.id,
        "question": q.question,
        "kind": q.kind,
        "category": q.category,
        "expected": list(q.sources),
        "answer": answer,
        "cited": sources,
        "action": crag.get("action"),
        "top_score": crag.get("top_score"),
        "band": crag.get("band"),
        "failure": crag.get("failure"),
        "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
        **score_answer(q, answer, sources, crag.get("action"), abstain_message),
    }


def score_graph(graph: Any, questions: Sequence[DocsQuestion]) -> list[dict[str, Any]]:
    """Ask every question of `graph` and score each answer (no run files: for notebooks and tests)."""
    return [ask(graph, q) for q in questions]


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def run(cfg: DocsConfig, settings: Settings) -> int:
    """Ask every question of `cfg.questions` of the configured graph, resumably, then write the report."""
    from fastcrag.components import Components  # the command loads its stack when run
    from fastcrag.evaluation.common import progress
    from fastcrag.graph.builder import build_graph

    if cfg.questions is None:
        raise ValueError("give the question set with --questions FILE (JSON Lines)")
    questions = load_questions(cfg.questions)
    parts = Components(settings)
    config = {
        "version": VERSION,
        "command": "eval docs",
        "questions": str(cfg.questions.resolve()),
        "questions_sha256": _file_hash(cfg.questions),
        "index": str(settings.index_dir.resolve()) if settings.index_dir else "embedded Python reference",
        "store": bool(settings.store),
        "llm": settings.llm,
        "reranker": settings.reranker,
        "calibration": str(settings.calibration) if settings.calibration else None,
        "retrieval": settings.retrieval,
        "top_k": settings.top_k,
        "top_n": settings.top_n,
        "crag_enabled": settings.crag_enabled,
    }
    log = ResultLog(cfg.out / "results.jsonl", config, fresh=cfg.fresh)
    todo = [q for q in questions if q.id not in log]
    started = time.perf_counter()
    try:
        if todo:
            parts.warm_up()
            graph = build_graph(parts=parts)
            with progress(len(questions), len(questions) - len(todo), "eval docs") as bar:
                for q in todo:
                    log.add(q.id, ask(graph, q, settings.abstain_message))
                    bar.update(1)
    finally:
        write_report(cfg, log, questions, time.perf_counter() - started)
    return 0


def _clip(text: str, chars: int = 160) -> str:
    flat = " ".join(text.split()).replace("|", "\\|")
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def worst(records: Sequence[Mapping[str, Any]], limit: int = 15) -> list[Mapping[str, Any]]:
    """The answers without the substance, worst first.

    What a reader is shown matters most: a fragment, then an answer from the wrong topic, then one that misses the
    defining sentence; an abstention ("I don't know") comes last.
    """

    def badness(r: Mapping[str, Any]) -> tuple[bool, int, bool]:
        return (not r["abstained"], bool(r.get("fragment")) + (not r.get("topic_cited")), not r.get("topic_first"))

    return sorted((r for r in records if not r["substance"]), key=badness, reverse=True)[:limit]


def write_report(cfg: DocsConfig, log: ResultLog, questions: Sequence[DocsQuestion], seconds: float) -> str:
    """Write report.md and summary.json under `cfg.out`; return the report text."""
    order = {q.id: i for i, q in enumerate(questions)}
    records = sorted((r for r in log.records.values() if r["key"] in order), key=lambda r: order[r["key"]])
    s = summarize(records)
    cfg.out.mkdir(parents=True, exist_ok=True)

    def cell(count: int) -> str:
        return f"{count}/{s.n} ({100 * s.rate(count):.0f}%)"

    kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.fragment_kinds.items())) or "none"
    lines = [
        "# Documentation answers",
        "",
        rp.completion_note(len(records), len(questions)),
        "",
        f"- Questions: `{cfg.questions}`; index: {log.config['index']}; generator: `{log.config['llm']}`; "
        f"grader: `{log.config['reranker'] or 'default'}`.",
        f"- Written {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"this session's answering took {seconds:.0f} s.",
        "- Answered with the substance: an acceptable source is cited, the answer holds the defining sentence or all "
        "its key terms, and it opens with prose (no table, grammar production, keyword list, note or version line).",
        "",
        rp.table(
            ["measure", "answers"],
            [
                ["answered with the substance", cell(s.substance)],
                ["right topic cited (any citation)", cell(s.topic_cited)],
                ["right topic cited first", cell(s.topic_first)],
                ["defining sentence in the answer", cell(s.sentence)],
                ["all key terms in the answer", cell(s.key_terms)],
                ["sentence or key terms", cell(s.sentence_or_terms)],
                [f"fragments ({kinds})", cell(s.fragments)],
                ["abstained", cell(s.abstained)],
            ],
        ),
        "",
    ]
    groups = sorted({str(r.get("category") or "") for r in records} - {""})
    if len(groups) > 1:
        rows = []
        for g in groups:
            sub = summarize(r for r in records if r.get("category") == g)
            rows.append([g, sub.n, sub.substance, sub.topic_cited, sub.sentence_or_terms, sub.fragments])
        lines += [
            "By category:",
            "",
            rp.table(["category", "questions", "substance", "topic cited", "sentence or terms", "fragments"], rows),
            "",
        ]
    failures = worst(records)
    if failures:
        lines += [
            "Worst answers (all of them in results.jsonl):",
            "",
            rp.table(
                ["id", "question", "answer opens", "cited first", "why"],
                [
                    [r["key"], _clip(r["question"], 80), _clip(r["answer"]), (r["cited"] or ["-"])[0], why(r)]
                    for r in failures
                ],
            ),
            "",
        ]
    text = "\n".join(lines)
    return rp.write_run_files(
        cfg.out,
        text,
        done=len(records),
        total=len(questions),
        config_hash=log.hash,
        summary={
            "n": s.n,
            "substance": s.substance,
            "topic_cited": s.topic_cited,
            "topic_first": s.topic_first,
            "sentence": s.sentence,
            "key_terms": s.key_terms,
            "sentence_or_terms": s.sentence_or_terms,
            "fragments": s.fragments,
            "fragment_kinds": s.fragment_kinds,
            "abstained": s.abstained,
        },
    )
