"""`python -m lab bench`: stage latency percentiles, CRAG on vs off, and the cost of an LLM judge as the grader."""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from fastcrag.components import Components
from fastcrag.config.settings import Context, Settings
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.common import (
    machine_note,
    progress,
    question_id,
    select_questions,
    set_threads,
    squad_setup,
    squad_store,
)
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.fileio import write_json_atomic, write_text_atomic
from fastcrag.generation import prompts
from fastcrag.generation.chat import load_chat_model
from fastcrag.generation.generators import ChatGenerator
from fastcrag.graph.builder import build_graph
from lab.benchmarks.configs import BenchConfig

VERSION = 2  # 2: the grader cache is cleared before each timed run
STAGES = ("retrieve_ms", "rerank_ms", "crag_ms", "generate_ms")
TOTAL = "retrieval_total_ms"
PERCENTILES = (50, 95, 100)


class GradeDocuments(BaseModel):
    """Binary score for relevance check on retrieved documents."""

    binary_score: Literal["yes", "no"] = Field(description="Documents are relevant to the question, 'yes' or 'no'")


def retrieval_total(timings: Mapping[str, float]) -> float:
    """Retrieval total: retrieve + rerank + CRAG (grading, refinement, rewrites and their retrieval)."""
    return float(timings.get("retrieve_ms", 0.0) + timings.get("rerank_ms", 0.0) + timings.get("crag_ms", 0.0))


