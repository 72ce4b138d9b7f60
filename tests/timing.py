"""Time bounds for fault and timing tests that hold on a loaded machine.

A bound is never an absolute number of seconds: it is what the test measured in the same run on the same machine
(the time a run takes there before the fault) times `LOAD_FACTOR`, plus the limit the server itself enforces (a run
timeout) where one applies. A busy core slows the measurement and the faulted run alike, so the bound moves with the
machine. `scripts/load_check.py` runs every test marked `load` beside a busy core, three times in a row.
"""

from __future__ import annotations

LOAD_FACTOR = 3.0
"""How many times the time measured before the fault a bound allows: a busy core slows a run by up to 2x, and the
fault adds a burst (every client reconnecting at once, a worker restarting beside the one that took the run over)."""

TIMEOUT_REASON = "took longer than"
"""The words of the abstention for a run over the server's run timeout (`server.runs._failure_reason`)."""

UNREACHABLE_REASON = "the run failed"
"""The words of the abstention for a run whose database went away (`server.runs._failure_reason`)."""


def bound(measured_s: float, *, limit_s: float = 0.0, factor: float = LOAD_FACTOR) -> float:
    """The most seconds allowed: `limit_s` (a timeout the server enforces) plus `factor` times `measured_s`."""
    return limit_s + factor * measured_s
