"""`fastcrag fit`: label the first pass over a user's index, adapt the grader, calibrate it, and report."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastcrag.components import Components
from fastcrag.config.calibration import FIT_DIR, Calibration, CalibrationSample, load_calibration
from fastcrag.config.settings import Settings, is_postgres_url
from fastcrag.fileio import write_json_atomic, write_text_atomic
from fastcrag.fitting.calibrate import Observation, choose_condition_factor, condition_curve
from fastcrag.fitting.draw import Draw, Drawn, draw_alone, shrink, with_reader
from fastcrag.fitting.generate import generate_questions, judge, write_questions_jsonl
from fastcrag.fitting.labels import Labelled, first_pass, training_pairs
from fastcrag.fitting.measure import (
    BOOTSTRAP_ROUNDS,
    KEEP_CONFIDENCE,
    MIN_RECALL,
    GraderFigures,
    Thresholds,
    calibrate_on,
    choose_weight,
    condition_views,
    figures_of,
    figures_record,
    keep_fitted,
    observe,
    order_curve,
)
from fastcrag.fitting.pseudo import (
    DEFAULT_KINDS,
    KINDS,
    pseudo_first_pass,
    sample_pseudo_questions,
    shift_scores,
    twin_pairs,
)
from fastcrag.fitting.questions import (
    MIN_HELD_OUT,
    FitError,
    check_sources,
    read_questions,
    split_held_out,
)
from fastcrag.generation.chat import load_chat_model
from fastcrag.grading.reranker import BI_ENCODER, CachingReranker, default_reranker_spec, load_reranker
from fastcrag.retrieval.hybrid import RoutedSearch
from fastcrag.retrieval.store import IndexLoadError

PSEUDO_QUESTIONS = 200
"""Pseudo-questions a fit makes from the index (the label-free thresholds, and the prior of a labelled fit)."""
MIN_PSEUDO = 20
"""A label-free fit needs at least this many pseudo-questions with their sentence retrieved."""


def _draw_label_free(
    obs: Sequence[Observation], rule: Draw, seed: int, shift: float, packaged: Calibration | None
) -> Drawn:
    """The thresholds drawn on pseudo-questions (`obs`, their grades already moved by `shift`).

    A grader that reads keeps the packaged `reader_threshold`: a pseudo-question's answer span stands in its own
    words, so the reader finds it far more surely than a real question's, and a floor drawn on those spans declines
    nothing (lab/RESULTS.md, "Fit without labels").
    """
    how = (
        f"their grades lowered by {-shift:g} logits first (the packaged calibration's pseudo_shift: cloze questions "
        "grade their evidence higher than real questions do)"
        if shift
        else "their grades as measured (no pseudo_shift for this grader)"
    )
    drawn = draw_alone(obs, rule, seed, f"thresholds drawn on the pseudo-questions alone (label-free), {how}")
    floor = packaged.reader_threshold if packaged is not None else None
    if floor is None:
        return drawn  # a grader without a packaged floor (one that does not read)
    return with_reader(
        drawn,
        floor,
        "reader_threshold: the packaged one (a pseudo-question's answer span stands in its own words: a floor drawn "
        "on those spans says nothing of a real question's)",
    )


@dataclass
class FitOptions:
    """Options of one `fastcrag fit` run."""

    questions: Path | None
    out: Path
    index: Path | None = None
    store: str = ""
    collection: str = "default"
    minutes: float = 10.0
    train: bool = False
    precision: float = 0.9
    min_recall: float = MIN_RECALL
    held_out: float = 0.3
    seed: int = 13
    install: bool = False
    data_root: Path | None = None
    progress: bool = True
    generate: int = 0
    llm: str = ""
    judge: bool = False
    replay_exclude: frozenset[str] = frozenset()
    pseudo: int = PSEUDO_QUESTIONS
    pseudo_kinds: tuple[str, ...] = DEFAULT_KINDS


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


def open_retriever(opts: FitOptions, settings: Settings) -> tuple[RoutedSearch, Any]:
    """The first pass `fastcrag ask` runs over the same index (the same `Components`), and the store under it.

    Raises:
        FitError: no index or store was named, the index is not there, or it cannot be opened.
    """
    if bool(opts.index) == bool(opts.store):
        raise FitError("give exactly one of --index DIR and --store postgresql://...")
    if opts.store and not is_postgres_url(opts.store):
        raise FitError(f"--store must be a postgresql:// URL, got {opts.store.split('://')[0]}://...")
    if opts.index and not opts.index.is_dir():
        raise FitError(f"no index folder {opts.index} (build one with `fastcrag index PATH --index DIR`)")
    located = settings.model_copy(update={"index_dir": opts.index, "store": opts.store, "collection": opts.collection})
    try:
        retriever = Components(located).retriever()
    except IndexLoadError as exc:
        raise FitError(str(exc)) from None
    store = getattr(retriever, "store", None)  # a FAISS folder or a Postgres collection: a store searched by route
    if not isinstance(retriever, RoutedSearch) or store is None:
        raise FitError("the index gives no retriever that searches by route over its store")
    if len(store) == 0:
        raise FitError("the index holds no chunks; index documents first")
    return retriever, store


def fine_tune_grader(
    base_dir: Path, pairs: Sequence[tuple[str, str, float, str]], work: Path, opts: FitOptions
) -> tuple[Path, str, dict[str, Any]]:
    """Fine-tune the base grader on `pairs` plus a replay of the packaged mix.

    Returns:
        The exported folder, its name, and what training did (steps, pairs seen, seconds, replay, notes).
    """
    from fastcrag.fitting.finetune import fine_tune
    from fastcrag.fitting.mix import Pair  # training pulls torch: only a fit that trains loads it

    rows = [Pair(q, p, label, "fit", hashlib.sha1(q.encode()).hexdigest()[:12], a) for q, p, label, a in pairs]
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
    done = {
        "steps": result.steps,
        "pairs_seen": result.pairs_seen,
        "seconds": round(result.seconds, 1),
        "user_pairs": result.user_pairs,
        "replay_pairs": result.replay,
        "stopped_by_time_budget": result.stopped_by_time_budget,
        "notes": list(result.notes),
    }
    return Path(result.export), str(result.name), done


def _check_options(opts: FitOptions) -> None:
    """Raises FitError on options that cannot work together (before any work)."""
    if not 0.5 <= opts.precision < 1.0:
        raise FitError(f"--precision must be in [0.5, 1), got {opts.precision}")
    if not 0.0 <= opts.min_recall < 1.0:
        raise FitError(f"--min-recall must be in [0, 1), got {opts.min_recall}")
    if opts.pseudo < 0:
        raise FitError(f"--pseudo must be 0 or more, got {opts.pseudo}")
    if unknown := sorted(set(opts.pseudo_kinds) - set(KINDS)) or not opts.pseudo_kinds:
        raise FitError(f"pseudo-question kinds must be among {', '.join(KINDS)}, got {list(opts.pseudo_kinds)}")
    if opts.replay_exclude:
        from fastcrag.fitting.finetune import REPLAY_FAMILIES  # the fine-tune (torch) loads only when asked

        if unknown := sorted(opts.replay_exclude - REPLAY_FAMILIES):
            raise FitError(f"--replay-exclude: unknown {unknown}; the packaged mix has {sorted(REPLAY_FAMILIES)}")
    if bool(opts.generate) != bool(opts.llm) and not (opts.judge and opts.llm):
        raise FitError("--generate N needs --llm provider:model (and --judge needs --llm)")
    if opts.questions is None:
        if opts.generate or opts.judge:
            raise FitError("--generate and --judge need --questions FILE (the file --generate writes, or labels)")
        if opts.train:
            raise FitError("--train needs labelled questions (--questions FILE): a label-free fit calibrates only")
        if not opts.pseudo:
            raise FitError("with no --questions, the fit draws on pseudo-questions: --pseudo must be above 0")
    elif opts.generate and opts.questions.exists():
        raise FitError(f"{opts.questions} exists: --generate writes the questions there; name a new file")


def fit(opts: FitOptions, settings: Settings | None = None, log: Callable[[str], None] = print) -> FitResult:
    """Fit the thresholds (and, with `train`, the grader) to an index; write everything to `opts.out` atomically.

    With labelled questions their thresholds are blended with the label-free ones (cross-validated shrinkage);
    without, the label-free ones are the fit.

    Raises:
        FitError: the questions, the index or the options do not allow a fit (nothing is written).
    """
    settings = settings or Settings()
    started = time.perf_counter()
    _check_options(opts)
    labels = opts.questions
    questions = [] if labels is None or opts.generate else read_questions(labels)  # a bad file fails before work
    retriever, store = open_retriever(opts, settings)
    llm = load_chat_model(opts.llm, settings.max_new_tokens, settings.llm_timeout_s) if opts.llm else None
    if labels is not None and opts.generate and llm is not None:
        written, stats = generate_questions(
            store.sample_chunks(max(50 * opts.generate, 5000)),
            llm,
            opts.generate,
            opts.seed,
            opts.progress,
            settings.llm_timeout_s,
        )
        write_questions_jsonl(labels, written)
        log(f"{labels}: {stats.summary()}")
        questions = read_questions(labels)
    if labels is not None:
        check_sources(questions, store.sources(), labels)
    embedder = str(getattr(store.embeddings, "name", ""))
    base_spec = settings.reranker or default_reranker_spec()
    base = load_reranker(base_spec)
    top_k = settings.top_k

    judged = (lambda q, texts: judge(llm, q, texts, settings.llm_timeout_s)) if opts.judge and llm is not None else None
    items = first_pass(retriever, questions, top_k, opts.progress, judged)
    # Without training nothing needs holding out: the thresholds are drawn on every question (more data, steadier
    # thresholds). A fine-tune is judged and calibrated on questions it never saw.
    share = opts.held_out if opts.train else 1.0
    for answerable in (True, False):  # each class split on its own, so the held-out part holds both
        part = [i for i in items if i.question.answerable == answerable]
        for item, out in zip(part, split_held_out([i.group for i in part], share, opts.seed), strict=True):
            item.held_out = out
    misses = [i for i in items if i.question.answerable and not i.retrieved(top_k)]
    fit_part = [i for i in items if not i.held_out]
    usable = [i for i in items if not (i.question.answerable and not i.retrieved(top_k))]
    held = [i for i in usable if i.held_out]
    usable_held = sum(i.question.answerable for i in held)
    pseudo = _pseudo_items(opts, store, retriever, top_k, log)
    counts = {
        "questions": len(items),
        "fit_part": len(fit_part) if opts.train else 0,
        "held_out": sum(i.held_out for i in items),
        "held_out_answerable_retrieved": usable_held,
        "held_out_unanswerable": sum(not i.question.answerable for i in held),
        "retrieval_misses": len(misses),
        "pseudo_questions": len(pseudo),
        "pseudo_questions_retrieved": sum(i.retrieved(top_k) for i in pseudo),
    }
    pseudo = [i for i in pseudo if i.retrieved(top_k)]
    if items:
        log(
            f"{len(items)} questions: {counts['fit_part']} to fit, {counts['held_out']} held out to calibrate on; "
            f"{len(misses)} retrieval misses (evidence not in the top {top_k}: counted, not used)"
        )
    if items and usable_held < MIN_HELD_OUT:
        raise FitError(
            f"the held-out part has {usable_held} answerable questions with their evidence retrieved; calibrating "
            f"needs at least {MIN_HELD_OUT}: label more questions (retrieval found evidence for "
            f"{sum(i.question.answerable and i.retrieved(top_k) for i in items)} of "
            f"{sum(i.question.answerable for i in items)} answerable ones)"
        )
    if items and len(pseudo) < MIN_PSEUDO:  # too few to draw a prior on: the labels go alone
        if pseudo:
            log(f"{len(pseudo)} pseudo-questions with their sentence retrieved: fewer than {MIN_PSEUDO}, not used")
        pseudo = []
    if not items and len(pseudo) < MIN_PSEUDO:
        raise FitError(
            f"the index gave {len(pseudo)} pseudo-questions with their sentence retrieved; a label-free fit needs at "
            f"least {MIN_PSEUDO} (index more prose, raise --pseudo, or label questions with --questions)"
        )
    notes: list[str] = []
    tmp = opts.out.parent / f".{opts.out.name}.tmp-{os.getpid()}"
    work = opts.out.parent / f".{opts.out.name}.work"  # training checkpoints: a rerun resumes from them
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        base_cached = CachingReranker(base)
        # the condition check is chosen first, on the base grader's scores over every usable question (the base
        # trained on none of them): every grader below is judged with it
        packaged = _packaged_calibration(base.name)
        base_factor = packaged.condition_factor if packaged is not None else 1.0
        views = condition_views(base_cached, [*usable, *pseudo], top_k)
        factors = condition_curve(views)
        factor, factor_objective = choose_condition_factor(factors, views, base_factor)

        def rule(obs: Sequence[Observation]) -> tuple[Thresholds, str]:
            return calibrate_on(obs, opts.precision, opts.min_recall)

        shift = (packaged.pseudo_shift or 0.0) if packaged is not None else 0.0

        def observe_pseudo(grader: CachingReranker, desc: str, condition_factor: float = factor) -> list[Observation]:
            """The pseudo-questions as `grader` sees them, on the scale their thresholds are drawn on (`shift`)."""
            return shift_scores(
                observe(grader, pseudo, top_k, True, opts.progress and bool(desc), desc, condition_factor), shift
            )

        pseudo_obs = observe_pseudo(base_cached, "pseudo-questions, base")
        label_free = _draw_label_free(pseudo_obs, rule, opts.seed, shift, packaged) if pseudo_obs else None
        base_obs = observe(base_cached, held, top_k, True, opts.progress, "labelled, base", factor) if held else []
        measured_on = base_obs or pseudo_obs  # the figures are measured on the labels when there are any
        figures = {"base": figures_of(base.name, measured_on, rule(measured_on)[0] if items else None)}
        if packaged is not None:
            packaged_obs = (
                measured_on
                if packaged.condition_factor == factor
                else observe(base_cached, held, top_k, True, False, "", packaged.condition_factor)
                if held
                else observe_pseudo(base_cached, "", packaged.condition_factor)
            )
            figures["base, packaged thresholds"] = figures_of(
                base.name,
                packaged_obs,
                Thresholds(packaged.reranker_threshold, packaged.crag_upper, packaged.reader_threshold),
            )
        if label_free is not None:
            figures["base, label-free thresholds"] = figures_of(base.name, measured_on, label_free.thresholds)
        kept, kept_cached, kept_obs, kept_name, grader_dir = base, base_cached, base_obs, base.name, None
        calibrated_on, calibration_obs = held, base_obs
        training: dict[str, Any] | None = None
        if opts.train:
            if base_spec == BI_ENCODER or not (Path(base_spec) / "model.onnx").is_file():
                raise FitError(f"the grader {base.name!r} cannot be fine-tuned here; leave out --train")
            pairs = training_pairs(fit_part, top_k, base_cached.score)  # negatives: the base grader's mistakes
            twins = twin_pairs(pseudo, top_k)  # hard negatives: the evidence with its sentence cut
            counts["training_pairs"], counts["pseudo_training_pairs"] = len(pairs), len(twins)
            pairs += twins
            if not pairs:
                raise FitError("the fit part gave no training pairs (no evidence retrieved); leave out --train")
            log(f"fine-tuning {base.name} on {len(pairs)} pairs (+ replay) for up to {opts.minutes:g} minutes")
            export, name, training = fine_tune_grader(Path(base_spec), pairs, work, opts)
            notes.append(
                f"Fine-tuning: {training['steps']} steps, {training['pairs_seen']} pairs seen in "
                f"{training['seconds']:.0f} s ({training['user_pairs']} fit pairs + {training['replay_pairs']} replay)"
                + "".join(f"; {n}" for n in training["notes"])
            )
            fitted = load_reranker(str(export))
            fitted_cached = CachingReranker(fitted)
            fitted_obs = observe(fitted_cached, held, top_k, True, opts.progress, "held-out, fitted", factor)
            figures["fitted"] = figures_of(name, fitted_obs, rule(fitted_obs)[0])
            before, after = figures["base"].aucs(), figures["fitted"].aucs()
            keep, ahead = keep_fitted(base_obs, fitted_obs, opts.seed)
            training["ahead_in_resamples"] = round(ahead, 3)
            if keep:
                kept, kept_cached, kept_obs, kept_name = fitted, fitted_cached, fitted_obs, name
                calibration_obs = fitted_obs
                grader_dir = tmp / "grader"
                shutil.copytree(export, grader_dir)
                if pseudo:  # the label-free prior, in the fitted grader's scores
                    pseudo_obs = observe_pseudo(fitted_cached, "pseudo, fitted")
                    label_free = _draw_label_free(pseudo_obs, rule, opts.seed, shift, packaged)
            else:
                shutil.copytree(export, tmp / "rejected-grader")
                # the base never saw the fit part either: every question calibrates it
                calibrated_on = [*held, *(i for i in usable if not i.held_out)]
                calibration_obs = [
                    *base_obs,
                    *observe(
                        base_cached, calibrated_on[len(held) :], top_k, True, opts.progress, "fit part, base", factor
                    ),
                ]
                notes.append(
                    f"The fitted grader did not beat the base on the held-out part clearly enough (AUCs {_fmt(after)} "
                    f"vs {_fmt(before)}; ahead in {ahead:.0%} of {BOOTSTRAP_ROUNDS} resamples of the held-out "
                    f"questions, {KEEP_CONFIDENCE:.0%} needed): the base grader is kept, its thresholds drawn on all "
                    f"{len(calibrated_on)} usable questions (the fitted one is in rejected-grader/, to inspect)."
                )
        if calibration_obs:
            groups = {i.question.question: i.group for i in calibrated_on}
            if label_free is not None:
                prior, prior_draws, prior_name = label_free.thresholds, label_free.draws, "the label-free thresholds"
            elif packaged is not None and kept is base:
                prior = Thresholds(packaged.reranker_threshold, packaged.crag_upper, packaged.reader_threshold)
                prior_draws, prior_name = [], "the packaged thresholds"
            else:
                prior, prior_draws, prior_name = None, [], ""
            drawn = (
                shrink(calibration_obs, prior, prior_draws, rule, groups, opts.seed, prior_name)
                if prior is not None
                else draw_alone(calibration_obs, rule, opts.seed, "thresholds drawn on the labels alone")
            )
            figures["kept, final thresholds"] = figures_of(kept_name, calibration_obs, drawn.thresholds)
        else:
            assert label_free is not None  # a fit has labels or pseudo-questions (checked above)
            drawn, calibration_obs = label_free, pseudo_obs
        chosen, objective = drawn.thresholds, drawn.objective
        if calibrated_on:
            curve = order_curve(kept_cached, calibrated_on, top_k, factor)
            weight, weight_objective = choose_weight(curve)
        else:  # pseudo-questions share their sentence's words: the first pass finds them too easily to judge it
            curve = {}
            weight = packaged.rerank_weight if packaged is not None else 1.0
            weight_objective = "rerank_weight: the packaged value (a label-free fit leaves the candidate order)"
        drawn_from = f"Postgres collection {opts.collection}" if opts.store else str(opts.index)
        if items:
            data = (
                f"{labels.name if labels else ''}: calibrated on {len(calibrated_on)} of {len(items)} labelled "
                f"questions ({'held out from the fine-tune' if grader_dir else 'the grader trained on none of them'})"
                + (f" and {len(pseudo)} pseudo-questions" if pseudo else "")
                + f" over {drawn_from}, seed {opts.seed}; classes answerable, gold removed, unanswerable"
            )
        else:
            data = (
                f"label-free: {len(pseudo)} pseudo-questions made from {drawn_from} ({_kinds(opts)}), "
                f"seed {opts.seed}; classes answerable, gold removed (the sentence that states the answer cut out)"
            )
        floor = load_calibration(None)  # the answer's floor is the embedder's, whatever the grader: kept as packaged
        calibration = Calibration(
            reranker_model=kept_name,
            reranker_threshold=round(chosen.lower, 6),
            crag_upper=round(chosen.upper, 6),
            reader_threshold=None if chosen.reader is None else round(chosen.reader, 6),
            rerank_weight=weight,
            condition_factor=factor,
            answer_floor=floor.answer_floor,
            answer_embedder=floor.answer_embedder,
            data=data,
            sample=CalibrationSample(
                questions=labels.name if labels else None,
                classes=["answerable", "gold_removed", "unanswerable"] if items else ["answerable", "gold_removed"],
                seed=opts.seed,
                labelled=len(items),
                calibrated_on=len(calibrated_on),
                pseudo=len(pseudo),
            ),
            objective=f"{objective}; {weight_objective}; {factor_objective}",
            created=dt.date.today().isoformat(),
            metrics={
                "questions": counts | {"calibrated_on": len(calibrated_on)},
                "embedder": embedder,
                "held_out": {k: figures_record(v) for k, v in figures.items()},
                "intervals": drawn.intervals,
                "shrinkage": None if drawn.weight is None else {"labels_weight": drawn.weight, "cv": drawn.cv},
                "fitted_grader_kept": kept is not base,
                "ndcg@10_by_rerank_weight": {f"{w:.1f}": v for w, v in curve.items()},
                "auc_by_condition_factor": {f"{f:g}": v for f, v in factors.items()},
                "fine_tune": training,
            },
        )
        write_json_atomic(tmp / "calibration.json", calibration.model_dump())
        write_text_atomic(  # what the thresholds were drawn on, one question's view a line: to inspect or redraw
            tmp / "observations.jsonl",
            "".join(
                json.dumps({"question": o.question, "kind": o.kind, "top_score": o.top_score, "span": o.span_score})
                + "\n"
                for o in [*calibration_obs, *(pseudo_obs if calibration_obs is not pseudo_obs else [])]
            ),
        )
        from fastcrag.fitting.report import write_report  # matplotlib loads only to draw the report

        write_report(
            tmp,
            opts,
            counts,
            figures,
            base_obs or pseudo_obs,
            kept_obs if kept is not base else None,
            calibration,
            notes,
        )
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
        where = (
            install(opts.out, opts.index, embedder) if opts.index else install_in_collection(opts.out, store, embedder)
        )
        notes.append(f"Installed into {where}: `ask`, `serve` and `build_graph()` use it without settings.")
    log(f"done in {time.perf_counter() - started:.0f} s")
    return FitResult(opts.out, calibration, kept is not base, figures, counts, env, notes)


def _kinds(opts: FitOptions) -> str:
    return ", ".join(opts.pseudo_kinds)


def _pseudo_items(
    opts: FitOptions, store: Any, retriever: RoutedSearch, top_k: int, log: Callable[[str], None]
) -> list[Labelled]:
    """The pseudo-questions of the fit, first-passed and labelled (none with `--pseudo 0`)."""
    if not opts.pseudo:
        return []
    made = sample_pseudo_questions(store, opts.pseudo, opts.seed, opts.pseudo_kinds)
    log(f"{len(made)} pseudo-questions made from the index ({_kinds(opts)})")
    return pseudo_first_pass(retriever, made, top_k, opts.progress)


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


def install_in_collection(out: Path, store: Any, embedder: str) -> str:
    """Store a fit's calibration and grader (a tar of its folder) in a Postgres collection's record."""
    grader = None
    if (out / "grader").is_dir():
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in sorted((out / "grader").iterdir()):
                tar.add(path, arcname=path.name)
        grader = buf.getvalue()
    calibration = json.loads((out / "calibration.json").read_text(encoding="utf-8"))
    store.save_fit(calibration, grader, embedder)
    return f"the record of Postgres collection {store.collection.name!r}"


def install(out: Path, index: Path, embedder: str) -> Path:
    """Store a fit's grader (when one was kept) and calibration with a FAISS index, replacing an earlier one."""
    staged = index / f".{FIT_DIR}.tmp-{os.getpid()}"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    shutil.copy2(out / "calibration.json", staged / "calibration.json")
    if (out / "grader").is_dir():
        shutil.copytree(out / "grader", staged / "grader")
    meta = {
        "embedder": embedder,
        "grader": (out / "grader").is_dir(),
        "from": str(out.resolve()),
    }
    (staged / "fit.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    _replace_folder(staged, index / FIT_DIR)
    return index / FIT_DIR
