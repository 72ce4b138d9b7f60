"""The CRAG graph: state (`state`), intake, the nodes (`nodes`), routing (`routing`) and `build_graph()` (`builder`).

Imports point down this list: `state` imports no other module here, `intake` and `routing` read the state, each
node module uses those and `nodes.stage`, and only `builder` (and `app`, which compiles it) imports the nodes.
Nothing is imported here, so that a module can use the state schemas without loading the graph that wires the nodes.
"""
