"""Does all-mpnet-base-v2's cosine add to the packaged grader's grade? Measured offline, nothing of it ships.

all-mpnet-base-v2 read as a bi-encoder holds rewordings that the grader misses, so its cosine of the question and the
passage was tried as a second term of the grade (lab/RESULTS.md, 2026-12-06). Two measures, one run:

- the training pool's dev split (by document; `lab.training.pool.build_pool`, seed 13; a 3,000-pair sample): AUC of
  the grader's logit, of each bi-encoder's cosine, and of logistic fusions fitted on one half of the sample and scored
  on the other;
- the paraphrase probe (`lab/questions/paraphrase_probe.jsonl`, candidates as `lab.scripts.paraphrase_probe` draws
  them): rewordings kept, first and MRR per scorer, each fused scorer kept at the threshold that passes the same
  share of the pool's wrong passages as the grader's own `reranker_threshold` does.

    python lab/experiments/mpnet_cosine_probe.py --mpnet MPNET_FOLDER --index git=IDX --index flask=IDX --out DIR

MPNET_FOLDER as `lab/scripts/train_grader_v5.sh` assembles it (RUN/mpnet). The scores are kept in DIR (pool.pkl,
probe.pkl), so a second run only prints; on 2 cores the mpnet encodings take about 20 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.fitting.mix import is_dev_group
from fastcrag.fitting.pseudo import logit

GRADER = "src/fastcrag/models/grader"
WEIGHTS: dict[str, tuple[float, float, float] | None] = {  # on (grader logit, MiniLM cosine, mpnet cosine)
    "grader": (1, 0, 0),
    "mpnet cosine": (0, 0, 1),
    "grader + MiniLM (fit)": None,
    "grader + mpnet (fit)": None,
    "grader + 3 x mpnet": (1, 0, 3),
    "grader + 5 x mpnet": (1, 0, 5),
    "grader + 8 x mpnet": (1, 0, 8),
}


def score_pool(mpnet: Any, grader: Any, mini: Any, n: int) -> dict[str, Any]:
    """Grader logits and both cosines for `n` pairs of the pool's dev split."""
    from fastcrag.fitting.mix import PoolConfig
    from lab.data import SHARED_DATA
    from lab.training.pool import build_pool

    _, dev = build_pool(SHARED_DATA, PoolConfig(), 13)
    random.Random(0).shuffle(dev)
    dev = dev[:n]
    qs, ps = [d.question for d in dev], [d.passage for d in dev]
    g = np.array([logit(grader.score(q, [p])[0]) for q, p in zip(qs, ps, strict=True)])
    cm = (np.asarray(mini.encode(qs)) * np.asarray(mini.encode(ps))).sum(1)
    eq = mpnet.encode(qs, batch_size=32, normalize_embeddings=True)
    ep = mpnet.encode(ps, batch_size=32, normalize_embeddings=True)
    return {
        "y": np.array([float(d.label) for d in dev]),
        "g": g,
        "cm": cm,
        "cp": (eq * ep).sum(1),
        "groups": [d.group for d in dev],
    }


def score_probe(mpnet: Any, grader: Any, mini: Any, indexes: dict[str, str]) -> list[dict[str, Any]]:
    """Per probe pair, the grader's logits and both cosines of the plain and reworded question vs its candidates."""
    from lab.data import SHARED_DATA
    from lab.scripts.paraphrase_probe import candidates_by_corpus, is_same_passage

    pairs = [json.loads(line) for line in Path("lab/questions/paraphrase_probe.jsonl").open() if line.strip()]
    cands = candidates_by_corpus(pairs, indexes, SHARED_DATA / "squad2-dev")
    rows = []
    for p in pairs:
        if p["id"] not in cands:
            continue
        texts = [p["passage"], *(c for c in cands[p["id"]] if not is_same_passage(c, p["passage"]))]
        row: dict[str, Any] = {"corpus": p["corpus"], "how": p["how"]}
        for key in ("reworded", "question"):
            vecs = np.asarray(mini.encode([p[key], *texts]))
            e = mpnet.encode([p[key], *texts], batch_size=16, normalize_embeddings=True)
            row[key] = np.stack([[logit(s) for s in grader.score(p[key], texts)], vecs[1:] @ vecs[0], e[1:] @ e[0]])
        rows.append(row)
    return rows


