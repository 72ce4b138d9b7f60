"""The meaning-reading teacher (all-mpnet-base-v2 as a cross-encoder) and the 6-layer student distilled from it.

Every step is resumable: training checkpoints every `--checkpoint-every` steps, at its time budget and when stopped
(Ctrl-C, SIGTERM), scoring keeps the scores as they come, and the same command continues where it stopped. The steps
after `pool` need only torch, transformers, safetensors, NumPy and scikit-learn (plus `fastcrag.fitting.model`,
`fastcrag.grading.reader` and `fastcrag.measures`, which import no more), so they run from a checkout on any machine,
a lent GPU or this CPU:

    python -m lab.training.teacher pool    --out runs/v5/pool                 # the mix + documentation pairs
    python -m lab.training.teacher teacher --pool runs/v5/pool --base MPNET --out runs/v5/teacher
    python -m lab.training.teacher snapshot runs/v5/teacher --base MPNET --out DIR   # a run under way, to measure
    python -m lab.training.teacher export  runs/v5/teacher/final --out DIR --name NAME    # an ONNX grader folder
    python -m lab.training.teacher score   --pool runs/v5/pool --teacher runs/v5/teacher/final --out runs/v5/scores.npz
    python -m lab.training.teacher distill --pool runs/v5/pool --scores runs/v5/scores.npz \
        --student runs/v5/v4-torch --out runs/v5/student
    python -m lab.training.teacher pack    MODEL_DIR --out PARTS_DIR --part-mb 55   # to carry a model in pieces
    python -m lab.training.teacher unpack  PARTS_DIR --out MODEL_DIR

`lab/scripts/train_grader_v5.sh` runs them in order with the settings the packaged grader was made with.

The pool folder holds `passages.jsonl.xz` (one JSON string a line, each passage once) and `pairs.jsonl.xz` (one
`[question, passage index, label, answer, source, group, split]` a line), so a pool of 400,000 pairs travels in
about 20 MB. The teacher's scores are kept beside the labels (`scores.npz`: `teacher_logit`, `label`, `split`, one
row per pair line), so a student is distilled again without the teacher.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import lzma
import math
import os
import random
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PASSAGES = "passages.jsonl.xz"
PAIRS = "pairs.jsonl.xz"
CHECKPOINT = "checkpoint.pt"


# --------------------------------------------------------------------------------------------------- the pool


@dataclass(frozen=True)
class PoolPair:
    """One labelled pair of the portable pool (the passage by index)."""

    question: str
    passage: int
    label: float
    answer: str
    source: str
    group: str
    split: str


def write_pool(folder: Path, train: Sequence[Any], dev: Sequence[Any]) -> dict[str, int]:
    """Write `fastcrag.fitting.mix.Pair`s as a portable pool: passages once, pairs by passage index."""
    folder.mkdir(parents=True, exist_ok=True)
    index: dict[str, int] = {}
    rows = []
    for split, pairs in (("train", train), ("dev", dev)):
        for p in pairs:
            pid = index.setdefault(p.passage, len(index))
            rows.append([p.question, pid, float(p.label), p.answer, p.source, p.group, split])
    tmp = folder / (PASSAGES + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8") as f:
        for text in index:
            f.write(json.dumps(text, ensure_ascii=False) + "\n")
    tmp.replace(folder / PASSAGES)
    tmp = folder / (PAIRS + ".tmp")
    with lzma.open(tmp, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(folder / PAIRS)
    return {"passages": len(index), "pairs": len(rows), "train": len(train), "dev": len(dev)}


def read_pool(folder: Path) -> tuple[list[str], list[PoolPair]]:
    """The passages and pairs of a pool folder written by `write_pool`."""
    with lzma.open(folder / PASSAGES, "rt", encoding="utf-8") as f:
        passages = [json.loads(line) for line in f]
    with lzma.open(folder / PAIRS, "rt", encoding="utf-8") as f:
        pairs = [
            PoolPair(str(q), int(p), float(y), str(a), str(s), str(g), str(sp))
            for q, p, y, a, s, g, sp in map(json.loads, f)
        ]
    return passages, pairs


# --------------------------------------------------------------------------------------- carrying a model


def pack(model_dir: Path, out: Path, part_mb: float, int8: bool = True) -> list[Path]:
    """A model folder's weights split into parts of at most `part_mb` MB, to carry where one file may not go.

    Matrices are per-row int8 (or fp16), the rest fp16. Every `*.safetensors` file is packed; the other small files
    (config, tokenizer, fusion) go into `files.npz` beside the parts.
    """
    from safetensors.numpy import load_file

    out.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    tensors = {
        f"{f.name}/{k}": v for f in sorted(model_dir.glob("*.safetensors")) for k, v in load_file(str(f)).items()
    }
    for name, w in tensors.items():
        w = w.astype(np.float32)
        if int8 and w.ndim == 2 and w.size >= 4096:
            scale = np.abs(w).max(axis=1, keepdims=True) / 127.0
            scale[scale == 0] = 1.0
            arrays[f"{name}::q"] = np.round(w / scale).astype(np.int8)
            arrays[f"{name}::s"] = scale.astype(np.float32)
        else:
            arrays[f"{name}::h"] = w.astype(np.float16)
    blob = out / "weights.npz"
    np.savez(blob, **arrays)
    data = blob.read_bytes()
    blob.unlink()
    size = int(part_mb * 1_000_000)
    parts = []
    for i in range(0, len(data), size):
        part = out / f"weights.part{i // size:02d}"
        part.write_bytes(data[i : i + size])
        parts.append(part)
    files = {
        p.name: np.frombuffer(p.read_bytes(), dtype=np.uint8)
        for p in model_dir.iterdir()
        if p.is_file()
        and p.suffix in (".json", ".txt", ".model")
        and p.name != "model_meta.json"
        and p.stat().st_size < 20_000_000
    }
    np.savez(out / "files.npz", **files)
    return parts


def unpack(parts_dir: Path, out: Path) -> Path:
    """The model folder of `pack`'s parts (weights back in fp32)."""
    import io

    from safetensors.numpy import save_file

    data = b"".join(p.read_bytes() for p in sorted(parts_dir.glob("weights.part*")))
    arrays = np.load(io.BytesIO(data))
    files_out: dict[str, dict[str, np.ndarray]] = {}
    for key in arrays.files:
        name, kind = key.rsplit("::", 1)
        file, tensor = name.split("/", 1)
        if kind == "q":
            files_out.setdefault(file, {})[tensor] = arrays[key].astype(np.float32) * arrays[f"{name}::s"]
        elif kind == "h":
            files_out.setdefault(file, {})[tensor] = arrays[key].astype(np.float32)
    out.mkdir(parents=True, exist_ok=True)
    for file, tensors in files_out.items():
        save_file(tensors, str(out / file))
    files = np.load(parts_dir / "files.npz")
    for name in files.files:
        (out / name).write_bytes(files[name].tobytes())
    return out


