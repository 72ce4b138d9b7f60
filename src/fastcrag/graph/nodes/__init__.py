"""The graph's nodes, one module each (CRAG's six, FLARE mode's five); `make(parts)` builds each over the parts."""

from __future__ import annotations

from collections.abc import Callable

from fastcrag.graph.state import State

Node = Callable[..., State]
"""A node function: `(state, *, runtime) -> partial state update` (a `State` of the keys it sets)."""
