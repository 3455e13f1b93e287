"""The layout's rules, checked on the source: imports only point down, no package imports a
package above it (so there is no circle between packages), no module of the lab imports itself
back through other modules (no circle inside a package either), and the packages below the
pages never import Streamlit.

Function-local imports count too: a circle closed by an import inside a function is still a
circle (it only moves the failure to the first call). Imports under `if TYPE_CHECKING:` are left
out of the module graph: they are never executed, they only name types for annotations."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BELOW = {  # package -> the lab packages it may import (besides itself and lab_env)
    "optimizers": set(),
    "optimizer_plugins": {"optimizers"},
    "schedules": {"optimizers"},
    "settings": {"schedules", "optimizers"},
    "engine": {"settings", "schedules", "optimizers"},
    "hypergrad": {"engine", "settings", "schedules", "optimizers", "optimizer_plugins"},
    "teaching": {"optimizers", "optimizer_plugins"},
    "runs": {"hypergrad", "engine", "settings", "schedules", "optimizers", "optimizer_plugins"},
    "lab_cli": {"runs", "settings", "schedules", "optimizers", "optimizer_plugins"},
    "components": {"runs", "hypergrad", "teaching", "engine", "settings", "schedules",
                   "optimizers", "optimizer_plugins"},
    "views": {"components", "runs", "hypergrad", "teaching", "engine", "settings", "schedules",
              "optimizers", "optimizer_plugins"},
}
NO_STREAMLIT = ("optimizers", "optimizer_plugins", "schedules", "settings", "engine", "hypergrad", "teaching", "runs",
                "lab_cli")


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every module `path` imports (see `imports_of`)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    return imports_of(path.read_text(), package)


def imports_of(source: str, package: str) -> set[str]:
    """Dotted names of every module `source` (a module of `package`) imports, at module and
    function level, not under `if TYPE_CHECKING:`; for `from a.b import c`, both `a.b` and
    `a.b.c` (c may be a module)."""
    tree = ast.parse(source)
    skipped = {id(inner) for node in ast.walk(tree)
               if isinstance(node, ast.If) and _is_type_checking(node)
               for part in node.body for inner in ast.walk(part)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def module_graph() -> dict[str, set[str]]:
    """Lab module -> the lab modules it imports (a package counts as its `__init__`)."""
    paths = [p for package in BELOW for p in sorted((ROOT / package).rglob("*.py"))]
    modules = {}
    for path in paths:
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return {name: {m for m in imported_modules(path) if m in modules and m != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of `graph` as [a, b, ..., a], or [] (depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The modules of each import circle: the strongly connected components with more than one
    module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(component)

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return out


def test_no_module_imports_itself_back():
    graph = module_graph()
    for component in circles(graph):
        inside = {m: graph[m] & component for m in component}
        raise AssertionError("import circle: " + " -> ".join(find_cycle(inside)))


def test_the_cycle_finder_sees_function_level_imports_and_skips_type_checking():
    assert find_cycle({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": set()}) == [
        "p.a", "p.b", "p.c", "p.a"]
    assert find_cycle({"p.a": {"p.b"}, "p.b": set()}) == []
    assert circles({"p.a": {"p.b"}, "p.b": {"p.a", "p.c"}, "p.c": set()}) == [{"p.a", "p.b"}]
    found = imports_of("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                       "    from optimizers.base import X\n"
                       "def f():\n    from optimizers import registry\n"
                       "    from . import catalog\n", "optimizers")
    assert {"optimizers.registry", "optimizers.catalog"} <= found
    assert "optimizers.base" not in found


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every import in `path` (module level and function level)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", list(BELOW))
def test_imports_only_point_down(package):
    lab = set(BELOW)
    for path in sorted((ROOT / package).rglob("*.py")):
        wrong = (imported_packages(path) & lab) - BELOW[package] - {package}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)} (above it)"


@pytest.mark.parametrize("package", NO_STREAMLIT)
def test_packages_below_the_pages_never_import_streamlit(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        assert "streamlit" not in imported_packages(path), path.relative_to(ROOT)


@pytest.mark.parametrize("module", ["table", "preview"])
def test_the_schedule_table_and_preview_need_neither_the_lab_nor_tensorflow(module):
    """The server and settings/ read them without TensorFlow."""
    imported = imported_modules(ROOT / "schedules" / f"{module}.py")
    assert not {m.split(".")[0] for m in imported} & (set(BELOW) | {"tensorflow", "tf_keras"})


def test_the_allowed_graph_has_no_circle():
    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in BELOW[start])

    assert not [p for p in BELOW if reaches(p, p)]
