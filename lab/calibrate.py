"""`python -m lab calibrate`: the packaged calibration, drawn on SQuAD v2 by the rules `fastcrag fit` also uses."""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fastcrag.config.calibration import PACKAGED_CALIBRATION, Calibration, CalibrationSample, load_calibration
from fastcrag.datasets import LabelledQuestion, question_pools, sample
from fastcrag.fileio import write_json_atomic
from fastcrag.fitting.calibrate import (
    ConditionView,
    Observation,
    RefineFloor,
    abstention_rates,
    build_corpus_store,
    choose_condition_factor,
    choose_reader_threshold,
    choose_threshold,
    choose_upper,
    condition_curve,
    observe,
)
from fastcrag.fitting.fit import PSEUDO_QUESTIONS
from fastcrag.fitting.labels import holds_answer
from fastcrag.fitting.measure import observe as observe_views
from fastcrag.fitting.pseudo import measure_shift, pseudo_first_pass, sample_pseudo_questions
from fastcrag.grading.bands import band_of
from fastcrag.grading.conditions import named_conditions, with_conditions_changed
from fastcrag.grading.reranker import CachingReranker, Reranker, checked_scores
from fastcrag.measures import auc
from fastcrag.retrieval.hybrid import HybridRetriever
from fastcrag.retrieval.store import FaissStore
from lab.calibrate_docs import declined_shares, docs_sample
from lab.data import (
    CHUNK_OVERLAP,
    CHUNK_TOKENS,
    PER_CLASS,
    PER_MANUAL,
    REFINE_K,
    SEED,
    TARGET_PRECISION,
    TOLERANCE,
    TOP_K,
)


def squad_condition_views(
    retrieved: Mapping[str, list[Any]], reranker: Reranker, questions: Sequence[LabelledQuestion]
) -> list[ConditionView]:
    """`ConditionView`s of calibration questions: evidence is a retrieved chunk holding a gold answer."""
    views: list[ConditionView] = []
    for q in tqdm(questions, desc="conditions", unit="q", file=sys.stderr):
        texts = [d.page_content for d in retrieved[q.question]]
        pairs = [(q.kind, texts)]
        if q.kind == "answerable":
            evidence = [holds_answer(t, q.answers) for t in texts]
            changed = with_conditions_changed(q.question, texts, evidence)
            pairs += [("condition_changed", changed)] if changed else []
        views += [(kind, q.question, t, checked_scores(reranker, q.question, t)) for kind, t in pairs if t]
    return views


def pseudo_grades(store: Any, reranker: Reranker, top_k: int, seed: int) -> list[float]:
    """The top grades of cloze pseudo-questions of `store`'s corpus, made and first-passed as `fastcrag fit` does."""
    made = sample_pseudo_questions(store, PSEUDO_QUESTIONS, seed)
    items = [
        i for i in pseudo_first_pass(HybridRetriever(store=store, k=top_k), made, top_k, True) if i.retrieved(top_k)
    ]
    return [
        o.top_score
        for o in observe_views(reranker, items, top_k, False, True, "pseudo-questions")
        if o.kind == "answerable"
    ]


def shift_figures(real: Sequence[float], pseudo: Sequence[float]) -> dict[str, Any]:
    """The two sides of a `pseudo_shift`: how many, and their median top grades."""
    return {
        "answerable": len(real),
        "pseudo_questions": len(pseudo),
        "median_top_score_answerable": round(float(np.median(real)), 4) if real else None,
        "median_top_score_pseudo": round(float(np.median(pseudo)), 4) if pseudo else None,
    }


def squad_shift_sides(
    store: FaissStore,
    reranker: Reranker,
    questions: Sequence[LabelledQuestion],
    obs: Sequence[Observation],
    retrieved: Mapping[str, list[Any]],
    top_k: int,
    seed: int,
) -> tuple[list[float], list[float]]:
    """The sides of `pseudo_shift` on SQuAD: real answerable questions and cloze pseudo-questions of the same corpus.

    Both are questions with their evidence retrieved (a chunk holding a gold answer, or the pseudo-question's
    sentence); the pseudo-questions are made and first-passed as `fastcrag fit` makes them.
    """
    real = [
        o.top_score
        for q, o in zip(questions, obs, strict=True)
        if q.kind == "answerable" and any(holds_answer(d.page_content, q.answers) for d in retrieved[q.question])
    ]
    return real, pseudo_grades(store, reranker, top_k, seed)


