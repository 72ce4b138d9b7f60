"""Prometheus metrics: the `crag_actions` counter by action, and per-stage latency histograms."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Histogram

CRAG_ACTIONS = Counter("crag_actions", "Answers by the CRAG action taken", ["action"])
STAGE_SECONDS = Histogram(
    "fastcrag_stage_seconds",
    "Latency of each pipeline stage",
    ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)


def record(action: str, timings: Mapping[str, float]) -> None:
    """Count one answer and observe its stage timings (milliseconds)."""
    CRAG_ACTIONS.labels(action=action).inc()
    for stage, ms in timings.items():
        STAGE_SECONDS.labels(stage=stage.removesuffix("_ms")).observe(ms / 1000.0)
