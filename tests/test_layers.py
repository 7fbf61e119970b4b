"""The packages are layered: no import cycles, and each layer imports only those below it.

``function`` is the runtime, what the image runs; ``function_tools`` (the CLI, the
simulator, render, the in-memory Crossplane, code generation, packaging, the AWS
checks) depends on it and never the other way, not even lazily.

Read from the source (module-level imports; those inside functions are the lazy
ones of the CLI and do not count for cycles), so a cycle fails here even where
Python's import order would hide it.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (ROOT / "function", ROOT / "function_tools")


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


def _files() -> dict[str, Path]:
    return {_module(p): p for package in PACKAGES for p in package.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    files = _files()
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
    assert _reaches(graph, "function.cluster") <= {
        "function.spec_base",
        "function.step_input",
        "function.structs",
    }
    # Each add-on's spec model lives with it; the frame that places them is above them all.
    assert not _reaches(graph, "function.spec") & above_addons
    assert "function.addons.vpc_cni" in graph["function.spec"]
    # The runner and the planner reach the add-ons only through the registry.
    assert not graph["function.fn"] & addons
    assert not graph["function.plan"] & addons
    # The commands reach the function's rules through accept, never through the runner.
    for command in ("function_tools.issuer", "function_tools.aws.target"):
        assert "function.accept" in graph[command]
        assert "function.fn" not in _reaches(graph, command), command


# The style's limit on the runner (docs/architecture.md, "The layers"): what it grows by
# belongs in the module that owns it.
RUNNER_MAX_LINES = 200


def test_the_runner_stays_thin() -> None:
    lines = (ROOT / "function" / "fn.py").read_text().count("\n")
    assert lines <= RUNNER_MAX_LINES, f"function/fn.py has {lines} lines"


def _all_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_runtime_never_imports_the_tools() -> None:
    runtime = {m: p for m, p in _files().items() if m.split(".")[0] == "function"}
    assert "function.fn" in runtime
    assert "function.serve" in runtime
    for module, path in runtime.items():
        tools = {n for n in _all_imports(path) if n.split(".")[0] == "function_tools"}
        assert not tools, f"{module} imports {sorted(tools)}"


def test_serve_imports_only_the_runtime() -> None:
    """What the container runs loads no module of the tools (a clean interpreter)."""
    code = (
        "import sys; from function.serve import serve; from function import fn, server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'function_tools'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert out.strip() == "[]"
