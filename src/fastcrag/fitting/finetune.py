"""Fine-tune a grader on a user's labelled pairs within a time budget, with a replay of the packaged training mix."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fastcrag.fileio import write_json_atomic
from fastcrag.fitting.mix import (
    PERMISSIVE_FOLDERS,
    Pair,
    PoolConfig,
    build_pool,
    read_pairs,
    scifact_train_pairs,
    split_pool,
    write_pairs,
)
from fastcrag.modelmeta import read_model_meta

#: The packaged grader's mix: SQuAD 1.1 questions of the shipped run; the other sources at `PoolConfig`'s sizes.
PACKAGED_SQUAD_QUESTIONS = 12000
#: About how many training pairs that mix gives (SciFact train claims included): the scale of a replay sample.
PACKAGED_MIX_PAIRS = 70000
#: Source families a replay may hold: the permissive folders of `data_root/train` and SciFact *train* qrels.
REPLAY_FAMILIES = frozenset({"squad11", "selqa", "medquad", "covidqa", "pubmedqa", "scifact"})
STATE_FILE = "finetune.json"


@dataclass(frozen=True)
class FineTuneResult:
    """What `fine_tune` made.

    Attributes:
        export: The exported grader folder (int8 ONNX, loadable by `load_reranker`).
        name: The exported grader's name (`<base name>-fit-<hash>`): what a calibration names.
        steps: Optimizer steps taken (across resumes).
        pairs_seen: Training pairs in those steps' batches.
        seconds: Training time on the budgeted clock (across resumes).
        replay: Replay pairs of the packaged mix mixed in.
        user_pairs: The user's pairs trained on.
        reader: The grader has the reader (answer-span) head, kept and trained.
        stopped_by_time_budget: The budget ended training before the planned epochs did.
        resumed_at: The step training resumed from (0: a fresh start).
        notes: What the caller should know (no replay and why, a run restarted on other pairs, ...).
        timings: Seconds per stage: weights, replay, tokenise, train, export.
    """

    export: Path
    name: str
    steps: int
    pairs_seen: int
    seconds: float
    replay: int
    user_pairs: int
    reader: bool
    stopped_by_time_budget: bool
    resumed_at: int
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def _fingerprint(pairs: Sequence[Pair], settings: dict[str, Any]) -> str:
    """A stable hash of the user's pairs and the settings that shape the result."""
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode("utf-8"))
    for p in pairs:
        digest.update(json.dumps([p.question, p.passage, p.label, p.answer]).encode("utf-8"))
    return digest.hexdigest()


def _missing_permissive(data_root: Path) -> list[str]:
    """The permissive training folders (and SciFact) that `data_root` lacks."""
    need = [data_root / "train" / name for name in PERMISSIVE_FOLDERS] + [data_root / "scifact"]
    return [str(p) for p in need if not p.is_dir()]


def replay_sample(
    data_root: Path, n: int, seed: int, *, dev_percent: float = 5.0, exclude: frozenset[str] = frozenset()
) -> list[Pair]:
    """A seeded sample of `n` training pairs of the packaged grader's mix, from its permissive sources only.

    Every source is built at the same fraction of the packaged mix (SQuAD 1.1 questions, SelQA, MedQuAD, COVID-QA,
    PubMedQA and SciFact *train* claims), so the sample keeps the mix's proportions without building the whole
    pool; pairs of the dev split's documents are left out. Nothing under `data_root/train/restricted` (nor any
    folder outside `PERMISSIVE_FOLDERS` and SciFact) is read.

    `exclude` names source families (`REPLAY_FAMILIES`) to leave out, e.g. the one a user's own corpus comes from,
    so that the replay cannot hold the held-out part's own questions.

    Raises:
        FileNotFoundError: a permissive folder is missing.
    """
    missing = _missing_permissive(data_root)
    if missing:
        raise FileNotFoundError(f"no packaged training mix under {data_root}: missing {', '.join(missing)}")
    if n <= 0:
        return []
    share = min(1.0, 1.5 * max(n, 100) / PACKAGED_MIX_PAIRS)  # 1.5x: the dev split and rounding take some
    base = PoolConfig(squad_questions=PACKAGED_SQUAD_QUESTIONS, dev_percent=dev_percent)
    cfg = replace(
        base,
        squad_questions=math.ceil(base.squad_questions * share),
        selqa_questions=math.ceil(base.selqa_questions * share),
        medquad_questions=math.ceil(base.medquad_questions * share),
        covidqa_questions=math.ceil(base.covidqa_questions * share),
        pubmedqa_questions=math.ceil(base.pubmedqa_questions * share),
    )
    train, _ = build_pool(data_root, cfg, seed, include_scifact_train=False)
    rng = random.Random(seed)
    # build_pool takes every SQuAD 2.0 unanswerable whatever the size: keep the same share of them as of the rest
    train = [p for p in train if not p.source.endswith(":unanswerable") or rng.random() < share]
    claims = scifact_train_pairs(data_root, cfg, rng)
    if claims:
        groups = sorted({p.group for p in claims})
        kept = set(rng.sample(groups, math.ceil(len(groups) * share)))
        sci_train, _ = split_pool([p for p in claims if p.group in kept], dev_percent, rng)
        train += sci_train
    stray = {p.source.split(":")[0] for p in train} - REPLAY_FAMILIES
    if stray:
        raise AssertionError(f"replay drew on sources outside the packaged mix: {sorted(stray)}")
    train = [p for p in train if p.source.split(":")[0] not in exclude]
    train.sort(key=lambda p: (p.source, p.group, p.question, p.passage))  # order independent of set iteration
    rng.shuffle(train)
    return train[:n]


