"""``autotune estimate --shape-range``: one grouping costed at every bucket (issue 49)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from quick_study import run

MODEL = ("zoo:bert-base", "--layers", "1", "--scale", "0.25")
RANGES = ("--shape-range", "batch=1..4", "--shape-range", "seq=16..64")


def _json(*args: str) -> Any:
    res = run(*args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("plan", ["none", "max"])
def test_each_bucket_costs_as_the_model_built_at_its_shape(plan: str) -> None:
    """Unfused (each op its own group) and max (every group at its best config) choose each
    bucket's configs at that bucket's shapes, so a bucket costs what an estimate of the model
    built at its shape does; a grouping that is the same at every shape (none) gives the same
    kernels too."""
    doc = _json("estimate", *MODEL, *RANGES, "--plan", plan, "--json")
    assert doc["schema"]["name"] == "autotune.estimate_range"
    assert [tuple(b["dims"].items()) for b in doc["buckets"]] == [
        (("batch", b), ("seq", s)) for b in (1, 2, 4) for s in (16, 32, 64)
    ]
    for bucket in doc["buckets"]:
        dims = bucket["dims"]
        alone = _json(
            "estimate", *MODEL, "--batch", str(dims["batch"]), "--seq-len", str(dims["seq"]),
            "--plan", plan, "--json",
        )  # fmt: skip
        if plan == "none":
            assert bucket["latency"]["us"] == pytest.approx(alone["latency"]["us"], rel=1e-9)
        else:  # max groups as at the top bucket, at each bucket
            assert bucket["n_kernels"] == doc["buckets"][-1]["n_kernels"]
            # a group max also makes at this shape alone runs at the config it has there
            there = {tuple(k["ops"]): k["config"] for k in alone["kernels"]}
            shared = [k for k in bucket["kernels"] if tuple(k["ops"]) in there]
            assert shared and all(k["config"] == there[tuple(k["ops"])] for k in shared)
        assert bucket["roofline_us"] == pytest.approx(alone["roofline_us"], rel=1e-9)
    weights = [b["weight"] for b in doc["buckets"]]
    assert sum(weights) == pytest.approx(1.0) and len(set(weights)) == 1


def test_the_top_buckets_grouping_runs_at_every_bucket() -> None:
    doc = _json("estimate", *MODEL, *RANGES, "--plan", "greedy", "--json")
    groups = {tuple(tuple(k["ops"]) for k in b["kernels"]) for b in doc["buckets"]}
    assert len(groups) == 1  # one fused graph, compiled once
    top = doc["buckets"][-1]
    alone = _json(
        "estimate", *MODEL, "--batch", "4", "--seq-len", "64", "--plan", "greedy", "--json"
    )
    assert top["latency"]["us"] == pytest.approx(alone["latency"]["us"], rel=1e-9)
    # more work, more time: the latency grows with each dim
    by = {(b["dims"]["batch"], b["dims"]["seq"]): b["latency"]["us"] for b in doc["buckets"]}
    assert by[(1, 16)] < by[(1, 64)] < by[(4, 64)]


def test_traffic_weights_the_buckets(tmp_path: Path) -> None:
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("batch,seq,count\n3,40,7\n4,64,1\n")
    doc = _json("estimate", *MODEL, *RANGES, "--traffic", str(traffic), "--json")
    by = {(b["dims"]["batch"], b["dims"]["seq"]): b for b in doc["buckets"]}
    assert by[(4, 64)]["weight"] == pytest.approx(1.0)  # both lines run in the top bucket
    assert doc["latency"]["us"] == pytest.approx(by[(4, 64)]["latency"]["us"])


def test_the_table_lists_every_bucket() -> None:
    res = run("estimate", *MODEL, *RANGES, "--buckets", "seq=32,64")
    assert res.exit_code == 0, res.output
    assert "batch=2,seq=32" in res.stdout and "weighted latency" in res.stdout
    assert "seq=16 " not in res.stdout and "6 buckets" in res.stdout


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--shape-range", "seq=64..16"), "LO 64 is above HI 16"),
        (("--shape-range", "width=1..4"), "'width' is not a dynamic dim of the model"),
        (("--buckets", "seq=16,64"), "--buckets and --traffic divide a --shape-range"),
        (("--shape-range", "batch=1..4", "--batch", "2"), "--batch and --shape-range batch"),
        (
            ("--shape-range", "seq=16..64", "--plan", "nowhere.json"),
            "plan file 'nowhere.json' not found",
        ),
    ],
)
def test_bad_ranges_are_one_line_and_exit_1(extra: tuple[str, ...], says: str) -> None:
    res = run("estimate", *MODEL, *extra)
    assert res.exit_code == 1, res.output
    assert says in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
