"""The CRAG graph: state schemas, routing and `build_graph()`."""

from fastcrag.graph.builder import build_graph

__all__ = ["build_graph"]
