"""Fine-tune the grader-reader (relevance logit + answer span, one pass): seeded, length-bucketed, resumable.

torch, transformers, safetensors, SciPy, scikit-learn and ONNX Runtime's quantiser are imported inside the functions
that use them: each takes from a fraction of a second to several seconds to load, and importing this module for its
configuration or helpers must stay cheap.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fastcrag.grading.reader import span_margins
from fastcrag.measures import auc_of_labels
from fastcrag.modelmeta import write_model_meta
from fastcrag.retrieval.embeddings import packaged_minilm_path
from fastcrag.training.data import Pair, PoolConfig, build_pool, pool_summary, read_pairs, write_pairs
from fastcrag.training.model import (
    build_model,
    find_answer,
    passage_masks,
    read_fusion,
    save_model,
    span_allowed,
    span_targets,
)
from fastcrag.training.network import has_reader, head_parameters, is_classifier_folder, load_network

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@dataclass
class TrainConfig:
    """Everything that determines a training run (written to `train_config.json` in the output folder).

    Attributes:
        output_dir: Run folder: pool, checkpoint, final model and logs.
        base_model: Folder of the starting weights; the packaged all-MiniLM-L6-v2 when empty.
        data_root: Shared data folder holding `train/` (and `scifact/` for its train qrels); empty for none.
        user_data: Extra labelled data (SQuAD JSON, BEIR folder, JSONL of question/passage/label).
        seed: Seed for the pool, the head initialisation and the batch order.
        epochs: Passes over the pool.
        batch_size: Pairs per step.
        lr: Peak learning rate (linear warm-up, then linear decay to 0).
        warmup: Share of steps used for warm-up.
        max_length: Token limit of a (question, passage) pair.
        bf16: Use bfloat16 autocast where the hardware supports it (CUDA, or a CPU with AVX-512); else fp32.
        checkpoint_every: Steps between checkpoints.
        max_minutes: Time budget: the learning rate decays with the clock and training stops (after
            checkpointing) when it is spent; 0 for a purely step-based schedule over the whole pool.
        max_pairs: Cap on training pairs after shuffling; 0 for all.
        threads: Torch CPU threads.
        freeze_embeddings: Keep the word-embedding matrix (half of MiniLM's weights) fixed: much less
            optimizer work per step on a CPU, little quality cost.
        include_scifact_train: Add SciFact train qrels (never the test split).
        span_weight: Weight of the reader head's start/end cross-entropy beside the relevance loss.
        pool: Pool sizes and mix.
    """

    output_dir: str
    base_model: str = ""
    data_root: str = ""
    user_data: list[str] = field(default_factory=list)
    seed: int = 13
    epochs: int = 1
    batch_size: int = 32
    lr: float = 4e-5
    warmup: float = 0.05
    max_length: int = 256
    bf16: bool = True
    checkpoint_every: int = 200
    max_minutes: float = 0.0
    max_pairs: int = 0
    threads: int = 2
    freeze_embeddings: bool = True
    include_scifact_train: bool = True
    span_weight: float = 0.5
    pool: PoolConfig = field(default_factory=PoolConfig)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def bf16_supported(device: str) -> bool:
    """Whether bfloat16 autocast is fast here: a CUDA device with bf16, or a CPU with AVX-512 (BF16/AMX paths).

    On a CPU with only AVX2, bf16 is emulated and a training step runs about 15x slower than in fp32.
    """
    import torch

    if device == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Batches of similar length, in a seeded random order.

    Indices are shuffled, cut into mega-batches of 50 batches, each sorted by length and cut into batches; the
    batch order is then shuffled, so padding is small but the label and source mix stays random.
    """
    rng = random.Random(seed * 1000 + epoch)
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    mega = batch_size * 50
    batches: list[list[int]] = []
    for start in range(0, len(idx), mega):
        chunk = sorted(idx[start : start + mega], key=lambda i: lengths[i])
        batches.extend(chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def lr_at(progress: float, peak: float, warmup: float) -> float:
    """Linear warm-up to `peak` over the first `warmup` of progress, then linear decay to 0 at progress 1."""
    if progress < warmup:
        return peak * max(progress, 1e-3) / warmup
    return peak * max(0.0, (1.0 - progress) / max(1e-9, 1.0 - warmup))


def progress_of(step: int, total: int, elapsed_s: float, budget_min: float) -> float:
    """Training progress in [0, 1]: the larger of the step share and, under a time budget, the time share.

    With a time budget the learning-rate schedule follows the clock, so a run that is slower than planned (a
    busy CPU) still anneals to 0 and stops on time, having trained on a seeded random prefix of the pool.
    """
    p = step / max(1, total)
    if budget_min > 0:
        p = max(p, elapsed_s / (budget_min * 60))
    return min(1.0, p)


def _save_checkpoint(path: Path, model: Any, optimizer: Any, step: int, elapsed: float) -> None:
    """Write model weights, optimizer moments (safetensors) and the step (JSON); no pickle."""
    import torch
    from safetensors.torch import save_file

    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
        str(tmp / "model.safetensors"),
    )
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, float]] = {}
    for pid, st in sd["state"].items():
        for name, val in st.items():
            if isinstance(val, torch.Tensor) and val.dim() > 0:
                tensors[f"{pid}.{name}"] = val.detach().contiguous().cpu()
            else:
                scalars.setdefault(str(pid), {})[name] = float(val)
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    meta = {"step": step, "elapsed_s": elapsed, "param_groups": sd["param_groups"], "scalars": scalars}
    (tmp / "state.json").write_text(json.dumps(meta), encoding="utf-8")
    if path.exists():
        for f in path.iterdir():
            f.unlink()
        path.rmdir()
    tmp.rename(path)