# ------------------------------------------------------------------------------------------------ training


def device_of() -> str:
    """`cuda` where a GPU is, else `cpu`."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def bf16_autocast(device: Any) -> Any:
    """bf16 autocast where the hardware computes bf16 natively (a GPU; a CPU with AVX-512 BF16 or AMX), else none.

    On such a CPU it trains all-mpnet-base-v2 about three times as fast as fp32; on one without, bf16 is emulated
    and slower, so it stays off.
    """
    import torch

    native = device.type == "cuda" or (device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bool(native))


def length_batches(lengths: Sequence[int], batch_size: int, seed: int) -> list[list[int]]:
    """Batches of similar lengths (sorted within shuffled windows of 50 batches), in a seeded random order."""
    rng = random.Random(seed)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    batches = []
    for w in range(0, len(order), window):
        chunk = sorted(order[w : w + window], key=lambda i: lengths[i])
        batches += [chunk[s : s + batch_size] for s in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


@dataclass
class Budget:
    """When a run stops and how its learning rate falls.

    Linear warm-up, then linear decay to 0 at whichever comes first of the planned steps and the time budget (so a
    clock-budgeted run still ends on a small rate).
    """

    total_steps: int
    max_minutes: float
    warmup: float = 0.05
    elapsed_before: float = 0.0

    def factor(self, step: int, elapsed: float) -> float:
        """The learning rate's share of its peak at `step`, `elapsed` seconds in."""
        warm = max(1, int(self.warmup * self.total_steps))
        if step < warm:
            return (step + 1) / warm
        done = step / max(1, self.total_steps)
        if self.max_minutes > 0:
            done = max(done, elapsed / (self.max_minutes * 60))
        return max(0.0, 1.0 - done)

    def over(self, step: int, elapsed: float) -> bool:
        """Whether the run has done its steps or spent its time."""
        return step >= self.total_steps or (self.max_minutes > 0 and elapsed >= self.max_minutes * 60)


