"""The lab's command line (`python -m lab COMMAND`, from the repository root): calibration, benchmarks, training.

The installed package is what a user runs (`fastcrag index|ask|fit|eval|serve`); these commands rebuild and measure
what it ships: the packaged calibration, the grader and embedder, and the benchmarks behind lab/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastcrag.cli import _settings, run
from fastcrag.config.options import add_options, from_args
from fastcrag.evaluation.cli import _check_paths, _grader, _offline
from fastcrag.evaluation.cli import _settings as _eval_settings
from lab.benchmarks.configs import BenchConfig
from lab.data import OFF_CORPUS, PER_CLASS, PER_MANUAL, SEED, SHARED_DATA, SQUAD, TARGET_PRECISION, TOLERANCE


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Derive the thresholds from labelled questions."""
    from fastcrag.config.calibration import PACKAGED_CALIBRATION
    from fastcrag.grading.reranker import default_reranker_spec, load_reranker
    from lab.calibrate import calibrate
    from lab.calibrate_docs import parse_manual

    settings = _settings(args)
    _check_paths(Path(args.squad), Path(args.off_corpus))
    try:
        manuals = [parse_manual(spec) for spec in args.docs]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wrong = [Path(w) for w in args.wrong_manual]
    _check_paths(*(index for _, index in manuals), *wrong)
    reranker = load_reranker(settings.reranker or default_reranker_spec())
    out = Path(args.out) if args.out else PACKAGED_CALIBRATION
    cal = calibrate(
        Path(args.squad),
        Path(args.off_corpus),
        reranker,
        out,
        per_class=args.per_class,
        seed=args.seed,
        target_precision=args.target_precision,
        tolerance=args.tolerance,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap,
        manuals=manuals,
        wrong_manuals=wrong,
        per_manual=args.docs_per_manual,
    )
    print(
        f"{out}: reranker_threshold={cal.reranker_threshold} crag_upper={cal.crag_upper} "
        f"({cal.reranker_model})\n{json.dumps(cal.metrics, indent=2)}"
    )
    return 0


