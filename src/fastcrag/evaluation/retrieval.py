"""`fastcrag eval retrieval`: nDCG@10 and recall on a BEIR folder: dense, BM25 and hybrid first passes, reranked."""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastcrag.config.calibration import CalibrationError, load_calibration
from fastcrag.config.settings import Settings
from fastcrag.datasets import read_qrels, read_queries
from fastcrag.evaluation import report as rp
from fastcrag.evaluation.common import cached_corpus_store, machine_note, progress, set_threads
from fastcrag.evaluation.configs import RetrievalConfig
from fastcrag.evaluation.runlog import ResultLog
from fastcrag.grading.reranker import (
    calibration_for,
    checked_scores,
    default_reranker_spec,
    load_reranker,
    scores_until,
)
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.hybrid import fuse, fused_order
from fastcrag.retrieval.loaders import load_documents

VERSION = 3  # 2: lexical and hybrid first passes; the reranker reorders the configured first pass; 3: the embedder
KEEP = 100  # documents kept per query and system (recall@100 needs 100)
MEASURES = ("nDCG@10", "R@10", "R@20", "R@100")
FIRST_PASSES = ("dense", "lexical", "hybrid")
LABELS = {"dense": "dense ({embedder})", "lexical": "lexical (BM25)", "hybrid": "hybrid (dense + BM25, RRF)"}


def _find(folder: Path, *names: str) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"none of {', '.join(names)} in {folder}")


def doc_id(source: str) -> str:
    """The BEIR document id of a chunk source (`corpus.jsonl.gz#<id>`)."""
    return source.split("#", 1)[1] if "#" in source else source