def _load_checkpoint(path: Path, model: Any, optimizer: Any) -> tuple[int, float]:
    """Restore a checkpoint written by `_save_checkpoint`; returns (step, elapsed seconds)."""
    import torch
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(path / "model.safetensors")))
    meta = json.loads((path / "state.json").read_text(encoding="utf-8"))
    tensors = load_file(str(path / "optimizer.safetensors"))
    state: dict[int, dict[str, Any]] = {}
    for key, val in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = val
    for pid, sc in meta["scalars"].items():
        for name, v in sc.items():
            state.setdefault(int(pid), {})[name] = torch.tensor(v)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    return int(meta["step"]), float(meta["elapsed_s"])


def _prepare_pool(cfg: TrainConfig, out: Path) -> tuple[list[Pair], list[Pair]]:
    """Build the pool once and keep it as JSONL in the run folder, so a resumed run sees the same pairs."""
    tp, dp = out / "pool" / "train.jsonl", out / "pool" / "dev.jsonl"
    if tp.exists() and dp.exists():
        return read_pairs(tp), read_pairs(dp)
    t0 = time.time()
    train, dev = build_pool(
        Path(cfg.data_root) if cfg.data_root else None,
        cfg.pool,
        cfg.seed,
        user_data=[Path(p) for p in cfg.user_data],
        include_scifact_train=cfg.include_scifact_train,
    )
    if cfg.max_pairs and len(train) > cfg.max_pairs:
        train = train[: cfg.max_pairs]
    write_pairs(tp, train)
    write_pairs(dp, dev)
    print(f"pool: {len(train)} train / {len(dev)} dev pairs in {time.time() - t0:.0f}s")
    for src, (pos, neg) in pool_summary(train).items():
        print(f"  {src:28s} pos {pos:6d}  neg {neg:6d}")
    return train, dev


@dataclass(frozen=True)
class Encoded:
    """Tokenised pairs with their reader targets ((0, 0) = no answer; -100 = no span to learn from)."""

    input_ids: list[list[int]]
    type_ids: list[list[int]]
    starts: list[int]
    ends: list[int]
    keep: list[int]


