"""Documentation questions for `python -m lab calibrate --docs`: newcomers' written questions of a manual.

SQuAD 2.0 asks as its annotators ask, of encyclopaedia paragraphs; a user of fastcrag asks a product's manual in their
own words, and the grade sits otherwise there (lab/RESULTS.md, 2026-12-07: the right page first and graded below
`reranker_threshold` for 11 of 230 development questions). These classes put that case into the calibration pool:

- answerable: a written question of `lab/questions/reworded/docs-NAME.jsonl` asked of its own manual's index;
- off_corpus: another of the manual's questions asked of another manual's index (`--wrong-manual`), as a user who
  points fastcrag at one product and asks about another does. It is left out where the packaged embedder places one
  of the candidates at `CROSS_BELOW` or nearer the question: the other manual may well answer it there.

Both are retrieved and graded as the graph retrieves and grades (the index's first pass, its `top_k` graded). A
manual whose written questions trained the grader grades its own questions too well: name only manuals it has not
been trained on (the grader's training script says which it read).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastcrag.components import Components
from fastcrag.config.settings import Settings
from fastcrag.datasets import LabelledQuestion, QuestionClass
from fastcrag.evaluation.docs_answers import source_matches
from fastcrag.fitting.calibrate import Observation, observe
from fastcrag.grading.reranker import Reranker
from fastcrag.graph.nodes.retrieve import search
from fastcrag.measures import auc
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.hybrid import HybridRetriever
from lab.experiments.reworded_pairs import CROSS_BELOW, HERE, section_page, written_questions


@dataclass(frozen=True)
class DocsSample:
    """Documentation observations for the calibration pool, with what they are in words and their figures."""

    observations: list[Observation]
    data: str
    metrics: dict[str, Any] = field(default_factory=dict)
    real: list[float] = field(default_factory=list)  # answerable top grades with a right page among the candidates
    pseudo: list[float] = field(default_factory=list)  # cloze pseudo-questions' top grades, made of each manual


def parse_manual(spec: str) -> tuple[str, Path]:
    """`NAME=INDEX`: a manual with written questions (`docs-NAME.jsonl`) and its index folder."""
    name, sep, index = spec.partition("=")
    if not sep or not name or not index:
        raise ValueError(f"--docs takes NAME=INDEX, not {spec!r}")
    if not (HERE / f"docs-{name}.jsonl").is_file():
        raise ValueError(f"no written questions of {name!r} (lab/questions/reworded/docs-{name}.jsonl)")
    return name, Path(index)


def _retriever(index: Path) -> Any:
    """The retriever the graph searches `index` with."""
    return Components(Settings(index_dir=index)).retriever()


def _retrieved(retriever: Any, questions: Sequence[str]) -> dict[str, list[Any]]:
    """Each question's graded candidates, as the graph's first retrieval takes them."""
    out = {}
    for q in questions:
        docs, _, depth = search(retriever, q)
        out[q] = docs[:depth]
    return out


def _nearest(questions: Sequence[str], retrieved: dict[str, list[Any]]) -> dict[str, float]:
    """Each question's highest embedder cosine with its candidates (the packaged embedder)."""
    embed = default_embeddings()
    vectors = np.asarray(embed.embed_documents(list(questions)))
    out = {}
    for q, v in zip(questions, vectors, strict=True):
        texts = [d.page_content for d in retrieved[q]]
        out[q] = float((np.asarray(embed.embed_documents(texts)) @ v).max()) if texts else 0.0
    return out


def docs_sample(
    manuals: Sequence[tuple[str, Path]],
    wrong: Sequence[Path],
    reranker: Reranker,
    per_manual: int,
    seed: int,
    refine_k: int,
    pseudo_of: Callable[[Any, int], list[float]] | None = None,
) -> DocsSample:
    """`per_manual` answerable and up to `per_manual` off-corpus observations of each manual's written questions.

    The answerable ones are a random draw of the manual's questions; the off-corpus ones are drawn from the rest and
    asked of the `wrong` indexes in turn (never the manual's own), kept below `CROSS_BELOW`. With `pseudo_of` (a
    store and its `top_k` -> the top grades of pseudo-questions made of it), also both sides of each manual's
    `pseudo_shift`: its answerable questions' top grades where a right page is among the candidates, and its
    pseudo-questions'.
    """
    observations: list[Observation] = []
    real: list[float] = []
    pseudo: list[float] = []
    counts: dict[str, dict[str, int]] = {}
    for name, index in manuals:
        keys = sorted(written_questions(name).items())
        random.Random(seed).shuffle(keys)
        asked = [q for _, q in keys[:per_manual]]
        retriever = _retriever(index)
        retrieved = _retrieved(retriever, asked)
        answerable = _observed(index, asked, "answerable", reranker, refine_k, retrieved)
        observations += answerable
        real += [
            o.top_score
            for (key, q), o in zip(keys[:per_manual], answerable, strict=True)
            if any(source_matches(str(d.metadata.get("source", "")), section_page(key)) for d in retrieved[q])
        ]
        if pseudo_of is not None and isinstance(retriever, HybridRetriever):
            pseudo += pseudo_of(retriever.store, retriever.k)
        others = [w for w in wrong if w.resolve() != index.resolve()]
        rest = [q for _, q in keys[per_manual:]]
        kept, left_out = 0, 0
        for i, other in enumerate(others):  # each wrong manual asks an equal share, drawn twice over for the bound
            share = rest[i :: len(others)][: 2 * per_manual // len(others)]
            retrieved = _retrieved(_retriever(other), share)
            near = _nearest(share, retrieved)
            chosen = [q for q in share if near[q] < CROSS_BELOW][: per_manual // len(others)]
            left_out += sum(near[q] >= CROSS_BELOW for q in share)
            kept += len(chosen)
            observations += _observed(other, chosen, "off_corpus", reranker, refine_k, retrieved)
        counts[name] = {"answerable": len(asked), "off_corpus": kept, "off_corpus_left_out_near": left_out}
    by_kind = {k: [o.top_score for o in observations if o.kind == k] for k in ("answerable", "off_corpus")}
    metrics: dict[str, Any] = {"questions": counts}
    if all(by_kind.values()):
        metrics["auc_answerable_vs_off_corpus"] = round(auc(by_kind["answerable"], by_kind["off_corpus"]), 4)
        metrics["median_top_score"] = {k: round(float(np.median(v)), 4) for k, v in by_kind.items()}
    names = ", ".join(f"{n} ({c['answerable']} + {c['off_corpus']})" for n, c in counts.items())
    data = (
        f"newcomers' written questions of {names}: answerable asked of their own manual's index, off-corpus of "
        f"another manual's ({', '.join(w.name for w in wrong)}; embedder cosine below {CROSS_BELOW}), seed {seed}"
    )
    return DocsSample(observations, data, metrics, real, pseudo)


def _observed(
    index: Path,
    questions: Sequence[str],
    kind: QuestionClass,
    reranker: Reranker,
    refine_k: int,
    retrieved: dict[str, list[Any]],
) -> list[Observation]:
    labelled = [LabelledQuestion(q, kind, (), str(index), index.name) for q in questions]
    return observe(retrieved, reranker, labelled, refine_k)


def declined_shares(observations: Sequence[Observation], threshold: float) -> dict[str, float]:
    """The share of each class graded below `threshold` (declined at grading)."""
    shares = {}
    for kind in ("answerable", "off_corpus"):
        scores = [o.top_score for o in observations if o.kind == kind]
        if scores:
            shares[kind] = round(sum(s < threshold for s in scores) / len(scores), 4)
    return shares
