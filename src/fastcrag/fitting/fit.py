"""`fastcrag fit`: label the first pass over a user's index, adapt the grader, calibrate it, and report."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from fastcrag.config.calibration import FIT_DIR, Calibration, load_calibration
from fastcrag.config.settings import Settings, is_postgres_url
from fastcrag.fileio import write_json_atomic
from fastcrag.fitting.calibrate import Observation, auc, choose_threshold, choose_upper
from fastcrag.fitting.generate import generate_questions, judge, write_questions_jsonl
from fastcrag.fitting.questions import (
    MIN_HELD_OUT,
    FitError,
    FitQuestion,
    check_sources,
    read_questions,
    split_held_out,
)
from fastcrag.generation.chat import load_chat_model
from fastcrag.grading.bands import band_of
from fastcrag.grading.reranker import BI_ENCODER, Reranker, checked_scores, default_reranker_spec, load_reranker
from fastcrag.retrieval.embeddings import default_embeddings
from fastcrag.retrieval.hybrid import HybridRetriever, chunk_key
from fastcrag.retrieval.store import FaissStore, IndexLoadError
from fastcrag.retrieval.text import normalise, split_sentences

EXTRA_DEPTH = 10
"""Candidates fetched past `top_k`, so that a question with its evidence taken out still has `top_k` of them."""
POSITIVES_PER_QUESTION, NEGATIVES_PER_QUESTION = 2, 3
"""Training pairs per fit question: its best-ranked evidence chunks, and its best-ranked candidates without evidence."""
REFINE_K = 6
"""Chunks split into strips to place `crag_upper` (as `fastcrag calibrate` does)."""
TOLERANCE = 0.1
"""`crag_upper`: the lowest score above which refinement moves the best evidence for at most this share."""
KEEP_MARGIN = 0.005
"""A fitted grader is kept when its held-out AUCs average higher than the base's and none is lower by more."""


@dataclass(frozen=True)
class Candidate:
    """One first-pass candidate of a labelled question."""

    chunk_id: str
    source: str
    text: str
    evidence: bool


@dataclass
class Labelled:
    """A labelled question with its first pass (in first-pass order, `top_k + EXTRA_DEPTH` deep)."""

    question: FitQuestion
    candidates: list[Candidate]
    group: str = ""
    held_out: bool = False

    def answerable_view(self, top_k: int) -> list[Candidate]:
        """What the graph grades for this question: the first `top_k` candidates."""
        return self.candidates[:top_k]

    def gold_removed_view(self, top_k: int) -> list[Candidate]:
        """What the graph would grade with the evidence out of the index: the first `top_k` without evidence."""
        return [c for c in self.candidates if not c.evidence][:top_k]

    def retrieved(self, top_k: int) -> bool:
        """Whether evidence is among the candidates the graph grades."""
        return any(c.evidence for c in self.candidates[:top_k])


@dataclass
class FitOptions:
    """Options of one `fastcrag fit` run."""

    questions: Path
    out: Path
    index: Path | None = None
    store: str = ""
    collection: str = "default"
    minutes: float = 10.0
    train: bool = True
    precision: float = 0.9
    held_out: float = 0.3
    seed: int = 13
    install: bool = False
    data_root: Path | None = None
    progress: bool = True
    generate: int = 0
    llm: str = ""
    judge: bool = False
    replay_exclude: frozenset[str] = frozenset()


@dataclass
class GraderFigures:
    """One grader's (and one calibration's) figures on the held-out part."""

    name: str
    auc_gold_removed: float
    auc_unanswerable: float | None
    thresholds: dict[str, float | None] = field(default_factory=dict)
    at_threshold: dict[str, float] = field(default_factory=dict)

    def aucs(self) -> list[float]:
        """The AUCs measured (answerable vs gold removed, and vs unanswerable when there are any)."""
        return [a for a in (self.auc_gold_removed, self.auc_unanswerable) if a is not None and not np.isnan(a)]


