"""The compiled graph served by `langgraph dev` (langgraph.json: `crag`); importing it loads no model."""

from fastcrag.graph.builder import build_graph

graph = build_graph()