def encode_pairs(tokenizer: Any, pairs: Sequence[Pair], max_length: int) -> Encoded:
    """Tokenise (question, passage) pairs and locate each positive's answer span in tokens.

    Negatives target [CLS] (no answer); positives without an answer phrase (answer-sentence data) give no
    span loss; a positive whose answer was truncated away is dropped (index not in `keep`).
    """
    enc = tokenizer(
        [p.question for p in pairs],
        [p.passage for p in pairs],
        truncation=True,
        max_length=max_length,
        return_offsets_mapping=True,
    )
    starts, ends, keep = [], [], []
    for i, p in enumerate(pairs):
        s = e = 0
        if p.label >= 0.5:
            s = e = -100
            a, b = find_answer(p.passage, p.answer)
            if a >= 0:
                s, e = span_targets(enc["offset_mapping"][i], enc.sequence_ids(i), a, b)
                if s < 0:
                    continue
        starts.append(s)
        ends.append(e)
        keep.append(i)
    return Encoded([enc["input_ids"][i] for i in keep], [enc["token_type_ids"][i] for i in keep], starts, ends, keep)


def _encoded_pool(path: Path, tokenizer: Any, pairs: Sequence[Pair], max_length: int) -> Encoded:
    """`encode_pairs`, kept as flat arrays in the run folder (NumPy, no pickle) so a resumed run skips it."""
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            if int(z["n_pairs"]) == len(pairs):
                ends_at = np.cumsum(z["lengths"])
                starts_at = ends_at - z["lengths"]
                ids, types = z["ids"].tolist(), z["types"].tolist()
                return Encoded(
                    [ids[a:b] for a, b in zip(starts_at, ends_at, strict=True)],
                    [types[a:b] for a, b in zip(starts_at, ends_at, strict=True)],
                    z["starts"].tolist(),
                    z["ends"].tolist(),
                    z["keep"].tolist(),
                )
    data = encode_pairs(tokenizer, pairs, max_length)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(
        tmp,
        n_pairs=np.int64(len(pairs)),
        lengths=np.asarray([len(x) for x in data.input_ids], dtype=np.int64),
        ids=np.asarray([t for x in data.input_ids for t in x], dtype=np.int32),
        types=np.asarray([t for x in data.type_ids for t in x], dtype=np.int8),
        starts=np.asarray(data.starts, dtype=np.int64),
        ends=np.asarray(data.ends, dtype=np.int64),
        keep=np.asarray(data.keep, dtype=np.int64),
    )
    tmp.replace(path)
    return data


def _batch_tensors(
    ids_list: Sequence[list[int]], types_list: Sequence[list[int]], pad: int, width: int
) -> tuple[Any, Any, Any]:
    import torch

    ids = torch.full((len(ids_list), width), pad, dtype=torch.long)
    tt = torch.zeros((len(ids_list), width), dtype=torch.long)
    am = torch.zeros((len(ids_list), width), dtype=torch.long)
    for r, (x, t) in enumerate(zip(ids_list, types_list, strict=True)):
        n = min(len(x), width)
        ids[r, :n] = torch.tensor(x[:n])
        tt[r, :n] = torch.tensor(t[:n])
        am[r, :n] = 1
    return ids, tt, am


def predict_heads(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int, batch_size: int, bf16: bool
) -> tuple[list[float], list[float]]:
    """Relevance logits and span margins (best span minus no-answer) of (question, passage) pairs."""
    import torch

    device = next(model.parameters()).device
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    rel_out = [0.0] * len(pairs)
    margin_out = [0.0] * len(pairs)
    model.eval()
    with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            enc = tokenizer(
                [pairs[i][0] for i in idx],
                [pairs[i][1] for i in idx],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
            ).to(device)
            rel, st, en = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
            masks = passage_masks(enc["token_type_ids"], enc["attention_mask"]).cpu().numpy()
            margins = span_margins(st.float().cpu().numpy(), en.float().cpu().numpy(), masks)
            for i, r, (_, _, m) in zip(idx, rel.float().cpu().tolist(), margins, strict=True):
                rel_out[i] = r
                margin_out[i] = m if math.isfinite(m) else -30.0
    return rel_out, margin_out


