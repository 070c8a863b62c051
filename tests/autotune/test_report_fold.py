"""``report``'s kernel table (issue 46, item 5, in part): repeated layers folded with a count,
a tile-config column, latencies labelled with their kind and unit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from quick_study import run, tune_args

from autotune.plan_file import read_plan
from autotune.report import folded_kernels, plan_report


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fold")
    res = run(*tune_args(folder, layers=3))
    assert res.exit_code == 0, res.stderr
    return folder / "plan.json"


def test_folding_keeps_every_kernel_and_joins_only_equal_ones(plan: Path) -> None:
    record = read_plan(plan)
    rows = folded_kernels(record, plan_report(record)["kernels"])
    assert sum(r["count"] for r in rows) == len(record.groups)
    assert any(r["count"] == 3 for r in rows)  # three identical layers fold
    per_kernel = plan_report(record)["kernels"]
    for row in rows:  # a folded row stands for kernels of its kind, tiles and latency
        alike = [
            (g, k)
            for g, k in zip(record.groups, per_kernel, strict=True)
            if g.kind == row["kind"]
            and g.config.short() == row["tiles"]
            and k["simulated_us"] == row["simulated_us"]
        ]
        assert len(alike) >= row["count"]


def test_a_plan_without_its_kernel_graph_folds_nothing(plan: Path) -> None:
    record = read_plan(plan)
    bare = dataclasses.replace(record, meta={k: v for k, v in record.meta.items() if k != "graph"})
    rows = folded_kernels(bare, plan_report(bare)["kernels"])
    assert [r["count"] for r in rows] == [1] * len(record.groups)


def test_the_table_names_its_units_and_tiles(plan: Path) -> None:
    """At any terminal width (a header or a config may wrap, word by word)."""
    res = run("report", str(plan))
    assert res.exit_code == 0, res.stderr
    # words only the kernel table's headers hold ("predicted", "simulated" and "us" are in the
    # summary too)
    for word in ("tiles", "unfused", "bound"):
        assert word in res.stdout.split(), word
    words = res.stdout.split()
    for group in read_plan(plan).groups:
        assert all(part in words for part in group.config.short().split()), group.ops
