"""The graph's six nodes, one module each; `make(parts)` builds each node function over the components."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Node = Callable[..., dict[str, Any]]
"""A node function: `(state, *, runtime) -> partial state update`."""
