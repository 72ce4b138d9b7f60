"""`fastcrag eval abstention`: truthfulness and abstention of CRAG on, threshold-only and plain RAG, on SQuAD v2."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastcrag.components import Components
from fastcrag.config.settings import Context, Settings
from fastcrag.datasets import distractor_documents, read_squad
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.common import (
    machine_note,
    progress,
    question_id,
    set_threads,
    squad_setup,
    squad_store,
)
from fastcrag.evaluation.configs import VARIANTS, AbstentionConfig
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.evaluation.scoring import (
    ACTIONS,
    CLASSES,
    Summary,
    is_abstention,
    outcome_of,
    precision_coverage,
    summarize,
)
from fastcrag.grading.reranker import CachingReranker
from fastcrag.graph.builder import build_graph
from fastcrag.retrieval.embeddings import default_embeddings

VERSION = 5  # 3: hybrid first pass, keyword rewrite; 4: gold_score, distractors; 5: embedder, grade batch, floors

VARIANT_LABELS = {"crag": "CRAG on", "threshold": "threshold only", "plain": "plain RAG"}


def variant_name(generator: str, variant: str) -> str:
    """`<generator> / CRAG on`, `<generator> / threshold only` or `<generator> / plain RAG`."""
    return f"{generator} / {VARIANT_LABELS[variant]}"


def variant_context(variant: str) -> Context:
    """The per-run context of a variant (CRAG on, threshold only, plain RAG)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    return Context(crag_enabled=variant == "crag", plain=variant == "plain")


def variant_of(record: Mapping[str, Any]) -> str:
    """A record's variant; records without one (version 1) were CRAG on or threshold-only."""
    return str(record.get("variant") or ("crag" if record.get("crag") else "threshold"))


def score_response(
    result: Mapping[str, Any], kind: str, answers: Sequence[str], abstain_message: str, source: str = ""
) -> dict[str, Any]:
    """The scored record of one graph response.

    `gold_score` is the best grade of a passage from the question's own paragraph `source` among those graded
    (both retrievals when a rewrite ran), None when none was retrieved.
    """
    crag = result.get("crag") or {}
    answer = str(result.get("answer") or "")
    abstained = is_abstention(answer, crag.get("action"), abstain_message)
    gold = [
        float(v["score"])
        for v in crag.get("verdicts") or []
        if source and v.get("source") == source and v["score"] is not None
    ]
    return {
        "gold_score": max(gold) if gold else None,
        "kind": kind,
        "answer": answer,
        "action": crag.get("action"),
        "band": crag.get("band"),
        "top_score": crag.get("top_score"),
        "strips_kept": crag.get("strips_kept"),
        "rewritten_query": crag.get("rewritten_query"),
        "rewriter": crag.get("rewriter"),
        "retrieval": crag.get("retrieval"),
        "failure": crag.get("failure"),
        "timings": crag.get("timings") or {},
        "outcome": outcome_of(answer, answers, abstained),
    }


