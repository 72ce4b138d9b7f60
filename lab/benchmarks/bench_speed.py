"""`python -m lab bench-speed`: every speed figure of the ask and served paths in one run, each beside its target.

Sections (each prints when it finishes; `--skip` leaves sections out):
- core: the graph in this process over `QUESTIONS`, CRAG off and on interleaved, the grader cache cleared before each
  run (so every run pays its own forward passes, as a new question does): retrieval total P50/P95 with CRAG off
  (query embedding + search + reranking) and crag_ms with CRAG on, plus the stages behind them;
- serve: `fastcrag serve --workers N` `/runs/wait` against the same graph in this process over the same questions,
  interleaved and new to both sides; then `langgraph dev` (the Studio path, its queue polled) the same way, beside it;
- cold: `fastcrag ask` in a new process to its answer, and `fastcrag serve` start to its first answer (median of 3
  after one discarded run, so the file cache is warm);
- embedder: `python -m lab bench-embedder`'s int8 vs fp32 table (throughput ratio, query P50, cosine, SciFact nDCG@10);
- levers: the grader-work levers alone and together against the earlier defaults (fp32 query embedder, top_k 20, all
  candidates graded at once), CRAG off, over the same questions: retrieval total P50/P95, the stages behind it, the
  share of questions whose grading stopped early, and whether each question's band matches the earlier defaults';
  then each lever's quality from stored runs (`--quality`: SciFact nDCG@10 replayed from an `eval retrieval` run,
  truthfulness from an `eval abstention` run, the grader's SQuAD v2 measures from an `eval-grader --out` table) and
  the Pareto table of latency against it, with the commands that store what a lever lacks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastcrag.config.settings import Context
from fastcrag.evaluation import launch
from fastcrag.evaluation.report import percentile
from fastcrag.fileio import write_json_atomic
from lab.data import SHARED_DATA

if TYPE_CHECKING:
    from lab.benchmarks.pareto import LeverSetup

VERSION = 1
SECTIONS = ("core", "serve", "cold", "embedder", "levers")
TARGETS = {"retrieval total P50 ms (CRAG off)": 200.0, "crag_ms P50 (CRAG on)": 20.0, "serve overhead P50 ms": 100.0}
QUESTIONS = [
    "How does the with statement work?",
    "What does the yield keyword do?",
    "How are default argument values evaluated?",
    "What is the difference between is and ==?",
    "How do I define a class?",
    "What does the global statement do?",
    "How does try/finally behave when the try block returns?",
    "What is a lambda expression?",
    "How does slicing work on sequences?",
    "What does the assert statement do?",
    "How do f-strings format values?",
    "What are the augmented assignment statements?",
    "How does the import statement find modules?",
    "What does the nonlocal statement do?",
    "Who won the 2018 FIFA World Cup?",
    "What is the boiling point of water at sea level?",
    "Who painted the Mona Lisa?",
    "What is the capital of Australia?",
    "How many moons does Jupiter have?",
    "When did the Berlin Wall fall?",
]


def _verdict(value: float, target: float) -> str:
    return f"{value:.1f} vs <= {target:g}: {'met' if value <= target else 'MISSED'}"


#: The earlier defaults the levers are measured against, and each lever alone and together (settings overrides).
BEFORE = {"embedder": "sentence-transformers", "top_k": 20, "grade_batch": 0}
EARLIER = {"embedder": "onnx-int8", "grade_batch": 10, "top_k": 15}
DEFAULTS = {"embedder": "onnx-int8", "grade_batch": 10, "top_k": 10}
DISTILLED = "fastcrag-grader-reader-minilm-l3-distilled"
LEVERS: dict[str, dict[str, Any]] = {
    "before: fp32 embedder, top_k 20, all graded": BEFORE,
    "int8 query embedder": {**BEFORE, "embedder": "onnx-int8"},
    "early exit, batches of 10": {**BEFORE, "grade_batch": 10},
    "early exit, batches of 5": {**BEFORE, "grade_batch": 5},
    "top_k 15": {**BEFORE, "top_k": 15},
    "top_k 10": {**BEFORE, "top_k": 10},
    "int8 + early exit 10": {**BEFORE, "embedder": "onnx-int8", "grade_batch": 10},
    "int8 + early exit 5": {**BEFORE, "embedder": "onnx-int8", "grade_batch": 5},
    "int8 + early exit 10 + top_k 15 (the defaults until top_k 10)": EARLIER,
    "int8 + top_k 10, early exit 10 (the defaults)": DEFAULTS,
    "the defaults with the distilled 3-layer grader": {**DEFAULTS, "reranker": DISTILLED},
}


class LocalGraph:
    """A graph in this process, each run paying its own forward passes (grader cache cleared first)."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        """Build the graph over the default index (environment settings with `overrides`); load every model."""
        # the CLI imports this module to build its parser: the graph and its parts load when the bench runs
        from fastcrag.components import Components
        from fastcrag.config.settings import Settings
        from fastcrag.graph.builder import build_graph

        parts = Components(Settings(**(overrides or {})))
        self.parts = parts
        self.graph = build_graph(parts=parts)
        parts.warm_up()
        self._clear: Callable[[], None] = getattr(parts.reranker(), "clear_cache", lambda: None)
        self.invoke("warm-up: what is a module?")

    def setup(self) -> LeverSetup:
        """The names this graph's runs record, its `top_k` and how it orders graded candidates."""
        from fastcrag.evaluation.retrieval import GraphOrder
        from fastcrag.retrieval.embeddings import default_embeddings
        from lab.benchmarks.pareto import LeverSetup

        settings, cal = self.parts.settings, self.parts.calibration()
        order = GraphOrder(cal.rerank_weight, settings.grade_batch, cal.crag_upper)
        embedder = default_embeddings(settings.embedder).name
        floors = (*cal.thresholds(), cal.reader_threshold, cal.refine_reader_threshold)
        return LeverSetup(embedder, self.parts.reranker().name, settings.top_k, order, floors)

    def invoke(self, question: str, context: Any = None) -> dict[str, Any]:
        """One cold-cache run."""
        self._clear()
        out: dict[str, Any] = self.graph.invoke({"question": question}, context=context)
        return out


