"""The options of `python -m lab bench`, declared once (light: the lab's parser imports it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fastcrag.config.options import option
from fastcrag.config.settings import SMOLLM2_LLM
from fastcrag.evaluation.configs import FRESH_HELP, OUT_HELP, THREADS_HELP
from lab.data import SHARED_DATA


@dataclass
class BenchConfig:
    """Options of one benchmark run."""

    squad: Path = field(
        default=SHARED_DATA / "squad2-dev", metadata=option("SQuAD v2 JSON file or folder (the corpus)")
    )
    off_corpus: Path = field(default=SHARED_DATA / "train" / "squad11-train", metadata=option("off-corpus SQuAD JSON"))
    per_class: int = field(default=20, metadata=option("questions per class (default: %(default)s)"))
    seed: int = field(default=7, metadata=option())
    llm: str = field(default=SMOLLM2_LLM, metadata=option("generator and judge model (default: %(default)s)"))
    """A chat model: it is also the LLM judge of the grading-cost comparison."""
    judge_questions: int = field(
        default=3,
        metadata=option("questions whose candidates the LLM judge grades, one call per chunk (default: %(default)s)"),
    )
    warmup: int = field(default=3, metadata=option("untimed warm-up questions (default: %(default)s)"))
    budget_ms: float = field(default=200.0, metadata=option("retrieval latency budget (default: %(default)s)"))
    out: Path = field(default=Path("runs/bench"), metadata=option(OUT_HELP))
    threads: int = field(default=1, metadata=option(THREADS_HELP))
    fresh: bool = field(default=False, metadata=option(FRESH_HELP))