def _weights(base_grader: Path, out: Path, log: Any) -> tuple[Path, dict[str, Any], float]:
    """The trainable folder of `base_grader` (rebuilt once into `out/base-weights` for an ONNX grader).

    Returns:
        (weights folder, the base grader's metadata, seconds spent rebuilding; 0 when cached or not needed).
    """
    from fastcrag.fitting.weights import trainable_once

    meta = read_model_meta(base_grader)
    if (base_grader / "model.onnx").is_file():
        cached = out / "base-weights"
        return cached, meta, trainable_once(base_grader, cached, log=log)
    if (base_grader / "config.json").is_file():
        return base_grader, meta, 0.0
    raise FileNotFoundError(f"{base_grader}: neither an ONNX grader (model.onnx) nor a Hugging Face folder")


def _weights_sha1(folder: Path) -> str:
    """SHA-1 over a saved network's weight files, in name order."""
    digest = hashlib.sha1()
    for path in sorted(folder.iterdir()):
        if path.suffix in (".safetensors", ".bin", ".pt"):
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _base_name(base_grader: Path, meta: dict[str, Any]) -> str:
    """The name the fitted grader is derived from: the grader's own, or the source of rebuilt weights."""
    src = meta.get("source_grader")
    if isinstance(src, dict) and src.get("name"):
        return str(src["name"])
    return str(meta.get("name") or base_grader.resolve().name)


