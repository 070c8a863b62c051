"""The public surface: one exported error base, an immutable Plan that applies to what tune
takes, the version, shell completion."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

import autotune
from autotune import AutofusionError, Plan, PlanError, ZooOptions, load_plan
from autotune.cli import app

PACKAGES = ("search_space", "costmodel", "autotune")


def _error_classes() -> list[type[BaseException]]:
    found = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if ".cli" in info.name or info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Exception) and cls.__module__ == info.name:
                    found.append(cls)
    return found


def test_every_error_the_tool_defines_derives_from_one_exported_base() -> None:
    found = _error_classes()
    assert PlanError in found and len(found) >= 8
    assert [c.__qualname__ for c in found if not issubclass(c, AutofusionError)] == []
    assert autotune.AutofusionError is AutofusionError


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    folder = tmp_path_factory.mktemp("plan")
    zoo = ZooOptions(layers=1, scale=0.25)
    plan = autotune.tune(
        "zoo:bert-base", zoo=zoo, trials=3, cost="analytic", polish=0,
        storage=str(folder / "s.journal"),
    )  # fmt: skip
    return load_plan(plan.save(folder / "plan.json"))


def test_a_plan_is_immutable_and_applies_to_a_zoo_name(tuned: Plan) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        tuned.path = Path("elsewhere.json")  # type: ignore[misc]
    fused = tuned.apply("zoo:bert-base", zoo=ZooOptions(layers=1, scale=0.25))
    onnx.checker.check_model(fused)
    assert any(n.domain == "ai.autofusion" for n in fused.graph.node)
    with pytest.raises(PlanError):  # built at another size: another model
        tuned.apply("zoo:bert-base", zoo=ZooOptions(layers=2, scale=0.25))


def test_version_is_the_installed_packages() -> None:
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"autotune {version('ascend-autofusion')}"


def test_shell_completion_is_offered() -> None:
    """``autotune --show-completion`` typed in bash prints bash's completion script. Run from
    bash as a user does: typer detects the shell from the parent processes, which a test
    runner started away from a shell does not have."""
    exe = Path(sys.executable).parent / "autotune"
    cmd = f"{shlex.quote(str(exe))} --show-completion; exit $?"  # a child of bash, not exec'd
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "_AUTOTUNE_COMPLETE" in res.stdout, res.stdout + res.stderr
