"""A plain (non-editable) wheel carries every module and runs from outside the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("search_space", "costmodel", "autotune")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (whl,) = out.glob("*.whl")
    return whl


def test_wheel_holds_every_module_and_no_datasets_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                assert str(path.relative_to(ROOT)) in names, path
    assert not any(n.startswith(("datasets/", "tests/", "experiments/")) for n in names)


def test_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = "import autotune, search_space, costmodel; print(autotune.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site)
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "zoo", "list", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    from search_space.zoo import list_models

    assert len(json.loads(proc.stdout)["models"]) == len(list_models())
    code = (
        "from costmodel.spec import available_targets, load_spec; import costmodel; "
        "print(costmodel.__file__, available_targets(), load_spec().name)"
    )

    def python(code: str) -> list[str]:
        """What ``code`` prints, run outside the checkout against the installed wheel."""
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()

    found = python(code)
    assert Path(found[0]).is_relative_to(site)  # package data read from the installed wheel
    shipped = " ".join(found)
    assert "'ascend910b'," in shipped and "'ascend910b4']" in shipped and found[-1] == "ascend910b"
    # the default learned model and fitted constants ship as package data (JSON, no pickle)
    code = (
        "from costmodel.learned import LearnedModel, shipped_model_path; "
        "from costmodel.analytic import AnalyticModel, AnalyticConstants; "
        "from costmodel.spec import load_target; t = load_target(); m = LearnedModel(t); "
        "print(shipped_model_path('ascend910b'), m.base is not None, "
        "AnalyticModel(t).constants != AnalyticConstants())"
    )
    shipped = python(code)
    assert Path(shipped[0]).is_relative_to(site) and shipped[1:] == ["True", "True"]