def _reset_run(out: Path) -> None:
    """Forget a run made on other pairs or settings (the rebuilt base weights are kept)."""
    for name in ("checkpoint", "pool", "final", "export", "train_log.jsonl", "train_config.json", STATE_FILE):
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def fine_tune(
    base_grader: Path,
    pairs: Sequence[Pair],
    out: Path,
    *,
    minutes: float,
    replay: int | None = None,
    replay_exclude: frozenset[str] = frozenset(),
    seed: int = 13,
    data_root: Path | None = None,
    progress: bool = True,
    batch_size: int = 32,
    lr: float = 2e-5,
    max_epochs: int = 4,
    checkpoint_every: int = 20,
    threads: int | None = None,
) -> FineTuneResult:
    """Fine-tune a grader on labelled pairs within `minutes` and export it as the packaged grader is exported.

    The base is a grader folder as shipped (int8 ONNX: its weights are rebuilt once by
    `fastcrag.fitting.weights.trainable_grader` into `out/base-weights`) or a trainable Hugging Face folder.
    The user's pairs are mixed with a replay sample of the packaged mix (`replay_sample`) so that the grader does
    not forget, and trained with `fastcrag.fitting.train_loop`'s loop: length-bucketed seeded batches, AdamW, warm-up
    then linear decay that reaches 0 when the time budget is spent (or after `max_epochs` passes, whichever comes
    first), checkpoints in `out/checkpoint` that a rerun with the same pairs and settings resumes, fp32 on CPUs
    without AVX-512. A grader-reader keeps its reader head: the replay trains both heads as `train` does, the
    user's pairs the relevance head only (and the span head too for a positive that carries its `answer`). The
    result is exported as int8 ONNX (`export_grader`) into `out/export`, named `<base name>-fit-<hash>` where the
    hash is of the trained weights (a clock-budgeted run can train another model from the same pairs).

    Args:
        base_grader: The grader to start from.
        pairs: The user's (question, passage, label) pairs; labels in [0, 1].
        out: The run folder (weights, pool, checkpoints, final model, export); reused by a rerun.
        minutes: Training time budget (the learning-rate schedule's clock; rebuilding, tokenising and exporting
            are not counted).
        replay: Replay pairs of the packaged mix; default as many as the user's pairs; 0 for none.
        replay_exclude: Source families of the packaged mix left out of the replay (see `replay_sample`).
        seed: Seed of the replay sample, the batch order and torch.
        data_root: The folder holding the packaged mix (`train/` and `scifact/`). Without it, or when it lacks
            the mix, there is no replay (said in the result's notes).
        progress: Show a progress bar.
        batch_size: Pairs per step.
        lr: Peak learning rate (the base is already trained: lower than a first training's).
        max_epochs: Passes over the pairs at most.
        checkpoint_every: Steps between checkpoints.
        threads: Torch CPU threads (default: every core).

    Returns:
        The export's folder and name, steps, pairs seen, seconds, replay size and notes.

    Raises:
        ValueError: no pairs, a label outside [0, 1], or a budget that is not positive.
        FileNotFoundError: `base_grader` is not a grader folder.
    """
    from transformers import AutoTokenizer  # transformers takes seconds to load: only when a fine-tune runs

    from fastcrag.fitting.export import export_grader
    from fastcrag.fitting.model import read_fusion
    from fastcrag.fitting.network import has_reader, load_network, save_network
    from fastcrag.fitting.train_loop import TrainConfig, _encoded_pool, make_optimizer, prepare_run, train_loop

    if not pairs:
        raise ValueError("fine_tune needs at least one labelled pair")
    if any(not 0.0 <= p.label <= 1.0 for p in pairs):
        raise ValueError("labels must be in [0, 1]")
    if minutes <= 0:
        raise ValueError(f"the time budget must be positive, got {minutes} minutes")

    def log(line: str) -> None:
        if progress:
            print(line, flush=True)

    base_grader, out = Path(base_grader), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    notes: list[str] = []
    weights, base_meta, timings["weights_s"] = _weights(base_grader, out, log)
    weights_meta = read_model_meta(weights)
    base_name = _base_name(base_grader, base_meta or weights_meta)
    max_length = int(base_meta.get("max_length") or weights_meta.get("max_length") or 256)
    train_length = int(
        base_meta.get("train_max_length") or weights_meta.get("train_max_length") or min(max_length, 256)
    )

    # --- the pool: the user's pairs, then the replay
    n_replay = len(pairs) if replay is None else max(0, int(replay))
    if n_replay and data_root is None:
        notes.append("no replay: no training mix given (--data-root)")
        n_replay = 0
    elif n_replay and data_root is not None and _missing_permissive(data_root):
        notes.append(f"no replay: the packaged training mix is not under {data_root.resolve()}")
        n_replay = 0
    settings = {
        "base": base_name,
        "minutes": minutes,
        "replay": n_replay,
        "replay_exclude": sorted(replay_exclude),
        "seed": seed,
        "batch_size": batch_size,
        "lr": lr,
        "max_epochs": max_epochs,
        "train_max_length": train_length,
    }
    fingerprint = _fingerprint(pairs, settings)
    state_path = out / STATE_FILE
    if state_path.is_file() and json.loads(state_path.read_text(encoding="utf-8")).get("fingerprint") != fingerprint:
        notes.append(f"{out} held a run on other pairs or settings: started afresh")
        _reset_run(out)
    write_json_atomic(state_path, {"fingerprint": fingerprint, "settings": settings})
    t0 = time.perf_counter()
    replay_path = out / "pool" / "replay.jsonl"
    if replay_path.is_file():
        mixed = read_pairs(replay_path)
    else:
        mixed = (
            replay_sample(data_root, n_replay, seed, exclude=replay_exclude)
            if data_root is not None and n_replay
            else []
        )
        write_pairs(replay_path, mixed)
    if len(mixed) < n_replay:
        notes.append(f"the packaged mix gave {len(mixed)} replay pairs of the {n_replay} asked for")
    timings["replay_s"] = time.perf_counter() - t0
    all_pairs = [*pairs, *mixed]

    # --- tokenise: the user's pairs train the span head only where they carry an answer
    t0 = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(weights), local_files_only=True)
    data = _encoded_pool(out / "pool" / f"encoded-{train_length}.npz", tokenizer, all_pairs, train_length)
    starts, ends = list(data.starts), list(data.ends)
    for k, i in enumerate(data.keep):
        if i < len(pairs) and not (all_pairs[i].label >= 0.5 and all_pairs[i].answer):
            starts[k] = ends[k] = -100
    data = replace(data, starts=starts, ends=ends)
    labels = [all_pairs[i].label for i in data.keep]
    timings["tokenise_s"] = time.perf_counter() - t0

    # --- train
    cfg = TrainConfig(
        output_dir=str(out),
        base_model=str(weights),
        data_root=str(data_root) if data_root is not None and mixed else "",
        seed=seed,
        epochs=max(1, max_epochs),
        batch_size=batch_size,
        lr=lr,
        warmup=0.1,
        max_length=train_length,
        checkpoint_every=max(1, checkpoint_every),
        max_minutes=minutes,
        threads=threads or os.cpu_count() or 2,
        pool=PoolConfig(squad_questions=PACKAGED_SQUAD_QUESTIONS),
    )
    device = prepare_run(cfg)
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2), encoding="utf-8")
    model = load_network(weights)
    reader = has_reader(model)
    optimizer = make_optimizer(model, cfg, device, head_lr_scale=1.0)  # the heads are trained already
    t0 = time.perf_counter()
    run = train_loop(
        model,
        optimizer,
        data,
        labels,
        cfg,
        out,
        pad_id=int(tokenizer.pad_token_id or 0),
        device=device,
        desc="fine-tune",
        progress=progress,
    )
    timings["train_s"] = time.perf_counter() - t0
    if run.resumed_at:
        notes.append(f"resumed from step {run.resumed_at} of {run.total_steps}")

    # --- export as the packaged grader is exported
    t0 = time.perf_counter()
    final = out / "final"
    model.eval()
    save_network(model.cpu(), tokenizer, final, read_fusion(weights) if reader else None)
    if (weights / "tokenizer.json").is_file():
        shutil.copyfile(weights / "tokenizer.json", final / "tokenizer.json")  # the base grader's own file
    # named by its weights: a clock-budgeted run trains as far as the machine lets it, so the same pairs and
    # settings can give another model, and a calibration must never apply to a model it was not made for
    name = f"{base_name}-fit-{_weights_sha1(final)[:8]}"
    export = out / "export"
    done = read_model_meta(export) if (export / "model.onnx").is_file() else {}
    if done.get("name") != name:
        staged = out / ".export.tmp"
        shutil.rmtree(staged, ignore_errors=True)
        fit_meta = {
            "user_pairs": len(pairs),
            "replay": len(mixed),
            "steps": run.steps,
            "pairs_seen": run.pairs_seen,
            "train_seconds": round(run.elapsed_s, 1),
            "minutes": minutes,
            "seed": seed,
        }
        export_grader(
            final,
            staged,
            name=name,
            max_length=max_length,
            extra_meta={"base_model": base_name, "train_max_length": train_length, "fit": fit_meta},
        )
        shutil.rmtree(export, ignore_errors=True)
        staged.rename(export)
    timings["export_s"] = time.perf_counter() - t0
    result = FineTuneResult(
        export=export,
        name=name,
        steps=run.steps,
        pairs_seen=run.pairs_seen,
        seconds=round(run.elapsed_s, 2),
        replay=len(mixed),
        user_pairs=len(pairs),
        reader=reader,
        stopped_by_time_budget=run.stopped_by_time_budget,
        resumed_at=run.resumed_at,
        notes=notes,
        timings={k: round(v, 2) for k, v in timings.items()},
    )
    summary = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(result).items()}
    write_json_atomic(out / "finetune_summary.json", summary)
    for note in notes:
        log(f"note: {note}")
    return result