def cmd_reliability(args: argparse.Namespace) -> int:
    """Print the reliability report; non-zero exit when anything failed."""
    from lab.benchmarks.reliability import run_report  # the command loads its stack when run

    report = run_report(args.runs, args.clients, args.memory_runs, args.kills, args.seed, args.server)
    print(report.render())
    return 1 if report.failures else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Run `python -m lab bench`."""
    from lab.benchmarks.bench import run  # the command loads its stack when run

    _offline()
    cfg = from_args(BenchConfig, args)
    _check_paths(cfg.squad, cfg.off_corpus)
    code = run(cfg, _eval_settings(args))
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


def cmd_bench_embedder(args: argparse.Namespace) -> int:
    """Run `python -m lab bench-embedder`."""
    from lab.benchmarks.bench_embedder import embedder_benchmark  # the command loads its stack when run

    beir = Path(args.beir) if args.beir else None
    embedder_benchmark(beir=beir, rounds=args.rounds, chunks=args.chunks, threads=args.threads)
    return 0


def cmd_bench_batching(args: argparse.Namespace) -> int:
    """Run `python -m lab bench-batching`."""
    from lab.benchmarks.bench_batching import batching_benchmark  # the command loads its stack when run

    beir = Path(args.beir)
    if not (beir / "corpus.jsonl.gz").is_file():
        print(f"error: no SciFact corpus at {beir / 'corpus.jsonl.gz'} (--beir)", file=sys.stderr)
        return 2
    if min(args.chunks, args.rounds, args.threads) < 1:
        print("error: --chunks, --rounds and --threads must be at least 1", file=sys.stderr)
        return 2
    batching_benchmark(beir=beir, chunks=args.chunks, rounds=args.rounds, threads=args.threads, ndcg=args.ndcg)
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `calibrate`, `reliability`, `bench`, `bench-embedder` and `bench-batching`."""
    cal = subparsers.add_parser("calibrate", help="derive reranker_threshold and crag_upper from SQuAD v2 questions")
    cal.add_argument("--squad", default=str(SQUAD), help="SQuAD v2 JSON file or folder")
    cal.add_argument(
        "--off-corpus",
        default=str(OFF_CORPUS),
        help="SQuAD JSON whose articles are not in the corpus",
    )
    cal.add_argument("--reranker", help="reranker to calibrate (default: FASTRAG_RERANKER, else packaged)")
    cal.add_argument("--out", help="calibration.json to write (default: the packaged one)")
    cal.add_argument("--per-class", type=int, default=PER_CLASS, help="questions per class")
    cal.add_argument("--seed", type=int, default=SEED)
    cal.add_argument("--target-precision", type=float, default=TARGET_PRECISION, help="abstention precision to reach")
    cal.add_argument("--tolerance", type=float, default=TOLERANCE, help="share of refinements allowed to matter")
    cal.add_argument(
        "--docs",
        action="append",
        default=[],
        metavar="NAME=INDEX",
        help="also a manual's written questions (lab/questions/reworded/docs-NAME.jsonl) asked of its index",
    )
    cal.add_argument(
        "--wrong-manual", action="append", default=[], metavar="INDEX", help="an index --docs questions are not of"
    )
    cal.add_argument("--docs-per-manual", type=int, default=PER_MANUAL, help="--docs questions per manual and class")
    cal.set_defaults(func=cmd_calibrate)

    rel = subparsers.add_parser("reliability", help="inject faults, bad input, load and kills; print the report")
    rel.add_argument("--runs", type=int, default=50, help="runs under load")
    rel.add_argument("--clients", type=int, default=10, help="concurrent clients")
    rel.add_argument("--memory-runs", type=int, default=200, help="sequential runs for the RSS check")
    rel.add_argument("--kills", type=int, default=4, help="index builds killed with SIGKILL")
    rel.add_argument("--seed", type=int, default=7)
    rel.add_argument("--server", help="run the load against this LangGraph server URL instead of in-process")
    rel.set_defaults(func=cmd_reliability)

    be = subparsers.add_parser("bench", help="stage latency P50/P95/P100, CRAG on vs off, and LLM-judge cost")
    add_options(be, BenchConfig)
    _grader(be)
    be.set_defaults(func=cmd_bench)

    em = subparsers.add_parser("bench-embedder", help="int8 ONNX vs fp32 embedder: speed, fidelity, SciFact nDCG")
    em.add_argument("--beir", default=str(SHARED_DATA / "scifact"), help="SciFact BEIR folder ('' to skip)")
    em.add_argument("--rounds", type=int, default=3, help="interleaved throughput rounds")
    em.add_argument("--chunks", type=int, default=0, help="chunks per round (0: the whole embedded corpus)")
    em.add_argument("--threads", type=int, default=2)
    em.set_defaults(func=cmd_bench_embedder)

    ba = subparsers.add_parser(
        "bench-batching", help="int8 embedder: each text alone vs padded batches (throughput, cosine, nDCG)"
    )
    ba.add_argument("--beir", default=str(SHARED_DATA / "scifact"), help="SciFact BEIR folder")
    ba.add_argument("--chunks", type=int, default=2000, help="chunks of SciFact abstracts per throughput round")
    ba.add_argument("--rounds", type=int, default=3, help="throughput rounds, both ways in each")
    ba.add_argument("--threads", type=int, default=2)
    ba.add_argument("--ndcg", action="store_true", help="also SciFact test nDCG@10 (dense), each way")
    ba.set_defaults(func=cmd_bench_batching)


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    from lab.benchmarks.bench_ray import add_commands as add_bench_ray
    from lab.benchmarks.bench_speed import add_commands as add_bench_speed
    from lab.benchmarks.bench_store import add_commands as add_bench_store
    from lab.training.cli import add_commands as add_training

    p = argparse.ArgumentParser(prog="python -m lab", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)
    add_commands(sub)
    add_training(sub)
    add_bench_store(sub)
    add_bench_speed(sub)
    add_bench_ray(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m lab`."""
    return run(parser().parse_args(argv), "lab", " (rerun the same command to resume)")
