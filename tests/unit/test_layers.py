"""Dependencies point down: no module of fastcrag imports from a higher layer (every import, also inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

import fastcrag

SRC = Path(fastcrag.__file__).resolve().parent

#: Lowest first. A first-level package or module of `fastcrag` may import from its own layer and those below.
LAYERS: list[set[str]] = [
    {"config", "cache", "fileio", "modelmeta", "measures", "metrics", "ortsession"},
    {"retrieval", "grading", "generation", "datasets"},
    {"components"},
    {"graph"},
    {"fitting", "evaluation", "server", "web"},
    {"cli", "agents", "__init__"},
]

#: The graph's nodes, one module each: a node module imports no other node module.
NODES = {"retrieve", "grade", "refine", "rewrite", "generate", "abstain"}

#: Inside `fastcrag.graph`, lowest first: the state, what reads it, the nodes, the wiring, the compiled graph.
GRAPH_LAYERS: list[set[str]] = [
    {"__init__", "state", "checkpoints"},
    {"intake", "routing"},
    {"nodes"},
    {"builder"},
    {"app"},
]

#: (importing module, imported module) pairs allowed against the rules above, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {}


def layer_of(part: str) -> int:
    """The layer of a first-level package or module of `fastcrag` (`__init__` for the package itself)."""
    for i, parts in enumerate(LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"fastcrag.{part} has no layer: add it to LAYERS in {Path(__file__).name}")


def module_name(path: Path) -> str:
    """The dotted module name of a source file."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    """Whether `name` (dotted, under `fastcrag`) is a module or package of the source tree."""
    rel = Path(*name.split(".")[1:])
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def imported_modules(path: Path) -> set[str]:
    """Every `fastcrag` module that the source file `path` imports."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    return imports_of(path.read_text(encoding="utf-8"), package)


def imports_of(source: str, package: str) -> set[str]:
    """Every `fastcrag` module that `source` (code of a module in `package`) imports, at the top or in functions.

    `from pkg import name` counts as importing `pkg.name` when that is a module, else `pkg`.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
    return {m for m in found if m == "fastcrag" or m.startswith("fastcrag.")}


def part_of(module: str) -> str:
    """The first-level part of `fastcrag` a module belongs to."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else "__init__"


def graph_layer(module: str) -> int:
    """The layer inside `fastcrag.graph` of one of its modules."""
    bits = module.split(".")
    part = bits[2] if len(bits) > 2 else "__init__"
    for i, parts in enumerate(GRAPH_LAYERS):
        if part in parts:
            return i
    raise AssertionError(f"{module} has no layer: add it to GRAPH_LAYERS in {Path(__file__).name}")


def violations() -> dict[tuple[str, str], str]:
    """Every (importer, imported) pair that breaks a rule, with the rule it breaks."""
    out: dict[tuple[str, str], str] = {}
    for path in sorted(SRC.rglob("*.py")):
        importer = module_name(path)
        for imported in imported_modules(path):
            src, dst = part_of(importer), part_of(imported)
            if layer_of(dst) > layer_of(src):
                out[(importer, imported)] = f"layer {layer_of(src)} ({src}) imports layer {layer_of(dst)} ({dst})"
            if src == dst == "graph" and graph_layer(imported) > graph_layer(importer):
                out[(importer, imported)] = f"{importer} imports the graph's higher layer {imported}"
            bits = importer.split("."), imported.split(".")
            if (
                all(len(b) == 4 and b[1:3] == ["graph", "nodes"] and b[3] in NODES for b in bits)
                and importer != imported
            ):
                out[(importer, imported)] = "a node module imports another node module"
    return out


def test_every_part_has_a_layer() -> None:
    for path in SRC.iterdir():
        if path.suffix == ".py" or (path / "__init__.py").is_file():
            layer_of(path.stem)


def test_dependencies_point_down() -> None:
    broken = {pair: why for pair, why in violations().items() if pair not in ALLOWED}
    assert not broken, "\n".join(f"{a} -> {b}: {why}" for (a, b), why in sorted(broken.items()))


def part_graph() -> dict[str, set[str]]:
    """Which first-level parts of `fastcrag` each part imports (itself left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        src = part_of(module_name(path))
        graph.setdefault(src, set()).update(part_of(m) for m in imported_modules(path) if part_of(m) != src)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of `graph`, each as the path that closes it."""
    found: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt > path[0]:  # each circle once, from its smallest member
                walk(nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, [start])
    return [c for c in found if c[0] == min(c)]


def test_no_import_circle_between_parts() -> None:
    # parts of one layer may import each other, but never both ways round
    assert not cycles(part_graph()), cycles(part_graph())


def test_the_circle_check_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_allow_list_is_current() -> None:
    found = violations()
    stale = [pair for pair in ALLOWED if pair not in found]
    assert not stale, f"allowed but no longer needed (remove from ALLOWED): {stale}"


def test_the_check_sees_every_kind_of_import() -> None:
    source = """
import json
import fastcrag.metrics
from fastcrag.config.settings import Settings
from fastcrag.evaluation import launch, report
from . import train_loop

def command():
    from fastcrag.graph.builder import build_graph
    from ..fitting import calibrate
"""
    assert imports_of(source, "fastcrag.fitting") == {
        "fastcrag.metrics",
        "fastcrag.config.settings",
        "fastcrag.evaluation.launch",
        "fastcrag.evaluation.report",
        "fastcrag.fitting.train_loop",
        "fastcrag.graph.builder",
        "fastcrag.fitting.calibrate",
    }


def lab_imports(path: Path) -> set[str]:
    """Every import of the lab (`lab`, `lab.*`) in the source file `path`, at the top or in functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return {m for m in found if m == "lab" or m.startswith("lab.")}


def test_the_package_never_imports_the_lab() -> None:
    found = {str(path.relative_to(SRC)): lab_imports(path) for path in sorted(SRC.rglob("*.py"))}
    assert not {name: mods for name, mods in found.items() if mods}, "the installed package imports the lab"


def test_the_lab_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    source = tmp_path / "module.py"
    source.write_text("import lab\nimport labels\n\ndef f():\n    from lab.cli import main\n    from .lab import x\n")
    assert lab_imports(source) == {"lab", "lab.cli"}
