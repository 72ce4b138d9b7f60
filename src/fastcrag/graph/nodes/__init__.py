"""The graph's nodes, one module each (CRAG's six, FLARE mode's five); `make(parts)` builds each over the parts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Node = Callable[..., dict[str, Any]]
"""A node function: `(state, *, runtime) -> partial state update`."""
