"""HTTP side of fastcrag under `langgraph dev`: the decision-trace console and Prometheus metrics (see `app`)."""

from __future__ import annotations