def core(local: LocalGraph, questions: Sequence[str]) -> dict[str, Any]:
    """Stage P50/P95 and the action mix, CRAG off and on interleaved question by question."""
    from lab.benchmarks.bench import retrieval_total  # loads the graph: only when the bench runs

    variants = {"CRAG off": Context(crag_enabled=False), "CRAG on": Context()}
    stages: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    actions: dict[str, Counter[str]] = {v: Counter() for v in variants}
    for q in questions:
        for label, context in variants.items():
            out = local.invoke(q, context)
            timings = out["crag"]["timings"]
            actions[label][out["crag"]["action"]] += 1
            for stage, ms in {**timings, "retrieval_total_ms": retrieval_total(timings)}.items():
                stages[label].setdefault(stage, []).append(float(ms))
    report: dict[str, Any] = {}
    for label in variants:
        report[label] = {s: {"p50": percentile(v, 50), "p95": percentile(v, 95)} for s, v in stages[label].items()}
        report[label]["actions"] = dict(actions[label])
        rows = "  ".join(f"{s}={v['p50']:.1f}/{v['p95']:.1f}" for s, v in report[label].items() if s != "actions")
        print(f"  {label}, P50/P95 ms over {len(questions)} questions: {rows}; actions {dict(actions[label])}")
    return report


