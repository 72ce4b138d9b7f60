"""Unit tests of fastcrag.measures (AUC, nDCG, percentiles) and fastcrag.config.options (options declared once)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from fastcrag.config.options import add_options, from_args, option
from fastcrag.measures import auc, auc_of_labels, ndcg, ndcg_at_k, percentile


def test_auc_counts_ties_half_and_equals_the_pairwise_count() -> None:
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auc([0.1], [0.9]) == 0.0
    assert auc([0.5], [0.5]) == 0.5
    assert auc([0.5, 0.7], [0.5, 0.1]) == (0.5 + 1 + 1 + 1) / 4
    assert math.isnan(auc([], [0.1])) and math.isnan(auc([0.1], []))
    assert math.isnan(auc([float("nan")], [0.1]))
    rng = np.random.default_rng(0)
    pos, neg = rng.integers(0, 5, 40) / 4, rng.integers(0, 5, 30) / 4  # a coarse grid: many ties
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (40 * 30)
    assert auc(pos.tolist(), neg.tolist()) == float(pairwise)  # exact: the count is integers and halves


def test_auc_of_labels_splits_at_one_half() -> None:
    assert auc_of_labels([1, 0, 1, 0], [0.9, 0.1, 0.8, 0.85]) == auc([0.9, 0.8], [0.1, 0.85])
    assert auc_of_labels([0.7, 0.2], [0.4, 0.6]) == 0.0  # soft labels: 0.7 is a positive
    assert math.isnan(auc_of_labels([1, 1], [0.1, 0.2]))


def test_ndcg_of_flags_and_of_ids() -> None:
    assert ndcg([True, False]) == 1.0 and ndcg([False, False]) == 0.0 and ndcg([]) == 0.0
    assert ndcg([False, True]) == pytest.approx(1 / math.log2(3))
    # the ideal counts every relevant id, also those the ranking missed
    assert ndcg_at_k(["a", "x"], {"a", "b"}) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(["x", "a"], {"a"}, k=1) == 0.0
    assert ndcg_at_k(["a", "x"], {"a", "b"}) == ndcg([True, False], 10, n_relevant=2)


def test_percentile_linear_and_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == pytest.approx(50.5) and percentile(values, 100) == 100.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50, "nearest") == 3.0  # rank 1.5 rounds half to even: 2
    assert percentile([1.0, 2.0, 3.0], 50, "nearest") == 2.0
    assert percentile([4.0, 1.0], 95, "nearest") == 4.0
    assert math.isnan(percentile([], 50)) and math.isnan(percentile([], 50, "nearest"))
    sample = np.random.default_rng(1).lognormal(size=99).tolist()
    assert percentile(sample, 95) == pytest.approx(float(np.percentile(sample, 95)), rel=1e-12)


@dataclass
class _Options:
    """A config with one option of each kind."""

    corpus: Path = field(default=Path("data/corpus"), metadata=option("corpus folder"))
    count: int = field(default=3, metadata=option("how many (default: %(default)s)"))
    ratio: float = field(default=0.5, metadata=option())
    names: list[str] = field(default_factory=lambda: ["a", "b"], metadata=option("comma-separated names"))
    upper: list[str] = field(default_factory=lambda: ["X"], metadata=option(parse=lambda t: t.upper().split(",")))
    keep: bool = field(default=True, metadata=option("drop it", flag="--no-keep"))
    loud: bool = field(default=False, metadata=option("say more"))
    cache: Path | None = field(default=Path("~/c"), metadata=option("cache", none_flag=("--no-cache", "keep none")))
    hidden: str = "not an option"


def _parse(*argv: str) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="t")
    add_options(parser, _Options)
    return parser, parser.parse_args(list(argv))


def test_options_declared_once_come_back_as_the_config() -> None:
    parser, args = _parse()
    assert from_args(_Options, args) == _Options()
    assert vars(args) == {
        "corpus": "data/corpus",
        "count": 3,
        "ratio": 0.5,
        "names": "a,b",
        "upper": "X",
        "no_keep": False,
        "loud": False,
        "cache": str(Path("~/c")),
        "no_cache": False,
    }
    help_text = parser.format_help()
    assert "how many (default: 3)" in help_text and "--no-keep" in help_text and "--hidden" not in help_text
    _, args = _parse("--corpus", "x", "--count", "7", "--names", " c, ,d ", "--upper", "p,q", "--no-keep", "--loud")
    cfg = from_args(_Options, args, hidden="given")
    assert cfg == _Options(Path("x"), 7, 0.5, ["c", "d"], ["P", "Q"], False, True, Path("~/c"), "given")
    assert from_args(_Options, _parse("--no-cache", "--cache", "y")[1]).cache is None
    with pytest.raises(SystemExit):
        _parse("--count", "many")


def test_a_switch_on_by_default_needs_its_flag() -> None:
    @dataclass
    class Bad:
        on: bool = field(default=True, metadata=option("on"))

    with pytest.raises(TypeError, match="flag"):
        add_options(argparse.ArgumentParser(), Bad)


def test_a_path_option_without_a_default_must_be_given() -> None:
    @dataclass
    class Needs:
        data: Path = field(metadata=option("data folder"))
        count: int = field(default=1, metadata=option())

    parser = argparse.ArgumentParser()
    add_options(parser, Needs)
    with pytest.raises(ValueError, match="--data is required"):
        from_args(Needs, parser.parse_args([]))
    assert from_args(Needs, parser.parse_args(["--data", "d"])) == Needs(Path("d"), 1)

    @dataclass
    class Bad:
        count: int = field(metadata=option())

    with pytest.raises(TypeError, match="needs a default"):
        add_options(argparse.ArgumentParser(), Bad)
