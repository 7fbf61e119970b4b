"""The package is layered: no import cycles, and each layer imports only those below it.

Read from the source (module-level imports; those inside functions are the lazy
ones of the CLI and do not count), so a cycle fails here even where Python's
import order would hide it.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "function"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules ``path`` imports at module level."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from function.addons import cni`` imports the module function.addons.cni.
            names = [f"{node.module}.{a.name}" for a in node.names]
            if not set(names) & modules:
                names = [node.module]
        else:
            continue  # TYPE_CHECKING blocks are ast.If: not imported at run time
        out |= {n for n in names if n in modules}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    return {m: _imports(p, modules) - {m} for m, p in files.items()}


def test_no_import_cycles() -> None:
    order = list(graphlib.TopologicalSorter(_graph()).static_order())
    assert "function.fn" in order


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph[todo.pop()]:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_layers() -> None:
    graph = _graph()
    addons = {m for m in graph if m.startswith("function.addons.")}
    above_addons = {"function.registry", "function.accept", "function.plan", "function.fn"}
    # The vocabulary names no add-on; the add-ons know nothing of who lists or runs them.
    assert not _reaches(graph, "function.graph") & (addons | above_addons)
    for addon in addons:
        assert not _reaches(graph, addon) & above_addons, addon
    # One reader of the CAPI objects, below everything that judges or plans.
    assert _reaches(graph, "function.cluster") <= {"function.spec", "function.structs"}
    # The runner reaches the add-ons only through the registry.
    assert not graph["function.fn"] & addons
    # The commands reach the function's rules through accept, never through the runner.
    for command in ("function.issuer", "function.aws.target"):
        assert "function.accept" in graph[command]
        assert "function.fn" not in _reaches(graph, command), command