def levers_section(questions: Sequence[str], quality_root: Path | None) -> dict[str, Any]:
    """Each lever's retrieval latency (CRAG off) and early-stop share, and its bands against the earlier defaults'.

    With `quality_root`, each lever's quality is read from the stored runs under it (`pareto.lever_quality`) and the
    Pareto table of latency against quality is printed and returned under `pareto`.
    """
    from lab.benchmarks.bench import retrieval_total  # loads the graph: only when the bench runs

    graphs = {name: LocalGraph(overrides) for name, overrides in LEVERS.items()}
    off = Context(crag_enabled=False)
    totals: dict[str, list[float]] = {n: [] for n in graphs}
    stages: dict[str, dict[str, list[float]]] = {n: {"retrieve_ms": [], "rerank_ms": []} for n in graphs}
    stopped: Counter[str] = Counter()
    same_band: Counter[str] = Counter()
    for q in questions:  # interleaved question by question, so drifts in machine load fall on every lever alike
        bands = {}
        for name, graph in graphs.items():
            crag = graph.invoke(q, off)["crag"]
            totals[name].append(retrieval_total(crag["timings"]))
            for stage in stages[name]:
                stages[name][stage].append(float(crag["timings"].get(stage, 0.0)))
            stopped[name] += any(v["verdict"] == "UNGRADED" for v in crag["verdicts"])
            bands[name] = crag["band"]
        first = next(iter(bands.values()))
        for name, band in bands.items():
            same_band[name] += band == first
    report: dict[str, Any] = {}
    for name in graphs:
        row = {
            "settings": LEVERS[name],
            "retrieval total P50 ms": percentile(totals[name], 50),
            "retrieval total P95 ms": percentile(totals[name], 95),
            **{f"{stage} P50": percentile(v, 50) for stage, v in stages[name].items()},
            "stopped early": stopped[name] / len(questions),
            "same band as before": same_band[name] / len(questions),
        }
        report[name] = row
        print(
            f"  {name}: retrieval total P50 {row['retrieval total P50 ms']:.0f} ms (P95 "
            f"{row['retrieval total P95 ms']:.0f}; embed + search {row['retrieve_ms P50']:.0f}, grading "
            f"{row['rerank_ms P50']:.0f}); stopped early {row['stopped early']:.0%}; same band "
            f"{row['same band as before']:.0%}"
        )
    if quality_root is not None:
        from lab.benchmarks.pareto import lever_quality, pareto_table

        quality = lever_quality({name: graph.setup() for name, graph in graphs.items()}, quality_root)
        latency = "retrieval total P50 ms"
        for name, measured in quality.items():
            report[name]["quality"] = measured
        table = pareto_table({n: {latency: report[n][latency], **quality[n]} for n in graphs}, latency)
        report["pareto"] = table
        print(f"\nlatency against quality stored under {quality_root}:\n{table}")
        missing = missing_quality(quality, quality_root)
        if missing:
            print("no stored run gives some levers' quality; these commands make them:")
            print("\n".join(f"  {command}" for command in missing))
    return report


def missing_quality(quality: dict[str, dict[str, Any]], root: Path) -> list[str]:
    """The commands that store the runs a lever's quality lacks, under `root` (one per distinct run)."""
    from lab.benchmarks.pareto import SCIFACT, TRUTHFULNESS

    commands: dict[str, None] = {}
    for name, measured in quality.items():
        settings = LEVERS[name]
        env = " ".join(f"FASTRAG_{k.upper()}={v}" for k, v in sorted(settings.items()))
        if SCIFACT not in measured:  # depth 20 serves every top_k up to 20 of the same embedder and grader
            first_pass = " ".join(
                f"FASTRAG_{k.upper()}={v}" for k, v in sorted(settings.items()) if k in ("embedder", "reranker")
            )
            slug = "-".join(str(settings.get(k, "default")) for k in ("embedder", "reranker"))
            commands[
                f"{first_pass} fastcrag eval retrieval --beir {SHARED_DATA / 'scifact'} --depth 20 "
                f"--out {root}/scifact-{slug}"
            ] = None
        if TRUTHFULNESS not in measured:
            slug = "-".join(str(v) for _, v in sorted(settings.items()))
            commands[
                f"{env} fastcrag eval abstention --squad {SHARED_DATA / 'squad2-dev'} "
                f"--off-corpus {SHARED_DATA / 'train' / 'squad11-train'} --per-class 40 --generators extractive "
                f"--variants crag --out {root}/abstention-{slug}"
            ] = None
    return list(commands)


def served_against_local(
    wait: Callable[[str], dict[str, Any]], local: LocalGraph, questions: Sequence[str]
) -> dict[str, float]:
    """`/runs/wait` vs in-process, interleaved; also how much of each lies inside the graph's own stages."""
    served_ms: list[float] = []
    local_ms: list[float] = []
    served_in: list[float] = []
    local_in: list[float] = []
    for q in questions:
        t = time.perf_counter()
        out = wait(q)
        served_ms.append((time.perf_counter() - t) * 1000)
        served_in.append(sum(out["crag"]["timings"].values()))
        t = time.perf_counter()
        mine = local.invoke(q)
        local_ms.append((time.perf_counter() - t) * 1000)
        local_in.append(sum(mine["crag"]["timings"].values()))
    figures = {
        "served P50 ms": statistics.median(served_ms),
        "served P95 ms": percentile(served_ms, 95),
        "in-process P50 ms": statistics.median(local_ms),
        "in-process P95 ms": percentile(local_ms, 95),
        "served outside the graph P50 ms": statistics.median(s - i for s, i in zip(served_ms, served_in, strict=True)),
        "in-process outside the graph P50 ms": statistics.median(
            s - i for s, i in zip(local_ms, local_in, strict=True)
        ),
    }
    figures["overhead P50 ms"] = figures["served P50 ms"] - figures["in-process P50 ms"]
    return figures