@contextlib.contextmanager
def stop_requests() -> Iterator[list[int]]:
    """SIGINT and SIGTERM noted (in the list yielded) instead of acted on while the block runs; handlers restored.

    A long step asked to stop finishes what it is doing, keeps it and exits: no work is lost to Ctrl-C or a shutdown.
    """
    stop: list[int] = []
    handlers = {sig: signal.signal(sig, lambda n, _f: stop.append(n)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def train_resumable(
    model: Any,
    batches: list[list[int]],
    loss_of: Callable[[list[int]], Any],
    out: Path,
    *,
    lr: float,
    head_lr_scale: float,
    max_minutes: float,
    checkpoint_every: int,
    log_every: int = 100,
) -> dict[str, Any]:
    """Run `loss_of` over `batches` with AdamW, checkpointing into `out`; a rerun continues where it stopped.

    SIGINT or SIGTERM ends the step under way, checkpoints it and exits, so stopping a run loses no work.
    """
    import torch

    device = next(model.parameters()).device
    encoder = {id(p) for p in model.encoder.parameters()}
    heads = [p for p in model.parameters() if id(p) not in encoder and p.requires_grad]
    body = [p for p in model.encoder.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [{"params": body, "lr": lr}, {"params": heads, "lr": lr * head_lr_scale}], weight_decay=0.01
    )
    base_lrs = [lr, lr * head_lr_scale]
    step, elapsed_before, losses = 0, 0.0, []
    ckpt = out / CHECKPOINT
    if ckpt.is_file():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, elapsed_before = int(state["step"]), float(state["elapsed"])
        print(f"resumed at step {step} ({elapsed_before / 60:.1f} min trained)", flush=True)
    budget = Budget(len(batches), max_minutes)

    def save(step: int, elapsed: float) -> None:
        tmp = out / (CHECKPOINT + ".tmp")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "elapsed": elapsed}, tmp)
        tmp.replace(ckpt)

    with stop_requests() as stop:
        t0 = time.time()
        model.train()
        while not stop and not budget.over(step, elapsed_before + time.time() - t0):
            elapsed = elapsed_before + time.time() - t0
            for g, base in zip(opt.param_groups, base_lrs, strict=True):
                g["lr"] = base * budget.factor(step, elapsed)
            loss = loss_of(batches[step])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            step += 1
            if step % log_every == 0:
                rate = step / max(1e-9, elapsed_before + time.time() - t0)
                mean = np.mean(losses[-log_every:])
                print(f"step {step}/{len(batches)} loss {mean:.4f} ({rate:.1f} steps/s)", flush=True)
            if checkpoint_every and step % checkpoint_every == 0:
                save(step, elapsed_before + time.time() - t0)
        elapsed = elapsed_before + time.time() - t0
        save(step, elapsed)
    if stop:
        raise SystemExit(f"stopped at step {step} of {len(batches)} and checkpointed: the same command continues")
    model.eval()
    return {"steps": step, "planned_steps": len(batches), "train_minutes": round(elapsed / 60, 2)}


