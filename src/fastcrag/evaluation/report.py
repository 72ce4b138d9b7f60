"""Report building blocks: percentiles, Markdown tables, completion notes and PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastcrag.fileio import write_bytes_atomic, write_json_atomic, write_text_atomic
from fastcrag.measures import percentile as percentile


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers rounded, None and NaN as `n/a`."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(c, digits) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def completion_note(done: int, total: int) -> str:
    """One line stating whether the run is complete; an interrupted run is never reported as complete."""
    if done >= total:
        return f"Status: complete ({done} of {total} runs)."
    return f"Status: **INCOMPLETE: {done} of {total} runs done** (rerun the same command to resume)."


def write_run_files(out: Path, text: str, *, done: int, total: int, config_hash: str, **results: Any) -> str:
    """Write a command's report.md and summary.json (with how much of the run is done); return the text."""
    write_text_atomic(out / "report.md", text)
    summary = {"complete": done >= total, "done": done, "total": total, "config_hash": config_hash, **results}
    write_json_atomic(out / "summary.json", summary)
    return text


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path) -> None:
    """Render a figure to PNG and write it atomically, then close it."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def plot_score_distributions(
    scores_by_class: Mapping[str, Sequence[float]], lower: float, upper: float, path: Path, title: str
) -> None:
    """Histograms of the top grader score per question class, with both thresholds drawn."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = [i / 40 for i in range(41)]
    for kind, scores in scores_by_class.items():
        if scores:
            ax.hist(list(scores), bins=bins, alpha=0.45, label=f"{kind} (n={len(scores)})")
    ax.axvline(lower, color="black", linestyle="--", label=f"reranker_threshold = {lower:.3f}")
    ax.axvline(upper, color="red", linestyle=":", label=f"crag_upper = {upper:.3f}")
    ax.set_xlabel("top grader score")
    ax.set_ylabel("questions")
    ax.set_title(title)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_precision_coverage(
    rows: Sequence[tuple[float, float, float | None, float | None]], lower: float, path: Path, title: str
) -> None:
    """Abstention precision and recall against coverage as the threshold moves; calibrated point marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    pts = [(c, p, r, t) for t, c, p, r in rows if p is not None]
    if pts:
        ax.plot([c for c, _, _, _ in pts], [p for _, p, _, _ in pts], label="abstention precision")
        ax.plot([c for c, _, _, _ in pts], [r for _, _, r, _ in pts], linestyle="--", label="abstention recall")
        at = min(pts, key=lambda x: abs(x[3] - lower))
        ax.scatter([at[0]], [at[1]], color="black", zorder=3, label=f"reranker_threshold {lower:.3f}")
    ax.set_xlabel("coverage (share of questions answered)")
    ax.set_ylabel("share")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(0, 1.0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    save_figure(fig, path)


def plot_cdfs(series: Mapping[str, Mapping[str, Sequence[float]]], path: Path, title: str) -> None:
    """One panel per stage: the empirical latency CDF of each variant (e.g. CRAG on vs off)."""
    plt = _pyplot()
    stages = list(series)
    cols = 3
    rows = math.ceil(len(stages) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, stage in zip(axes.flat, stages, strict=False):
        for variant, values in series[stage].items():
            v = sorted(values)
            if v:
                ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=variant)
        ax.set_title(stage, fontsize=9)
        ax.set_xlabel("ms")
        ax.set_ylabel("CDF")
        if any(x > 0 for vals in series[stage].values() for x in vals):
            ax.set_xscale("symlog", linthresh=1.0)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(stages) :]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    save_figure(fig, path)


def plot_bars(values: Mapping[str, Mapping[str, float]], path: Path, title: str) -> None:
    """Grouped bars: one group per metric, one bar per system."""
    plt = _pyplot()
    systems = list(values)
    metrics = list(next(iter(values.values()), {}))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs = [m + i * width for m in range(len(metrics))]
        ax.bar(xs, [values[system][m] for m in metrics], width=width, label=system)
    ax.set_xticks([m + width * (len(systems) - 1) / 2 for m in range(len(metrics))], metrics)
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=8)
    save_figure(fig, path)
