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
from autotune.plan_file import read_plan
from autotune.report_html import figures
from autotune.tuner.study import open_storage
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.zoo import build

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
    plan = read_plan(tuned / "plan.json")
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
    for key in ("history", "importances", "kernels", "roofline", "buffers"):
        assert f"id='{key}'" in text and f"fig-{key}" in text, key
    assert "id='graph'" in text and "id='gv-graph'" in text


def test_the_plots_hold_every_kernel_trial_and_group(tuned: Path) -> None:
    plan = json.loads((tuned / "plan.json").read_text())
    graph = load_graph(build("bert-base", layers=1, scale=0.25))
    ops = FusionContext(graph).nodes
    s = _sections(tuned)
    before, after = s["kernels"][0].data
    assert len(after.x) == len(before.x) == len(set(after.y)) == len(plan["groups"])
    assert all(b >= 0 for b in after.x)
    history = s["history"][0].data[0]
    assert len(history.x) == 8  # one point per complete trial
    graph_html = s["graph"][0]
    assert graph_html.count('class="node"') == len(ops)
    drawn = set(ops)  # views are not drawn: a box holds a group's ops of the kernel graph
    boxes = sum(1 for g in plan["groups"] if len(drawn & set(g["ops"])) > 1)
    assert graph_html.count('class="cluster"') == boxes > 0  # one box per fused group
    fused = sum(1 for g in plan["groups"] if len(g["ops"]) > 1)
    (buffers,) = s["buffers"][0].data
    assert list(buffers.x) == ["L1", "L0A", "L0B", "L0C", "UB"]
    assert len(buffers.z) == len(buffers.y) == fused
    assert all(0 <= z <= 100 for row in buffers.z for z in row)  # every config fits


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

    plan = read_plan(tuned / "plan.json")
    rows = plan.meta["kernels"]
    assert sum(r["predicted_us"] for r in rows) == pytest.approx(plan.predicted_us, rel=1e-6)
    fig, _ = _sections(tuned, with_study=False)["parity"]
    points = [t for t in fig.data if t.type == "scatter" and t.mode == "markers"]
    assert sum(len(t.x) for t in points) == len(plan.groups)
    boxes = [t for t in fig.data if t.type == "box"]
    logs = sorted(v for t in boxes for v in t.y)
    assert logs == pytest.approx(
        sorted(math.log(r["predicted_us"] / r["simulated_us"]) for r in rows)
    )
    older = dataclasses.replace(
        plan,
        meta={
            **plan.meta,
            "kernels": [{k: v for k, v in r.items() if k != "predicted_us"} for r in rows],
        },
    )
    spec = load_target(plan.target).spec
    assert {k: f for k, f, _ in figures(older, spec, None)}["parity"] is None


def test_the_roofline_says_what_each_colour_is_and_draws_the_l2_roof(tuned: Path) -> None:
    """A legend entry per bound, in that bound's colour, holding exactly that bound's kernels;
    two roofs: HBM and the faster L2, meeting at the cube peak."""
    from autotune.graph_view import colour

    plan = read_plan(tuned / "plan.json")
    fig, _ = _sections(tuned, with_study=False)["roofline"]
    roofs = [t for t in fig.data if t.mode == "lines"]
    assert [t.name.split(":")[1].split()[0] for t in roofs] == ["HBM", "L2"]
    spec = load_target(plan.target).spec
    assert all(max(t.y) == pytest.approx(spec.cube_peak_flops) for t in roofs)
    assert roofs[1].y[0] > roofs[0].y[0]  # below the ridge, L2 is the higher roof
    bounds = [str(r.get("bound", "")) for r in plan.meta["kernels"] if r.get("flops")]
    for t in (t for t in fig.data if t.mode == "markers"):
        bound = t.name.removesuffix("-bound kernel")
        assert t.marker.color == colour(bound) and len(t.x) == bounds.count(bound)