@dataclass
class FitResult:
    """What `fit` did and measured."""

    out: Path
    calibration: Calibration
    kept_fitted: bool
    figures: dict[str, GraderFigures]
    counts: dict[str, int]
    env: list[str]
    notes: list[str]


# ----------------------------------------------------------------------------------------------- evidence


def is_evidence(q: FitQuestion, source: str, text: str) -> bool:
    """Whether a chunk is evidence for `q`.

    It is when it holds one of the question's answers (case and whitespace aside), or comes from one of its sources.
    """
    if q.sources:
        return source in q.sources
    body = normalise(text)
    return any(normalise(a) in body for a in q.answers)


def open_retriever(opts: FitOptions, settings: Settings) -> tuple[HybridRetriever, Any]:
    """The first pass `fastcrag ask` runs over the same index, and the store under it.

    Raises:
        FitError: no index or store was named, the index is not there, or it cannot be opened.
    """
    if bool(opts.index) == bool(opts.store):
        raise FitError("give exactly one of --index DIR and --store postgresql://...")
    try:
        if opts.store:
            if not is_postgres_url(opts.store):
                raise FitError(f"--store must be a postgresql:// URL, got {opts.store.split('://')[0]}://...")
            from fastcrag.retrieval.pgstore import PgStore  # psycopg is in the optional `postgres` extra

            store: Any = PgStore(opts.store, default_embeddings(), opts.collection, ef_search=settings.ef_search)
        else:
            assert opts.index is not None
            if not opts.index.is_dir():
                raise FitError(f"no index folder {opts.index} (build one with `fastcrag index PATH --index DIR`)")
            store = FaissStore.load(opts.index, default_embeddings())
    except IndexLoadError as exc:
        raise FitError(str(exc)) from None
    if len(store) == 0:
        raise FitError("the index holds no chunks; index documents first")
    return HybridRetriever(store=store, mode=settings.retrieval, k=settings.top_k), store


Judge = Callable[[str, Sequence[str]], list[bool | None]]
"""A chat-model judge: whether each passage answers the question (None: no verdict)."""


def first_pass(
    retriever: HybridRetriever,
    questions: Sequence[FitQuestion],
    top_k: int,
    progress: bool,
    judge: Judge | None = None,
) -> list[Labelled]:
    """Retrieve each question as `ask` does (deeper by `EXTRA_DEPTH`) and label every candidate.

    With a `judge`, the candidates the graph grades are labelled by it where it gives a verdict (a question
    labelled by `answers` only: `sources` are exact), and an unanswerable question that one of them answers is
    dropped (a near miss written by a chat model may be answered elsewhere in the corpus).
    """
    out = []
    for q in tqdm(questions, desc="first pass", unit="q", file=sys.stderr, disable=not progress):
        docs, _ = retriever.search(q.question, k=top_k + EXTRA_DEPTH)
        candidates = []
        for d in docs:
            meta = d.metadata or {}
            source, text = str(meta.get("source", "")), str(d.page_content)
            candidates.append(Candidate(chunk_key(text, meta), source, text, is_evidence(q, source, text)))
        if judge is not None and not q.sources:
            verdicts = judge(q.question, [c.text for c in candidates[:top_k]])
            if not q.answerable and any(verdicts):
                continue
            candidates = [
                c if v is None else Candidate(c.chunk_id, c.source, c.text, v)
                for c, v in zip(candidates, [*verdicts, *[None] * len(candidates)], strict=False)
            ]
        first_evidence = next((c.source for c in candidates[:top_k] if c.evidence), None)
        group = q.sources[0] if q.sources else first_evidence or f"question:{q.question}"
        out.append(Labelled(q, candidates, group))
    return out


# ----------------------------------------------------------------------------------------------- scoring


class ScoreCache:
    """A grader's scores, each (question, text) pair scored once."""

    def __init__(self, grader: Reranker) -> None:
        """Score with `grader`."""
        self.grader = grader
        self._scores: dict[tuple[str, str], float] = {}

    def scores(self, question: str, texts: Sequence[str]) -> list[float]:
        """Scores of `texts` for `question`."""
        todo = list(dict.fromkeys(t for t in texts if (question, t) not in self._scores))
        if todo:
            for t, s in zip(todo, checked_scores(self.grader, question, todo), strict=True):
                self._scores[(question, t)] = s
        return [self._scores[(question, t)] for t in texts]


