"""Train the grader-reader from scratch on the packaged mix (`python -m lab train-reranker`) and measure it on dev.

torch, transformers, SciPy and scikit-learn are imported inside the functions that use them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.fitting.mix import Pair, read_pairs, write_pairs
from fastcrag.fitting.model import build_model, passage_masks, save_model
from fastcrag.fitting.train_loop import TrainConfig, _encoded_pool, make_optimizer, prepare_run, train_loop
from fastcrag.grading.reader import span_margins
from fastcrag.measures import auc_of_labels
from fastcrag.retrieval.embeddings import packaged_minilm_path
from lab.training.pool import build_pool, pool_summary


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