def rank_documents(
    hits: list[tuple[str, str, float]], scores: list[float] | None, depth: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Document runs from chunk hits, best chunk per document.

    Args:
        hits: (doc id, chunk text, first-pass score) in first-pass order.
        scores: Reranker scores of the hits belonging to the top `depth` documents (in hit order), or None.
        depth: Documents reranked.

    Returns:
        (first-pass run, reranked run), each {doc: score} over at most `KEEP` documents. Reranked documents
        rank above the rest, which keep their first-pass order.
    """
    bi: dict[str, float] = {}
    for d, _, s in hits:
        bi[d] = max(bi.get(d, float("-inf")), s)
    order = sorted(bi, key=lambda d: bi[d], reverse=True)
    top = set(order[:depth])
    rr: dict[str, float] = {}
    if scores is not None:
        scored = [h for h in hits if h[0] in top]
        for (d, _, _), s in zip(scored, scores, strict=True):
            rr[d] = max(rr.get(d, float("-inf")), 2.0 + s)  # above every non-reranked document
    for d in order:
        if d not in rr:
            rr[d] = bi[d] - 2.0
    keep_rr = sorted(rr, key=lambda d: rr[d], reverse=True)[:KEEP]
    return {d: bi[d] for d in order[:KEEP]}, {d: rr[d] for d in keep_rr}


@dataclass(frozen=True)
class GraphOrder:
    """How the graph orders reranked candidates: `rerank_weight`, and the early exit (`grade_batch`, `crag_upper`)."""

    weight: float = 1.0
    batch: int = 0
    upper: float = 1.0

    def changes_order(self) -> bool:
        """Whether the graph's order can differ from the grader's order over every candidate."""
        return self.weight < 1.0 or self.batch > 0

    def label(self) -> str:
        """The report row's description."""
        return f"rerank_weight {self.weight:g}, grade batch {self.batch or 'all'}, crag_upper {self.upper:.3f}"


class _Recorded:
    """A grader that answers from scores recorded earlier (the text is the document id)."""

    name = "recorded"

    def __init__(self, scores: Mapping[str, float]) -> None:
        self.scores = scores

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """The recorded scores of `texts`."""
        return [self.scores[t] for t in texts]


def graph_run(first_pass: Mapping[str, float], reranked: Mapping[str, float], order: GraphOrder) -> dict[str, float]:
    """A query's reranked documents in the order the graph gives them.

    Documents are graded in first-pass order, `order.batch` at a time, until one reaches `order.upper` (the early
    exit); the graded ones are ordered by `fused_order` at `order.weight`, the ungraded follow in first-pass order.

    Args:
        first_pass: {doc: score}, best first (a run of `rank_documents`).
        reranked: Its reranked run: reranked documents score 2 + grader score, the rest below.
        order: The graph's ordering settings.
    """
    top = [d for d in first_pass if reranked.get(d, 0.0) >= 2.0]
    recorded = _Recorded({d: reranked[d] - 2.0 for d in top})
    scores = scores_until(recorded, "", top, order.batch, order.upper)  # the graph's own early-exit rule
    ranked = [top[i] for i in fused_order(scores, order.weight)] + top[len(scores) :]
    run = {d: 2.0 + (len(ranked) - r) / max(1, len(ranked)) for r, d in enumerate(ranked)}
    return run | {d: s for d, s in reranked.items() if d not in run}


def graph_order(settings: Settings, grader: str) -> GraphOrder:
    """How the graph would order candidates with `grader` under `settings`.

    The calibration is FASTRAG_CALIBRATION when set, else the one the grader's folder carries, else the packaged one
    when made for `grader`; with none, the grader's order over every candidate.

    Raises:
        CalibrationError: FASTRAG_CALIBRATION is unreadable or made for another grader.
    """
    path = calibration_for(settings.calibration, settings.reranker)
    if path is not None:
        cal = load_calibration(path, expected_model=grader)
    else:
        try:
            cal = load_calibration(None, expected_model=grader)
        except CalibrationError:
            return GraphOrder()
    return GraphOrder(cal.rerank_weight, settings.grade_batch, cal.crag_upper)


def _hits(found: list[tuple[Any, float]]) -> list[tuple[str, str, float]]:
    """(BEIR doc id, chunk text, score) of each retrieved chunk, in retrieval order."""
    return [(doc_id(str(d.metadata.get("source", ""))), d.page_content, s) for d, s in found]


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """nDCG@10, R@10 and R@100 with ir-measures (pytrec_eval underneath), over the queries in `run`."""
    import ir_measures  # the `eval` extra: checked by `fastcrag eval` before it runs

    measures = [ir_measures.parse_measure(m) for m in MEASURES]
    sub = {q: dict(qrels[q]) for q in run}
    result = ir_measures.calc_aggregate(measures, sub, {q: dict(r) for q, r in run.items()})
    return {str(m): float(result[m]) for m in measures}


def run(cfg: RetrievalConfig, settings: Settings) -> int:
    """Retrieve and rerank every selected query, resumably, then write the report."""
    set_threads(cfg.threads)
    qrels = read_qrels(_find(cfg.beir / "qrels", f"{cfg.split}.tsv"))
    texts = read_queries(_find(cfg.beir, "queries.jsonl", "queries.jsonl.gz"))
    qids = sorted(q for q in qrels if q in texts)
    if cfg.queries and cfg.queries < len(qids):
        qids = sorted(random.Random(cfg.seed).sample(qids, cfg.queries))
    corpus = _find(cfg.beir, "corpus.jsonl.gz", "corpus.jsonl")
    grader = load_reranker(settings.reranker or default_reranker_spec())
    order = graph_order(settings, grader.name)
    config = {
        "version": VERSION,
        "command": "eval retrieval",
        "beir": str(cfg.beir.resolve()),
        "split": cfg.split,
        "queries": qids if cfg.queries else len(qids),
        "depth": cfg.depth,
        "reranker": grader.name,
        "reranked_first_pass": settings.retrieval,
        "embedder": default_embeddings(settings.embedder).name,
        "chunk_tokens": settings.chunk_tokens,
        "chunk_overlap": settings.chunk_overlap,
    }
    log = ResultLog(cfg.out / "results.jsonl", config, fresh=cfg.fresh)
    todo = [q for q in qids if q not in log]
    started = time.perf_counter()
    index_note = "no indexing: every query was already done"
    try:
        if todo:
            t0 = time.perf_counter()
            store, from_cache = cached_corpus_store(
                corpus,
                lambda: load_documents([corpus]),
                settings.chunk_tokens,
                settings.chunk_overlap,
                cfg.index_cache,
            )
            index_note = f"index {'loaded from cache' if from_cache else 'built'} in {time.perf_counter() - t0:.0f} s"
            k = min(len(store), 4 * max(KEEP, cfg.depth))
            with progress(len(qids), len(qids) - len(todo), "eval retrieval") as bar:
                for q in todo:
                    t0 = time.perf_counter()
                    dense = store.similarity_search_with_score(texts[q], k=k)
                    t1 = time.perf_counter()
                    lexical = store.lexical_search_with_score(texts[q], k=k)
                    t2 = time.perf_counter()
                    hybrid = fuse([d for d, _ in dense], [d for d, _ in lexical], k)
                    t3 = time.perf_counter()
                    passes = {
                        "dense": _hits(dense),
                        "lexical": _hits(lexical),
                        "hybrid": _hits([(d, float(d.metadata["rrf"])) for d in hybrid]),
                    }
                    hits = passes[settings.retrieval]
                    top = set(list(dict.fromkeys(h[0] for h in hits))[: cfg.depth])
                    scores = checked_scores(grader, texts[q], [h[1] for h in hits if h[0] in top])
                    t4 = time.perf_counter()
                    record: dict[str, Any] = {name: rank_documents(h, None, cfg.depth)[0] for name, h in passes.items()}
                    record |= {
                        "rr": rank_documents(hits, scores, cfg.depth)[1],
                        "pairs": len(scores),
                        "dense_ms": round((t1 - t0) * 1000, 2),
                        "lexical_ms": round((t2 - t1) * 1000, 2),
                        "fuse_ms": round((t3 - t2) * 1000, 2),
                        "rerank_ms": round((t4 - t3) * 1000, 2),
                    }
                    log.add(q, record)
                    bar.update(1)
    finally:
        write_report(cfg, log, qrels, len(qids), grader.name, time.perf_counter() - started, index_note, order)
    return 0


def write_report(
    cfg: RetrievalConfig,
    log: ResultLog,
    qrels: Mapping[str, Mapping[str, int]],
    total: int,
    grader: str,
    seconds: float,
    index_note: str,
    order: GraphOrder | None = None,
) -> str:
    """Write report.md, summary.json and metrics.png; return the report text.

    When the graph's `order` differs from the grader's (a fitted `rerank_weight`, the early exit), a row for it.
    """
    records = log.records
    systems: dict[str, dict[str, float]] = {}
    first_pass = str(log.config.get("reranked_first_pass", "dense"))
    if records:
        for name in FIRST_PASSES:
            label = LABELS[name].format(embedder=log.config.get("embedder", "all-MiniLM-L6-v2"))
            systems[label] = evaluate(qrels, {q: r[name] for q, r in records.items()})
        systems[f"{first_pass} + reranker ({grader}, top {cfg.depth})"] = evaluate(
            qrels, {q: r["rr"] for q, r in records.items()}
        )
        if order is not None and order.changes_order():
            systems[f"{first_pass} + reranker as the graph orders it ({order.label()})"] = evaluate(
                qrels, {q: graph_run(r[first_pass], r["rr"], order) for q, r in records.items()}
            )
    cfg.out.mkdir(parents=True, exist_ok=True)
    if systems:
        rp.plot_bars(systems, cfg.out / "metrics.png", f"{cfg.beir.name} {cfg.split}: retrieval quality")
    ms = {key: [float(r[key]) for r in records.values()] for key in ("dense_ms", "lexical_ms", "rerank_ms")}
    pairs = [int(r["pairs"]) for r in records.values()]
    lines = [
        f"# Retrieval: {cfg.beir.name} ({cfg.split} qrels)",
        "",
        rp.completion_note(len(records), total),
        "",
        f"- Corpus `{cfg.beir}` chunked as `fastcrag index` chunks; document score = best chunk. First passes "
        "over the same index: dense (the embedder's cosine), lexical (BM25 over stemmed words, the index's "
        "lexical.npz) and hybrid (both fused by reciprocal rank fusion, k = 60). Reranker: "
        f"`{grader}` over the {first_pass} first pass's chunks of its top {cfg.depth} documents.",
        f"- Metrics by ir-measures (pytrec_eval): {', '.join(MEASURES)}; R@100 of the reranked run "
        f"equals its first pass's (reranking reorders the top {cfg.depth} documents; it adds none).",
        f"- Queries: {len(records)} of {total}. Config hash `{log.hash}`. Machine: {machine_note()}; "
        f"wall time "
        f"{seconds / 60:.1f} min ({index_note}); "
        f"{dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        rp.table(["system", *MEASURES], [[s, *[m[k] for k in MEASURES]] for s, m in systems.items()]),
        "",
        f"Cost per query (P50): dense search {rp.percentile(ms['dense_ms'], 50):.1f} ms, BM25 "
        f"{rp.percentile(ms['lexical_ms'], 50):.1f} ms, reranking {rp.percentile(ms['rerank_ms'], 50):.0f} ms for "
        f"{rp.percentile([float(p) for p in pairs], 50):.0f} chunk pairs.",
        "",
        "![metrics](metrics.png)",
    ]
    text = "\n".join(lines) + "\n"
    return rp.write_run_files(cfg.out, text, done=len(records), total=total, config_hash=log.hash, metrics=systems)
