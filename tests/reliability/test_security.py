"""Nothing a user gives is unpickled or evaluated, and nothing read from a plan file becomes a
path that is written to."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
from bad_input_helpers import make_corpus
from typer.testing import CliRunner

from autotune.cli import app

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("search_space", "costmodel", "autotune")
# calls that run or unpickle what they read: module.function (or a bare builtin)
UNSAFE = {
    "pickle.load", "pickle.loads", "pickle.Unpickler", "marshal.load", "marshal.loads",
    "shelve.open", "joblib.load", "dill.load", "dill.loads", "cloudpickle.load",
    "cloudpickle.loads", "torch.load", "yaml.load", "yaml.unsafe_load", "eval", "exec",
    "compile", "__import__", "pandas.read_pickle", "pd.read_pickle",
}  # fmt: skip


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


def unsafe_calls(root: Path) -> list[str]:
    """Calls of ``UNSAFE`` functions, and of ``numpy.load`` with ``allow_pickle`` on, in the
    packages under ``root``."""
    bad = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not isinstance(node, ast.Call):
                    continue
                name = _name(node.func)
                pickles = name in ("np.load", "numpy.load") and any(
                    k.arg == "allow_pickle"
                    and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                    for k in node.keywords
                )
                if name in UNSAFE or pickles:
                    bad.append(f"{path.relative_to(root)}:{node.lineno} calls {name}")
    return bad


def test_no_module_unpickles_or_evaluates() -> None:
    assert unsafe_calls(ROOT) == []


def test_the_scan_finds_a_planted_call(tmp_path: Path) -> None:
    (tmp_path / "costmodel").mkdir()
    (tmp_path / "costmodel" / "m.py").write_text(
        "import pickle, numpy as np\n"
        "def f(b):\n    return pickle.loads(b), eval(b), np.load(b, allow_pickle=True)\n"
    )
    assert [c.rsplit(" ", 1)[1] for c in unsafe_calls(tmp_path)] == [
        "pickle.loads",
        "eval",
        "np.load",
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_corpus(tmp_path_factory)


def _trap(value: Any, trap: Path) -> Any:
    """Every string of a plan's metadata replaced by a path into ``trap``."""
    if isinstance(value, str):
        return str(trap / "planted.json")
    if isinstance(value, dict):
        return {k: _trap(v, trap) for k, v in value.items()}
    if isinstance(value, list):
        return [_trap(v, trap) for v in value]
    return value


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_paths_in_a_plan_are_never_written(corpus: dict[str, Path], tmp_path: Path) -> None:
    """A plan whose every metadata string names a file in a trap folder (its target source,
    measurements file, study storage...): reading it with each command writes nothing there."""
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "planted.json").write_text("{}\n")
    doc = json.loads(corpus["plan_valid"].read_text())
    doc["meta"] = _trap(doc.get("meta", {}), trap)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    before = _files(trap)
    model = str(corpus["valid"])
    for argv in (
        ["report", str(plan)],
        ["report", str(plan), "--json"],
        ["estimate", model, "--plan", str(plan)],
        ["apply", model, str(plan), "-o", str(tmp_path / "fused.onnx")],
        ["verify", model, str(plan)],
    ):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0 and "Traceback" not in res.output, (argv, res.output)
        assert _files(trap) == before, argv