@contextmanager
def _runs_wait(url: str) -> Iterator[Callable[[str], dict[str, Any]]]:
    """`/runs/wait` of the server at `url`, one question at a time (its client closed on leaving)."""
    import httpx  # about 0.2 s: kept off the CLI's start, which imports this module for its parser

    with httpx.Client(base_url=url, timeout=300.0) as client:

        def wait(question: str) -> dict[str, Any]:
            resp = client.post("/runs/wait", json={"assistant_id": "crag", "input": {"question": question}})
            resp.raise_for_status()
            out: dict[str, Any] = resp.json()
            if "crag" not in out:
                raise RuntimeError(f"/runs/wait answered without a trace: {str(out)[:300]}")
            return out

        yield wait


def _server_env(scratch: Path) -> dict[str, str]:
    """This environment, offline, without a key or a metrics folder; threads in `scratch` unless set."""
    env = {**os.environ, **launch.OFFLINE_ENV}
    for name in ("FASTRAG_API_KEY", "PROMETHEUS_MULTIPROC_DIR"):
        env.pop(name, None)
    env.setdefault("FASTRAG_CHECKPOINTS", str(scratch / "threads.sqlite"))
    return env


def serve_section(local: LocalGraph, questions: Sequence[str], workers: int, project: Path) -> dict[str, Any]:
    """`fastcrag serve` and `langgraph dev` against the in-process graph, each over questions new to it."""
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fastcrag-bench-speed-") as tmp:
        scratch = Path(tmp)
        env = _server_env(scratch)
        servers: dict[str, Callable[[], AbstractContextManager[launch.ServerProcess]]] = {
            f"fastcrag serve --workers {workers}": lambda: launch.serve(scratch, env, workers=workers),
            "langgraph dev": lambda: launch.langgraph_dev(project, scratch, env),
        }
        for name, start in servers.items():
            try:
                with start() as server, _runs_wait(server.url) as wait:
                    wait("warm-up: what is a package?")  # the first run may still load models
                    figures = served_against_local(wait, local, questions)
            except launch.ServerStartError as exc:
                print(f"  {name}: not measured: {str(exc).splitlines()[0]}")
                report[name] = {"error": str(exc).splitlines()[0]}
                continue
            figures["start to ready s"] = server.start_s
            report[name] = figures
            print(
                f"  {name}: /runs/wait P50 {figures['served P50 ms']:.0f} ms (P95 {figures['served P95 ms']:.0f}) vs "
                f"in-process {figures['in-process P50 ms']:.0f} ms (P95 {figures['in-process P95 ms']:.0f}): "
                f"{figures['overhead P50 ms']:+.0f} ms; outside the graph's stages "
                f"{figures['served outside the graph P50 ms']:.0f} vs "
                f"{figures['in-process outside the graph P50 ms']:.0f} ms; ready in {server.start_s:.1f} s"
            )
    return report