def fit_grade_fusion(rel: Sequence[float], margin: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    """Logistic regression of the label on (relevance logit, span margin): the grade's combination weights."""
    from sklearn.linear_model import LogisticRegression

    x = np.stack([np.asarray(rel, dtype=np.float64), np.clip(np.asarray(margin, dtype=np.float64), -30, 30)], 1)
    lr = LogisticRegression(C=1.0).fit(x, np.asarray(labels) >= 0.5)
    return {"relevance": float(lr.coef_[0][0]), "span": float(lr.coef_[0][1]), "bias": float(lr.intercept_[0])}


def fused_logits(rel: Sequence[float], margin: Sequence[float], w: dict[str, float]) -> list[float]:
    """The grade's logit: w.relevance * relevance + w.span * clip(margin) + w.bias."""
    return [
        w["relevance"] * r + w["span"] * max(-30.0, min(30.0, m)) + w["bias"] for r, m in zip(rel, margin, strict=True)
    ]


def evaluate_dev(
    model: Any, tokenizer: Any, dev: Sequence[Pair], cfg: TrainConfig, limit: int = 4000
) -> tuple[dict[str, Any], dict[str, float]]:
    """Fit the grade fusion on the dev split, and report AUCs of each head and the grade, per source family.

    The fusion is fitted on the first half of the dev sample and every AUC is measured on the second half.

    Returns:
        (metrics, fusion weights).
    """
    sample = list(dev[:limit])
    rel, margin = predict_heads(
        model, tokenizer, [(p.question, p.passage) for p in sample], cfg.max_length, 64, cfg.bf16
    )
    labels = [p.label for p in sample]
    half = len(sample) // 2
    fusion = fit_grade_fusion(rel[:half], margin[:half], labels[:half])
    grade = fused_logits(rel, margin, fusion)
    held = range(half, len(sample))
    res: dict[str, Any] = {"pairs": len(sample), "fusion_fit_pairs": half, "fusion": fusion}
    for name, vals in (("relevance", rel), ("span", margin), ("grade", grade)):
        res[f"auc_{name}"] = auc_of_labels([labels[i] for i in held], [vals[i] for i in held])
    groups: dict[str, list[int]] = {}
    for i in held:
        p = sample[i]
        groups.setdefault(p.source.split(":")[0], []).append(i)
        kind = p.source.split(":")[-1]
        if p.label >= 0.5 and kind == "own":
            groups.setdefault("own_vs_hard", []).append(i)
        elif kind in ("deleted", "perturbed", "relation", "same_article", "swap", "unanswerable"):
            groups.setdefault("own_vs_hard", []).append(i)
    for fam, idx in sorted(groups.items()):
        a = auc_of_labels([labels[i] for i in idx], [grade[i] for i in idx])
        if not math.isnan(a):
            res[f"auc_grade_{fam}"] = a
    return res, fusion


def prepare_run(cfg: TrainConfig) -> str:
    """Seed Python and torch, set torch's threads and drop bf16 where it is emulated; returns the device.

    On a CPU without AVX-512 bf16 autocast is emulated and about 15x slower, so `cfg.bf16` is turned off there.
    """
    import torch  # torch takes seconds to load: only when a run starts

    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = _device()
    if cfg.bf16 and not bf16_supported(device):
        print(
            f"bf16 autocast is emulated on this {device} ({torch.backends.cpu.get_cpu_capability()}): training in fp32"
        )
        cfg.bf16 = False
    return device


def make_optimizer(model: Any, cfg: TrainConfig, device: str, *, head_lr_scale: float) -> Any:
    """Move `model` to `device` and make its AdamW, the heads at `head_lr_scale` times the learning rate.

    Weight decay is 0.01 on the encoder's matrices and 0 on biases, LayerNorm weights and the heads. With
    `cfg.freeze_embeddings` the word-embedding matrix is not trained. `model` is a network of
    `fastcrag.training.network.load_network` (or `build_model`): it has an `encoder` and its heads.
    """
    import torch  # torch takes seconds to load: only when a run starts

    model.to(device)
    if cfg.freeze_embeddings:
        model.encoder.get_input_embeddings().weight.requires_grad_(False)
    no_decay = ("bias", "LayerNorm.weight")
    encoder = [(n, p) for n, p in model.encoder.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in encoder if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in encoder if n.endswith(no_decay)], "weight_decay": 0.0},
        {
            "params": [p for p in head_parameters(model) if p.requires_grad],
            "weight_decay": 0.0,
            "scale": head_lr_scale,
        },
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr)


