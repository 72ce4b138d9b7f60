"""Subcommands `eval abstention|retrieval|docs|results` of the `fastcrag` command line."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, TypeVar

from fastcrag.config.options import add_options, from_args
from fastcrag.config.settings import Settings
from fastcrag.evaluation.configs import DATA_SETTING, AbstentionConfig, DocsConfig, RetrievalConfig
from fastcrag.evaluation.configs import parse_variants as parse_variants
from fastcrag.evaluation.results import write_results

Cfg = TypeVar("Cfg", AbstentionConfig, RetrievalConfig)


def _settings(args: argparse.Namespace, **overrides: Any) -> Any:
    if getattr(args, "reranker", None):
        overrides["reranker"] = args.reranker
    if getattr(args, "calibration", None):
        overrides["calibration"] = Path(args.calibration)
    return Settings(**overrides)


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _prepared(args: argparse.Namespace, config: type[Cfg]) -> tuple[Cfg, Any]:
    """The command's config and settings; each data option the command line left out comes from `FASTRAG_DATA`.

    Raises:
        ValueError: the `eval` extra (ir-measures, matplotlib) is not installed, or an option is left out and
            `FASTRAG_DATA` is not set (one line naming both), before any work.
        FileNotFoundError: a data option names no file or folder.
    """
    _offline()
    if missing := [m for m in ("ir_measures", "matplotlib") if importlib.util.find_spec(m) is None]:
        raise ValueError(f"`fastcrag eval` needs {' and '.join(missing)}: pip install 'fastcrag[eval]'")
    settings = _settings(args)
    for name, under in config.DATA.items():
        if getattr(args, name) is None and settings.data is None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"no {flag}: give {flag} PATH, or set {DATA_SETTING} to the folder holding {under}/")
        setattr(args, name, getattr(args, name) or str(settings.data / under))
        _check_paths(Path(getattr(args, name)))
    return from_args(config, args), settings


def _check_paths(*paths: Path) -> None:
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"no such file or folder: {p}")


def cmd_abstention(args: argparse.Namespace) -> int:
    """Run `fastcrag eval abstention`."""
    from fastcrag.evaluation.abstention import run  # the command loads its stack when run

    cfg, settings = _prepared(args, AbstentionConfig)
    if cfg.distractors < 0:
        raise ValueError("--distractors must be >= 0")
    if cfg.per_class < 1 or not cfg.generators:
        raise ValueError("--per-class must be >= 1 and --generators must name at least one generator")
    code = run(cfg, settings)
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


def cmd_retrieval(args: argparse.Namespace) -> int:
    """Run `fastcrag eval retrieval`."""
    from fastcrag.evaluation.retrieval import run  # the command loads its stack when run

    cfg, settings = _prepared(args, RetrievalConfig)
    code = run(cfg, settings)
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


def cmd_docs(args: argparse.Namespace) -> int:
    """Run `fastcrag eval docs`."""
    from fastcrag.evaluation.docs_answers import run  # the command loads its stack when run

    _offline()
    cfg = from_args(DocsConfig, args)
    if cfg.questions is None:
        raise ValueError("give the question set with --questions FILE (JSON Lines)")
    _check_paths(cfg.questions, *([cfg.index] if cfg.index else []))
    overrides: dict[str, Any] = {}
    if cfg.index:
        overrides["index_dir"] = cfg.index
    if cfg.llm:
        overrides["llm"] = cfg.llm
    code = run(cfg, _settings(args, **overrides))
    print((cfg.out / "report.md").read_text(encoding="utf-8"))
    return code


DEFAULT_COMMANDS = [
    "export HF_HUB_OFFLINE=1 FASTRAG_DATA=<your data folder>  # squad2-dev/, train/squad11-train/, scifact/",
    "fastcrag eval abstention     # -> runs/eval-abstention/",
    "fastcrag eval retrieval      # -> runs/eval-retrieval/",
    "python -m lab bench          # -> runs/bench/",
    "fastcrag eval results        # -> runs/RESULTS.md",
]


def cmd_results(args: argparse.Namespace) -> int:
    """Run `fastcrag eval results`."""
    preface = Path(args.preface).read_text(encoding="utf-8") if args.preface else ""
    write_results(Path(args.runs), Path(args.out), DEFAULT_COMMANDS, preface)
    print(f"{args.out}: written from the reports under {args.runs}")
    return 0


def _grader(p: argparse.ArgumentParser) -> None:
    """The settings a run may override: which grader, which calibration."""
    p.add_argument("--reranker", help="grader folder, model name or `bi-encoder` (default: FASTRAG_RERANKER)")
    p.add_argument("--calibration", help="calibration.json (default: FASTRAG_CALIBRATION, else the packaged one)")


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `eval` (with `abstention`, `retrieval`, `docs` and `results`) to the `fastcrag` parser."""
    ev = subparsers.add_parser("eval", help="evaluate CRAG against plain RAG on shared data")
    ev_sub = ev.add_subparsers(dest="eval_command", required=True)

    ab = ev_sub.add_parser(
        "abstention", help="truthfulness and abstention on SQuAD v2: CRAG on, threshold only, plain RAG"
    )
    add_options(ab, AbstentionConfig)
    _grader(ab)
    ab.set_defaults(func=cmd_abstention)

    rt = ev_sub.add_parser("retrieval", help="nDCG@10, recall@10/100 on a BEIR folder, bi-encoder vs reranked")
    add_options(rt, RetrievalConfig)
    _grader(rt)
    rt.set_defaults(func=cmd_retrieval)

    dc = ev_sub.add_parser(
        "docs", help="answers to documentation questions: right page cited, its substance, no table or grammar"
    )
    add_options(dc, DocsConfig)
    _grader(dc)
    dc.set_defaults(func=cmd_docs)

    rs = ev_sub.add_parser("results", help="stitch the three reports into one Results page")
    rs.add_argument("--runs", default="runs", help="folder holding eval-abstention/, eval-retrieval/, bench/")
    rs.add_argument("--out", default="runs/RESULTS.md", help="page to write (default: runs/RESULTS.md)")
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
