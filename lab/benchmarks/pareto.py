"""Quality of `bench-speed`'s levers from stored runs, and the Pareto table of latency against quality.

A lever's quality is read, not measured again:
- SciFact nDCG@10 as the graph orders it, from a stored `eval retrieval` run made with the lever's embedder and
  grader over the hybrid first pass, reranking at least the lever's `top_k` documents. The run records every
  query's first pass and the grader's score of each reranked document, so any smaller `top_k` and any early exit
  (`grade_batch`, at the lever's calibration) is replayed exactly by `retrieval.graph_run`.
- Truthfulness, abstention precision and answerable questions answered right (extractive, CRAG on), from a stored
  `eval abstention` run made with the lever's embedder, grader, thresholds, `top_k` and `grade_batch`.
- The grader's SQuAD v2 measures, from a stored `eval-grader --out` table that has the lever's grader as a column.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastcrag.datasets import read_qrels
from fastcrag.evaluation.retrieval import GraphOrder, evaluate, graph_run

SCIFACT = "SciFact nDCG@10"
TRUTHFULNESS = "truthfulness"
PRECISION = "abstention precision"
RIGHT = "answerable right"
ABSTENTION_MEASURES = (TRUTHFULNESS, PRECISION, RIGHT)
GRADER_MEASURES = (  # eval-grader rows shown and compared (higher is better)
    "squad2-dev AUC answerable vs unanswerable",
    "squad2-dev AUC answerable vs gold-removed",
    "squad2-dev AUC answerable vs off-corpus",
    "squad2-dev gold paragraph first (answerable)",
)
SHORT = {
    PRECISION: "abst. precision",
    "squad2-dev AUC answerable vs unanswerable": "AUC unans.",
    "squad2-dev AUC answerable vs gold-removed": "AUC gold-rem.",
    "squad2-dev AUC answerable vs off-corpus": "AUC off-corpus",
    "squad2-dev gold paragraph first (answerable)": "gold first",
}


@dataclass(frozen=True)
class LeverSetup:
    """What a lever's quality depends on: the names its runs record, its `top_k` and how the graph orders."""

    embedder: str
    grader: str
    top_k: int
    order: GraphOrder
    #: reranker_threshold, crag_upper, reader_threshold, refine_reader_threshold of the lever's calibration
    thresholds: tuple[float | None, ...] = ()


@dataclass
class RetrievalRun:
    """A stored `eval retrieval` run: its folder, configuration and per-query records."""

    folder: Path
    config: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)

    def serves(self, lever: LeverSetup) -> bool:
        """Whether this run can replay `lever`: same embedder and grader, hybrid first pass, deep enough."""
        c = self.config
        return (
            c.get("embedder") == lever.embedder
            and c.get("reranker") == lever.grader
            and c.get("reranked_first_pass") == "hybrid"
            and int(c.get("depth", 0)) >= lever.top_k
        )


def _read_jsonl_header(path: Path) -> dict[str, Any] | None:
    try:
        with path.open(encoding="utf-8") as fh:
            header = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) and header.get("type") == "header" else None