@dataclass(frozen=True)
class LoopResult:
    """What `train_loop` did (counted from the start of the run, across resumes).

    Attributes:
        steps: Optimizer steps taken.
        total_steps: Steps of the whole plan (`cfg.epochs` passes).
        pairs_seen: Training pairs in the batches taken.
        elapsed_s: Training time (the clock of the learning-rate schedule).
        stopped_by_time_budget: The time budget ended the run before the plan did.
        resumed_at: The step the run resumed from (0: a fresh start).
    """

    steps: int
    total_steps: int
    pairs_seen: int
    elapsed_s: float
    stopped_by_time_budget: bool
    resumed_at: int


def train_loop(
    model: Any,
    optimizer: Any,
    data: Encoded,
    labels: Sequence[float],
    cfg: TrainConfig,
    out: Path,
    *,
    pad_id: int,
    device: str,
    desc: str = "train-reranker",
    progress: bool = True,
    loss: Callable[[tuple[Any, Any, Any], Any, Any, Any], Any] | None = None,
) -> LoopResult:
    """Train `model` on encoded pairs: length-bucketed seeded batches, the warm-up/decay schedule, checkpoints.

    The plan is `cfg.epochs` passes of `length_bucketed_batches`. A checkpoint in `out/checkpoint` is resumed
    (step, optimizer moments and the clock), one is written every `cfg.checkpoint_every` steps and at the end,
    and each is logged to `out/train_log.jsonl`. Under `cfg.max_minutes` the learning rate follows the clock and
    reaches 0 when the budget is spent (`progress_of`). The loss is the relevance BCE plus, for a grader-reader,
    `cfg.span_weight` times the span cross-entropy over the batch's pairs that have a span target (-100: none);
    `loss`, when given, replaces it: it is called with the model's outputs and the batch's input ids, token types
    and attention mask (a distillation's loss against its teacher, `training.distill`).
    """
    import torch  # torch takes seconds to load: only when a run starts

    lengths = [len(x) for x in data.input_ids]
    plan = [b for e in range(cfg.epochs) for b in length_bucketed_batches(lengths, cfg.batch_size, cfg.seed, e)]
    total = len(plan)
    step, elapsed0 = 0, 0.0
    ckpt = out / "checkpoint"
    if (ckpt / "state.json").exists():
        step, elapsed0 = _load_checkpoint(ckpt, model, optimizer)
        print(f"resumed from step {step}/{total} ({elapsed0 / 60:.1f} min already trained)")
    resumed_at = step
    bce = torch.nn.BCEWithLogitsLoss()
    ce = torch.nn.CrossEntropyLoss(ignore_index=-100)
    model.train()
    start = time.time()
    log_path = out / "train_log.jsonl"
    ema: float | None = None
    stopped_early = False
    elapsed = elapsed0
    bar = tqdm(total=total, initial=step, desc=desc, unit="step", dynamic_ncols=True, disable=not progress)
    while step < total and progress_of(step, total, elapsed0 + time.time() - start, cfg.max_minutes) < 1.0:
        batch = plan[step]
        # Round widths up to a multiple of 32: oneDNN compiles kernels per shape, so few shapes train faster.
        width = min(-(-max(lengths[i] for i in batch) // 32) * 32, max(cfg.max_length, 32))
        ids, tt, am = _batch_tensors(
            [data.input_ids[i] for i in batch], [data.type_ids[i] for i in batch], pad_id, width
        )
        ids, tt, am = ids.to(device), tt.to(device), am.to(device)
        y = torch.tensor([labels[i] for i in batch], dtype=torch.float32, device=device)
        ys = torch.tensor([data.starts[i] for i in batch], dtype=torch.long, device=device)
        ye = torch.tensor([data.ends[i] for i in batch], dtype=torch.long, device=device)
        progress_now = progress_of(step, total, elapsed0 + time.time() - start, cfg.max_minutes)
        for g in optimizer.param_groups:
            g["lr"] = lr_at(progress_now, cfg.lr, cfg.warmup) * g.get("scale", 1.0)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=cfg.bf16):
            rel, st, en = model(input_ids=ids, attention_mask=am, token_type_ids=tt)
        if loss is not None:
            value = loss((rel, st, en), ids, tt, am)
        else:
            value = bce(rel.float(), y)
            # a batch with no span target (all -100) would make the mean cross-entropy NaN: no span loss then
            if st is not None and en is not None and bool((ys != -100).any()):
                allowed = span_allowed(tt, am)
                st = st.float().masked_fill(~allowed, -1e4)
                en = en.float().masked_fill(~allowed, -1e4)
                value = value + cfg.span_weight * (ce(st, ys) + ce(en, ye)) / 2
        value.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        lv = float(value.item())
        ema = lv if ema is None else 0.98 * ema + 0.02 * lv
        bar.update(1)
        bar.set_postfix(loss=f"{ema:.4f}", lr=f"{optimizer.param_groups[0]['lr']:.1e}")
        elapsed = elapsed0 + time.time() - start
        over = progress_of(step, total, elapsed, cfg.max_minutes) >= 1.0
        if step % cfg.checkpoint_every == 0 or step == total or over:
            _save_checkpoint(ckpt, model, optimizer, step, elapsed)
            with log_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"step": step, "total": total, "loss_ema": ema, "elapsed_s": elapsed}) + "\n")
        if over and step < total:
            stopped_early = True
            if progress:
                print(f"\ntime budget spent at step {step}/{total} ({elapsed / 60:.1f} min); schedule complete")
            break
    bar.close()
    return LoopResult(
        steps=step,
        total_steps=total,
        pairs_seen=sum(len(b) for b in plan[:step]),
        elapsed_s=elapsed,
        stopped_by_time_budget=stopped_early,
        resumed_at=resumed_at,
    )


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) training and write the final model to `<output_dir>/final`.

    Returns:
        The folder of the final model: encoder (Hugging Face format), heads, tokenizer and grade fusion.
    """
    from transformers import AutoTokenizer

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = cfg.base_model or str(packaged_minilm_path())
    cfg.base_model = base
    (out / "train_config.json").write_text(json.dumps(asdict(cfg), indent=2), encoding="utf-8")
    device = prepare_run(cfg)
    train_pairs, dev_pairs = _prepare_pool(cfg, out)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    t0 = time.time()
    data = _encoded_pool(out / "pool" / f"encoded-{cfg.max_length}.npz", tokenizer, train_pairs, cfg.max_length)
    lengths = [len(x) for x in data.input_ids]
    labels = [train_pairs[i].label for i in data.keep]
    print(
        f"tokenised {len(lengths)} pairs in {time.time() - t0:.0f}s ({len(train_pairs) - len(lengths)} positives "
        f"dropped: answer truncated); mean length {sum(lengths) / max(1, len(lengths)):.0f}"
    )

    model = build_model(base)
    optimizer = make_optimizer(model, cfg, device, head_lr_scale=5.0)  # the heads start from scratch
    run = train_loop(model, optimizer, data, labels, cfg, out, pad_id=int(tokenizer.pad_token_id or 0), device=device)
    step, total, elapsed = run.steps, run.total_steps, run.elapsed_s
    final = out / "final"
    model.eval()
    dev_metrics, fusion = evaluate_dev(model, tokenizer, dev_pairs, cfg) if dev_pairs else ({}, None)
    save_model(model, tokenizer, final, fusion)
    summary = {
        "steps": step,
        "total_steps": total,
        "stopped_by_time_budget": run.stopped_by_time_budget,
        "pairs_seen": run.pairs_seen,
        "train_minutes": round(elapsed / 60, 2),
        "train_pairs": len(lengths),
        "pairs_per_s": round(run.pairs_seen / max(1e-9, elapsed), 1),
        "device": device,
        "dev": dev_metrics,
    }
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print(json.dumps(summary, indent=2))
    return final


def export_onnx(model_dir: Path, onnx_path: Path, opset: int = 17) -> None:
    """Export a trained grader to ONNX (fp32, dynamic batch and sequence axes).

    Outputs: `logits` (batch, 1) relevance and, for a grader-reader, `start_logits` and `end_logits` (batch,
    sequence) of the reader; a one-logit classifier folder (`fastcrag.training.network`) exports `logits` only.
    """
    import torch

    inner = load_network(model_dir)
    inner.eval()
    reader = has_reader(inner)

    class Export(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            rel, st, en = self.inner(input_ids, attention_mask, token_type_ids)
            return (rel.unsqueeze(-1), st, en) if reader else rel.unsqueeze(-1)

    ids = torch.ones((2, 16), dtype=torch.long)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    axes = {0: "batch", 1: "sequence"}
    with torch.inference_mode():
        torch.onnx.export(
            Export().eval(),
            (ids, ids.clone(), torch.zeros_like(ids)),
            str(onnx_path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logits", "start_logits", "end_logits"] if reader else ["logits"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "logits": {0: "batch"},
                **({"start_logits": axes, "end_logits": axes} if reader else {}),
            },
            opset_version=opset,
            dynamo=False,
        )


def quantize_int8(src: Path, dst: Path, per_channel: bool = True) -> None:
    """Dynamic int8 quantisation of an ONNX model's weights (per-channel keeps scores closest to fp32)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel)