def observe(
    cache: ScoreCache, items: Sequence[Labelled], top_k: int, strips: bool, progress: bool, desc: str
) -> list[Observation]:
    """Per held-out question, what grading sees: answerable and its gold-removed twin, or unanswerable.

    With `strips`, the best sentence strip of the top `REFINE_K` chunks too (for `crag_upper`).
    """
    out: list[Observation] = []
    for item in tqdm(items, desc=desc, unit="q", file=sys.stderr, disable=not progress):
        q = item.question
        views = (
            [("answerable", item.answerable_view(top_k)), ("gold_removed", item.gold_removed_view(top_k))]
            if q.answerable
            else [("unanswerable", item.answerable_view(top_k))]
        )
        for kind, view in views:
            if not view:
                continue
            scores = cache.scores(q.question, [c.text for c in view])
            ranked = sorted(zip(scores, view, strict=True), key=lambda t: t[0], reverse=True)
            top_chunk = ranked[0][1].chunk_id
            strip_chunk = top_chunk
            if strips:
                pieces = [(s, c.chunk_id) for _, c in ranked[:REFINE_K] for s in split_sentences(c.text)]
                if pieces:
                    strip_scores = cache.scores(q.question, [s for s, _ in pieces])
                    strip_chunk = pieces[int(np.argmax(strip_scores))][1]
            out.append(Observation(kind, ranked[0][0], top_chunk, strip_chunk))
    return out


def _scores_of(obs: Sequence[Observation], kind: str) -> list[float]:
    return [o.top_score for o in obs if o.kind == kind]


def held_out_aucs(obs: Sequence[Observation]) -> tuple[float, float | None]:
    """AUC answerable vs gold removed, and vs unanswerable (None when the held-out part has none)."""
    unanswerable = _scores_of(obs, "unanswerable")
    return (
        auc(_scores_of(obs, "answerable"), _scores_of(obs, "gold_removed")),
        auc(_scores_of(obs, "answerable"), unanswerable) if unanswerable else None,
    )


def at_threshold(obs: Sequence[Observation], lower: float, upper: float) -> dict[str, float]:
    """Abstention precision and recall, answer rate and band mix on held-out observations at the thresholds."""
    abstained = [o for o in obs if o.top_score < lower]
    should = [o for o in obs if o.kind != "answerable"]
    answerable = [o for o in obs if o.kind == "answerable"]
    bands = [band_of(o.top_score, lower, upper) for o in obs]
    return {
        "abstention_precision": round(sum(o.kind != "answerable" for o in abstained) / max(1, len(abstained)), 4),
        "abstention_recall": round(sum(o.top_score < lower for o in should) / max(1, len(should)), 4),
        "answerable_answered": round(sum(o.top_score >= lower for o in answerable) / max(1, len(answerable)), 4),
        "correct_share": round(bands.count("CORRECT") / max(1, len(bands)), 4),
        "ambiguous_share": round(bands.count("AMBIGUOUS") / max(1, len(bands)), 4),
        "incorrect_share": round(bands.count("INCORRECT") / max(1, len(bands)), 4),
    }


