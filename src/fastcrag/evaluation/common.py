"""Shared pieces of the evaluation commands: question sets, a memoising grader wrapper, run metadata."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastcrag.components import Components
from fastcrag.config.calibration import Calibration, load_calibration
from fastcrag.config.settings import Settings
from fastcrag.datasets import (
    LabelledQuestion,
    question_pools,
    sample,
)
from fastcrag.evaluation.runlog import config_hash
from fastcrag.fitting.calibrate import build_corpus_store
from fastcrag.generation.generators import ChatBacked
from fastcrag.grading.reranker import Reranker, calibration_for, default_reranker_spec, load_reranker
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.store import FORMAT_VERSION, FaissStore, IndexLoadError


def question_id(q: LabelledQuestion) -> str:
    """A stable id for a labelled question (class, paragraph and text)."""
    return hashlib.sha256(f"{q.kind}\x1f{q.source}\x1f{q.question}".encode()).hexdigest()[:12]


def calibration_sample(calibration: Calibration) -> tuple[int, int] | None:
    """(per_class, seed) of the questions `python -m lab calibrate` drew; None when it drew no such sample."""
    s = calibration.sample
    return (s.per_class, s.seed) if s is not None and s.per_class is not None else None


def select_questions(
    pools: dict[str, list[LabelledQuestion]],
    per_class: int,
    seed: int,
    exclude: tuple[int, int] | None = None,
) -> list[LabelledQuestion]:
    """A seeded sample of `per_class` questions of each class, interleaved by class.

    Args:
        pools: Questions by class, in the order `python -m lab calibrate` samples them.
        per_class: Questions per class.
        seed: Sampling seed (class i uses seed + i).
        exclude: (per_class, seed) of the calibration sample; those questions are left out (held-out eval).
    """
    held: set[str] = set()
    if exclude is not None:
        n, s = exclude
        held = {question_id(q) for i, qs in enumerate(pools.values()) for q in sample(qs, n, s + i)}
    chosen = [
        sample([q for q in qs if question_id(q) not in held], per_class, seed + i)
        for i, qs in enumerate(pools.values())
    ]
    out = []
    for i in range(max((len(c) for c in chosen), default=0)):
        out += [c[i] for c in chosen if i < len(c)]
    return out


@dataclass
class SquadSetup:
    """What a SQuAD-based evaluation runs on.

    The corpus, the question pools, the grader checked against its calibration, the calibration sample left
    out, and the chosen questions.
    """

    docs: list[Any]
    pools: dict[str, list[LabelledQuestion]]
    grader: Reranker
    calibration: Calibration
    exclude: tuple[int, int] | None
    questions: list[LabelledQuestion]

    def config(self, command: str, version: int, cfg: Any, settings: Settings) -> dict[str, Any]:
        """The run-configuration fields every SQuAD-based command records (its results' hash covers them)."""
        return {
            "version": version,
            "command": command,
            "squad": str(cfg.squad.resolve()),
            "off_corpus": str(cfg.off_corpus.resolve()),
            "per_class": cfg.per_class,
            "seed": cfg.seed,
            "reranker": self.grader.name,
            "thresholds": self.calibration.thresholds(),
            "top_k": settings.top_k,
            "top_n": settings.top_n,
            "chunk_tokens": settings.chunk_tokens,
            "chunk_overlap": settings.chunk_overlap,
        }


def squad_setup(
    cfg: Any,
    settings: Settings,
    *,
    exclude_calibration: bool = True,
    wrap: Callable[[Reranker], Reranker] | None = None,
) -> SquadSetup:
    """Load the question pools, the grader and its calibration, and pick the questions.

    Reads `cfg.squad` / `cfg.off_corpus`; the grader is wrapped by `wrap` when given; another grader's
    calibration is refused; `cfg.per_class` questions per class are picked with `cfg.seed`.
    """
    docs, pools = question_pools(cfg.squad, cfg.off_corpus)
    grader = load_reranker(settings.reranker or default_reranker_spec())
    if wrap is not None:
        grader = wrap(grader)
    calibration = load_calibration(calibration_for(settings.calibration, settings.reranker), expected_model=grader.name)
    exclude = calibration_sample(calibration) if exclude_calibration else None
    questions = select_questions(pools, cfg.per_class, cfg.seed, exclude)
    return SquadSetup(docs, pools, grader, calibration, exclude, questions)


def squad_store(docs: list[Any], chunk_tokens: int, chunk_overlap: int) -> FaissStore:
    """The in-memory FAISS store over the SQuAD paragraphs, chunked as `fastcrag index` chunks."""
    return build_corpus_store(docs, chunk_tokens, chunk_overlap)


def cached_corpus_store(
    corpus: Path, load_docs: Any, chunk_tokens: int, chunk_overlap: int, cache: Path | None
) -> tuple[FaissStore, bool]:
    """The FAISS store over a corpus file, reused from `cache` when built before with the same inputs.

    The cache lives outside the project (default `~/.cache/fastcrag/eval-index`); its key covers the corpus
    file (path, size, mtime), the chunking and the embedder. Returns (store, whether it came from the cache).
    """
    embeddings = default_embeddings()
    folder = None
    if cache is not None:
        st = corpus.stat()
        key = config_hash(
            {
                "corpus": str(corpus.resolve()),
                "size": st.st_size,
                "mtime": st.st_mtime_ns,
                "chunk_tokens": chunk_tokens,
                "chunk_overlap": chunk_overlap,
                "embedder": getattr(embeddings, "name", ""),
                "format": FORMAT_VERSION,  # the index format covers how loaders clean text
            }
        )
        folder = cache.expanduser() / f"{corpus.name}-{key}"
        try:
            return FaissStore.load(folder, embeddings), True
        except IndexLoadError:
            pass
    store = build_corpus_store(list(load_docs()), chunk_tokens, chunk_overlap)
    if folder is not None:
        store.save(folder, {"source": str(corpus)})
    return store, False


def machine_note() -> str:
    """CPU count and load average, for the report (this machine is shared with a training job)."""
    try:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    cpus = os.cpu_count()
    return f"{platform.machine()}, {cpus} CPU cores, load average {load}, Python {platform.python_version()}"


def set_threads(threads: int, parts: Components | None = None) -> None:
    """Limit torch (and the parts' llama.cpp generator, when it has one) to `threads` CPU threads.

    On a machine shared with other jobs, oversubscribed intra-op threads spin against each other: one thread
    per model is several times faster there than one per core.
    """
    if threads < 1:
        return
    import torch  # heavy (over a second): only the commands that set threads load it here

    torch.set_num_threads(threads)
    if parts is not None:
        generator = parts.generator()
        if isinstance(generator, ChatBacked) and hasattr(generator.llm, "n_threads"):
            generator.llm.n_threads = threads  # read when llama.cpp loads, on first use


def progress(total: int, initial: int, desc: str) -> Any:
    """A tqdm progress bar on stderr."""
    return tqdm(total=total, initial=initial, desc=desc, unit="run", file=sys.stderr, dynamic_ncols=True)
