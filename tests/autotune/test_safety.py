"""Safe mode end to end: a planted bad fusion is caught by verification and unfused."""

from __future__ import annotations

import dataclasses
import json

from typer.testing import CliRunner

from autotune.cli import app
from autotune.tuner import make_safety
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import Policy
from search_space.space import SpacePlan, baseline_plan
from search_space.zoo import ZooOptions, build


def test_planted_fp16_statistics_are_caught_and_unfused() -> None:
    zoo = ZooOptions(weights="inputs", scale=0.1, layers=1)
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1, layers=1))
    ctx = FusionContext(graph)
    plan = baseline_plan("max", ctx, CostOracle(graph, load_target(), ctx=ctx))
    ln = [  # a residual norm: what it reads are activations (the embeddings' are weights)
        i
        for i, g in enumerate(plan.groups)
        if any(
            graph.op(o).op_type == "LayerNormalization" and "attention/output" in o for o in g.ops
        )
        and len(g.ops) > 1
    ]
    assert ln
    bad = list(plan.configs)
    bad[ln[0]] = dataclasses.replace(bad[ln[0]], knobs=(("stats_fp16", 1),))
    planted = SpacePlan(plan.groups, tuple(bad))
    check = make_safety(graph, "zoo:bert-base", zoo, Policy(), load_target())
    checked = check(planted)
    safe, counts, verdicts = checked.plan, checked.counts, checked.verdicts
    assert counts["skipped_precision"] >= 1
    assert plan.groups[ln[0]] not in safe.groups  # the bad kernel is no longer fused
    assert all(len(g.ops) == 1 or g in plan.groups for g in safe.groups)
    unfused = [v for ops, v in verdicts.items() if v.startswith("unfused")]
    assert unfused and "fail at input scale 64" in unfused[0]  # the reason travels with the plan
    checked = check(plan)
    clean, counts = checked.plan, checked.counts
    assert counts["skipped_precision"] == 0 and clean == plan


def test_cli_verify_reports_every_kernel(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "tune",
            "zoo:gpt2",
            "--scale",
            "0.1",
            "--trials",
            "6",
            "--measure-every",
            "3",
            "-o",
            "p.json",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)["safe_mode"]  # safe mode ran by default
    assert {"fused", "skipped_low_benefit", "skipped_buffer_overflow", "skipped_precision"} <= set(
        report
    )
    ver = runner.invoke(app, ["verify", "zoo:gpt2", "p.json", "--scale", "0.1", "--json"])
    assert ver.exit_code == 0, ver.output
    data = json.loads(ver.stdout)
    assert data["ok"] and data["graph_max_abs_err"] < 1e-4
    assert all({"ops", "cosine", "max_abs_err", "verdict"} <= set(k) for k in data["kernels"])
