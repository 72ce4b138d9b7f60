"""The from-scratch training pool: the packaged mix plus a user's labelled data (SQuAD JSON, BEIR or JSONL)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from fastcrag.fitting.mix import (
    Article,
    Pair,
    PoolConfig,
    beir_pairs,
    is_dev_group,
    iter_jsonl,
    load_squad,
    mix_pairs,
    open_text,
    split_pool,
    squad_pairs,
)


def jsonl_pairs(path: Path, source: str = "user") -> list[Pair]:
    """A JSONL of `{"question", "passage", "label"}`; optional `group` (default: passage hash) and `answer`."""
    out: list[Pair] = []
    for i, row in enumerate(iter_jsonl(path)):
        try:
            q, p, lab = str(row["question"]), str(row["passage"]), float(row["label"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{i + 1}: need question, passage and a numeric label") from exc
        if not 0.0 <= lab <= 1.0:
            raise ValueError(f"{path}:{i + 1}: label must be in [0, 1], got {lab}")
        grp = str(row.get("group") or hashlib.sha1(p.encode("utf-8")).hexdigest()[:12])
        answer = str(row.get("answer") or "") if lab >= 0.5 else ""
        out.append(Pair(q, p, lab, f"{source}:jsonl", f"{source}:{grp}", answer if answer in p else ""))
    return out


def detect_format(path: Path) -> str:
    """Which user-data format a path holds: `beir` (folder), `jsonl` or `squad` (JSON with a `data` list).

    Raises:
        ValueError: the path is none of these.
    """
    if path.is_dir():
        if (path / "qrels").is_dir() and any((path / n).exists() for n in ("corpus.jsonl", "corpus.jsonl.gz")):
            return "beir"
        raise ValueError(f"{path}: a folder must be BEIR (corpus.jsonl[.gz], queries.jsonl, qrels/)")
    name = path.name.lower().removesuffix(".gz")
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".json"):
        head = open_text(path).lstrip()[:1]
        if head == "{":
            return "squad"
    raise ValueError(f"{path}: expected SQuAD .json, .jsonl pairs, or a BEIR folder")


def user_pairs(path: Path, cfg: PoolConfig, rng: random.Random, *, beir_split: str = "train") -> list[Pair]:
    """Pairs from a user's labelled data in any of the supported formats (see `detect_format`)."""
    fmt = detect_format(path)
    if fmt == "jsonl":
        return jsonl_pairs(path)
    if fmt == "beir":
        return beir_pairs(
            path,
            beir_split,
            rng,
            hard_negatives=cfg.scifact_hard_negatives,
            max_words=cfg.max_words,
            source="user",
        )
    return squad_pairs(load_squad(path), cfg, rng, source="user")


def build_pool(
    data_root: Path | None,
    cfg: PoolConfig,
    seed: int,
    *,
    user_data: Sequence[Path] = (),
    include_scifact_train: bool = True,
) -> tuple[list[Pair], list[Pair]]:
    """Build the train and dev pools: the packaged mix and a user's labelled data.

    Args:
        data_root: The shared data folder (holding `train/` and `scifact/`); None to use only `user_data`.
        cfg: Sizes and mix.
        seed: Seed of every random choice.
        user_data: Extra labelled data (SQuAD JSON, BEIR folder or JSONL) mixed in.
        include_scifact_train: Add SciFact *train* qrels (never test) as claim/abstract pairs.

    Returns:
        (train pairs, dev pairs), split by document group with `is_dev_group`.
    """
    rng = random.Random(seed)
    pairs: list[Pair] = []
    force_train: set[str] = set()
    if data_root is not None:
        pairs, force_train = mix_pairs(data_root, cfg, rng, include_scifact_train=include_scifact_train)
    for path in user_data:
        pairs += user_pairs(Path(path), cfg, rng)
    return split_pool(pairs, cfg.dev_percent, rng, force_train=force_train)


def heldout_squad_articles(
    articles: Sequence[Article], dev_percent: float, force_train: Iterable[str] = ()
) -> list[Article]:
    """The SQuAD 1.1 articles of the dev split (never trained on); `force_train` titles are excluded."""
    keep = set(force_train)
    return [a for a in articles if a.title not in keep and is_dev_group(f"squad11:{a.title}", dev_percent)]


def pool_summary(pairs: Sequence[Pair]) -> dict[str, tuple[int, int]]:
    """Count (positives, negatives) per source."""
    out: dict[str, tuple[int, int]] = {}
    for p in pairs:
        pos, neg = out.get(p.source, (0, 0))
        out[p.source] = (pos + (p.label >= 0.5), neg + (p.label < 0.5))
    return dict(sorted(out.items()))