def cold_section(questions: Sequence[str], repeats: int = 3) -> dict[str, float]:
    """`fastcrag ask` in a new process to its answer; `fastcrag serve --workers 1` start to its first answer."""
    asks: list[float] = []
    serves: list[float] = []
    with tempfile.TemporaryDirectory(prefix="fastcrag-bench-cold-") as tmp:
        scratch = Path(tmp)
        env = _server_env(scratch)
        try:
            for q in questions[: repeats + 1]:
                t = time.perf_counter()
                done = subprocess.run([*launch.fastcrag_command(), "ask", q], env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    raise launch.ServerStartError(f"`fastcrag ask` exited with {done.returncode}: {done.stderr[-500:]}")
                asks.append(time.perf_counter() - t)
            for q in questions[: repeats + 1]:
                t = time.perf_counter()
                with launch.serve(scratch, env, workers=1) as server, _runs_wait(server.url) as wait:
                    wait(q)
                    serves.append(time.perf_counter() - t)
        except launch.ServerStartError as exc:
            print(f"  not measured: {str(exc).splitlines()[0]}")
            return {}
    figures = {
        "ask to answer s": statistics.median(asks[1:]),
        "serve start to first answer s": statistics.median(serves[1:]),
    }
    print(
        f"  `fastcrag ask` to the answer: {figures['ask to answer s']:.2f} s; `fastcrag serve` start to the first "
        f"answer: {figures['serve start to first answer s']:.2f} s (medians of {repeats}, after one discarded run)"
    )
    return figures


def run(args: argparse.Namespace) -> int:
    """Run the sections, print each and the targets, and write the JSON report when asked."""
    from fastcrag.evaluation.common import machine_note  # loads the models' stack: only when the bench runs

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = sorted(skip - set(SECTIONS))
    if unknown:
        print(
            f"fastcrag: error: unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.questions <= len(QUESTIONS):
        print(f"fastcrag: error: --questions must be between 1 and {len(QUESTIONS)}", file=sys.stderr)
        return 2
    questions = QUESTIONS[: args.questions]
    report: dict[str, Any] = {"version": VERSION, "machine": machine_note(), "questions": len(questions)}
    print(f"bench-speed: {report['machine']}")
    local = LocalGraph() if {"core", "serve"} - skip else None
    if local is not None and "core" not in skip:
        print("core (in-process, grader cache cleared before each run):")
        report["core"] = core(local, questions)
    if local is not None and "serve" not in skip:
        print("serve (interleaved with the in-process graph, questions new to both):")
        report["serve"] = serve_section(local, questions, args.workers, Path(args.project))
    if "cold" not in skip:
        print("cold start:")
        report["cold"] = cold_section(QUESTIONS)
    if "levers" not in skip:
        print("levers (CRAG off, grader cache cleared before each run, interleaved):")
        report["levers"] = levers_section(questions, Path(args.quality) if args.quality else None)
    if "embedder" not in skip:
        from lab.benchmarks.bench_embedder import embedder_benchmark  # torch: only for this section

        print("embedder (int8 ONNX vs fp32 sentence-transformers):")
        beir = Path(args.beir) if args.beir else None
        report["embedder"] = embedder_benchmark(beir=beir, rounds=args.rounds, threads=args.threads)
    print("\ntargets:")
    for line in target_lines(report):
        print(f"  {line}")
    if args.out:
        write_json_atomic(Path(args.out), report)
    return 0


def target_lines(report: dict[str, Any]) -> list[str]:
    """The measured figure beside each target of the sections that ran."""
    lines = []
    if "core" in report:
        total = report["core"]["CRAG off"]["retrieval_total_ms"]["p50"]
        key = "retrieval total P50 ms (CRAG off)"
        lines.append(f"{key}: {_verdict(total, TARGETS[key])}")
        crag = report["core"]["CRAG on"].get("crag_ms", {"p50": 0.0})["p50"]
        key = "crag_ms P50 (CRAG on)"
        lines.append(f"{key}: {_verdict(crag, TARGETS[key])}")
    for name, figures in report.get("serve", {}).items():
        if "overhead P50 ms" in figures:
            target = TARGETS["serve overhead P50 ms"] if name.startswith("fastcrag serve") else float("inf")
            shown = (
                _verdict(figures["overhead P50 ms"], target)
                if target < float("inf")
                else f"{figures['overhead P50 ms']:+.0f} (reported beside it; its queue is polled)"
            )
            lines.append(f"{name} /runs/wait overhead P50 ms: {shown}")
    if report.get("cold"):
        cold = report["cold"]
        lines.append(
            f"cold start: ask {cold['ask to answer s']:.2f} s, serve to first answer "
            f"{cold['serve start to first answer s']:.2f} s (reported)"
        )
    if "embedder" in report:
        lines.append("embedder: see the targets printed under its table")
    return lines


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `bench-speed` to the main CLI's subparsers."""
    b = subparsers.add_parser(
        "bench-speed", help="every speed figure in one run: retrieval, CRAG, served vs in-process, cold start, embedder"
    )
    b.add_argument("--questions", type=int, default=len(QUESTIONS), help=f"questions, at most {len(QUESTIONS)}")
    b.add_argument("--workers", type=int, default=2, help="`fastcrag serve` workers (default: 2)")
    b.add_argument("--project", default=".", help="folder with langgraph.json, for the `langgraph dev` row")
    b.add_argument("--skip", default="", help=f"comma-separated sections to leave out, from {', '.join(SECTIONS)}")
    b.add_argument(
        "--beir", default=str(SHARED_DATA / "scifact"), help="SciFact BEIR folder for the embedder's nDCG row"
    )
    b.add_argument("--rounds", type=int, default=3, help="embedder throughput rounds (default: 3)")
    b.add_argument("--threads", type=int, default=2, help="embedder threads (default: 2)")
    b.add_argument(
        "--quality",
        default="runs",
        help="folder of stored `eval retrieval` runs and `eval-grader --out` tables giving each lever's quality "
        "(default: runs; empty: latency only)",
    )
    b.add_argument("--out", help="also write the report as JSON here")
    b.set_defaults(func=run)