def stored_runs(root: Path, command: str) -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(folder, configuration, summary) of each complete run of `command` in the folders under `root`, by name.

    Complete: its summary.json says so, for the configuration its results.jsonl was written by.
    """
    found = []
    for results in sorted(root.glob("*/results.jsonl")):
        header = _read_jsonl_header(results)
        if header is None or header.get("config", {}).get("command") != command:
            continue
        try:
            summary = json.loads((results.parent / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (
            isinstance(summary, dict)
            and summary.get("complete")
            and summary.get("config_hash") == header.get("config_hash")
        ):
            found.append((results.parent, header["config"], summary))
    return found


def retrieval_runs(root: Path) -> list[RetrievalRun]:
    """The complete `eval retrieval` runs in the folders under `root`."""
    return [RetrievalRun(folder, config) for folder, config, _ in stored_runs(root, "eval retrieval")]


def _records(run: RetrievalRun) -> list[dict[str, Any]]:
    if not run.records:
        with (run.folder / "results.jsonl").open(encoding="utf-8") as fh:
            next(fh)
            run.records = [r for r in map(json.loads, fh) if "hybrid" in r and "rr" in r]
    return run.records


def replayed_ndcg(run: RetrievalRun, lever: LeverSetup, qrels: Mapping[str, Mapping[str, int]]) -> float:
    """nDCG@10 of the graph's order for `lever`, replayed from `run`'s recorded first pass and grader scores.

    The first `lever.top_k` documents of the first pass keep their grader scores (the run reranked at least as
    many); the rest fall below them in first-pass order, as `retrieval.rank_documents` places unreranked documents.
    """
    runs: dict[str, dict[str, float]] = {}
    for record in _records(run):
        first: dict[str, float] = record["hybrid"]
        recorded: dict[str, float] = record["rr"]
        reranked = {
            d: (recorded[d] if i < lever.top_k and recorded.get(d, 0.0) >= 2.0 else s - 2.0)
            for i, (d, s) in enumerate(first.items())
        }
        runs[str(record["key"])] = graph_run(first, reranked, lever.order)
    return evaluate(qrels, runs)["nDCG@10"]


def abstention_quality(root: Path, lever: LeverSetup) -> dict[str, float]:
    """The lever's abstention measures (extractive generator, CRAG on); empty without a matching run.

    They come from the newest complete `eval abstention` run under `root` made with the lever's settings.
    """
    found: dict[str, float] = {}
    runs = sorted(stored_runs(root, "eval abstention"), key=lambda run: (run[0] / "results.jsonl").stat().st_mtime)
    for _, c, summary in runs:
        if not (
            c.get("reranker") == lever.grader
            and c.get("embedder") == lever.embedder
            and c.get("top_k") == lever.top_k
            and c.get("grade_batch") == lever.order.batch
            and _rounded([*c.get("thresholds", []), *c.get("reader_thresholds", [])]) == _rounded(lever.thresholds)
        ):
            continue
        crag = summary.get("summaries", {}).get("extractive / CRAG on")
        if crag:
            found = {
                TRUTHFULNESS: float(crag["all"]["truthfulness"]),
                PRECISION: float(crag["all"]["abstention_precision"]),
                RIGHT: float(crag["answerable"]["correct"]),
            }
    return found


def _rounded(values: Sequence[float | None]) -> list[float | None]:
    return [None if v is None else round(float(v), 6) for v in values]


def grader_tables(root: Path) -> dict[str, dict[str, float]]:
    """{grader: {measure: value}} from the `eval-grader --out` JSON files directly under `root` (newest last wins)."""
    out: dict[str, dict[str, float]] = {}
    for path in sorted(root.glob("*.json"), key=lambda p: p.stat().st_mtime):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("command") != "eval-grader":
            continue
        for measure, row in data.get("table", {}).items():
            for column, value in row.items():
                out.setdefault(column, {})[measure] = float(value)
    return out


def lever_quality(levers: Mapping[str, LeverSetup], root: Path) -> dict[str, dict[str, Any]]:
    """Each lever's stored quality: SciFact nDCG@10 (with the run it came from) and its grader's measures."""
    runs = retrieval_runs(root)
    graders = grader_tables(root)
    qrels_of: dict[tuple[str, str], Mapping[str, Mapping[str, int]]] = {}
    out: dict[str, dict[str, Any]] = {}
    for name, lever in levers.items():
        own = graders.get(lever.grader, {})
        quality: dict[str, Any] = {m: own[m] for m in GRADER_MEASURES if m in own} | abstention_quality(root, lever)
        run = next((r for r in runs if r.serves(lever)), None)
        if run is not None:
            key = (str(run.config["beir"]), str(run.config.get("split", "test")))
            if key not in qrels_of:
                qrels_path = Path(key[0]) / "qrels" / f"{key[1]}.tsv"
                qrels_of[key] = read_qrels(qrels_path) if qrels_path.is_file() else {}
            if qrels_of[key]:
                quality[SCIFACT] = replayed_ndcg(run, lever, qrels_of[key])
                quality["SciFact run"] = str(run.folder)
        out[name] = quality
    return out


def dominated(
    row: Mapping[str, Any], others: Sequence[Mapping[str, Any]], latency: str, measures: Sequence[str]
) -> bool:
    """Whether another row is as fast or faster and as good or better on every measure, and better on one."""
    if any(m not in row for m in measures):
        return False
    for other in others:
        if other is row or any(m not in other for m in measures):
            continue
        if other[latency] <= row[latency] and all(other[m] >= row[m] for m in measures):
            if other[latency] < row[latency] or any(other[m] > row[m] for m in measures):
                return True
    return False


def pareto_table(rows: Mapping[str, Mapping[str, Any]], latency: str) -> str:
    """A markdown table: each row's latency and stored quality, `front` where no other row dominates it.

    Rows are compared on every measure some row has; a row lacking one (no stored run could give it) is marked `?`
    and dominates no other.
    """
    measures = [m for m in (SCIFACT, *ABSTENTION_MEASURES, *GRADER_MEASURES) if any(m in r for r in rows.values())]
    values = list(rows.values())
    head = ["lever", latency, *[SHORT.get(m, m) for m in measures], "Pareto"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        if any(m not in row for m in measures):
            mark = "?"
        else:
            mark = "dominated" if dominated(row, values, latency, measures) else "**front**"
        cells = [name, f"{row[latency]:.0f}", *[_cell(row.get(m), m) for m in measures], mark]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None, measure: str) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if measure == RIGHT else f"{value:.3f}"
