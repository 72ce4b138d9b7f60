"""The options of `fastcrag eval abstention` and `eval retrieval`, declared once (light: the CLI parser imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from fastcrag.config.options import option
from fastcrag.config.settings import SMOLLM2_LLM

VARIANTS = ("crag", "threshold", "plain")
"""The graph configurations compared per generator: CRAG on; CRAG off abstaining below reranker_threshold
(threshold only); CRAG off with `plain` (plain RAG: the top_n reranked candidates always go to the generator)."""

DEFAULT_INDEX_CACHE = Path("~/.cache/fastcrag/eval-index")

OUT_HELP = "output folder (default: %(default)s)"
THREADS_HELP = (
    "CPU threads per model (default: %(default)s; oversubscribed threads spin on a shared machine; 0: library default)"
)
FRESH_HELP = "discard earlier results in --out instead of resuming"
DATA_SETTING = "FASTRAG_DATA"
"""The setting naming the folder where `fastcrag eval` finds the data its options do not name (`Settings.data`)."""


def parse_variants(text: str) -> list[str]:
    """The variants named by `--variants`, in canonical order (the same choice gives the same config hash).

    Raises:
        ValueError: a name is not a variant, or none is named.
    """
    names = {v.strip() for v in text.split(",") if v.strip()}
    if not names or names - set(VARIANTS):
        raise ValueError(f"--variants takes a comma-separated subset of {','.join(VARIANTS)}, got {text!r}")
    return [v for v in VARIANTS if v in names]


@dataclass
class AbstentionConfig:
    """Options of one abstention run (`fastcrag eval abstention`)."""

    DATA: ClassVar[dict[str, str]] = {"squad": "squad2-dev", "off_corpus": "train/squad11-train"}
    """Each data option's folder under `FASTRAG_DATA`, its default when that is set."""

    squad: Path = field(
        metadata=option(f"SQuAD v2 JSON file or folder, the corpus (default: {DATA_SETTING}/squad2-dev)")
    )
    off_corpus: Path = field(
        metadata=option(
            "SQuAD JSON whose articles are not indexed, the off-corpus questions (default: "
            f"{DATA_SETTING}/train/squad11-train)"
        ),
    )
    per_class: int = field(default=40, metadata=option("questions per class (default: %(default)s)"))
    seed: int = field(default=2026, metadata=option())
    distractors: int = field(
        default=0,
        metadata=option(
            "index also the paragraphs of N --off-corpus articles that no asked question comes from, so "
            "first-pass retrieval can miss (default: %(default)s)"
        ),
    )
    """Articles of `off_corpus` added to the corpus (none of the asked questions' articles)."""
    generators: list[str] = field(
        default_factory=lambda: ["extractive", SMOLLM2_LLM],
        metadata=option("comma-separated generators (default: %(default)s)"),
    )
    variants: list[str] = field(
        default_factory=lambda: list(VARIANTS),
        metadata=option(
            "comma-separated graph variants per generator: crag (CRAG on), threshold (CRAG off, abstain below "
            "the threshold), plain (plain RAG: no grading, no abstention) (default: %(default)s)",
            parse=parse_variants,
        ),
    )
    exclude_calibration: bool = field(
        default=True,
        metadata=option(
            "allow questions of the calibration sample (excluded by default)", flag="--include-calibration-sample"
        ),
    )
    out: Path = field(default=Path("runs/eval-abstention"), metadata=option(OUT_HELP))
    threads: int = field(default=1, metadata=option(THREADS_HELP))
    fresh: bool = field(default=False, metadata=option(FRESH_HELP))


@dataclass
class RetrievalConfig:
    """Options of one retrieval run (`fastcrag eval retrieval`)."""

    DATA: ClassVar[dict[str, str]] = {"beir": "scifact"}
    """Each data option's folder under `FASTRAG_DATA`, its default when that is set."""

    beir: Path = field(
        metadata=option(f"BEIR folder: corpus.jsonl.gz, queries, qrels/ (default: {DATA_SETTING}/scifact)")
    )
    split: str = field(default="test", metadata=option("qrels split (default: %(default)s)"))
    queries: int = field(default=0, metadata=option("sample this many queries (default %(default)s: all)"))
    seed: int = field(default=2026, metadata=option())
    depth: int = field(default=30, metadata=option("documents reranked per query (default: %(default)s)"))
    index_cache: Path | None = field(
        default=DEFAULT_INDEX_CACHE,
        metadata=option(
            "folder for the embedded corpus index, reused across runs (default: %(default)s)",
            none_flag=("--no-index-cache", "embed the corpus afresh, keep nothing"),
        ),
    )
    out: Path = field(default=Path("runs/eval-retrieval"), metadata=option(OUT_HELP))
    threads: int = field(default=1, metadata=option(THREADS_HELP))
    fresh: bool = field(default=False, metadata=option(FRESH_HELP))


@dataclass
class DocsConfig:
    """Options of one documentation-answers run (`fastcrag eval docs`)."""

    questions: Path | None = field(
        default=None,
        metadata=option(
            "JSON Lines question set: `question`, `sources`, `sentence` and/or `key_terms` per line (required)"
        ),
    )
    index: Path | None = field(
        default=None,
        metadata=option("index folder (default: FASTRAG_INDEX_DIR, else the embedded Python reference)"),
    )
    llm: str | None = field(default=None, metadata=option("`provider:model` or `extractive` (default: FASTRAG_LLM)"))
    out: Path = field(default=Path("runs/eval-docs"), metadata=option(OUT_HELP))
    fresh: bool = field(default=False, metadata=option(FRESH_HELP))