def export_grader(
    model_dir: Path,
    dest: Path,
    *,
    name: str,
    train_dir: Path | None = None,
    max_length: int = 256,
    int8: bool = True,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Package a trained model as an ONNX grader folder loadable by `fastcrag.grading.reranker.load_reranker`.

    Writes `model.onnx` (int8 when `int8`), `tokenizer.json` and `fastcrag_model.json` (with the grade fusion
    fitted on the run's dev split) into `dest`. `model_dir` is a grader-reader folder (`reader: true`) or a one-logit
    classifier folder (`reader: false`; see `fastcrag.training.network`).

    Returns:
        `dest`.
    """
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model_fp32.onnx"
        export_onnx(model_dir, fp32)
        if int8:
            quantize_int8(fp32, dest / "model.onnx")
        else:
            shutil.copyfile(fp32, dest / "model.onnx")
    shutil.copyfile(model_dir / "tokenizer.json", dest / "tokenizer.json")
    meta: dict[str, Any] = {
        "name": name,
        "format": "onnx-int8-dynamic-per-channel" if int8 else "onnx-fp32",
        "max_length": max_length,
        "activation": "sigmoid",
        "labels": "1 = the passage states the answer",
        "reader": not is_classifier_folder(model_dir),
    }
    fusion = read_fusion(model_dir)
    if fusion is not None and meta["reader"]:
        meta["grade"] = fusion
    if train_dir is not None and (train_dir / "train_config.json").exists():
        cfg = json.loads((train_dir / "train_config.json").read_text(encoding="utf-8"))
        meta["dev_percent"] = cfg["pool"]["dev_percent"]
        meta["seed"] = cfg["seed"]
    meta.update(extra_meta or {})
    write_model_meta(dest, meta)
    return dest
