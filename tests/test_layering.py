"""Imports flow search_space -> costmodel -> autotune, never back (DESIGN §2)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = {"search_space": 0, "costmodel": 1, "autotune": 2}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_back_edges_between_packages() -> None:
    bad = []
    for package, rank in RANK.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            for target in _imports(path) & RANK.keys():
                if RANK[target] > rank:
                    bad.append(f"{path.relative_to(ROOT)} imports {target}")
    assert not bad, "back edges: " + "; ".join(bad)


def test_datasets_is_not_an_import_package() -> None:
    assert not (ROOT / "datasets" / "__init__.py").exists()


def test_the_checker_sees_a_back_edge(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("from autotune.cli import app\nimport costmodel.x\n")
    assert _imports(bad) == {"autotune", "costmodel"}
