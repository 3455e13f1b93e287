"""The layout's rules, checked on the source: imports only point down, no package imports a
package above it (so there is no circle), and the packages below the pages never import
Streamlit. Function-local imports count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BELOW = {  # package -> the lab packages it may import (besides itself and lab_env)
    "optimizers": set(),
    "settings": {"optimizers"},
    "engine": {"settings", "optimizers"},
    "hypergrad": {"engine", "settings", "optimizers"},
    "teaching": {"optimizers"},
    "runs": {"hypergrad", "engine", "settings", "optimizers"},
    "lab_cli": {"runs", "settings", "optimizers"},
    "components": {"runs", "hypergrad", "teaching", "engine", "settings", "optimizers"},
    "views": {"components", "runs", "hypergrad", "teaching", "engine", "settings", "optimizers"},
}
NO_STREAMLIT = ("optimizers", "settings", "engine", "hypergrad", "teaching", "runs",
                "lab_cli")


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
    for path in sorted((ROOT / package).glob("*.py")):
        wrong = (imported_packages(path) & lab) - BELOW[package] - {package}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)} (above it)"


@pytest.mark.parametrize("package", NO_STREAMLIT)
def test_packages_below_the_pages_never_import_streamlit(package):
    for path in sorted((ROOT / package).glob("*.py")):
        assert "streamlit" not in imported_packages(path), path.relative_to(ROOT)


def test_the_allowed_graph_has_no_circle():
    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in BELOW[start])

    assert not [p for p in BELOW if reaches(p, p)]
