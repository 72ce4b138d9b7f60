"""Prometheus metrics: the `crag_actions` counter by action, per-stage latency histograms, and failed runs.

`crag_actions` counts answers by the path's action, and FLARE's active retrievals by theirs: `flare_add`,
`flare_refine` and `flare_drop` (one per active retrieval, so a FLARE answer may add several).

Counters and histograms only, so the series are correct under `fastcrag serve --workers K`, where prometheus-client
runs in multiprocess mode (`PROMETHEUS_MULTIPROC_DIR`, set by `serve` before any worker imports it) and `/metrics`
sums every worker's files.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Histogram

CRAG_ACTIONS = Counter(
    "crag_actions", "Answers by the CRAG action taken, and FLARE active retrievals by theirs (flare_*)", ["action"]
)
STAGE_SECONDS = Histogram(
    "fastcrag_stage_seconds",
    "Latency of each pipeline stage",
    ["stage"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
)

RUN_FAILURES = Counter(
    "fastcrag_run_failures",
    "Server runs that ended in an abstention because the run itself failed (timeout, checkpoint or store error)",
    ["reason"],
)


def record(action: str, timings: Mapping[str, float]) -> None:
    """Count one answer and observe its stage timings (milliseconds)."""
    CRAG_ACTIONS.labels(action=action).inc()
    for stage, ms in timings.items():
        STAGE_SECONDS.labels(stage=stage.removesuffix("_ms")).observe(ms / 1000.0)


def record_flare(action: str) -> None:
    """Count one FLARE active retrieval by what it did (`add`, `refine`, `drop`), as `flare_<action>`."""
    CRAG_ACTIONS.labels(action=f"flare_{action}").inc()
