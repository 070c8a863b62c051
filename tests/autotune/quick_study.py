"""A small, fast study for the tests of how a run behaves (its start, progress, summary,
report): one bert-base layer at a quarter of its width, the analytic cost model, no polish,
safe mode off, in a folder of the test's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from autotune.cli import app

MODEL = ("zoo:bert-base", "--layers", "1", "--scale", "0.25")
FAST = ("--cost", "analytic", "--polish", "0", "--unsafe")
runner = CliRunner()


def tune_args(folder: Path, trials: int = 2, out: str = "plan.json", layers: int = 1) -> list[str]:
    """``autotune tune`` of the small model into ``folder`` (its journal, plan ``out``)."""
    return [
        "tune",
        "zoo:bert-base",
        "--layers",
        str(layers),
        "--scale",
        "0.25",
        "--trials",
        str(trials),
        *FAST,
        "--storage",
        str(folder / "s.journal"),
        "-o",
        str(folder / out),
    ]


def run(*args: str) -> Any:
    """The CLI on ``args`` (CliRunner's result: exit code, stdout, stderr)."""
    return runner.invoke(app, list(args))


def quick_config(folder: Path, trials: int, **changes: Any) -> Any:
    """The same study from Python: a TuneConfig with its journal in ``folder``."""
    from autotune.tuner import TuneConfig
    from search_space.rules import Policy

    return TuneConfig(
        trials=trials,
        cost="analytic",
        polish=0,
        storage=str(folder / "s.journal"),
        policy=Policy(safe_mode=False),
        **changes,
    )


def small_graph() -> Any:
    """The small model's graph (for ``tune_graph``)."""
    from search_space import load_graph
    from search_space.zoo import build

    return load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))