def stage_values(records: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Per-stage latency lists (plus the retrieval total) of timed records."""
    out: dict[str, list[float]] = {s: [] for s in (*STAGES, TOTAL)}
    for r in records:
        t = r.get("timings") or {}
        for s in STAGES:
            out[s].append(float(t.get(s, 0.0)))
        out[TOTAL].append(retrieval_total(t))
    return out


def latency_table(by_variant: Mapping[str, Mapping[str, Sequence[float]]]) -> str:
    """P50 / P95 / P100 per stage and variant."""
    rows = []
    for stage in (*STAGES, TOTAL):
        for variant, stages in by_variant.items():
            v = stages.get(stage, [])
            rows.append([stage, variant, len(v), *[rp.percentile(v, q) for q in PERCENTILES]])
    return rp.table(["stage", "CRAG", "n", *[f"P{q} ms" for q in PERCENTILES]], rows, digits=1)


def judge_chunk(llm: Any, question: str, text: str) -> bool:
    """One structured relevance call: True when the chat model grades the chunk relevant."""
    grader = llm.with_structured_output(GradeDocuments)
    result = grader.invoke(prompts.relevance_judge_messages(text, question))
    if isinstance(result, dict):
        result = GradeDocuments.model_validate(result.get("parsed", result))
    return GradeDocuments.model_validate(result).binary_score == "yes"


def judge_cost(judged: Sequence[Mapping[str, Any]], timed: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """LLM-judge cost against the cross-encoder grader's, per question, over the same candidates.

    The CRAG grader's cost is the reranking of the candidates (which ranking needs anyway) plus the grade
    node's comparisons; the ratio divides the judge's time per question by that.
    """
    if not judged:
        return {}
    judge_q = [sum(j["judge_ms"]) for j in judged]
    per_chunk = [ms for j in judged for ms in j["judge_ms"]]
    rerank = [float(r["timings"].get("rerank_ms", 0.0)) for r in timed]
    grade = [float(r["timings"].get("crag_ms", 0.0)) for r in timed if not r["crag"]]
    rerank_p50 = rp.percentile(rerank, 50)
    grade_p50 = rp.percentile(grade, 50)
    chunks = [(rel, v) for j in judged for rel, v in zip(j["relevant"], j["verdicts"], strict=True)]
    agree = sum(rel == (v != "INCORRECT") for rel, v in chunks)
    gold = [
        (rel, v)
        for j in judged
        if j["kind"] == "answerable"
        for rel, v, g in zip(j["relevant"], j["verdicts"], j["gold"], strict=True)
        if g
    ]
    return {
        "questions": len(judged),
        "chunks": len(per_chunk),
        "judge_ms_per_chunk_p50": rp.percentile(per_chunk, 50),
        "judge_ms_per_question_p50": rp.percentile(judge_q, 50),
        "rerank_ms_per_question_p50": rerank_p50,
        "grade_ms_per_question_p50": grade_p50,
        "cost_ratio": rp.percentile(judge_q, 50) / max(1e-9, rerank_p50 + grade_p50),
        "cost_ratio_vs_grade_only": rp.percentile(judge_q, 50) / max(1e-9, grade_p50),
        "judge_relevant_share": sum(rel for rel, _ in chunks) / max(1, len(chunks)),
        "agreement_with_crag_verdicts": agree / max(1, len(chunks)),
        "gold_chunks": len(gold),
        "gold_judged_relevant": sum(rel for rel, _ in gold),
        "gold_passing_crag_grade": sum(v != "INCORRECT" for _, v in gold),
    }


def run(cfg: BenchConfig, settings: Settings) -> int:
    """Time every question with CRAG on and off on one compiled graph, then judge some candidate sets."""
    set_threads(cfg.threads)
    setup = squad_setup(cfg, settings)
    questions = setup.questions
    judged_q = questions[: max(0, cfg.judge_questions)] if cfg.llm != "extractive" else []
    config = setup.config("bench", VERSION, cfg, settings) | {
        "llm": cfg.llm,
        "threads": cfg.threads,
        "judge_questions": len(judged_q),
    }
    log = ResultLog(cfg.out / "results.jsonl", config, fresh=cfg.fresh)
    # Alternate which variant runs first, so that load drift on this shared machine hits both alike.
    jobs = [(q, crag) for i, q in enumerate(questions) for crag in ((True, False) if i % 2 == 0 else (False, True))]
    todo = [(q, c) for q, c in jobs if _key(q, c) not in log]
    judge_todo = [q for q in judged_q if f"judge|{question_id(q)}" not in log]
    total = len(jobs) + len(judged_q)
    started = time.perf_counter()
    try:
        if todo or judge_todo:
            store = squad_store(setup.docs, settings.chunk_tokens, settings.chunk_overlap)
            parts = Components(settings, store, setup.grader, cfg.llm)
            graph = build_graph(parts=parts)
            set_threads(cfg.threads, parts)
            parts.warm_up()
            warm = select_questions(setup.pools, 1, cfg.seed + 100)[: cfg.warmup]
            for q in warm:  # untimed: first-call costs (thread pools, llama.cpp context) stay out of the figures
                for crag in (True, False):
                    graph.invoke({"question": q.question}, context=Context(crag_enabled=crag))
            # The grader caches per (question, passage): without clearing it, the second variant of each question
            # would rerank for free. Every timed run pays its own forward passes, as a new question does.
            clear_cache = getattr(parts.reranker(), "clear_cache", lambda: None)
            with progress(total, total - len(todo) - len(judge_todo), "bench") as bar:
                for q, crag in todo:
                    clear_cache()
                    t0 = time.perf_counter()
                    result = graph.invoke({"question": q.question}, context=Context(crag_enabled=crag))
                    wall = (time.perf_counter() - t0) * 1000
                    trace = result.get("crag") or {}
                    log.add(
                        _key(q, crag),
                        {
                            "type": "timed",
                            "qid": question_id(q),
                            "kind": q.kind,
                            "crag": crag,
                            "action": trace.get("action"),
                            "band": trace.get("band"),
                            "top_score": trace.get("top_score"),
                            "timings": trace.get("timings") or {},
                            "wall_ms": round(wall, 3),
                        },
                    )
                    bar.update(1)
                if judge_todo:
                    llm = _judge_model(parts, cfg.llm, settings)
                    for q in judge_todo:
                        log.add(f"judge|{question_id(q)}", _judge_question(graph, llm, q))
                        bar.update(1)
    finally:
        write_report(
            cfg,
            log,
            len(jobs),
            len(judged_q),
            setup.grader.name,
            setup.calibration.thresholds(),
            time.perf_counter() - started,
        )
    return 0


def _key(q: Any, crag: bool) -> str:
    return f"{'on' if crag else 'off'}|{question_id(q)}"


def _judge_model(parts: Any, spec: str, settings: Settings) -> Any:
    """The chat model the generator uses (the same weights grade), loaded on its own when not exposed."""
    generator = parts.generator()
    if isinstance(generator, ChatGenerator):
        return generator.llm
    return load_chat_model(spec, settings.max_new_tokens, settings.llm_timeout_s)


def _judge_question(graph: Any, llm: Any, q: Any) -> dict[str, Any]:
    """Grade the candidates the graph retrieved for `q` with the LLM judge, one call per chunk."""
    candidates: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    for update in graph.stream({"question": q.question}, context=Context(crag_enabled=False), stream_mode="updates"):
        for node, delta in update.items():
            if node == "retrieve" and delta and delta.get("candidates"):
                candidates = list(delta["candidates"])
            if node == "grade" and delta and delta.get("verdicts"):
                verdicts = list(delta["verdicts"])
    verdict_of = {v["chunk_id"]: v["verdict"] for v in verdicts}
    relevant, ms = [], []
    for c in candidates:
        t0 = time.perf_counter()
        try:
            ok = judge_chunk(llm, q.question, c["text"])
        except Exception:  # an unparseable judgement counts as not relevant, its time still counts
            ok = False
        ms.append(round((time.perf_counter() - t0) * 1000, 3))
        relevant.append(ok)
    return {
        "type": "judge",
        "qid": question_id(q),
        "kind": q.kind,
        "judge_ms": ms,
        "relevant": relevant,
        "verdicts": [verdict_of.get(c["chunk_id"], "INCORRECT") for c in candidates],
        "gold": [c["source"] == q.source for c in candidates],
    }


def write_report(
    cfg: BenchConfig,
    log: ResultLog,
    total_timed: int,
    total_judged: int,
    grader: str,
    thresholds: tuple[float, float],
    seconds: float,
) -> str:
    """Write report.md, summary.json and latency_cdf.png; return the report text."""
    timed = [r for r in log.records.values() if r.get("type") == "timed"]
    judged = [r for r in log.records.values() if r.get("type") == "judge"]
    by_variant = {
        "on": stage_values([r for r in timed if r["crag"]]),
        "off": stage_values([r for r in timed if not r["crag"]]),
    }
    by_variant = {k: v for k, v in by_variant.items() if v[TOTAL]}
    cfg.out.mkdir(parents=True, exist_ok=True)
    if by_variant:
        series = {s: {f"CRAG {v}": vals[s] for v, vals in by_variant.items()} for s in (*STAGES, TOTAL)}
        rp.plot_cdfs(series, cfg.out / "latency_cdf.png", f"Stage latency CDFs, CRAG on vs off ({grader})")
    on = [r for r in timed if r["crag"]]
    actions = Counter(str(r["action"]) for r in on)
    bands = Counter(str(r["band"]) for r in on)
    crag_by_action = [
        [
            a,
            n,
            rp.percentile([r["timings"].get("crag_ms", 0.0) for r in on if r["action"] == a], 50),
            max(r["timings"].get("crag_ms", 0.0) for r in on if r["action"] == a),
        ]
        for a, n in sorted(actions.items())
    ]
    off_total = by_variant.get("off", {}).get(TOTAL, [])
    p50_off = rp.percentile(off_total, 50)
    if not off_total:
        budget = "No CRAG-off runs yet."
    elif p50_off <= cfg.budget_ms:
        budget = f"CRAG-off retrieval total P50 = {p50_off:.1f} ms: within the {cfg.budget_ms:.0f} ms budget."
    else:
        budget = (
            f"CRAG-off retrieval total P50 = {p50_off:.1f} ms: **over** the {cfg.budget_ms:.0f} ms budget "
            f"on this machine ({machine_note()})."
        )
    cost = judge_cost(judged, timed)
    lower, upper = thresholds
    lines = [
        "# Latency benchmark: CRAG on vs off",
        "",
        rp.completion_note(len(timed), total_timed) + f" LLM-judge questions: {len(judged)} of {total_judged}.",
        "",
        f"- Questions: {cfg.per_class} per class (answerable, unanswerable, off-corpus) from `{cfg.squad}` / "
        f"`{cfg.off_corpus}`, seed {cfg.seed}; each runs with CRAG on and off on the same compiled graph "
        f"(order alternating); {cfg.warmup} untimed warm-up questions; {cfg.threads} CPU thread(s) per model.",
        f"- Grader: `{grader}` (reranker_threshold {lower:.4f}, crag_upper {upper:.4f}); "
        f"generator `{cfg.llm}`. "
        f"Config hash `{log.hash}`.",
        f"- Machine: {machine_note()}; wall time {seconds / 60:.1f} min; "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        "## Stage latency",
        "",
        latency_table(by_variant),
        "",
        budget,
        "",
        "![latency CDFs](latency_cdf.png)",
        "",
        "## CRAG-on band and action mix",
        "",
        rp.table(["band", "questions"], sorted(bands.items())),
        "",
        rp.table(["action", "questions", "crag_ms P50", "crag_ms max"], crag_by_action, digits=1),
        "",
        "## Grader cost: LLM judge vs cross-encoder grade",
        "",
    ]
    if cost:
        lines += [
            f"The same {cost['chunks']} candidates of {cost['questions']} questions were graded by "
            f"`{cfg.llm}` "
            "with one structured relevant / not-relevant call per chunk (LangGraph CRAG tutorial prompt).",
            "",
            rp.table(
                ["grader", "ms per question (P50)", "ms per chunk (P50)"],
                [
                    ["LLM judge", cost["judge_ms_per_question_p50"], cost["judge_ms_per_chunk_p50"]],
                    ["cross-encoder rerank (all candidates)", cost["rerank_ms_per_question_p50"], None],
                    ["CRAG grade node (two comparisons each)", cost["grade_ms_per_question_p50"], None],
                ],
                digits=1,
            ),
            "",
            f"Grader cost ratio (LLM judge / (rerank + grade), per question, P50): "
            f"**{cost['cost_ratio']:,.0f}x**; "
            f"against the grade node alone (the reranking is paid for ranking anyway): "
            f"{cost['cost_ratio_vs_grade_only']:,.0f}x.",
            "",
            f"Judge agreement with the CRAG verdicts (relevant = not INCORRECT): "
            f"{cost['agreement_with_crag_verdicts']:.1%}; judged relevant: "
            f"{cost['judge_relevant_share']:.1%} of "
            f"chunks. Gold-paragraph chunks of answerable questions: {cost['gold_chunks']}, judged relevant "
            f"{cost['gold_judged_relevant']}, passing the CRAG grade {cost['gold_passing_crag_grade']}.",
        ]
    else:
        lines.append("No LLM-judge results (the generator is `extractive`, or --judge-questions 0).")
    text = "\n".join(lines) + "\n"
    write_text_atomic(cfg.out / "report.md", text)
    write_json_atomic(
        cfg.out / "summary.json",
        {
            "complete": len(timed) >= total_timed and len(judged) >= total_judged,
            "done": len(timed),
            "total": total_timed,
            "config_hash": log.hash,
            "latency": {
                v: {s: {f"p{q}": rp.percentile(vals[s], q) for q in PERCENTILES} for s in vals}
                for v, vals in by_variant.items()
            },
            "mean_wall_ms": {
                v: statistics.fmean([r["wall_ms"] for r in timed if r["crag"] == (v == "on")]) for v in by_variant
            },
            "actions": dict(actions),
            "bands": dict(bands),
            "judge": cost,
        },
    )
    return text
