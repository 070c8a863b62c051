"""The layout holds (docs/architecture.md): imports flow search_space -> costmodel -> autotune,
never back; no import cycle between modules or between subpackages, counting imports inside
functions and under ``TYPE_CHECKING``; no module imports another's private names; the tests of
a package import only it and the packages below it, their helper modules too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("search_space", "costmodel", "autotune")
RANK = {p: i for i, p in enumerate(PACKAGES)}


def _module(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[_module(path, root)] = path
    return found


def _imports(path: Path, module: str, known: set[str]) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every import anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield sub, "", node.lineno
                else:
                    yield base, alias.name, node.lineno


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Modules of the three packages and the imports between them (edge attribute ``names``)."""
    modules = _modules(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        for target, name, line in _imports(path, module, set(modules)):
            if target in modules and target != module:
                graph.add_edge(module, target)
                graph.edges[module, target].setdefault("names", []).append((name, line))
    return graph


def subpackage(module: str) -> str:
    """The unit a module belongs to: ``costmodel.analytic`` for costmodel/analytic/*.py, the
    module itself for a top-level module (``costmodel.base``) or a package root."""
    return ".".join(module.split(".")[:2])


def package_graph(modules: nx.DiGraph) -> nx.DiGraph:
    graph = nx.DiGraph()
    for a, b in modules.edges:
        if subpackage(a) != subpackage(b):
            graph.add_edge(subpackage(a), subpackage(b))
    return graph


def _cycles(graph: nx.DiGraph) -> list[list[str]]:
    return [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]


def back_edges(graph: nx.DiGraph) -> list[str]:
    """Imports from a package ranked before the importer's (costmodel -> autotune, ...)."""
    return [
        f"{a} imports {b}" for a, b in graph.edges if RANK[b.split(".")[0]] > RANK[a.split(".")[0]]
    ]


def private_imports(graph: nx.DiGraph) -> list[str]:
    """Imports of another module's ``_names``, or of a ``_module`` from outside its package."""
    bad = []
    for a, b, data in graph.edges(data=True):
        for name, line in data["names"]:
            private_name = name.startswith("_") and not name.startswith("__")
            parent = b.rpartition(".")[0]
            private_module = any(p.startswith("_") for p in b.split(".")[1:]) and not (
                a == parent or a.startswith(parent + ".")
            )
            if private_name or private_module:
                bad.append(f"{a}:{line} imports {name or b} from {b}")
    return bad


MAX_FUNCTION_LINES = 80
LONG_REASON = "# Long "  # a function past the limit says why at its top: "# Long by design: ..."


def oversized(root: Path = ROOT) -> list[str]:
    """Functions over the line budget that do not say why at their top (modules have no
    budget: they are split by concept, not by size)."""
    bad = []
    for module, path in _modules(root).items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if length <= MAX_FUNCTION_LINES:
                continue
            first = node.body[0]
            docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            code = node.body[1] if docstring and len(node.body) > 1 else first
            top = lines[node.lineno - 1 : code.lineno - 1]  # the head, before the first code
            if not any(line.strip().startswith(LONG_REASON) for line in top):
                bad.append(f"{module}.{node.name} ({length} lines)")
    return bad


def test_no_back_edges_between_packages() -> None:
    assert back_edges(import_graph()) == []


def test_no_import_cycle_between_modules() -> None:
    assert _cycles(import_graph()) == []


def test_no_import_cycle_between_subpackages() -> None:
    assert _cycles(package_graph(import_graph())) == []


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(import_graph()) == []


def test_functions_stay_short_or_say_why() -> None:
    assert oversized() == []


def _doc_sections(doc: str) -> dict[str, str]:
    """docs/architecture.md's module tables by the package each heads (``### `pkg` ...``)."""
    out: dict[str, str] = {}
    for part in doc.split("\n### ")[1:]:
        head = part.split("`")[1]
        out[head] = part
    return out


def undocumented(root: Path = ROOT) -> list[str]:
    """Modules docs/architecture.md does not list: each must be named in its package's table
    (the codegen's in ``autotune.codegen``'s), as ``name``, ``dir/name`` or under ``dir/*``."""
    sections = _doc_sections((root / "docs" / "architecture.md").read_text())
    missing = []
    for module, path in _modules(root).items():
        if path.name == "__init__.py":
            continue
        parts = module.split(".")
        codegen = parts[:2] == ["autotune", "codegen"]
        inner = parts[2:] if codegen else parts[1:]
        text = sections.get("autotune.codegen" if codegen else parts[0], "")
        globbed = any(f"`{'/'.join(inner[:i])}/*`" in text for i in range(1, len(inner)))
        named = f"`{inner[-1]}`" in text or f"{'/'.join(inner)}`" in text
        if not (globbed or named):
            missing.append(module)
    return missing


def test_every_module_is_in_the_architecture_doc() -> None:
    assert undocumented() == []


# the packages the tests of a package may import: their own and those below
TESTS_MAY_IMPORT = {"search_space": ("search_space",), "costmodel": ("search_space", "costmodel")}


def _top_imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every absolute import anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, node.lineno


def imports_across_layers(root: Path = ROOT) -> list[str]:
    """Imports of a package the tests of a lower one may not make (``TESTS_MAY_IMPORT``),
    counting the helper modules they import (``tests/<package>/*.py`` and ``tests/*.py``,
    conftest's builders among them), followed through, and imports inside functions."""
    tests = root / "tests"
    bad = []
    for package, allowed in TESTS_MAY_IMPORT.items():
        folder = tests / package
        todo = sorted(folder.glob("*.py"))
        seen: set[Path] = set()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            for name, line in _top_imports(path):
                top = name.split(".")[0]
                if top in PACKAGES and top not in allowed:
                    where = path.relative_to(root).as_posix()
                    bad.append(f"{where}:{line} imports {name} (tests/{package} may not)")
                # a helper resolves as pytest's sys.path has it: the tests' folder, then tests/
                helpers = [d / f"{top}.py" for d in (folder, tests)]
                todo += [h for h in helpers if h.is_file()][:1]
    return sorted(set(bad))


def test_tests_of_a_package_import_only_it_and_those_below() -> None:
    assert imports_across_layers() == []


def test_datasets_is_not_an_import_package() -> None:
    assert not (ROOT / "datasets" / "__init__.py").exists()


def test_every_check_fires_on_a_planted_tree(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package / "sub").mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
        (tmp_path / package / "sub" / "__init__.py").write_text("")
    (tmp_path / "costmodel" / "a.py").write_text("def f():\n    from costmodel.b import g\n")
    (tmp_path / "costmodel" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from costmodel import a\n"
    )
    (tmp_path / "search_space" / "sub" / "m.py").write_text("from autotune.sub import x\n")
    (tmp_path / "autotune" / "sub" / "x.py").write_text("from search_space.sub.m import _y\n")
    (tmp_path / "autotune" / "sub" / "_hidden.py").write_text("")
    (tmp_path / "autotune" / "y.py").write_text("from autotune.sub import _hidden\n")
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    (tmp_path / "costmodel" / "long.py").write_text(
        f"def long():\n{body}\n\n\ndef explained():\n    # Long by design: planted\n{body}\n"
    )
    graph = import_graph(tmp_path)
    assert sorted(_cycles(graph)) == [
        ["autotune.sub.x", "search_space.sub.m"],
        ["costmodel.a", "costmodel.b"],
    ]
    assert sorted(_cycles(package_graph(graph))) == [
        ["autotune.sub", "search_space.sub"],
        ["costmodel.a", "costmodel.b"],
    ]
    assert back_edges(graph) == ["search_space.sub.m imports autotune.sub.x"]
    assert private_imports(graph) == [
        "autotune.sub.x:1 imports _y from search_space.sub.m",
        "autotune.y:1 imports autotune.sub._hidden from autotune.sub._hidden",
    ]
    found = oversized(tmp_path)
    assert any(f.startswith("costmodel.long.long (") for f in found)
    assert not any(f.startswith("costmodel.long.explained") for f in found)
    (tmp_path / "tests" / "costmodel").mkdir(parents=True)
    (tmp_path / "tests" / "search_space").mkdir()
    (tmp_path / "tests" / "shared.py").write_text("def f():\n    import autotune.api\n")
    (tmp_path / "tests" / "costmodel" / "test_a.py").write_text(
        "import search_space\nfrom costmodel import x\nfrom shared import f\n"
    )
    (tmp_path / "tests" / "search_space" / "test_b.py").write_text(
        "from costmodel.kernel import K\n"
    )
    assert imports_across_layers(tmp_path) == [
        "tests/search_space/test_b.py:1 imports costmodel.kernel (tests/search_space may not)",
        "tests/shared.py:2 imports autotune.api (tests/costmodel may not)",
    ]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(
        "# A\n\n### `costmodel`\n\n| `a`, `long` |\n\n### `autotune`\n\n| `sub/*` |\n"
    )
    assert undocumented(tmp_path) == ["search_space.sub.m", "costmodel.b", "autotune.y"]