def teacher_network(base: str | Path) -> Any:
    """all-mpnet-base-v2 (or any encoder folder) with a relevance logit read from the first token."""
    import torch
    from transformers import AutoModel

    class Teacher(torch.nn.Module):
        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder
            self.dropout = torch.nn.Dropout(0.1)
            self.relevance = torch.nn.Linear(int(encoder.config.hidden_size), 1)

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return self.relevance(self.dropout(h[:, 0])).squeeze(-1)

    model = Teacher(AutoModel.from_pretrained(str(base), local_files_only=True))
    heads = Path(base) / "relevance.safetensors"
    if heads.is_file():
        from safetensors.torch import load_file

        model.relevance.load_state_dict(load_file(str(heads)))
    return model


def save_teacher(model: Any, tokenizer: Any, folder: Path) -> None:
    """Write the teacher as `teacher_network` reads it: the encoder, `relevance.safetensors`, the tokenizer."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(str(folder), safe_serialization=True)
    save_file(
        {k: v.contiguous().cpu() for k, v in model.relevance.state_dict().items()},
        str(folder / "relevance.safetensors"),
    )
    tokenizer.save_pretrained(str(folder))


def _texts(passages: Sequence[str], pairs: Sequence[PoolPair], idx: Sequence[int]) -> tuple[list[str], list[str]]:
    return [pairs[i].question for i in idx], [passages[pairs[i].passage] for i in idx]


def inference_batches(
    model: Any, tokenizer: Any, qs: Sequence[str], ps: Sequence[str], max_length: int, batch: int
) -> Iterator[tuple[list[int], Any]]:
    """(pair indices, tokenised batch on the model's device) in length order, under inference mode and autocast."""
    import torch

    device = next(model.parameters()).device
    order = sorted(range(len(qs)), key=lambda i: len(qs[i]) + len(ps[i]))
    model.eval()
    with torch.inference_mode(), bf16_autocast(device):
        for s in range(0, len(order), batch):
            idx = order[s : s + batch]
            enc = tokenizer(
                [qs[i] for i in idx],
                [ps[i] for i in idx],
                truncation="only_second",
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            )
            yield idx, enc.to(device)


def teacher_logits(
    model: Any, tokenizer: Any, qs: Sequence[str], ps: Sequence[str], max_length: int, batch: int
) -> np.ndarray:
    """The teacher's relevance logits of (question, passage) pairs, in order."""
    out = np.zeros(len(qs), dtype=np.float32)
    for idx, enc in inference_batches(model, tokenizer, qs, ps, max_length, batch):
        out[idx] = model(enc["input_ids"], enc["attention_mask"]).float().cpu().numpy()
    return out


def teacher_logits_resumable(
    model: Any,
    tokenizer: Any,
    qs: Sequence[str],
    ps: Sequence[str],
    max_length: int,
    batch: int,
    partial: Path,
    key: str,
    keep_every_s: float = 60.0,
) -> np.ndarray:
    """`teacher_logits`, kept in `partial` as they come (at most `keep_every_s` apart) so a rerun scores only the rest.

    `key` names what is scored (pool, teacher, length): a partial file of another key is started afresh. SIGINT or
    SIGTERM ends the batch under way, keeps what is scored and exits; the file is removed once every pair is scored.
    """
    logits = np.full(len(qs), np.nan, dtype=np.float32)
    if partial.is_file():
        with np.load(partial) as kept:
            if str(kept["key"]) == key and len(kept["teacher_logit"]) == len(qs):
                logits = kept["teacher_logit"].astype(np.float32)
                print(f"resumed with {int(np.sum(~np.isnan(logits)))} of {len(qs)} pairs scored", flush=True)
    todo = np.flatnonzero(np.isnan(logits))

    def keep() -> None:
        tmp = partial.with_name(partial.name + ".tmp.npz")
        np.savez(tmp, teacher_logit=logits, key=np.array(key))
        tmp.replace(partial)

    last = time.time()
    with stop_requests() as stop:
        rest = todo.tolist()
        batches = inference_batches(model, tokenizer, [qs[i] for i in rest], [ps[i] for i in rest], max_length, batch)
        for idx, enc in batches:
            logits[todo[idx]] = model(enc["input_ids"], enc["attention_mask"]).float().cpu().numpy()
            if stop:
                break
            if time.time() - last >= keep_every_s:
                keep()
                last = time.time()
        keep()
    left = int(np.sum(np.isnan(logits)))
    if stop and left:
        scored = f"{len(qs) - left} of {len(qs)} pairs scored"
        raise SystemExit(f"stopped with {scored} and kept: the same command continues")
    partial.unlink()
    return logits


def auc(labels: Sequence[float], scores: Sequence[float]) -> float:
    """ROC AUC of scores against labels (>= 0.5 is positive)."""
    from fastcrag.measures import auc_of_labels

    return float(auc_of_labels(list(labels), list(scores)))


def cmd_snapshot(args: argparse.Namespace) -> None:
    """A teacher folder from a run's last checkpoint, to measure a run still under way (`teacher_network` reads it)."""
    import torch
    from transformers import AutoTokenizer

    state = torch.load(Path(args.run) / CHECKPOINT, map_location="cpu", weights_only=False)
    model = teacher_network(args.base)
    model.load_state_dict(state["model"])
    save_teacher(model, AutoTokenizer.from_pretrained(args.base, local_files_only=True), Path(args.out))
    print(json.dumps({"step": int(state["step"]), "train_minutes": round(float(state["elapsed"]) / 60, 2)}))


def cmd_export(args: argparse.Namespace) -> None:
    """The teacher as an ONNX grader folder (relevance only), for the graph, `lab calibrate` and the evals."""
    import torch

    from fastcrag.fitting.export import package_grader

    model = teacher_network(args.teacher).eval()
    ids = torch.ones((2, 16), dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}

    def write_fp32(path: Path) -> None:
        with torch.inference_mode():
            torch.onnx.export(
                model,
                (ids, ids.clone()),
                str(path),
                input_names=["input_ids", "attention_mask"],
                output_names=["logits"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )

    out = package_grader(
        write_fp32,
        Path(args.teacher) / "tokenizer.json",
        Path(args.out),
        name=args.name,
        max_length=args.max_length,
        int8=args.int8,
        reader=False,
    )
    print(out)


def cmd_teacher(args: argparse.Namespace) -> None:
    """Train (or continue training) the teacher on the pool's train split; its dev AUC goes to `summary.json`."""
    import torch
    from transformers import AutoTokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    passages, pairs = read_pool(Path(args.pool))
    train = [i for i, p in enumerate(pairs) if p.split == "train"]
    if args.max_pairs:
        train = train[: args.max_pairs]
    tokenizer = AutoTokenizer.from_pretrained(args.base, local_files_only=True)
    model = teacher_network(args.base).to(device_of())
    lengths = [len(pairs[i].question) + len(passages[pairs[i].passage]) for i in train]
    batches = [[train[j] for j in b] for b in length_batches(lengths, args.batch_size, args.seed)] * args.epochs
    labels = torch.tensor([p.label for p in pairs], dtype=torch.float32)
    bce = torch.nn.BCEWithLogitsLoss()
    device = next(model.parameters()).device

    def loss_of(idx: list[int]) -> Any:
        qs, ps = _texts(passages, pairs, idx)
        enc = tokenizer(
            qs, ps, truncation="only_second", max_length=args.max_length, padding=True, return_tensors="pt"
        ).to(device)
        with bf16_autocast(device):
            logit = model(enc["input_ids"], enc["attention_mask"])
        return bce(logit.float(), labels[idx].to(device))

    run = train_resumable(
        model,
        batches,
        loss_of,
        out,
        lr=args.lr,
        head_lr_scale=5.0,
        max_minutes=args.max_minutes,
        checkpoint_every=args.checkpoint_every,
    )
    dev = [i for i, p in enumerate(pairs) if p.split == "dev"][: args.dev_pairs]
    qs, ps = _texts(passages, pairs, dev)
    logits = teacher_logits(model, tokenizer, qs, ps, args.max_length, 256)
    run["dev_auc"] = auc([pairs[i].label >= 0.5 for i in dev], logits)
    run["dev_pairs"] = len(dev)
    save_teacher(model, tokenizer, out / "final")
    (out / "summary.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(run), flush=True)


def cmd_score(args: argparse.Namespace) -> None:
    """The teacher's logit for every pair of the pool, kept with the labels and the split (`scores.npz`); resumable."""
    from transformers import AutoTokenizer

    passages, pairs = read_pool(Path(args.pool))
    tokenizer = AutoTokenizer.from_pretrained(args.teacher, local_files_only=True)
    model = teacher_network(args.teacher).to(device_of())
    t0 = time.time()
    qs, ps = _texts(passages, pairs, range(len(pairs)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    key = f"{Path(args.pool).resolve()}|{Path(args.teacher).resolve()}|{args.max_length}"
    partial = out.with_name(out.name + ".partial.npz")
    logits = teacher_logits_resumable(model, tokenizer, qs, ps, args.max_length, args.batch_size, partial, key)
    tmp = out.with_name(out.name + ".tmp.npz")
    np.savez(
        tmp,
        teacher_logit=logits,
        label=np.array([p.label for p in pairs], dtype=np.float32),
        split=np.array([p.split == "dev" for p in pairs]),
    )
    tmp.replace(out)
    dev = [i for i, p in enumerate(pairs) if p.split == "dev"]
    print(
        json.dumps(
            {
                "scored": len(pairs),
                "seconds": round(time.time() - t0, 1),
                "dev_auc": auc([pairs[i].label >= 0.5 for i in dev], logits[dev]),
            }
        ),
        flush=True,
    )


def _student_batch(
    tokenizer: Any, qs: Sequence[str], ps: Sequence[str], answers: Sequence[str], max_length: int
) -> tuple[Any, list[tuple[int, int]]]:
    """Tokenised pairs and each pair's answer span in tokens ((0, 0) = no answer; (-1, -1) = unknown)."""
    from fastcrag.fitting.model import find_answer, span_targets

    enc = tokenizer(
        list(qs),
        list(ps),
        truncation="only_second",
        max_length=max_length,
        padding=True,
        return_offsets_mapping=True,
        return_tensors="pt",
    )
    spans = []
    for i, answer in enumerate(answers):
        if answer == "":
            spans.append((0, 0))
            continue
        a, b = find_answer(ps[i], answer)
        spans.append(span_targets(enc["offset_mapping"][i].tolist(), enc.sequence_ids(i), a, b) if a >= 0 else (-1, -1))
    enc.pop("offset_mapping")
    return enc, spans


def student_heads(
    model: Any, tokenizer: Any, qs: Sequence[str], ps: Sequence[str], max_length: int, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """The student's relevance logits and span margins (best span minus no answer) of pairs, in order."""
    from fastcrag.fitting.model import passage_masks
    from fastcrag.grading.reader import span_margins

    rel = np.zeros(len(qs), dtype=np.float32)
    margin = np.zeros(len(qs), dtype=np.float32)
    for idx, enc in inference_batches(model, tokenizer, qs, ps, max_length, batch):
        r, st, en = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        masks = passage_masks(enc["token_type_ids"], enc["attention_mask"]).cpu().numpy()
        m = span_margins(st.float().cpu().numpy(), en.float().cpu().numpy(), masks)
        rel[idx] = r.float().cpu().numpy()
        margin[idx] = [x if math.isfinite(x) else -30.0 for _, _, x in m]
    return rel, margin


def fit_fusion(rel: np.ndarray, margin: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Logistic regression of the label on (relevance logit, clipped span margin): the grade's weights."""
    from sklearn.linear_model import LogisticRegression

    x = np.stack([rel.astype(np.float64), np.clip(margin.astype(np.float64), -30, 30)], 1)
    lr = LogisticRegression(C=1.0).fit(x, labels >= 0.5)
    return {"relevance": float(lr.coef_[0][0]), "span": float(lr.coef_[0][1]), "bias": float(lr.intercept_[0])}


def cmd_distill(args: argparse.Namespace) -> None:
    """The student learns the teacher's logits (and keeps its reader head on the answer spans); fusion refitted."""
    import torch
    from transformers import AutoTokenizer

    from fastcrag.fitting.model import build_model, save_model, span_allowed

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    passages, pairs = read_pool(Path(args.pool))
    scores = np.load(args.scores)
    target = torch.from_numpy(scores["teacher_logit"].astype(np.float32))
    if len(target) != len(pairs):
        raise SystemExit(f"{args.scores}: {len(target)} scores for {len(pairs)} pairs: score this pool first")
    train = [i for i, p in enumerate(pairs) if p.split == "train"]
    tokenizer = AutoTokenizer.from_pretrained(args.student, local_files_only=True)
    model = build_model(args.student).to(device_of())
    for p in model.encoder.embeddings.word_embeddings.parameters():
        p.requires_grad = False
    device = next(model.parameters()).device
    lengths = [len(pairs[i].question) + len(passages[pairs[i].passage]) for i in train]
    batches = [[train[j] for j in b] for b in length_batches(lengths, args.batch_size, args.seed)] * args.epochs
    labels = torch.tensor([p.label for p in pairs], dtype=torch.float32)
    ce = torch.nn.CrossEntropyLoss()
    bce = torch.nn.BCEWithLogitsLoss()

    def loss_of(idx: list[int]) -> Any:
        qs, ps = _texts(passages, pairs, idx)
        answers = [pairs[i].answer if pairs[i].label >= 0.5 else "" for i in idx]
        enc, spans = _student_batch(tokenizer, qs, ps, answers, args.max_length)
        enc = enc.to(device)
        with bf16_autocast(device):
            rel, st, en = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
        rel = rel.float()
        loss = torch.mean((rel - target[idx].to(device)) ** 2) + args.label_weight * bce(rel, labels[idx].to(device))
        keep = [k for k, s in enumerate(spans) if s[0] >= 0]
        if keep and args.span_weight > 0:
            allowed = span_allowed(enc["token_type_ids"], enc["attention_mask"])[keep]
            st_k = st.float()[keep].masked_fill(~allowed, -1e4)
            en_k = en.float()[keep].masked_fill(~allowed, -1e4)
            s_t = torch.tensor([spans[k][0] for k in keep], device=device)
            e_t = torch.tensor([spans[k][1] for k in keep], device=device)
            loss = loss + args.span_weight * 0.5 * (ce(st_k, s_t) + ce(en_k, e_t))
        return loss

    run = train_resumable(
        model,
        batches,
        loss_of,
        out,
        lr=args.lr,
        head_lr_scale=2.0,
        max_minutes=args.max_minutes,
        checkpoint_every=args.checkpoint_every,
    )
    dev = [i for i, p in enumerate(pairs) if p.split == "dev"][: args.dev_pairs]
    qs, ps = _texts(passages, pairs, dev)
    rel, margin = student_heads(model, tokenizer, qs, ps, args.max_length, 256)
    lab = np.array([pairs[i].label for i in dev])
    half = len(dev) // 2
    fusion = fit_fusion(rel[:half], margin[:half], lab[:half])
    grade = fusion["relevance"] * rel + fusion["span"] * np.clip(margin, -30, 30) + fusion["bias"]
    t = scores["teacher_logit"][dev]
    run |= {
        "dev_pairs": len(dev) - half,
        "fusion": fusion,
        "dev_auc_grade": auc(lab[half:] >= 0.5, grade[half:]),
        "dev_auc_relevance": auc(lab[half:] >= 0.5, rel[half:]),
        "dev_auc_teacher": auc(lab[half:] >= 0.5, t[half:]),
        "dev_pearson_teacher": float(np.corrcoef(rel, t)[0, 1]),
    }
    final = out / "final"
    if args.half:
        model.half()
    save_model(model, tokenizer, final, fusion)
    (out / "summary.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(run), flush=True)


def cmd_pool(args: argparse.Namespace) -> None:
    """Build the lab's mix (plus `--user-data`) and write it as a portable pool."""
    from fastcrag.fitting.mix import PoolConfig
    from lab.training.pool import build_pool, pool_summary

    cfg = PoolConfig(squad_questions=args.squad_questions, dev_percent=args.dev_percent)
    train, dev = build_pool(Path(args.data_root), cfg, args.seed, user_data=[Path(p) for p in args.user_data])
    random.Random(args.seed).shuffle(train)
    if args.max_pairs:
        train = train[: args.max_pairs]
    print(json.dumps(write_pool(Path(args.out), train, dev)))
    for src, (pos, neg) in pool_summary(train).items():
        print(f"  {src:28s} pos {pos:6d}  neg {neg:6d}")


def main(argv: Sequence[str] | None = None) -> None:
    """The command line."""
    from lab.data import SHARED_DATA

    ap = argparse.ArgumentParser(prog="python -m lab.training.teacher", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pool", help="build the portable training pool")
    p.add_argument("--out", required=True)
    p.add_argument("--data-root", default=str(SHARED_DATA))
    p.add_argument("--user-data", action="append", default=[], help="more labelled pairs (JSONL, SQuAD, BEIR)")
    p.add_argument("--squad-questions", type=int, default=0)
    p.add_argument("--max-pairs", type=int, default=0)
    p.add_argument("--dev-percent", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=13)
    p = sub.add_parser("pack", help="a model folder as int8 parts of a given size")
    p.add_argument("model_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--part-mb", type=float, default=55.0)
    p.add_argument("--fp16", action="store_true", help="matrices in fp16 rather than per-row int8")
    p = sub.add_parser("unpack", help="the parts back into a model folder")
    p.add_argument("parts_dir")
    p.add_argument("--out", required=True)
    for name in ("teacher", "distill"):
        p = sub.add_parser(name)
        p.add_argument("--pool", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--seed", type=int, default=13)
        p.add_argument("--epochs", type=int, default=1)
        p.add_argument("--max-length", type=int, default=256)
        p.add_argument("--max-minutes", type=float, default=0.0)
        p.add_argument("--checkpoint-every", type=int, default=500)
        p.add_argument("--dev-pairs", type=int, default=6000)
    t = sub.choices["teacher"]
    t.add_argument("--base", required=True, help="all-mpnet-base-v2 folder")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--lr", type=float, default=2e-5)
    t.add_argument("--max-pairs", type=int, default=0)
    d = sub.choices["distill"]
    d.add_argument("--scores", required=True)
    d.add_argument("--student", required=True, help="the grader-reader to start from (torch folder)")
    d.add_argument("--batch-size", type=int, default=64)
    d.add_argument("--lr", type=float, default=5e-5)
    d.add_argument("--span-weight", type=float, default=0.5)
    d.add_argument("--label-weight", type=float, default=0.2)
    d.add_argument("--half", action="store_true", help="save the student in fp16 (to carry it)")
    p = sub.add_parser("snapshot", help="a teacher folder from a teacher run's last checkpoint")
    p.add_argument("run", help="the teacher run's --out folder")
    p.add_argument("--base", required=True, help="the folder the run started from (all-mpnet-base-v2)")
    p.add_argument("--out", required=True)
    p = sub.add_parser("export", help="the teacher as an ONNX grader folder (relevance only)")
    p.add_argument("teacher", help="a teacher folder (`teacher`'s final, or a `snapshot`)")
    p.add_argument("--out", required=True)
    p.add_argument("--name", required=True, help="the grader's name (its calibration is tied to it)")
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--int8", action="store_true", help="dynamic int8 weights (calibrate after quantising)")
    p = sub.add_parser("score", help="the teacher's logits for every pair of a pool")
    p.add_argument("--pool", required=True)
    p.add_argument("--teacher", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        print([str(p) for p in pack(Path(args.model_dir), Path(args.out), args.part_mb, int8=not args.fp16)])
    elif args.cmd == "unpack":
        print(unpack(Path(args.parts_dir), Path(args.out)))
    else:
        commands = {
            "pool": cmd_pool,
            "teacher": cmd_teacher,
            "snapshot": cmd_snapshot,
            "export": cmd_export,
            "score": cmd_score,
            "distill": cmd_distill,
        }
        commands[args.cmd](args)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    main()
