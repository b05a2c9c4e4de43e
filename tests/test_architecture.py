"""The house kept clean (issues #30, #53): no import cycle, every arrow between layers points down, no module loose
at the package root, and files and functions small enough to read (300 lines; 50 lines and 6 parameters).

Imports are read from the source (module level and inside functions alike), so a lazy import cannot hide
an upward arrow. Layers, lowest first; a module may import its own layer or any layer below it.
"""

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [  # the tree names them (issue #53): `ls src/persalign` reads as this list, bottom to top
    {"core"},
    {"models", "engine", "metrics", "data"},
    {"rewards"},
    {"decoders"},
    {"runner"},
    {"analysis"},
    {"report", "planner"},
    {"api"},
    {"cli"},
]
LAYER = {name: level for level, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in (SRC / "persalign").rglob("*.py")}
    graph = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets += [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_module_lies_loose_at_the_package_root():
    loose = sorted(p.name for p in (SRC / "persalign").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"put these in the package of their layer: {loose}"


def test_every_package_has_a_layer():
    tops = {top(m) for m in import_graph()} - {"persalign"}
    assert tops <= set(LAYER), f"give these a layer: {sorted(tops - set(LAYER))}"


def test_no_arrow_points_from_a_lower_layer_to_a_higher_one():
    upward = sorted(f"{a} -> {b}" for a, targets in import_graph().items() for b in targets
                    if top(a) in LAYER and top(b) in LAYER and LAYER[top(b)] > LAYER[top(a)])
    assert not upward, upward


def test_no_import_cycle_between_modules():
    graph, state, cycles = import_graph(), {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


MAX_FILE_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 300, 50, 6


def oversized() -> list[str]:
    found = []
    for path in sorted((SRC / "persalign").rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(SRC)
        if len(text.splitlines()) > MAX_FILE_LINES:
            found.append(f"{where}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                named = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES or len(named) > MAX_PARAMETERS:
                    found.append(f"{where}:{node.lineno} {node.name}: {length} lines, {len(named)} parameters")
    return found


def test_files_and_functions_stay_small():
    assert not oversized(), oversized()
