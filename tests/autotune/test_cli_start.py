"""The command line starts light: ``--version``, ``--help`` and shell completion import none of
the heavy packages (onnx, scikit-learn, scipy, pandas, optuna, onnxruntime, plotly, torch,
triton); each command imports what it runs when it runs. Checked in a fresh interpreter, since
this one has imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "onnx",
    "sklearn",
    "scipy",
    "pandas",
    "optuna",
    "onnxruntime",
    "plotly",
    "torch",
    "triton",
)


def _imported_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    loaded = set(json.loads(run.stdout.strip().splitlines()[-1]))
    return [m for m in HEAVY if m in loaded]


@pytest.mark.parametrize(
    "code",
    [
        "import autotune.cli",
        "import autotune",
        "from autotune.cli import app\n"
        "from typer.testing import CliRunner\n"
        "for args in (['--version'], ['--help'], ['tune', '--help'], ['report', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args",
        "import os, sys\n"
        "os.environ.update(_AUTOTUNE_COMPLETE='complete_bash', COMP_WORDS='autotune tu',"
        " COMP_CWORD='1')\n"
        "from autotune.cli import app\n"
        "try:\n"
        "    app(prog_name='autotune')\n"
        "except SystemExit:\n"
        "    pass\n",
    ],
    ids=["import-cli", "import-package", "version-and-help", "completion"],
)
def test_starting_the_command_line_imports_no_heavy_package(code: str) -> None:
    assert _imported_after(code) == []


def test_the_public_names_still_resolve() -> None:
    """``autotune.tune``, ``autotune.load_plan``... and ``search_space.load_graph`` are
    imported on first use, and are the objects of their home modules."""
    import autotune
    import search_space
    from autotune.api import Plan, load_plan, tune
    from search_space.onnx import load_graph

    assert (autotune.tune, autotune.load_plan, autotune.Plan) == (tune, load_plan, Plan)
    assert search_space.load_graph is load_graph
    assert set(autotune.__all__) <= set(dir(autotune))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = autotune.nope  # type: ignore[attr-defined]
