"""`autotune report PLAN --html`: one self-contained page whose plots hold what the plan and
the study hold (counted against the plan file and the model, not the page's own code)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.report_html import figures
from autotune.tuner.study import open_storage
from autotune.zoo import build
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.space import FusionPlan

ZOO = ["--layers", "1", "--scale", "0.25"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    res = CliRunner().invoke(
        app,
        [
            "tune",
            "zoo:bert-base",
            *ZOO,
            "--trials",
            "8",
            "--cost",
            "analytic",
            "-o",
            str(folder / "plan.json"),
            "--storage",
            str(folder / "s.journal"),
        ],
    )
    assert res.exit_code == 0, res.output
    return folder


def _sections(tuned: Path, with_study: bool = True) -> dict:
    plan = FusionPlan.load(tuned / "plan.json")
    study = None
    if with_study:
        storage, _ = open_storage(str(tuned / "s.journal"))
        study = optuna.load_study(study_name=plan.meta["study"], storage=storage)
    spec = load_target(plan.target).spec
    return {key: (fig, why) for key, fig, why in figures(plan, spec, study)}


def test_the_page_is_one_file_that_loads_nothing(tuned: Path) -> None:
    page = tuned / "report.html"
    res = CliRunner().invoke(
        app,
        [
            "report",
            str(tuned / "plan.json"),
            "--html",
            str(page),
            "--storage",
            str(tuned / "s.journal"),
        ],
    )
    assert res.exit_code == 0, res.output
    text = page.read_text()
    assert not re.search(r"<script[^>]+src=", text)  # plotly inlined, no network
    assert "Plotly.newPlot" in text
    for key in ("history", "importances", "kernels", "roofline", "buffers", "graph"):
        assert f"id='{key}'" in text and f"fig-{key}" in text, key


def test_the_plots_hold_every_kernel_trial_and_group(tuned: Path) -> None:
    plan = json.loads((tuned / "plan.json").read_text())
    graph = load_graph(build("bert-base", layers=1, scale=0.25))
    ops = FusionContext(graph).nodes
    s = _sections(tuned)
    before, after = s["kernels"][0].data
    assert len(after.y) == len(before.y) == len(plan["groups"])
    assert all(b >= 0 for b in after.y)
    history = s["history"][0].data[0]
    assert len(history.x) == 8  # one point per complete trial
    graph_fig = s["graph"][0]
    markers = [d for d in graph_fig.data if d.mode == "markers"]
    assert len(markers[0].x) == len(ops)
    fused = sum(1 for g in plan["groups"] if len(g["ops"]) > 1)
    assert len(graph_fig.layout.shapes) == fused > 0  # one box per fused group
    buffers = s["buffers"][0]
    assert {d.name for d in buffers.data} == {"L1", "L0A", "L0B", "L0C", "UB"}
    assert all(len(d.y) == fused for d in buffers.data)
    assert all(0 <= y <= 100 for d in buffers.data for y in d.y)  # every config fits


def test_without_a_study_the_page_says_how_to_get_its_history(tuned: Path) -> None:
    s = _sections(tuned, with_study=False)
    assert s["history"][0] is None and "--storage" in s["history"][1]
    assert s["kernels"][0] is not None


def test_the_page_never_overwrites_the_plan_and_names_a_missing_study(tuned: Path) -> None:
    plan = tuned / "plan.json"
    before = plan.read_bytes()
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(plan), "--html", str(plan)])
    assert res.exit_code == 1 and plan.read_bytes() == before
    out = tuned / "other.html"
    res = runner.invoke(
        app,
        [
            "report",
            str(plan),
            "--html",
            str(out),
            "--storage",
            str(tuned / "s.journal"),
            "--study",
            "nope",
        ],
    )
    assert res.exit_code == 1 and "no study 'nope'" in res.stderr and not out.exists()


def test_the_parity_plot_holds_each_kernels_prediction_and_simulation(tuned: Path) -> None:
    """Trust at a glance (issue 46, item 4): per kernel, the study's prediction against the
    simulator; the predictions are the ones the plan's predicted_us sums."""
    import dataclasses
    import math

    plan = FusionPlan.load(tuned / "plan.json")
    rows = plan.meta["kernels"]
    assert sum(r["us_predicted"] for r in rows) == pytest.approx(plan.predicted_us, rel=1e-6)
    fig, _ = _sections(tuned, with_study=False)["parity"]
    points = [t for t in fig.data if t.type == "scatter" and t.mode == "markers"]
    assert sum(len(t.x) for t in points) == len(plan.groups)
    boxes = [t for t in fig.data if t.type == "box"]
    logs = sorted(v for t in boxes for v in t.y)
    assert logs == pytest.approx(sorted(math.log(r["us_predicted"] / r["us"]) for r in rows))
    older = dataclasses.replace(
        plan,
        meta={
            **plan.meta,
            "kernels": [{k: v for k, v in r.items() if k != "us_predicted"} for r in rows],
        },
    )
    spec = load_target(plan.target).spec
    assert {k: f for k, f, _ in figures(older, spec, None)}["parity"] is None
