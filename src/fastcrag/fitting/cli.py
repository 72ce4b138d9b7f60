"""The `fastcrag fit` command."""

from __future__ import annotations

import argparse
from pathlib import Path

from fastcrag.config.settings import Settings


def _fit(args: argparse.Namespace) -> int:
    # registering the command stays cheap for every other command: the fit (numpy, the index, models) loads here
    from fastcrag.fitting.fit import FitOptions, fit
    from fastcrag.fitting.measure import MIN_RECALL

    if args.train and not args.data_root:
        print("fit: no --data-root given: fine-tuning replays no training mix (the user's pairs alone)", flush=True)
    opts = FitOptions(
        questions=Path(args.questions) if args.questions else None,
        out=Path(args.out),
        index=Path(args.index) if args.index else None,
        store=args.store or "",
        collection=args.collection,
        minutes=args.minutes,
        train=args.train,
        precision=args.precision,
        held_out=args.held_out,
        min_recall=MIN_RECALL if args.min_recall is None else args.min_recall,
        seed=args.seed,
        install=args.install,
        data_root=Path(args.data_root) if args.data_root else None,
        progress=not args.quiet,
        generate=args.generate,
        llm=args.llm or "",
        judge=args.judge,
        replay_exclude=frozenset(args.replay_exclude or ()),
    )
    if args.pseudo is not None:
        opts.pseudo = args.pseudo
    if args.pseudo_kinds:
        opts.pseudo_kinds = tuple(args.pseudo_kinds)
    result = fit(opts, Settings())
    print(f"\n{result.out / 'report.md'}")
    for label, fig in result.figures.items():
        at = fig.at_threshold
        print(
            f"  {label:<28} AUC vs gold removed {fig.auc_gold_removed:.3f}"
            + ("" if fig.auc_unanswerable is None else f", vs unanswerable {fig.auc_unanswerable:.3f}")
            + (
                f"; at its thresholds: abstention precision {at['abstention_precision']:.3f}, recall "
                f"{at['abstention_recall']:.3f}, answerable answered {at['answerable_answered']:.3f}"
                if at
                else ""
            )
        )
    for note in result.notes:
        print(f"  {note}")
    print("\nUse it with:\n  " + " ".join(result.env))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `fit`."""
    f = subparsers.add_parser(
        "fit",
        help="fit the grader's thresholds to your index: from the corpus alone, or with labelled questions; a report",
    )
    f.add_argument(
        "--questions",
        help="JSONL: question + answers | sources | answerable: false (without: a label-free fit on pseudo-questions)",
    )
    where = f.add_mutually_exclusive_group(required=True)
    where.add_argument("--index", help="a FAISS index folder (`fastcrag index ... --index DIR`)")
    where.add_argument("--store", help="a Postgres URL (postgresql://...), with --collection")
    f.add_argument("--collection", default="default", help="the Postgres collection (default: default)")
    f.add_argument("--out", required=True, help="folder for calibration.json, grader/, report.md and plots")
    f.add_argument(
        "--pseudo",
        type=int,
        metavar="N",
        help="pseudo-questions made from the index: the label-free thresholds, and the prior that labels are blended "
        "with (default 200; 0: the labels alone)",
    )
    f.add_argument(
        "--pseudo-kinds",
        nargs="+",
        choices=("cloze", "ict"),
        help="pseudo-question kinds: cloze (a span of a sentence asked about), ict (the sentence as the query, its "
        "chunk without it as the evidence); default cloze",
    )
    f.add_argument("--train", action="store_true", help="also fine-tune the grader on the labels (kept if it wins)")
    f.add_argument("--minutes", type=float, default=10.0, help="fine-tuning time budget with --train (default 10)")
    f.add_argument("--no-train", action="store_true", help="calibrate the current grader only (the default)")
    f.add_argument("--precision", type=float, default=0.9, help="abstention precision to calibrate at (0.9)")
    f.add_argument(
        "--min-recall",
        type=float,
        help="share of the questions to decline that reranker_threshold must decline; a precision target reached "
        "only below it gives way to the lowest threshold that does (default 0.5; 0: the precision target alone)",
    )
    f.add_argument("--held-out", type=float, default=0.3, help="share of questions held out (by source; 0.3)")
    f.add_argument("--seed", type=int, default=13)
    f.add_argument("--install", action="store_true", help="store the fit with the index (FAISS folder)")
    f.add_argument(
        "--data-root",
        help="with --train: the folder holding the packaged grader's training mix (train/ and scifact/), a sample of "
        "which is replayed while fine-tuning so the grader does not forget (default: none, no replay)",
    )
    f.add_argument(
        "--replay-exclude",
        nargs="+",
        metavar="SOURCE",
        help="leave these sources of the packaged mix out of the replay (e.g. covidqa: the one your corpus comes from)",
    )
    f.add_argument("--quiet", action="store_true", help="no progress bars")
    f.add_argument(
        "--generate", type=int, default=0, metavar="N", help="no labels: the chat model writes questions from N chunks"
    )
    f.add_argument("--llm", help="the chat model for --generate and --judge (provider:model, or llamacpp:...)")
    f.add_argument("--judge", action="store_true", help="the chat model labels each candidate of `answers` questions")
    f.set_defaults(func=_fit)
