"""The report `fastcrag fit` writes: report.md and its plots (score distributions, precision and recall)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fastcrag.config.calibration import Calibration
from fastcrag.fitting.calibrate import Observation, abstention_rates

if TYPE_CHECKING:
    from fastcrag.fitting.fit import FitOptions
    from fastcrag.fitting.measure import GraderFigures

KINDS = ("answerable", "gold_removed", "unanswerable")
COLOURS = {"answerable": "#2a7ab0", "gold_removed": "#e08a1e", "unanswerable": "#b03a2e"}


def precision_recall(obs: Sequence[Observation], thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Abstention precision and recall at each threshold (abstain below it; right when not answerable)."""
    rates = [abstention_rates(obs, float(t), undefined=np.nan) for t in thresholds]
    return np.asarray([p for p, _ in rates]), np.asarray([r for _, r in rates])


def _plots(folder: Path, base: Sequence[Observation], fitted: Sequence[Observation] | None, cal: Calibration) -> None:
    import matplotlib  # a plotting library loads only when a report is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("base grader", base)] + ([("fitted grader", fitted)] if fitted is not None else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    bins = np.linspace(0, 1, 26)
    for ax, (title, obs) in zip(axes[0], panels, strict=True):
        for kind in KINDS:
            values = [o.top_score for o in obs if o.kind == kind]
            if values:
                ax.hist(values, bins=bins, alpha=0.55, label=f"{kind} ({len(values)})", color=COLOURS[kind])
        ax.set_title(f"top score per held-out question: {title}")
        ax.set_xlabel("grader score")
        ax.set_ylabel("questions")
        ax.legend()
    for ax in axes[0][-1:]:
        ax.axvline(cal.reranker_threshold, color="black", linestyle="--", linewidth=1)
        ax.axvline(cal.crag_upper, color="grey", linestyle=":", linewidth=1)
    fig.tight_layout()
    fig.savefig(folder / "scores.png", dpi=110)
    plt.close(fig)

    thresholds = np.linspace(0, 1, 201)
    fig, ax = plt.subplots(figsize=(6, 4))
    for title, obs, style in [("base", base, ":"), *([("fitted", fitted, "-")] if fitted is not None else [])]:
        precision, recall = precision_recall(obs, thresholds)
        ax.plot(thresholds, precision, style, color="#2a7ab0", label=f"abstention precision, {title}")
        ax.plot(thresholds, recall, style, color="#b03a2e", label=f"abstention recall, {title}")
    ax.axvline(cal.reranker_threshold, color="black", linestyle="--", linewidth=1, label="reranker_threshold")
    ax.set_xlabel("reranker_threshold")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "threshold.png", dpi=110)
    plt.close(fig)


def _row(label: str, fig: GraderFigures) -> str:
    t, a = fig.thresholds, fig.at_threshold
    unans = "-" if fig.auc_unanswerable is None else f"{fig.auc_unanswerable:.3f}"

    def g(d: dict[str, Any], k: str) -> str:
        return f"{d[k]:.3f}" if d.get(k) is not None else "-"

    return (
        f"| {label} (`{fig.name}`) | {fig.auc_gold_removed:.3f} | {unans} | {g(t, 'reranker_threshold')} | "
        f"{g(t, 'crag_upper')} | {g(t, 'reader_threshold')} | {g(a, 'abstention_precision')} | "
        f"{g(a, 'abstention_recall')} | {g(a, 'answerable_answered')} |"
    )


def _curve_table(setting: str, measure: str, curve: dict[str, float]) -> list[str]:
    """A one-row Markdown table of `measure` for each value of `setting`."""
    return [
        f"| {setting} | " + " | ".join(curve) + " |",
        "|---|" + "---|" * len(curve),
        f"| {measure} | " + " | ".join(f"{v:.3f}" for v in curve.values()) + " |",
    ]


def write_report(
    folder: Path,
    opts: FitOptions,
    counts: dict[str, int],
    figures: dict[str, GraderFigures],
    base: Sequence[Observation],
    fitted: Sequence[Observation] | None,
    cal: Calibration,
    notes: Sequence[str],
) -> None:
    """Write report.md, scores.png and threshold.png into `folder` (the plots need matplotlib: `fastcrag[eval]`)."""
    curve: dict[str, float] = cal.metrics.get("ndcg@10_by_rerank_weight", {})
    factors: dict[str, float] = cal.metrics.get("auc_by_condition_factor", {})
    try:
        _plots(folder, base, fitted, cal)
        plots = [
            "![score distributions](scores.png)",
            "",
            "![abstention precision and recall against the threshold](threshold.png)",
        ]
    except ModuleNotFoundError as exc:  # plotting is an extra: the fit itself needs none of it
        if exc.name != "matplotlib":
            raise
        plots = ["No plots: matplotlib is not installed (`pip install 'fastcrag[eval]'` draws them)."]
    lines = [
        "# fastcrag fit report",
        "",
        f"Questions: {f'`{opts.questions}`' if opts.questions else 'none (a label-free fit)'}; "
        f"{counts.get('pseudo_questions', 0)} pseudo-questions made from the index; "
        f"index: `{opts.index or 'Postgres collection ' + opts.collection}`; created {cal.created}; seed {opts.seed}.",
        "",
        "| questions | count |",
        "|---|---|",
        *(f"| {k.replace('_', ' ')} | {v} |" for k, v in counts.items()),
        "",
        (
            "Measured on the held-out part (questions of other source documents than the fit part)."
            if opts.train
            else "Measured on every labelled question (nothing is trained, so none is held out)."
            if opts.questions
            else "Measured on the pseudo-questions: a sentence of a sampled chunk asked about, its evidence every "
            "candidate holding that sentence; their twin (gold removed) is the same candidates with the sentence cut."
        )
        + " Classes: answerable (evidence retrieved), gold removed (the same question with its evidence taken out of "
        f"the candidates), unanswerable (labelled so). Thresholds are drawn at abstention precision {opts.precision}.",
        "",
        "| grader and thresholds | AUC answerable vs gold removed | AUC vs unanswerable | reranker_threshold | "
        "crag_upper | reader_threshold | abstention precision | abstention recall | answerable answered |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(label, fig) for label, fig in figures.items()),
        "",
        f"Kept: `{cal.reranker_model}`, reranker_threshold {cal.reranker_threshold}, crag_upper {cal.crag_upper}, "
        f"reader_threshold {cal.reader_threshold}, rerank_weight {cal.rerank_weight}, "
        f"condition_factor {cal.condition_factor}.",
        "",
        *(
            [
                "Candidate order on the held-out part (nDCG@10 of the evidence chunks; rerank_weight 1: the grader's "
                "order, 0: the first pass's):",
                "",
                *_curve_table("rerank_weight", "nDCG@10", curve),
            ]
            if curve
            else ["Candidate order: rerank_weight kept at the packaged value (a label-free fit does not judge it)."]
        ),
        "",
        "Chunks lacking a year, ordinal, quarter or month the question names, scored down by condition_factor (1: no "
        "check; mean AUC of the top chunk score, the base grader):",
        "",
        *_curve_table("condition_factor", "mean AUC", factors),
        "",
        "Each threshold's bootstrap interval (5-95%, questions resampled with their views, the draw redone): "
        + "; ".join(f"{k} {v[0]}-{v[1]}" for k, v in (cal.metrics.get("intervals") or {}).items() if v)
        + ".",
        "",
        f"Objective: {cal.objective}.",
        "",
        *(f"- {n}" for n in notes),
        "",
        *plots,
        "",
    ]
    (folder / "report.md").write_text("\n".join(lines), encoding="utf-8")
