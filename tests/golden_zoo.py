"""Pinned behaviour of the whole tool on small zoo models (the refactoring safety net).

What is pinned, through the CLI (the surface that must not change):
* every zoo model at ``--scale 0.25``, plans none / greedy / max, costed by the analytic model
  and by the simulator: total latency, kernel count, the grouping (a digest of every group's
  ops, kind and config) and each kernel's latency;
* a fixed-seed 12-trial study (the default learned cost model, safe mode on): the plan it
  writes (groups and configs), its simulated and predicted latency, the baselines and where the
  winner came from.

Regenerate after a change that is meant to move figures, and show the diff in the commit:

    .venv/bin/python tests/golden_zoo.py        # rewrites tests/golden/zoo.json
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden" / "zoo.json"


def models() -> tuple[str, ...]:
    """Every zoo model (a new one fails the test until the file is regenerated)."""
    from search_space.zoo import list_models

    return tuple(m.name for m in list_models())


PLANS = ("none", "greedy", "max")
COSTS = ("analytic", "simulator")
SCALE = "0.25"
STUDY_ARGS = ("zoo:bert-base", "--scale", SCALE, "--trials", "12", "--measure-every", "6")
RTOL = 1e-6  # figures are deterministic; the tolerance absorbs float summation order only


def _cli(args: list[str]) -> dict[str, Any]:
    from typer.testing import CliRunner

    from autotune.cli import app

    result = CliRunner().invoke(app, args)
    if result.exit_code != 0:
        raise RuntimeError(f"autotune {' '.join(args)} failed: {result.output}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _digest(groups: list[Any]) -> str:
    text = json.dumps(groups, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def estimate(model: str, plan: str, cost: str) -> dict[str, Any]:
    """One pinned estimate: zoo model at the golden scale under a baseline plan."""
    out = _cli(
        ["estimate", f"zoo:{model}", "--scale", SCALE, "--plan", plan, "--cost", cost, "--json"]
    )
    kernels = out["kernels"]
    return {
        "latency_us": out["latency"]["us"],
        "kernels": out["n_kernels"],
        "fused": sum(1 for k in kernels if len(k["ops"]) > 1),
        "grouping": _digest([[k["ops"], k["kind"], k["config"]] for k in kernels]),
        "per_kernel_us": [k["us"] for k in kernels],
    }


def study() -> dict[str, Any]:
    """The pinned short study's plan (fresh storage in a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = Path(tmp) / "plan.json"
        summary = _cli(
            [
                "tune",
                *STUDY_ARGS,
                "--storage",
                str(Path(tmp) / "study.journal"),
                "-o",
                str(plan_path),
                "--json",
            ]
        )
        plan = json.loads(plan_path.read_text())
    return {
        "best_latency_us": summary["simulated_us"],
        "predicted_us": summary["predicted_us"],
        "baseline_us": summary["baseline_simulated_us"],
        "source": plan["meta"]["source"],
        "kernels": len(plan["groups"]),
        "groups": [[g["ops"], g["kind"], g["config"]] for g in plan["groups"]],
    }


def compute() -> dict[str, Any]:
    return {
        "scale": SCALE,
        "estimates": {
            m: {p: {c: estimate(m, p, c) for c in COSTS} for p in PLANS} for m in models()
        },
        "study": {"args": list(STUDY_ARGS), **study()},
    }


def load() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def close(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two pinned values differ (floats within RTOL, everything else exactly)."""
    if isinstance(a, float) or isinstance(b, float):
        numbers = isinstance(a, int | float) and isinstance(b, int | float)
        if numbers and abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-12):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a)} != {sorted(b)}"]
        return [d for k in a for d in close(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in close(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _write(data: dict[str, Any]) -> None:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    # run as a script, this folder comes first on the path, and its test folders named like
    # the packages (tests/search_space, ...) would shadow them
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
    _write(compute())
    print(f"wrote {GOLDEN}")
