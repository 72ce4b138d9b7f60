"""Model commands of the lab (`python -m lab`): train, distil, bench and evaluate the grader; export the embedder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lab.data import SHARED_DATA


def _train(args: argparse.Namespace) -> int:
    from fastcrag.fitting.mix import PoolConfig  # loaded when the command runs
    from fastcrag.fitting.train_loop import TrainConfig
    from lab.training.train import train

    pool = PoolConfig(
        squad_questions=args.squad_questions,
        selqa_questions=args.selqa_questions,
        medquad_questions=args.medquad_questions,
        covidqa_questions=args.covidqa_questions,
        pubmedqa_questions=args.pubmedqa_questions,
        dev_percent=args.dev_percent,
    )
    data_root = "" if args.no_shared_data else str(Path(args.data_root).resolve())
    if not data_root and not args.user_data:
        print("error: --no-shared-data needs at least one --user-data")
        return 2
    cfg = TrainConfig(
        output_dir=args.output,
        base_model=args.base_model,
        data_root=data_root,
        user_data=[str(Path(p).resolve()) for p in args.user_data],
        seed=args.seed,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        max_length=args.max_length,
        bf16=not args.fp32,
        checkpoint_every=args.checkpoint_every,
        max_minutes=args.max_minutes,
        max_pairs=args.max_pairs,
        threads=args.threads,
        freeze_embeddings=not args.train_embeddings,
        include_scifact_train=not args.no_scifact_train,
        span_weight=args.span_weight,
        pool=pool,
    )
    final = train(cfg)
    print(f"final model: {final}")
    if args.export:
        from fastcrag.fitting.export import export_grader

        # A calibration names the model it was made for, so an export never reuses the packaged grader's name.
        name = args.name or f"grader-{Path(args.output).resolve().name}"
        export_grader(final, Path(args.export), name=name, train_dir=Path(args.output))
        print(f"exported: {args.export}")
    return 0


def _distill(args: argparse.Namespace) -> int:
    from fastcrag.fitting.export import export_grader
    from fastcrag.fitting.mix import PoolConfig
    from fastcrag.fitting.train_loop import TrainConfig
    from fastcrag.fitting.weights import WeightsError, trainable_once
    from fastcrag.grading.reranker import PACKAGED_GRADER  # loaded when the command runs
    from lab.training.distill import distill

    teacher = Path(args.teacher) if args.teacher else PACKAGED_GRADER
    out = Path(args.output)
    weights = out / "teacher-torch"  # the teacher's trainable weights, rebuilt once from its ONNX file
    try:
        trainable_once(teacher, weights, log=print)
    except (FileNotFoundError, WeightsError) as exc:
        print(f"error: {exc}")
        return 2
    cfg = TrainConfig(
        output_dir=str(out),
        data_root=str(Path(args.data_root).resolve()),
        seed=args.seed,
        batch_size=args.batch_size,
        lr=args.lr,
        max_length=args.max_length,
        checkpoint_every=args.checkpoint_every,
        max_minutes=args.max_minutes,
        max_pairs=args.max_pairs,
        threads=args.threads,
        pool=PoolConfig(dev_percent=args.dev_percent),
    )
    try:
        final = distill(cfg, teacher, weights, args.layers)
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    if args.export:
        name = args.name or f"grader-{out.resolve().name}"
        export_grader(final, Path(args.export), name=name, train_dir=out, extra_meta=_student_meta(out, teacher))
        print(f"exported: {args.export}")
    return 0


def _student_meta(run: Path, teacher: Path) -> dict[str, object]:
    """What an exported student records of its making: the teacher, the layers kept, the training it had."""
    from fastcrag.modelmeta import read_model_meta

    plan = json.loads((run / "distill_config.json").read_text(encoding="utf-8"))
    summary = json.loads((run / "distill_summary.json").read_text(encoding="utf-8"))
    return {
        "teacher": read_model_meta(teacher).get("name", teacher.name),
        "teacher_layers_kept": plan["layers"],
        "train_max_length": plan["max_length"],
        "distillation": {k: summary[k] for k in ("steps", "pairs_seen", "train_minutes", "dev")},
    }


def _bench(args: argparse.Namespace) -> int:
    from lab.training.bench import speed_benchmark  # loaded when the command runs

    speed_benchmark(
        torch_model=Path(args.torch_model) if args.torch_model else None,
        onnx_dirs=[Path(p) for p in args.onnx],
        candidates=args.candidates,
        lengths=args.lengths,
        repeats=args.repeats,
        threads=args.threads,
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from lab.training.bench import SECTIONS, quality_benchmark  # loaded when the command runs

    table = quality_benchmark(
        graders=args.grader,
        data_root=Path(args.data_root),
        per_class=args.per_class,
        scifact_depth=args.scifact_depth,
        scifact_claims=args.scifact_claims,
        threads=args.threads,
        dev_percent=args.dev_percent,
        fusion_pairs=Path(args.fusion_pairs) if args.fusion_pairs else None,
        sections=args.only or SECTIONS,
    )
    if args.out:
        from fastcrag.fileio import write_json_atomic

        config = {k: v for k, v in vars(args).items() if k not in ("func", "out", "command")}
        write_json_atomic(Path(args.out), {"command": "eval-grader", "config": config, "table": table})
        print(f"table written to {args.out}")
    return 0


def _export_embedder(args: argparse.Namespace) -> int:
    from lab.training.embedder_export import export_embedder  # loaded when the command runs

    print(f"exported: {export_embedder(Path(args.out), int8=not args.fp32)}")
    return 0


GRADER_FILES = ("model.onnx", "tokenizer.json", "fastcrag_model.json")
"""What a grader folder holds that `unpack-grader` reads (its card aside)."""
GRADER_IN_GIT = "src/fastcrag/models/grader"
"""Where the repository keeps the packaged grader."""


def grader_at(revision: str, folder: Path) -> Path:
    """Write the packaged grader's files as commit `revision` held them into `folder` (an earlier grader to train on).

    Raises:
        FileNotFoundError: git does not know the revision, or the grader folder had no such file there.
    """
    import subprocess

    root = Path(__file__).resolve().parent.parent.parent
    folder.mkdir(parents=True, exist_ok=True)
    for name in GRADER_FILES:
        path = f"{GRADER_IN_GIT}/{name}"
        shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=root, capture_output=True)
        if shown.returncode:
            raise FileNotFoundError(f"no {path} at revision {revision!r}: {shown.stderr.decode().strip()}")
        (folder / name).write_bytes(shown.stdout)
    return folder


def _unpack_grader(args: argparse.Namespace) -> int:
    import tempfile
    import time

    from fastcrag.fitting.weights import WeightsError, trainable_grader
    from fastcrag.grading.reranker import PACKAGED_GRADER  # loaded when the command runs

    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            grader = grader_at(args.revision, Path(tmp)) if args.revision else Path(args.grader or PACKAGED_GRADER)
            out = trainable_grader(grader, Path(args.out), log=print)
    except (FileNotFoundError, WeightsError) as exc:
        print(f"error: {exc}")
        return 2
    print(f"trainable grader: {out} ({time.perf_counter() - t0:.1f}s in all)")
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `train-reranker`, `distill-grader`, `bench-reranker`, `eval-grader`, `unpack-grader`, `export-embedder`."""
    t = subparsers.add_parser("train-reranker", help="fine-tune the cross-encoder grader (resumable)")
    t.add_argument("--output", default="runs/grader", help="run folder (pool, checkpoint, final model)")
    t.add_argument("--base-model", default="", help="starting weights (default: packaged all-MiniLM-L6-v2)")
    t.add_argument("--data-root", default=str(SHARED_DATA), help="shared data folder holding train/ and scifact/")
    t.add_argument("--no-shared-data", action="store_true", help="train only on --user-data")
    t.add_argument(
        "--user-data",
        action="append",
        default=[],
        help="extra labelled data: SQuAD .json[.gz], BEIR folder (train qrels) or JSONL of pairs",
    )
    t.add_argument("--no-scifact-train", action="store_true", help="leave out SciFact train qrels")
    t.add_argument("--seed", type=int, default=13)
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--lr", type=float, default=4e-5)
    t.add_argument("--max-length", type=int, default=256)
    t.add_argument("--fp32", action="store_true", help="disable bf16 autocast")
    t.add_argument("--checkpoint-every", type=int, default=200)
    t.add_argument("--max-minutes", type=float, default=0.0, help="checkpoint and stop after this long (0: none)")
    t.add_argument("--max-pairs", type=int, default=0, help="cap the training pairs (0: all)")
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--train-embeddings", action="store_true", help="also update the word-embedding matrix")
    t.add_argument("--span-weight", type=float, default=0.5, help="weight of the reader head's span loss")
    t.add_argument("--squad-questions", type=int, default=0, help="SQuAD 1.1 questions used (0: all 87,599)")
    t.add_argument("--selqa-questions", type=int, default=2375)
    t.add_argument("--medquad-questions", type=int, default=3000)
    t.add_argument("--covidqa-questions", type=int, default=1380)
    t.add_argument("--pubmedqa-questions", type=int, default=1000)
    t.add_argument("--dev-percent", type=float, default=5.0, help="documents held out for dev, by hash")
    t.add_argument("--export", default="", help="also export the final model (ONNX int8) into this folder")
    t.add_argument("--name", default="", help="model name written on export (default: grader-<output folder name>)")
    t.set_defaults(func=_train)

    d = subparsers.add_parser(
        "distill-grader", help="train a smaller grader-reader from the grader's own layers and its outputs"
    )
    d.add_argument("--teacher", default="", help="ONNX grader-reader folder (default: the packaged grader)")
    d.add_argument("--layers", type=int, default=3, help="encoder layers the student keeps (evenly spaced)")
    d.add_argument("--output", default="runs/distill", help="run folder (pool, checkpoint, final model)")
    d.add_argument("--data-root", default=str(SHARED_DATA), help="shared data folder holding train/ and scifact/")
    d.add_argument("--seed", type=int, default=13)
    d.add_argument("--batch-size", type=int, default=32)
    d.add_argument("--lr", type=float, default=1e-4)
    d.add_argument("--max-length", type=int, default=192)
    d.add_argument("--checkpoint-every", type=int, default=100)
    d.add_argument("--max-minutes", type=float, default=60.0, help="checkpoint and stop after this long (0: none)")
    d.add_argument("--max-pairs", type=int, default=150000, help="cap the training pairs (0: all)")
    d.add_argument("--threads", type=int, default=2)
    d.add_argument("--dev-percent", type=float, default=5.0, help="documents held out for dev, by hash")
    d.add_argument("--export", default="", help="also export the student (ONNX int8) into this folder")
    d.add_argument("--name", default="", help="model name written on export (default: grader-<output folder name>)")
    d.set_defaults(func=_distill)

    b = subparsers.add_parser("bench-reranker", help="P50/P95 latency of reranking N candidates per variant")
    b.add_argument("--torch-model", default="", help="HF/sentence-transformers folder (fp32 and bf16 torch rows)")
    b.add_argument("--onnx", action="append", default=[], help="folder(s) holding model.onnx (repeatable)")
    b.add_argument("--candidates", type=int, default=20)
    b.add_argument("--lengths", type=int, nargs="+", default=[128, 256], help="tokens per candidate")
    b.add_argument("--repeats", type=int, default=30)
    b.add_argument("--threads", type=int, default=2)
    b.set_defaults(func=_bench)

    e = subparsers.add_parser("eval-grader", help="quality table of graders vs bi-encoder and BM25 baselines")
    e.add_argument(
        "--grader",
        action="append",
        default=[],
        help="reranker spec(s) to evaluate (default: the packaged grader)",
    )
    e.add_argument("--data-root", default=str(SHARED_DATA))
    e.add_argument("--per-class", type=int, default=400, help="questions per class for the SQuAD AUCs")
    e.add_argument("--scifact-depth", type=int, default=100, help="bi-encoder candidates reranked per claim")
    e.add_argument("--scifact-claims", type=int, default=0, help="SciFact test claims used (0: all 300)")
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--dev-percent", type=float, default=5.0, help="must match the training run's dev split")
    e.add_argument(
        "--fusion-pairs",
        default="",
        help="a training run's pool/dev.jsonl: also fit and report grader+bi-encoder score fusion on it",
    )
    e.add_argument(
        "--only",
        action="append",
        default=[],
        choices=["squad2", "strip", "scifact"],
        help="measure only this block (repeatable): squad2 paragraphs+snippets, strip scoring, SciFact",
    )
    e.add_argument("--out", default="", help="also write the table as JSON here (bench-speed reads it for quality)")
    e.set_defaults(func=_eval)

    u = subparsers.add_parser(
        "unpack-grader", help="rebuild an ONNX grader's trainable torch weights as a Hugging Face folder"
    )
    which = u.add_mutually_exclusive_group()
    which.add_argument("--grader", default="", help="ONNX grader folder (default: the packaged grader)")
    which.add_argument("--revision", default="", help="the packaged grader as this git commit held it")
    u.add_argument("--out", required=True, help="folder to write (replaced once the new one is complete)")
    u.set_defaults(func=_unpack_grader)

    x = subparsers.add_parser("export-embedder", help="export all-MiniLM-L6-v2 to ONNX int8 (pooling inside)")
    x.add_argument("--out", default="src/fastcrag/models/embedder", help="output folder")
    x.add_argument("--fp32", action="store_true", help="no quantisation (for comparison)")
    x.set_defaults(func=_export_embedder)
