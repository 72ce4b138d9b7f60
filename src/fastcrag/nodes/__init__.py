"""The graph's six nodes, one module each; `make(parts)` builds each node function over the components."""