def run(cfg: AbstentionConfig, settings: Settings) -> int:
    """Run every (question, generator, variant) through the graph, resumably, then write the report."""
    set_threads(cfg.threads)
    setup = squad_setup(cfg, settings, exclude_calibration=cfg.exclude_calibration, wrap=CachingReranker)
    config = setup.config("eval abstention", VERSION, cfg, settings) | {
        "generators": cfg.generators,
        "variants": cfg.variants,
        "excluded_calibration_sample": setup.exclude,
        "crag_max_rewrites": settings.crag_max_rewrites,
        "retrieval": settings.retrieval,
        "crag_strip_min_tokens": settings.crag_strip_min_tokens,
        "distractors": cfg.distractors,
        "embedder": default_embeddings(settings.embedder).name,
        "grade_batch": settings.grade_batch,
        "reader_thresholds": [setup.calibration.reader_threshold, setup.calibration.refine_reader_threshold],
    }
    log = ResultLog(cfg.out / "results.jsonl", config, fresh=cfg.fresh)
    jobs = [(q, g, v) for q in setup.questions for g in cfg.generators for v in cfg.variants]
    todo = [j for j in jobs if _key(*j) not in log]
    started = time.perf_counter()
    try:
        if todo:
            asked = {q.title for q in setup.questions} | {d.source.rsplit("#", 1)[0] for d in setup.docs}
            extra = distractor_documents(read_squad(cfg.off_corpus), asked, cfg.distractors, cfg.seed)
            store = squad_store([*setup.docs, *extra], settings.chunk_tokens, settings.chunk_overlap)
            parts = {g: Components(settings, store, setup.grader, g) for g in cfg.generators}
            graphs = {g: build_graph(parts=p) for g, p in parts.items()}
            for p in parts.values():
                set_threads(cfg.threads, p)
            bar = progress(len(jobs), len(jobs) - len(todo), "eval abstention")
            with bar:
                for q, g, variant in todo:
                    t0 = time.perf_counter()
                    result = graphs[g].invoke({"question": q.question}, context=variant_context(variant))
                    record = score_response(result, q.kind, q.answers, settings.abstain_message, q.source)
                    record |= {
                        "qid": question_id(q),
                        "question": q.question,
                        "gold": list(q.answers),
                        "source": q.source,
                        "generator": g,
                        "variant": variant,
                        "crag": variant == "crag",
                        "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
                    }
                    log.add(_key(q, g, variant), record)
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


def _key(q: Any, generator: str, variant: str) -> str:
    return f"{generator}|{variant}|{question_id(q)}"


def summaries(
    records: Sequence[Mapping[str, Any]], generators: Sequence[str], variants: Sequence[str] = VARIANTS
) -> dict[str, dict[str, Summary]]:
    """Summary per variant (generator x CRAG on / threshold only / plain RAG), per class and overall (`all`)."""
    out: dict[str, dict[str, Summary]] = {}
    for g in generators:
        for variant in variants:
            rows = [r for r in records if r["generator"] == g and variant_of(r) == variant]
            if not rows:
                continue
            per = {k: summarize([r for r in rows if r["kind"] == k]) for k in CLASSES}
            per["answerable+unanswerable"] = summarize([r for r in rows if r["kind"] != "off_corpus"])
            per["answerable+off_corpus"] = summarize([r for r in rows if r["kind"] != "unanswerable"])
            per["all"] = summarize(rows)
            out[variant_name(g, variant)] = per
    return out


def truthfulness_gains(sums: Mapping[str, Mapping[str, Summary]], generators: Sequence[str]) -> dict[str, float | None]:
    """Per generator: overall truthfulness of CRAG on minus plain RAG (None unless both were measured)."""
    out: dict[str, float | None] = {}
    for g in generators:
        on, plain = sums.get(variant_name(g, "crag")), sums.get(variant_name(g, "plain"))
        out[g] = on["all"].truthfulness - plain["all"].truthfulness if on and plain else None
    return out


def gain_lines(sums: Mapping[str, Mapping[str, Summary]], generators: Sequence[str]) -> list[str]:
    """One report line per generator: truthfulness of CRAG on minus plain RAG, with both figures."""
    lines = []
    for g, gain in truthfulness_gains(sums, generators).items():
        if gain is None:
            lines.append(f"- `{g}`: n/a (CRAG on and plain RAG were not both measured)")
            continue
        on, plain = sums[variant_name(g, "crag")]["all"], sums[variant_name(g, "plain")]["all"]
        lines.append(
            f"- `{g}`: truthfulness CRAG on minus plain RAG = {gain:+.3f} "
            f"(CRAG on {rp.fmt(on.truthfulness)}, plain RAG {rp.fmt(plain.truthfulness)})"
        )
    return lines


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
    """Final action per variant and class; a rewrite whose retry still grades INCORRECT ends in `abstain`.

    Of the rewrites tried (first retrieval graded INCORRECT): how many the keyword rewrite made, how many answerable
    questions ended correct (rescued), and how many questions that should be declined ended in a wrong answer.
    """
    rows = []
    for variant, per in sums.items():
        for cls in (*CLASSES, "all"):
            s = per[cls]
            rows.append(
                [
                    variant,
                    cls,
                    s.n,
                    *[s.actions.get(a, 0) for a in ACTIONS],
                    s.rewrites_tried,
                    s.keyword_rewrites,
                    s.rescued,
                    s.rewrite_wrong,
                ]
            )
    return rp.table(
        ["variant", "class", "n", *ACTIONS, "rewrites tried", "keyword", "rescued", "rewrite -> wrong"], rows
    )