def _carried(kept: Calibration) -> str:
    """What the packaged calibration's objective says of the values `calibrate` keeps from it."""
    start = kept.objective.find("; rerank_weight:")
    said = kept.objective[start:] if start >= 0 else ""
    return (
        f" (rerank_weight, flare_threshold and answer_floor kept from the packaged calibration, "
        f"{kept.reranker_model}){said}"
    )


def squad_sample(
    squad: Path, off_corpus: Path, per_class: int, seed: int, chunk_tokens: int, chunk_overlap: int
) -> tuple[list[Any], dict[str, list[LabelledQuestion]], list[LabelledQuestion], FaissStore]:
    """SQuAD's side of the calibration: its paragraphs, each class's questions, the drawn sample, the corpus indexed.

    `per_class` questions of each class are drawn (seeded); the corpus is indexed in memory as `fastcrag index`
    chunks it.
    """
    docs, pool = question_pools(squad, off_corpus)
    chosen = [q for i, (kind, qs) in enumerate(pool.items()) for q in sample(qs, per_class, seed + i)]
    return docs, pool, chosen, build_corpus_store(docs, chunk_tokens, chunk_overlap)


def calibrate(
    squad: Path,
    off_corpus: Path,
    reranker: Reranker,
    out: Path,
    per_class: int = PER_CLASS,
    seed: int = SEED,
    target_precision: float = TARGET_PRECISION,
    tolerance: float = TOLERANCE,
    top_k: int = TOP_K,
    refine_k: int = REFINE_K,
    chunk_tokens: int = CHUNK_TOKENS,
    chunk_overlap: int = CHUNK_OVERLAP,
    manuals: Sequence[tuple[str, Path]] = (),
    wrong_manuals: Sequence[Path] = (),
    per_manual: int = PER_MANUAL,
) -> Calibration:
    """Derive both thresholds and write them, with their provenance and figures, atomically to `out`.

    `rerank_weight`, `flare_threshold` and `answer_floor` are not drawn here (one is chosen end to end on the
    evaluation sets, the others are properties of the chat model and of the embedder): they, their objectives and
    their figures (`flare_*`, `answer_floor_*` metrics) are kept from the packaged calibration. With `manuals`
    ((name, index) pairs) and `wrong_manuals`, the thresholds are drawn on SQuAD's observations and on `per_manual`
    documentation ones of each class together (`lab.calibrate_docs`).
    """
    kept = load_calibration(PACKAGED_CALIBRATION)
    docs, pool, chosen, store = squad_sample(squad, off_corpus, per_class, seed, chunk_tokens, chunk_overlap)
    reranker = CachingReranker(reranker)  # the condition views below score the same pairs again
    # condition_factor: every answerable question of the corpus that names a condition, against the sample. The
    # thresholds stay drawn on scores without the check (unlike `fit`'s): drawn with it, the reader's floor (the
    # highest with precision >= 0.9 among the questions passing grading, a flat curve here) went 0.026 -> 0.567 and
    # declined the README's own question (lab/RESULTS.md, "Conditions the question names").
    naming = [q for q in pool["answerable"] if named_conditions(q.question) and q not in chosen]
    retrieved = {q.question: store.similarity_search(q.question, k=top_k) for q in [*chosen, *naming]}
    obs = observe(retrieved, reranker, chosen, refine_k)
    views = squad_condition_views(retrieved, reranker, [*chosen, *naming])
    factors = condition_curve(views)
    factor, factor_objective = choose_condition_factor(factors, views, 1.0)
    real, pseudo = squad_shift_sides(store, reranker, chosen, obs, retrieved, top_k, seed)
    shift_metrics = shift_figures(real, pseudo)

    def pseudo_of(store: Any, k: int) -> list[float]:
        return pseudo_grades(store, reranker, k, seed)

    documentation = (
        docs_sample(manuals, wrong_manuals, reranker, per_manual, seed, refine_k, pseudo_of) if manuals else None
    )
    if documentation:  # pseudo-questions overrate a manual's evidence more than SQuAD's: both sides pooled
        docs_shift = shift_figures(documentation.real, documentation.pseudo)
        real, pseudo = real + documentation.real, pseudo + documentation.pseudo
        shift_metrics = {"squad": shift_metrics, "documentation": docs_shift}
    shift = measure_shift(real, pseudo)
    squad_obs, obs = obs, [*obs, *(documentation.observations if documentation else [])]
    threshold, objective = choose_threshold(obs, target_precision)
    objective += " (SQuAD's questions and the documentation ones together)" if documentation else ""
    # crag_upper on SQuAD's questions alone: over documentation the best sentence strip lies in another chunk than
    # the best chunk for most questions (58% of SQLAlchemy's at v6), so drawn there too it sends nearly every answer
    # through refine (crag_upper 0.870 -> 0.926; lab/RESULTS.md, "Documentation questions in the calibration pool")
    upper = choose_upper(squad_obs, threshold, tolerance, min_support=max(10, len(squad_obs) // 20))
    reader_threshold, reader_objective = choose_reader_threshold(obs, threshold, target_precision)
    refine_floor, refine_objective = choose_reader_threshold(obs, threshold, target_precision, upper)
    objective += reader_objective + refine_objective
    passing = [o for o in obs if o.span_score is not None and o.top_score >= threshold]
    by_kind = {k: [o.top_score for o in squad_obs if o.kind == k] for k in pool}
    refine = RefineFloor(upper, refine_floor)
    precision, recall = abstention_rates(squad_obs, threshold, reader_threshold=reader_threshold, refine=refine)

    def band_mix(group: Sequence[Observation]) -> dict[str, int]:
        return dict(Counter(band_of(o.top_score, threshold, upper) for o in group))

    metrics = {
        "questions": {k: len(v) for k, v in by_kind.items()},
        "auc_answerable_vs_off_corpus": round(auc(by_kind["answerable"], by_kind["off_corpus"]), 4),
        "auc_answerable_vs_unanswerable": round(auc(by_kind["answerable"], by_kind["unanswerable"]), 4),
        "abstention_precision": round(precision, 4),
        "abstention_recall": round(recall, 4),
        "band_mix": band_mix(squad_obs),
        "median_top_score": {k: round(float(np.median(v)), 4) for k, v in by_kind.items() if v},
        "auc_by_condition_factor": {f"{f:g}": v for f, v in factors.items()},
        "pseudo_shift": shift_metrics,
    }
    if documentation:
        declined = declined_shares(documentation.observations, threshold)
        metrics["documentation"] = {
            **documentation.metrics,
            "declined_at_grading": declined,
            "band_mix": band_mix(documentation.observations),
        }
    for key, group in (
        ("passing", passing),
        ("correct", [o for o in passing if o.top_score >= upper]),
        ("ambiguous", [o for o in passing if o.top_score < upper]),
    ):
        span_by_kind = {k: [float(o.span_score or 0.0) for o in group if o.kind == k] for k in pool}
        if span_by_kind["answerable"] and span_by_kind["unanswerable"]:
            metrics[f"auc_span_answerable_vs_unanswerable_{key}"] = round(
                auc(span_by_kind["answerable"], span_by_kind["unanswerable"]), 4
            )
    calibration = Calibration(
        reranker_model=reranker.name,
        reranker_threshold=round(threshold, 6),
        crag_upper=round(upper, 6),
        reader_threshold=None if reader_threshold is None else round(reader_threshold, 6),
        refine_reader_threshold=None if refine_floor is None else round(refine_floor, 6),
        condition_factor=factor,
        pseudo_shift=shift,
        data=f"{squad.name} (corpus: its {len(docs)} paragraphs; answerable, unanswerable); "
        f"off-corpus: {off_corpus.name} articles not in the corpus; {per_class} questions per class, seed {seed}"
        + (f"; documentation: {documentation.data}" if documentation else ""),
        sample=CalibrationSample(
            questions=squad.name, classes=list(pool), off_corpus=off_corpus.name, per_class=per_class, seed=seed
        ),
        rerank_weight=kept.rerank_weight,
        flare_threshold=kept.flare_threshold,
        answer_floor=kept.answer_floor,
        answer_embedder=kept.answer_embedder,
        objective=f"{objective}; crag_upper: lowest score above which refinement moves the best evidence to "
        f"another chunk for <= {tolerance:.0%} of {squad.name}'s questions; {factor_objective}; pseudo_shift: the "
        f"median logit of the answerable questions' top grade (evidence retrieved) minus that of {PSEUDO_QUESTIONS} "
        f"cloze pseudo-questions made from the same corpus as `fastcrag fit` makes them"
        f"{' (SQuAD and each manual: both sides pooled)' if documentation else ''}{_carried(kept)}",
        created=dt.date.today().isoformat(),
        metrics={**metrics, **{k: v for k, v in kept.metrics.items() if k.startswith(("flare_", "answer_floor_"))}},
    )
    write_json_atomic(out, calibration.model_dump())
    return calibration
