"""Command line: index, ask, fit, eval and serve."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

log = logging.getLogger("fastcrag")


class UserError(Exception):
    """An error to report in one line, without a traceback."""


def _settings(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from fastcrag.config.settings import Settings

    overrides: dict[str, Any] = {}
    if getattr(args, "index", None):
        overrides["index_dir"] = Path(args.index)
    if getattr(args, "llm", None):
        overrides["llm"] = args.llm
    if getattr(args, "reranker", None):
        overrides["reranker"] = args.reranker
    if getattr(args, "no_crag", False):
        overrides["crag_enabled"] = False
    if getattr(args, "flare", False):
        overrides["mode"] = "flare"
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise UserError(f"invalid setting: {exc}") from None


def cmd_index(args: argparse.Namespace) -> int:
    """Index files and folders into a FAISS folder or a Postgres collection."""
    from fastcrag.config.settings import is_postgres_url, redact_url
    from fastcrag.retrieval.indexing import build_index
    from fastcrag.retrieval.loaders import load_documents

    settings = _settings(args)
    store = args.store if args.store is not None else settings.store
    if store and not is_postgres_url(store):
        raise UserError(f"--store / FASTRAG_STORE takes a Postgres URL (postgresql://...), not {redact_url(store)!r}")
    paths = [Path(p) for p in args.paths]
    for p in paths:
        if not p.exists():
            raise UserError(f"no such file or folder: {p}")
    if args.ray is not None:
        if not store:
            raise UserError("--ray builds into a Postgres store: give --store URL (or FASTRAG_STORE)")
        from fastcrag.retrieval.raybuild import ray_build_index

        collection = args.collection or settings.collection
        target = f"{redact_url(store)} collection {collection!r} (Ray)"
        report = ray_build_index(
            paths, store, collection, address=args.ray, settings=settings, progress=not args.quiet, prune=args.prune
        )
    elif store:
        from fastcrag.retrieval.embeddings import default_embeddings
        from fastcrag.retrieval.pgstore import build_pg_index

        collection = args.collection or settings.collection
        target = f"{redact_url(store)} collection {collection!r}"
        report = build_pg_index(
            load_documents(paths),
            store,
            default_embeddings(),
            collection,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap=settings.chunk_overlap,
            progress=not args.quiet,
            prune=args.prune,
        )
    else:
        folder = settings.index_dir
        if folder is None:
            raise UserError("give the index folder with --index DIR or FASTRAG_INDEX_DIR (or --store URL)")
        target = str(folder)
        report = build_index(
            load_documents(paths),
            folder,
            chunk_tokens=settings.chunk_tokens,
            chunk_overlap=settings.chunk_overlap,
            progress=not args.quiet,
            prune=args.prune,
        )
    removed = f", {report.documents_removed} removed" if args.prune else ""
    print(
        f"{target}: {report.documents_added} new, {report.documents_changed} changed, "
        f"{report.documents_unchanged} unchanged documents{removed}; {report.chunks_added} chunks added "
        f"({report.chunks_per_second:.1f} chunks/s), {report.chunks_total} in the index"
    )
    return 0


def format_result(result: dict[str, Any]) -> str:
    """Human-readable answer, citations and decision trace."""
    crag = result.get("crag", {})
    lines = [result.get("answer", ""), ""]
    if result.get("citations"):
        lines.append("Citations:")
        lines += [
            f"  [{i}] {c['source']}  chunk {c['chunk_id']}  score {c['score']:.3f}"
            for i, c in enumerate(result["citations"], 1)
        ]
        lines.append("")
    top = crag.get("top_score")
    thresholds = crag.get("thresholds") or {}
    lines.append(
        f"Trace: action={crag.get('action')} band={crag.get('band')} "
        f"top_score={'n/a' if top is None else f'{top:.3f}'} "
        f"thresholds={thresholds.get('reranker_threshold')}/{thresholds.get('crag_upper')} "
        f"grader={crag.get('reranker')} strips_kept={crag.get('strips_kept')} retrieval={crag.get('retrieval')}"
    )
    if crag.get("rewritten_query"):
        lines.append(f"  rewritten query ({crag.get('rewriter')}): {crag['rewritten_query']}")
    if crag.get("failure"):
        lines.append(f"  failure: {crag['failure']}")
    timings = crag.get("timings", {})
    lines.append("  timings: " + " ".join(f"{k}={v:.1f}" for k, v in timings.items()))
    for v in crag.get("verdicts", [])[:5]:
        score = "    -" if v["score"] is None else f"{v['score']:.3f}"
        unmet = f"  (states no {', '.join(v['unmet'])})" if v.get("unmet") else ""
        lines.append(f"  {v['verdict']:<9} {score}  {v['source']}{unmet}")
    if "flare" in crag:
        lines.append(f"  FLARE: {len(crag['flare'])} active retrievals, stopped at {crag.get('flare_stop') or 'n/a'}")
    for r in crag.get("flare") or []:
        lines.append(f"    {r['action'] or '-':<6} {r['band'] or 'FAILED':<9} {r['sentence']!r}")
        lines.append(f"           searched {r['query']!r} ({r['query_by']})")
        if r.get("rewritten"):
            lines.append(f"           written again: {r['rewritten']!r}")
    return "\n".join(lines)


def cmd_ask(args: argparse.Namespace) -> int:
    """Answer one question."""
    from fastcrag.components import Components
    from fastcrag.graph.builder import build_graph

    parts = Components(_settings(args))
    graph = build_graph(parts=parts)  # loads nothing; refuses FLARE mode without token log-probabilities
    parts.warm_up()  # load errors are reported plainly, timings are warm
    result = graph.invoke({"question": args.question})
    result.pop("messages", None)
    print(json.dumps(result, ensure_ascii=False, indent=2) if args.json else format_result(result))
    return 0


def parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(prog="fastcrag", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)

    ix = sub.add_parser("index", help="index .txt .md .html .pdf files and BEIR .jsonl(.gz) corpora")
    ix.add_argument("paths", nargs="+", help="files and folders")
    ix.add_argument("--index", help="index folder (default: FASTRAG_INDEX_DIR)")
    ix.add_argument("--store", help="Postgres URL to index into instead of a folder (default: FASTRAG_STORE)")
    ix.add_argument("--collection", help="collection (index name) in the Postgres store (default: FASTRAG_COLLECTION)")
    ix.add_argument("--prune", action="store_true", help="remove documents whose source is not among PATHS")
    ix.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help="build on Ray (the `ray` extra; needs --store): a cluster's address, or `auto` (the default): RAY_ADDRESS "
        "when set, else a local Ray runtime",
    )
    ix.add_argument("--quiet", action="store_true", help="no progress bar")
    ix.set_defaults(func=cmd_index)

    ask = sub.add_parser("ask", help="answer a question, with citations and the CRAG decision trace")
    ask.add_argument("question")
    ask.add_argument("--index", help="index folder (default: FASTRAG_INDEX_DIR, else the embedded one)")
    ask.add_argument("--llm", help="`provider:model` or `extractive` (default: FASTRAG_LLM)")
    ask.add_argument("--reranker", help="reranker folder, model name or `bi-encoder`")
    ask.add_argument("--no-crag", action="store_true", help="retrieval-only path (FASTRAG_CRAG_ENABLED=false)")
    ask.add_argument(
        "--flare",
        action="store_true",
        help="FLARE mode (FASTRAG_MODE=flare): sentence by sentence, with active retrieval for uncertain ones; needs "
        "a chat model that returns token log-probabilities",
    )
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    ask.set_defaults(func=cmd_ask)

    from fastcrag.evaluation.cli import add_commands as add_evaluation
    from fastcrag.fitting.cli import add_commands as add_fitting
    from fastcrag.server.cli import add_commands as add_server

    add_fitting(sub)
    add_evaluation(sub)
    add_server(sub)
    return p


def run(args: argparse.Namespace, prog: str, resume_hint: str = "") -> int:
    """Run a parsed command: errors a user can act on in one line (exit 2), never a traceback.

    Args:
        args: The parsed arguments; `args.func` is the command.
        prog: The name the messages start with.
        resume_hint: Said after "interrupted" (for commands that resume).
    """
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format=f"{prog}: %(levelname)s: %(message)s"
    )
    from fastcrag.config.calibration import CalibrationError
    from fastcrag.retrieval.store import IndexLoadError

    try:
        return int(args.func(args))
    except (UserError, CalibrationError, IndexLoadError, FileNotFoundError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted{resume_hint}", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `fastcrag` console script."""
    return run(parser().parse_args(argv), "fastcrag")


if __name__ == "__main__":
    sys.exit(main())