def rewrite_lines(records: Sequence[Mapping[str, Any]], threshold: float) -> list[str]:
    """Why the answerable questions that went to a rewrite (CRAG on) were or were not rescued.

    A rescue needs a passage of the question's own paragraph graded at or above `threshold`; a grader miss (the
    paragraph retrieved but graded below it) cannot be rescued, since every candidate is graded against the
    user's question.
    """
    tried = [r for r in records if r.get("crag") and r["kind"] == "answerable" and r.get("rewriter")]
    if not tried:
        return []
    missed = sum(r["gold_score"] is None for r in tried)
    below = sum(r["gold_score"] is not None and r["gold_score"] < threshold for r in tried)
    return [
        f"Answerable questions rewritten (CRAG on, all generators): {len(tried)}. Their own paragraph was never "
        f"retrieved in {missed} (a retrieval miss the retry did not repair); it was retrieved but graded below "
        f"reranker_threshold in {below} (a grader miss: no retry can repair it, because candidates are graded "
        f"against the user's question); graded at or above it in {len(tried) - missed - below}.",
        "",
    ]


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
    sums = summaries(records, cfg.generators, cfg.variants)
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
    gains = (
        ["Truthfulness of CRAG on minus plain RAG (overall):", "", *gain_lines(sums, cfg.generators), ""]
        if {"crag", "plain"} <= set(cfg.variants)
        else []
    )
    lines = [
        "# Abstention: CRAG on vs threshold only vs plain RAG (SQuAD v2)",
        "",
        rp.completion_note(len(records), total),
        "",
        f"- Corpus: the paragraphs of `{cfg.squad}`"
        + (f" and of {cfg.distractors} distractor articles of `{cfg.off_corpus}`" if cfg.distractors else "")
        + f"; off-corpus questions: `{cfg.off_corpus}` articles not indexed.",
        f"- {cfg.per_class} questions per class, seed {cfg.seed}; calibration sample excluded: "
        f"{cfg.exclude_calibration} (calibration: {calibration_data or 'n/a'}).",
        f"- Grader: `{grader}`; reranker_threshold = {lower:.4f}, crag_upper = {upper:.4f}.",
        f"- Generators: {', '.join(f'`{g}`' for g in cfg.generators)}. Config hash `{log.hash}`.",
        f"- Variants: {', '.join(VARIANT_LABELS[v] for v in cfg.variants)}. CRAG on: grade, refine, rewrite, "
        "abstain; threshold only: CRAG off, abstain below reranker_threshold, else generate; plain RAG: CRAG off, "
        "no grading and no abstention, the top_n reranked candidates always go to the generator.",
        "- Scoring: correct = a SQuAD-normalised gold answer appears in the answer (+1); abstained "
        "(graph abstention or the generator's own \"I don't know\") = 0; wrong = any other answer (-1).",
        f"- Wall time of this invocation: {seconds / 60:.1f} min; machine: {machine_note()}; "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "## Overall",
        "",
        headline_table(sums),
        "",
        *gains,
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
        *rewrite_lines(records, lower),
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
    return rp.write_run_files(
        cfg.out,
        text,
        done=len(records),
        total=total,
        config_hash=log.hash,
        summaries=as_dicts,
        truthfulness_crag_minus_plain=truthfulness_gains(sums, cfg.generators),
    )
