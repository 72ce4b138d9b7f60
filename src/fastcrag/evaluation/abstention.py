"""`fastcrag eval abstention`: truthfulness and abstention of CRAG on vs off, per generator, on SQuAD v2."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastcrag.config.settings import DEFAULT_LLM, Context, Settings
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.common import (
    CachingReranker,
    machine_note,
    progress,
    question_id,
    set_threads,
    squad_setup,
    squad_store,
)
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.evaluation.scoring import (
    CLASSES,
    Summary,
    is_abstention,
    outcome_of,
    precision_coverage,
    summarize,
)

VERSION = 1


@dataclass
class AbstentionConfig:
    """Options of one abstention run."""

    squad: Path = Path("../shared/data/squad2-dev")
    off_corpus: Path = Path("../shared/data/train/squad11-train")
    per_class: int = 40
    seed: int = 2026
    generators: list[str] = field(default_factory=lambda: ["extractive", DEFAULT_LLM])
    out: Path = Path("runs/eval-abstention")
    fresh: bool = False
    exclude_calibration: bool = True
    threads: int = 1


def variant_name(generator: str, crag: bool) -> str:
    """`<generator> / CRAG on|off`."""
    return f"{generator} / CRAG {'on' if crag else 'off'}"


def score_response(
    result: Mapping[str, Any], kind: str, answers: Sequence[str], abstain_message: str
) -> dict[str, Any]:
    """The scored record of one graph response."""
    crag = result.get("crag") or {}
    answer = str(result.get("answer") or "")
    abstained = is_abstention(answer, crag.get("action"), abstain_message)
    return {
        "kind": kind,
        "answer": answer,
        "action": crag.get("action"),
        "band": crag.get("band"),
        "top_score": crag.get("top_score"),
        "strips_kept": crag.get("strips_kept"),
        "rewritten_query": crag.get("rewritten_query"),
        "failure": crag.get("failure"),
        "timings": crag.get("timings") or {},
        "outcome": outcome_of(answer, answers, abstained),
    }


def run(cfg: AbstentionConfig, settings: Settings) -> int:
    """Run every (question, generator, CRAG on/off) through the graph, resumably, then write the report."""
    from fastcrag.graph.builder import build_graph

    set_threads(cfg.threads)
    setup = squad_setup(cfg, settings, exclude_calibration=cfg.exclude_calibration, wrap=CachingReranker)
    config = setup.config("eval abstention", VERSION, cfg, settings) | {
        "generators": cfg.generators,
        "excluded_calibration_sample": setup.exclude,
        "crag_max_rewrites": settings.crag_max_rewrites,
        "crag_strip_min_tokens": settings.crag_strip_min_tokens,
    }
    log = ResultLog(cfg.out / "results.jsonl", config, fresh=cfg.fresh)
    jobs = [(q, g, crag) for q in setup.questions for g in cfg.generators for crag in (True, False)]
    todo = [j for j in jobs if _key(*j) not in log]
    started = time.perf_counter()
    try:
        if todo:
            store = squad_store(setup.docs, settings.chunk_tokens, settings.chunk_overlap)
            graphs = {
                g: build_graph(retriever=store, reranker=setup.grader, llm=g, settings=settings) for g in cfg.generators
            }
            for graph in graphs.values():
                set_threads(cfg.threads, graph)
            bar = progress(len(jobs), len(jobs) - len(todo), "eval abstention")
            with bar:
                for q, g, crag in todo:
                    t0 = time.perf_counter()
                    result = graphs[g].invoke({"question": q.question}, context=Context(crag_enabled=crag))
                    record = score_response(result, q.kind, q.answers, settings.abstain_message)
                    record |= {
                        "qid": question_id(q),
                        "question": q.question,
                        "gold": list(q.answers),
                        "source": q.source,
                        "generator": g,
                        "crag": crag,
                        "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
                    }
                    log.add(_key(q, g, crag), record)
                    bar.update(1)
    finally:
        write_report(
            cfg,
            log,
            len(jobs),
            setup.calibration.thresholds(),
            setup.grader.name,
            setup.calibration.data,
            time.perf_counter() - started,
        )
    return 0


def _key(q: Any, generator: str, crag: bool) -> str:
    return f"{generator}|{'on' if crag else 'off'}|{question_id(q)}"


def summaries(records: Sequence[Mapping[str, Any]], generators: Sequence[str]) -> dict[str, dict[str, Summary]]:
    """Summary per variant (generator x CRAG on/off), per class and over all classes (`all`)."""
    out: dict[str, dict[str, Summary]] = {}
    for g in generators:
        for crag in (True, False):
            rows = [r for r in records if r["generator"] == g and r["crag"] == crag]
            if not rows:
                continue
            per = {k: summarize([r for r in rows if r["kind"] == k]) for k in CLASSES}
            per["answerable+unanswerable"] = summarize([r for r in rows if r["kind"] != "off_corpus"])
            per["answerable+off_corpus"] = summarize([r for r in rows if r["kind"] != "unanswerable"])
            per["all"] = summarize(rows)
            out[variant_name(g, crag)] = per
    return out


def headline_table(sums: Mapping[str, Mapping[str, Summary]]) -> str:
    """Overall truthfulness, abstention precision/recall and answer rate per variant."""
    rows = []
    for variant, per in sums.items():
        s = per["all"]
        rows.append(
            [
                variant,
                s.n,
                s.truthfulness,
                s.abstention_precision,
                s.abstention_recall,
                s.answer_rate,
                s.accuracy_answered,
                s.correct,
                s.wrong,
                s.abstained,
            ]
        )
    return rp.table(
        [
            "variant",
            "n",
            "truthfulness",
            "abst. precision",
            "abst. recall",
            "answer rate",
            "accuracy (answered)",
            "correct",
            "wrong",
            "abstained",
        ],
        rows,
    )


def class_table(sums: Mapping[str, Mapping[str, Summary]]) -> str:
    """The same figures per question class (and for answerable plus each negative class)."""
    rows = []
    for variant, per in sums.items():
        for cls, s in per.items():
            if cls == "all":
                continue
            rows.append(
                [
                    variant,
                    cls,
                    s.n,
                    s.truthfulness,
                    s.abstention_precision,
                    s.abstention_recall,
                    s.answer_rate,
                    s.correct,
                    s.wrong,
                    s.abstained,
                ]
            )
    return rp.table(
        [
            "variant",
            "class",
            "n",
            "truthfulness",
            "abst. precision",
            "abst. recall",
            "answer rate",
            "correct",
            "wrong",
            "abstained",
        ],
        rows,
    )


def action_table(sums: Mapping[str, Mapping[str, Summary]]) -> str:
    """Final action per variant and class; a rewrite whose retry still grades INCORRECT ends in `abstain`."""
    actions = ("generate", "refine", "rewrite", "abstain", "disabled")
    rows = []
    for variant, per in sums.items():
        for cls in (*CLASSES, "all"):
            s = per[cls]
            rows.append([variant, cls, s.n, *[s.actions.get(a, 0) for a in actions], s.rewrites_tried])
    return rp.table(["variant", "class", "n", *actions, "rewrites tried"], rows)


def write_report(
    cfg: AbstentionConfig,
    log: ResultLog,
    total: int,
    thresholds: tuple[float, float],
    grader: str,
    calibration_data: str,
    seconds: float,
) -> str:
    """Write report.md, summary.json and the plots; return the report text."""
    records = list(log.records.values())
    sums = summaries(records, cfg.generators)
    lower, upper = thresholds
    # Scores of the first retrieval: the CRAG-off runs (a rewrite's retry would report the second one).
    first: dict[str, tuple[str, float]] = {}
    for r in records:
        if r.get("top_score") is not None and (not r["crag"] or r["qid"] not in first):
            first[r["qid"]] = (r["kind"], float(r["top_score"]))
    by_class = {k: [s for kind, s in first.values() if kind == k] for k in CLASSES}
    kinds = [k for k, _ in first.values()]
    scores = [s for _, s in first.values()]
    curve = precision_coverage(scores, kinds)
    cfg.out.mkdir(parents=True, exist_ok=True)
    if scores:
        rp.plot_score_distributions(
            by_class,
            lower,
            upper,
            cfg.out / "score_distributions.png",
            f"Top grader score per class ({grader})",
        )
        rp.plot_precision_coverage(
            curve,
            lower,
            cfg.out / "precision_coverage.png",
            "Abstention precision vs coverage (threshold sweep)",
        )
    at = precision_coverage(scores, kinds, [lower])[0] if scores else None
    lines = [
        "# Abstention: CRAG on vs off (SQuAD v2)",
        "",
        rp.completion_note(len(records), total),
        "",
        f"- Corpus: the paragraphs of `{cfg.squad}`; off-corpus questions: `{cfg.off_corpus}` articles not indexed.",
        f"- {cfg.per_class} questions per class, seed {cfg.seed}; calibration sample excluded: "
        f"{cfg.exclude_calibration} (calibration: {calibration_data or 'n/a'}).",
        f"- Grader: `{grader}`; reranker_threshold = {lower:.4f}, crag_upper = {upper:.4f}.",
        f"- Generators: {', '.join(f'`{g}`' for g in cfg.generators)}. Config hash `{log.hash}`.",
        "- Scoring: correct = a SQuAD-normalised gold answer appears in the answer (+1); abstained "
        "(graph abstention or the generator's own \"I don't know\") = 0; wrong = any other answer (-1).",
        f"- Wall time of this invocation: {seconds / 60:.1f} min; machine: {machine_note()}; "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "## Overall",
        "",
        headline_table(sums),
        "",
        "## Per class",
        "",
        "Abstention precision: share of abstentions on questions that should be declined (unanswerable or "
        "off-corpus); recall: share of those questions declined (n/a where undefined).",
        "",
        class_table(sums),
        "",
        "## Action mix",
        "",
        action_table(sums),
        "",
        "## Grader scores",
        "",
        "![score distributions](score_distributions.png) ![precision vs coverage](precision_coverage.png)",
        "",
    ]
    if at is not None:
        lines.append(
            f"At the calibrated reranker_threshold the top-score rule alone answers {at[1]:.1%} of "
            f"questions, with abstention precision {rp.fmt(at[2])} and recall {rp.fmt(at[3])}."
        )
    text = "\n".join(lines) + "\n"
    as_dicts = {v: {c: s.as_dict() for c, s in per.items()} for v, per in sums.items()}
    return rp.write_run_files(cfg.out, text, done=len(records), total=total, config_hash=log.hash, summaries=as_dicts)