def report(pool: dict[str, Any], rows: list[dict[str, Any]], threshold: float) -> None:
    """Print the pool AUCs and the probe's figures per scorer."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    y, feats = pool["y"], np.stack([pool["g"], pool["cm"], pool["cp"]], 1)
    half = np.array([is_dev_group(f"half:{g}", 50.0) for g in pool["groups"]])  # stable, by document
    weights = dict(WEIGHTS)
    for name, cols in (("grader + MiniLM (fit)", [0, 1]), ("grader + mpnet (fit)", [0, 2])):
        aucs = []
        for k in (False, True):
            lr = LogisticRegression().fit(feats[half == k][:, cols], y[half == k])
            aucs.append(roc_auc_score(y[half != k], lr.decision_function(feats[half != k][:, cols])))
        coef = LogisticRegression().fit(feats[:, cols], y).coef_[0]
        w = [0.0, 0.0, 0.0]
        for c, v in zip(cols, coef, strict=True):
            w[c] = float(v)
        weights[name] = tuple(w)
        print(f"pool dev: {name}: AUC on the other half {aucs[0]:.4f} / {aucs[1]:.4f}, weights {np.round(coef, 3)}")
    for name, col in (("grader", 0), ("MiniLM cosine", 1), ("mpnet cosine", 2)):
        print(f"pool dev: {name}: AUC {roc_auc_score(y, feats[:, col]):.4f}")
    t4 = logit(threshold)
    fpr = float(((pool["g"] >= t4) & (y == 0)).sum() / (y == 0).sum())
    print(f"\nthe grader's reranker_threshold {threshold} passes {fpr:.3f} of the pool's wrong passages")
    right = np.array([r["reworded"][0, 0] for r in rows])
    other = np.array([r["reworded"][0, 1:].max(initial=-np.inf) for r in rows])
    for share in (0.85, 0.7, 0.5):  # the threshold that would keep this share of rewordings, and what else it passes
        t = float(np.quantile(right, 1 - share))
        print(
            f"the grader keeps {share} of rewordings at {1 / (1 + math.exp(-t)):.3f}: it passes "
            f"{((pool['g'] >= t) & (y == 0)).sum() / (y == 0).sum():.3f} of the pool's wrong passages, and a wrong "
            f"candidate beside {np.mean(other >= t):.3f} of the rewordings' right passages"
        )
    for name, w in weights.items():
        s = feats @ np.array(w)
        neg = np.sort(s[y == 0])
        t = t4 if name == "grader" else neg[min(len(neg) - 1, round((1 - fpr) * len(neg)))]
        out = []
        for corpus in ("all", "python", "git", "flask", "squad"):
            sel = [r for r in rows if corpus in ("all", r["corpus"])]
            if not sel:
                continue
            rew = [np.array(w) @ r["reworded"] for r in sel]
            plain = [float(np.array(w) @ r["question"][:, 0]) for r in sel]
            ranks = [1 + int((v[1:] > v[0]).sum()) for v in rew]
            out.append(
                f"{corpus} kept {np.mean([v[0] >= t for v in rew]):.3f}"
                f" (plain {np.mean([p >= t for p in plain]):.3f})"
                f" first {np.mean([r == 1 for r in ranks]):.3f} mrr {np.mean([1 / r for r in ranks]):.3f}"
            )
        print(f"{name}: " + " | ".join(out))


def main() -> int:
    """Score (or read back) both measures and print them."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mpnet", required=True, help="all-mpnet-base-v2's sentence-transformers folder")
    ap.add_argument("--index", action="append", default=[], help="CORPUS=INDEX (git, flask)")
    ap.add_argument("--pairs", type=int, default=3000, help="pool dev pairs sampled")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from sentence_transformers import SentenceTransformer

    from fastcrag.config.calibration import load_calibration
    from fastcrag.grading.reranker import calibration_for, load_reranker
    from fastcrag.retrieval.embeddings import ONNX_SPEC, default_embeddings

    grader, mini = load_reranker(GRADER), default_embeddings(ONNX_SPEC)
    threshold = load_calibration(calibration_for(None, GRADER), expected_model=grader.name).reranker_threshold
    mpnet = SentenceTransformer(args.mpnet, device="cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    stored, indexes = [], dict(i.split("=", 1) for i in args.index)
    for name, make in (
        ("pool.pkl", lambda: score_pool(mpnet, grader, mini, args.pairs)),
        ("probe.pkl", lambda: score_probe(mpnet, grader, mini, indexes)),
    ):
        path = args.out / name
        if not path.is_file():
            path.write_bytes(pickle.dumps(make()))
        stored.append(pickle.loads(path.read_bytes()))
    report(stored[0], stored[1], threshold)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
