"""Subcommands `eval abstention|retrieval|results` of the `fastcrag` command line."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from fastcrag.config.settings import SHARED_DATA, SMOLLM2_LLM, Settings
from fastcrag.evaluation.results import write_results

DATA = str(SHARED_DATA)


def _settings(args: argparse.Namespace) -> Any:
    overrides: dict[str, Any] = {}
    if getattr(args, "reranker", None):
        overrides["reranker"] = args.reranker
    if getattr(args, "calibration", None):
        overrides["calibration"] = Path(args.calibration)
    return Settings(**overrides)


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _check_extra() -> None:
    """Fail in one line, before any work, when the `eval` extra (ir-measures, matplotlib) is not installed."""
    missing = [m for m in ("ir_measures", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"`fastcrag eval` needs {' and '.join(missing)}: pip install 'fastcrag[eval]'")


def _check_paths(*paths: Path) -> None:
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"no such file or folder: {p}")


def parse_variants(text: str) -> list[str]:
    """The variants named by `--variants`, in canonical order (the same choice gives the same config hash).

    Raises:
        ValueError: a name is not a variant, or none is named.
    """
    from fastcrag.evaluation.abstention import VARIANTS  # the graph's stack: kept off the CLI parser's import

    names = {v.strip() for v in text.split(",") if v.strip()}
    if not names or names - set(VARIANTS):
        raise ValueError(f"--variants takes a comma-separated subset of {','.join(VARIANTS)}, got {text!r}")
    return [v for v in VARIANTS if v in names]


def cmd_abstention(args: argparse.Namespace) -> int:
    """Run `fastcrag eval abstention`."""
    from fastcrag.evaluation.abstention import AbstentionConfig, run  # the command loads its stack when run

    _offline()
    _check_extra()
    cfg = AbstentionConfig(
        squad=Path(args.squad),
        off_corpus=Path(args.off_corpus),
        per_class=args.per_class,
        seed=args.seed,
        generators=[g.strip() for g in args.generators.split(",") if g.strip()],
        variants=parse_variants(args.variants),
        out=Path(args.out),
        fresh=args.fresh,
        threads=args.threads,
        exclude_calibration=not args.include_calibration_sample,
        distractors=args.distractors,
    )
    _check_paths(cfg.squad, cfg.off_corpus)
    if cfg.distractors < 0:
        raise ValueError("--distractors must be >= 0")
    if cfg.per_class < 1 or not cfg.generators:
        raise ValueError("--per-class must be >= 1 and --generators must name at least one generator")
    code = run(cfg, _settings(args))
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


def cmd_retrieval(args: argparse.Namespace) -> int:
    """Run `fastcrag eval retrieval`."""
    from fastcrag.evaluation.retrieval import RetrievalConfig, run  # the command loads its stack when run

    _offline()
    _check_extra()
    cfg = RetrievalConfig(
        beir=Path(args.beir),
        split=args.split,
        queries=args.queries,
        seed=args.seed,
        depth=args.depth,
        index_cache=None if args.no_index_cache else Path(args.index_cache),
        out=Path(args.out),
        fresh=args.fresh,
        threads=args.threads,
    )
    _check_paths(cfg.beir)
    code = run(cfg, _settings(args))
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


DEFAULT_COMMANDS = [
    "export HF_HUB_OFFLINE=1",
    "fastcrag eval abstention     # -> runs/eval-abstention/",
    "fastcrag eval retrieval      # -> runs/eval-retrieval/",
    "python -m lab bench          # -> runs/bench/",
    "fastcrag eval results        # -> docs/RESULTS.md",
]


def cmd_results(args: argparse.Namespace) -> int:
    """Run `fastcrag eval results`."""
    preface = Path(args.preface).read_text(encoding="utf-8") if args.preface else ""
    write_results(Path(args.runs), Path(args.out), DEFAULT_COMMANDS, preface)
    print(f"{args.out}: written from the reports under {args.runs}")
    return 0


def _common(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--out", default=out, help=f"output folder (default: {out})")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads per model (default: 1; oversubscribed threads spin on a shared machine; 0: library default)",
    )
    p.add_argument("--fresh", action="store_true", help="discard earlier results in --out instead of resuming")
    p.add_argument("--reranker", help="grader folder, model name or `bi-encoder` (default: FASTRAG_RERANKER)")
    p.add_argument("--calibration", help="calibration.json (default: FASTRAG_CALIBRATION, else the packaged one)")


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `eval` (with `abstention`, `retrieval` and `results`) to the `fastcrag` parser."""
    ev = subparsers.add_parser("eval", help="evaluate CRAG against plain RAG on shared data")
    ev_sub = ev.add_subparsers(dest="eval_command", required=True)

    ab = ev_sub.add_parser(
        "abstention", help="truthfulness and abstention on SQuAD v2: CRAG on, threshold only, plain RAG"
    )
    ab.add_argument("--squad", default=f"{DATA}/squad2-dev", help="SQuAD v2 JSON file or folder (the corpus)")
    ab.add_argument(
        "--off-corpus",
        default=f"{DATA}/train/squad11-train",
        help="SQuAD JSON whose articles are not indexed (off-corpus questions)",
    )
    ab.add_argument("--per-class", type=int, default=40, help="questions per class (default: 40)")
    ab.add_argument("--seed", type=int, default=2026)
    ab.add_argument(
        "--distractors",
        type=int,
        default=0,
        help="index also the paragraphs of N --off-corpus articles that no asked question comes from, so "
        "first-pass retrieval can miss (default: 0)",
    )
    ab.add_argument(
        "--generators",
        default=f"extractive,{SMOLLM2_LLM}",
        help=f"comma-separated generators (default: extractive,{SMOLLM2_LLM})",
    )
    ab.add_argument(
        "--variants",
        default="crag,threshold,plain",
        help="comma-separated graph variants per generator: crag (CRAG on), threshold (CRAG off, abstain below "
        "the threshold), plain (plain RAG: no grading, no abstention) (default: crag,threshold,plain)",
    )
    ab.add_argument(
        "--include-calibration-sample",
        action="store_true",
        help="allow questions of the calibration sample (excluded by default)",
    )
    _common(ab, "runs/eval-abstention")
    ab.set_defaults(func=cmd_abstention)

    rt = ev_sub.add_parser("retrieval", help="nDCG@10, recall@10/100 on a BEIR folder, bi-encoder vs reranked")
    rt.add_argument("--beir", default=f"{DATA}/scifact", help="BEIR folder (corpus.jsonl.gz, queries, qrels/)")
    rt.add_argument("--split", default="test", help="qrels split (default: test)")
    rt.add_argument("--queries", type=int, default=0, help="sample this many queries (default 0: all)")
    rt.add_argument("--seed", type=int, default=2026)
    rt.add_argument("--depth", type=int, default=30, help="documents reranked per query (default: 30)")
    rt.add_argument(
        "--index-cache",
        default="~/.cache/fastcrag/eval-index",
        help="folder for the embedded corpus index, reused across runs (default: ~/.cache/fastcrag/eval-index)",
    )
    rt.add_argument("--no-index-cache", action="store_true", help="embed the corpus afresh, keep nothing")
    _common(rt, "runs/eval-retrieval")
    rt.set_defaults(func=cmd_retrieval)

    rs = ev_sub.add_parser("results", help="stitch the three reports into one Results page")
    rs.add_argument("--runs", default="runs", help="folder holding eval-abstention/, eval-retrieval/, bench/")
    rs.add_argument("--out", default="docs/RESULTS.md", help="page to write (default: docs/RESULTS.md)")
    rs.add_argument("--preface", help="Markdown file whose text opens the page (e.g. a summary)")
    rs.set_defaults(func=cmd_results)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (`python -m fastcrag.evaluation.cli ...`), the same commands as `fastcrag`."""
    parser = argparse.ArgumentParser(prog="fastcrag", description=__doc__)
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("fastcrag: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:  # bad options, data or calibration: one line, no traceback
        print(f"fastcrag: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
