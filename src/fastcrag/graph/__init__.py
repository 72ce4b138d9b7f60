"""The CRAG graph: state schemas (`state`), routing (`routing`) and `build_graph()` (`builder`).

Nothing is imported here, so that a node can use the state schemas without loading the graph that wires the nodes.
"""