def calibrate_on(obs: Sequence[Observation], precision: float) -> tuple[float, float, str]:
    """`reranker_threshold` at the abstention precision, and `crag_upper` by the rule `fastcrag calibrate` uses."""
    threshold, objective = choose_threshold(list(obs), precision)
    upper = choose_upper(list(obs), threshold, TOLERANCE, min_support=max(5, len(obs) // 20))
    objective += (
        f"; crag_upper: lowest score above which refinement moves the best evidence to another chunk for "
        f"<= {TOLERANCE:.0%} of held-out questions"
    )
    return threshold, upper, objective


# ----------------------------------------------------------------------------------------------- training


def training_pairs(items: Sequence[Labelled], top_k: int) -> list[tuple[str, str, float]]:
    """(question, passage, label) pairs from the fit part.

    Evidence is 1; the best-ranked candidates without evidence (on topic, no answer) and an unanswerable question's
    candidates are 0. Questions whose evidence was not retrieved give no pairs (a retrieval miss is not a negative).
    """
    pairs: list[tuple[str, str, float]] = []
    for item in items:
        q, view = item.question, item.answerable_view(top_k)
        if q.answerable and not item.retrieved(top_k):
            continue
        pairs += [(q.question, c.text, 1.0) for c in view if c.evidence][:POSITIVES_PER_QUESTION]
        pairs += [(q.question, c.text, 0.0) for c in view if not c.evidence][:NEGATIVES_PER_QUESTION]
    return pairs


def fine_tune_grader(
    base_dir: Path, pairs: Sequence[tuple[str, str, float]], work: Path, opts: FitOptions
) -> tuple[Path, str]:
    """Fine-tune the base grader on `pairs` plus a replay of the packaged mix; the exported folder and its name."""
    from fastcrag.training.data import Pair  # training pulls torch: only a fit that trains loads it
    from fastcrag.training.finetune import fine_tune

    rows = [Pair(q, p, label, "fit", hashlib.sha1(q.encode()).hexdigest()[:12]) for q, p, label in pairs]
    result = fine_tune(
        base_dir,
        rows,
        work,
        minutes=opts.minutes,
        replay_exclude=opts.replay_exclude,
        seed=opts.seed,
        data_root=opts.data_root,
        progress=opts.progress,
    )
    return Path(result.export), str(result.name)


# ----------------------------------------------------------------------------------------------- the run


def fit(opts: FitOptions, settings: Settings | None = None, log: Callable[[str], None] = print) -> FitResult:
    """Fit the grader and the thresholds to an index; write everything to `opts.out` at the end, atomically.

    Raises:
        FitError: the questions, the index or the options do not allow a fit (nothing is written).
    """
    settings = settings or Settings()
    started = time.perf_counter()
    if not 0.5 <= opts.precision < 1.0:
        raise FitError(f"--precision must be in [0.5, 1), got {opts.precision}")
    if opts.replay_exclude:
        from fastcrag.training.finetune import REPLAY_FAMILIES  # the training package loads only when asked

        if unknown := sorted(opts.replay_exclude - REPLAY_FAMILIES):
            raise FitError(f"--replay-exclude: unknown {unknown}; the packaged mix has {sorted(REPLAY_FAMILIES)}")
    if bool(opts.generate) != bool(opts.llm) and not (opts.judge and opts.llm):
        raise FitError("--generate N needs --llm provider:model (and --judge needs --llm)")
    if opts.generate and opts.questions.exists():
        raise FitError(f"{opts.questions} exists: --generate writes the questions there; name a new file")
    questions = [] if opts.generate else read_questions(opts.questions)  # a bad file fails before any work
    retriever, store = open_retriever(opts, settings)
    llm = load_chat_model(opts.llm, settings.max_new_tokens, settings.llm_timeout_s) if opts.llm else None
    if opts.generate and llm is not None:
        written, stats = generate_questions(
            store.sample_chunks(max(50 * opts.generate, 5000)), llm, opts.generate, opts.seed, opts.progress
        )
        write_questions_jsonl(opts.questions, written)
        log(f"{opts.questions}: {stats.summary()}")
        questions = read_questions(opts.questions)
    check_sources(questions, store.sources(), opts.questions)
    base_spec = settings.reranker or default_reranker_spec()
    base = load_reranker(base_spec)
    top_k = settings.top_k

    judged = (lambda q, texts: judge(llm, q, texts)) if opts.judge and llm is not None else None
    items = first_pass(retriever, questions, top_k, opts.progress, judged)
    for answerable in (True, False):  # each class split on its own, so the held-out part holds both
        part = [i for i in items if i.question.answerable == answerable]
        for item, out in zip(part, split_held_out([i.group for i in part], opts.held_out, opts.seed), strict=True):
            item.held_out = out
    misses = [i for i in items if i.question.answerable and not i.retrieved(top_k)]
    fit_part = [i for i in items if not i.held_out]
    held = [i for i in items if i.held_out and not (i.question.answerable and not i.retrieved(top_k))]
    usable_held = sum(i.question.answerable for i in held)
    counts = {
        "questions": len(items),
        "fit_part": len(fit_part),
        "held_out": sum(i.held_out for i in items),
        "held_out_answerable_retrieved": usable_held,
        "held_out_unanswerable": sum(not i.question.answerable for i in held),
        "retrieval_misses": len(misses),
    }
    log(
        f"{len(items)} questions: {counts['fit_part']} to fit, {counts['held_out']} held out; "
        f"{len(misses)} retrieval misses (evidence not in the top {top_k}: counted, not used)"
    )
    if usable_held < MIN_HELD_OUT:
        raise FitError(
            f"the held-out part has {usable_held} answerable questions with their evidence retrieved; calibrating "
            f"needs at least {MIN_HELD_OUT}: label more questions (retrieval found evidence for "
            f"{sum(i.question.answerable and i.retrieved(top_k) for i in items)} of "
            f"{sum(i.question.answerable for i in items)} answerable ones)"
        )
    notes: list[str] = []
    tmp = opts.out.parent / f".{opts.out.name}.tmp-{os.getpid()}"
    work = opts.out.parent / f".{opts.out.name}.work"  # training checkpoints: a rerun resumes from them
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        base_cache = ScoreCache(base)
        base_obs = observe(base_cache, held, top_k, strips=True, progress=opts.progress, desc="held-out, base")
        chosen = calibrate_on(base_obs, opts.precision)
        figures = {"base": _figures(base.name, base_obs, chosen[:2])}
        packaged = _packaged_calibration(base.name)
        if packaged is not None:
            figures["base, packaged thresholds"] = _figures(
                base.name, base_obs, (packaged.reranker_threshold, packaged.crag_upper)
            )
        kept, kept_obs, kept_name, grader_dir = base, base_obs, base.name, None
        if opts.train:
            if base_spec == BI_ENCODER or not (Path(base_spec) / "model.onnx").is_file():
                raise FitError(f"the grader {base.name!r} cannot be fine-tuned here; use --no-train")
            pairs = training_pairs(fit_part, top_k)
            counts["training_pairs"] = len(pairs)
            if not pairs:
                raise FitError("the fit part gave no training pairs (no evidence retrieved); use --no-train")
            log(f"fine-tuning {base.name} on {len(pairs)} pairs (+ replay) for up to {opts.minutes:g} minutes")
            export, name = fine_tune_grader(Path(base_spec), pairs, work, opts)
            fitted = load_reranker(str(export))
            fitted_obs = observe(
                ScoreCache(fitted), held, top_k, strips=True, progress=opts.progress, desc="held-out, fitted"
            )
            fitted_chosen = calibrate_on(fitted_obs, opts.precision)
            figures["fitted"] = _figures(name, fitted_obs, fitted_chosen[:2])
            before, after = figures["base"].aucs(), figures["fitted"].aucs()
            if np.mean(after) > np.mean(before) and all(a >= b - KEEP_MARGIN for a, b in zip(after, before)):
                kept, kept_obs, kept_name, chosen = fitted, fitted_obs, name, fitted_chosen
                grader_dir = tmp / "grader"
                shutil.copytree(export, grader_dir)
            else:
                notes.append(
                    f"The fitted grader did not beat the base on the held-out part (AUCs {_fmt(after)} vs "
                    f"{_fmt(before)}); the base grader is kept."
                )
        threshold, upper, objective = chosen
        calibration = Calibration(
            reranker_model=kept_name,
            reranker_threshold=round(threshold, 6),
            crag_upper=round(upper, 6),
            reader_threshold=None,
            data=f"{opts.questions.name}: {counts['held_out']} held-out of {len(items)} labelled questions over "
            f"{f'Postgres collection {opts.collection}' if opts.store else opts.index}, seed {opts.seed}; "
            f"classes answerable, gold removed, unanswerable",
            objective=objective,
            created=dt.date.today().isoformat(),
            metrics={
                "questions": counts,
                "embedder": getattr(default_embeddings(), "name", ""),
                "held_out": {k: _as_dict(v) for k, v in figures.items()},
                "fitted_grader_kept": kept is not base,
            },
        )
        write_json_atomic(tmp / "calibration.json", calibration.model_dump())
        from fastcrag.fitting.report import write_report  # matplotlib loads only to draw the report

        write_report(tmp, opts, counts, figures, base_obs, kept_obs if kept is not base else None, calibration, notes)
        _replace_folder(tmp, opts.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    env = []
    if grader_dir is not None:
        env.append(f"FASTRAG_RERANKER={opts.out / 'grader'}")
    elif settings.reranker:
        env.append(f"FASTRAG_RERANKER={settings.reranker}")
    env.append(f"FASTRAG_CALIBRATION={opts.out / 'calibration.json'}")
    if opts.install:
        where = install(opts.out, opts.index) if opts.index else install_in_collection(opts.out, store)
        notes.append(f"Installed into {where}: `ask`, `serve` and `build_graph()` use it without settings.")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return FitResult(opts.out, calibration, kept is not base, figures, counts, env, notes)


def _figures(name: str, obs: Sequence[Observation], thresholds: tuple[float, float] | None = None) -> GraderFigures:
    gold, unans = held_out_aucs(obs)
    fig = GraderFigures(name, round(gold, 4), None if unans is None else round(unans, 4))
    if thresholds is not None:
        fig.thresholds = {"reranker_threshold": round(thresholds[0], 6), "crag_upper": round(thresholds[1], 6)}
        fig.at_threshold = at_threshold(obs, *thresholds)
    return fig


def _as_dict(fig: GraderFigures) -> dict[str, Any]:
    return {
        "grader": fig.name,
        "auc_answerable_vs_gold_removed": fig.auc_gold_removed,
        "auc_answerable_vs_unanswerable": fig.auc_unanswerable,
        **fig.thresholds,
        **fig.at_threshold,
    }


def _fmt(values: Sequence[float]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


def _packaged_calibration(name: str) -> Calibration | None:
    """The packaged thresholds when they were made for this grader (the "before" of the report)."""
    try:
        return load_calibration(None, expected_model=name)
    except ValueError:
        return None


def _replace_folder(new: Path, dest: Path) -> None:
    """Put `new` in the place of `dest` with renames only; an interruption leaves `dest` whole, old or new."""
    if dest.exists() and not dest.is_dir():
        raise FitError(f"--out {dest} exists and is not a folder")
    old = dest.parent / f".{dest.name}.old-{os.getpid()}"
    if dest.exists():
        os.replace(dest, old)
    os.replace(new, dest)
    shutil.rmtree(old, ignore_errors=True)


def install_in_collection(out: Path, store: Any) -> str:
    """Store a fit's calibration and grader (a tar of its folder) in a Postgres collection's record."""
    grader = None
    if (out / "grader").is_dir():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in sorted((out / "grader").iterdir()):
                tar.add(path, arcname=path.name)
        grader = buf.getvalue()
    calibration = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    store.save_fit(calibration, grader, getattr(default_embeddings(), "name", ""))
    return f"the record of Postgres collection {store.collection.name!r}"


def install(out: Path, index: Path) -> Path:
    """Store a fit's grader (when one was kept) and calibration with a FAISS index, replacing an earlier one."""
    staged = index / f".{FIT_DIR}.tmp-{os.getpid()}"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    shutil.copy2(out / "calibration.json", staged / "calibration.json")
    if (out / "grader").is_dir():
        shutil.copytree(out / "grader", staged / "grader")
    meta = {
        "embedder": getattr(default_embeddings(), "name", ""),
        "grader": (out / "grader").is_dir(),
        "from": str(out.resolve()),
    }
    (staged / "fit.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    _replace_folder(staged, index / FIT_DIR)
    return index / FIT_DIR
