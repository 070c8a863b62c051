"""A study over shape ranges: one grouping, a config table per bucket, the weighted objective
(issue 49, item 2)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from quick_study import FAST, MODEL, run

from autotune.estimate import estimate_graph
from autotune.plan_file import read_plan
from search_space.ir import KernelConfig
from search_space.rules import Policy
from search_space.space import FusionPlan, PlanBucket, PlanError, PlanGroup
from search_space.zoo import ZooOptions, load_model_spec

RANGES = ("--shape-range", "batch=1..2", "--shape-range", "seq=16..32")


def _tune(folder: Path, *extra: str, trials: int = 4) -> dict[str, Any]:
    res = run(
        "tune", *MODEL, *RANGES, *extra, "--trials", str(trials), *FAST,
        "--storage", str(folder / "s.journal"), "-o", str(folder / "plan.json"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return dict(json.loads((folder / "plan.json").read_text()))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _tune(tmp_path_factory.mktemp("range"))


def _bucket_graph(dims: dict[str, int]) -> Any:
    opts = ZooOptions(scale=0.25, layers=1, batch=dims["batch"], seq_len=dims["seq"])
    return load_model_spec("zoo:bert-base", zoo=opts)


def test_the_plan_holds_a_config_for_every_group_at_every_bucket(tuned: dict[str, Any]) -> None:
    assert tuned["shape_ranges"] == ["batch=1..2", "seq=16..32"]
    dims = [b["dims"] for b in tuned["buckets"]]
    assert dims == [{"batch": b, "seq": s} for b in (1, 2) for s in (16, 32)]
    assert sum(b["weight"] for b in tuned["buckets"]) == pytest.approx(1.0)
    for b in tuned["buckets"]:
        assert len(b["configs"]) == len(tuned["groups"])
        assert all(c is not None for c in b["configs"])
    # the top bucket's configs are the groups' own, and its graph is the plan's fingerprint
    assert tuned["buckets"][-1]["configs"] == [g["config"] for g in tuned["groups"]]
    assert tuned["fingerprint"] == _bucket_graph({"batch": 2, "seq": 32}).fingerprint()


def test_each_buckets_figure_is_its_kernels_simulated_at_its_shape(tuned: dict[str, Any]) -> None:
    """The oracle: ``estimate`` of the same groups at the bucket's configs, on the model
    built at the bucket's shape, run on the simulator (another path to the same figure)."""
    total = 0.0
    for b in tuned["buckets"]:
        graph = _bucket_graph(b["dims"])
        groups = tuple(
            PlanGroup(tuple(g["ops"]), g["kind"], KernelConfig.from_json(c))
            for g, c in zip(tuned["groups"], b["configs"], strict=True)
        )
        plan = FusionPlan(graph.fingerprint(), "ascend910b", groups)
        alone = estimate_graph(graph, model_name="m", plan=plan, cost="simulator")  # type: ignore[arg-type]
        assert b["simulated_us"] == pytest.approx(alone.latency_us, rel=1e-9)
        total += b["weight"] * b["simulated_us"]
    assert tuned["simulated_us"] == pytest.approx(total, rel=1e-9)
    assert tuned["latency"]["kind"] == "simulated"


def test_a_bucket_the_traffic_never_sees_weighs_nothing(tmp_path: Path) -> None:
    traffic = tmp_path / "traffic.csv"
    traffic.write_text("batch,seq,count\n1,20,9\n")  # every shape runs in bucket batch=1,seq=32
    plan = _tune(tmp_path, "--traffic", str(traffic), trials=2)
    by = {(b["dims"]["batch"], b["dims"]["seq"]): b for b in plan["buckets"]}
    assert by[(1, 32)]["weight"] == pytest.approx(1.0)
    assert plan["simulated_us"] == pytest.approx(by[(1, 32)]["simulated_us"])
    for key, b in by.items():
        if key != (1, 32):
            assert b["weight"] == 0 and b["simulated_us"] is None
            assert all(c is not None for c in b["configs"])  # configs still, for dispatch


def test_studies_of_other_ranges_are_other_studies(tmp_path: Path) -> None:
    _tune(tmp_path, trials=1)
    res = run(
        "tune", *MODEL, "--shape-range", "batch=1..2", "--trials", "1", *FAST,
        "--storage", str(tmp_path / "s.journal"), "-o", str(tmp_path / "p2.json"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "new study" in res.stderr  # not the first range's, resumed


def test_a_range_plan_reads_back_and_a_short_config_row_is_refused(
    tuned: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tuned))
    plan = read_plan(path)
    assert plan.shape_ranges == ("batch=1..2", "seq=16..32")
    assert [b.label for b in plan.buckets][-1] == "batch=2,seq=32"
    again = FusionPlan.from_json(plan.to_json())
    assert again.buckets == plan.buckets
    short = dataclasses.replace(plan, buckets=(PlanBucket((("batch", 1),), 1.0, ()),))
    with pytest.raises(PlanError, match="configs do not match its groups"):
        FusionPlan.from_json(short.to_json())


def test_bad_ranges_stop_tune_before_any_study(tmp_path: Path) -> None:
    res = run(
        "tune", *MODEL, "--shape-range", "width=1..4", "--trials", "1", *FAST,
        "--storage", str(tmp_path / "s.journal"), "-o", str(tmp_path / "plan.json"),
    )  # fmt: skip
    assert res.exit_code == 1
    assert "'width' is not a dynamic dim of the model" in res.stderr
    assert not (tmp_path / "plan.json").exists() and not (tmp_path / "s.journal").exists()


def test_report_lists_the_buckets(tuned: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tuned))
    res = run("report", str(path), "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["shape_ranges"] == tuned["shape_ranges"]
    assert [b["simulated_us"] for b in rep["buckets"]] == [
        b["simulated_us"] for b in tuned["buckets"]
    ]
    res = run("report", str(path))
    assert res.exit_code == 0 and "buckets over batch=1..2, seq=16..32" in res.stdout
    assert "batch=1,seq=16" in res.stdout


def test_python_tune_takes_ranges(tmp_path: Path) -> None:
    import autotune

    plan = autotune.tune(
        "zoo:bert-base",
        zoo=ZooOptions(scale=0.25, layers=1),
        shape_ranges=["seq=16..32"],
        trials=1,
        cost="analytic",
        polish=0,
        storage=str(tmp_path / "s.journal"),
        policy=Policy(safe_mode=False),
    )
    assert [b.label for b in plan.record.buckets] == ["seq=16", "seq=32"]
    assert plan.record.measured_us == pytest.approx(
        sum(b.weight * (b.simulated_us or 0.0) for b in plan.record.buckets)
    )


def test_a_search_on_few_buckets_measures_its_best_plans_at_every_bucket(tmp_path: Path) -> None:
    plan = _tune(tmp_path, "--search-buckets", "2", trials=3)
    assert all(b["simulated_us"] is not None for b in plan["buckets"])
    total = sum(b["weight"] * b["simulated_us"] for b in plan["buckets"])
    assert plan["simulated_us"] == pytest.approx(total, rel=1e-9)
    sources = [c["source"] for c in plan["meta"]["candidates"]]
    assert sources and all(s.endswith("every bucket") for s in sources)
    assert plan["meta"]["source"].endswith("every bucket")


def _saved(tuned: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(tuned))
    return path


def test_estimate_runs_a_range_plan_at_every_bucket_as_it_was_simulated(
    tuned: dict[str, Any], tmp_path: Path
) -> None:
    """The plan read back at each bucket's shape (its ops' digest and input axes tell the
    bucket) costs on the simulator what the study simulated there."""
    path = _saved(tuned, tmp_path)
    res = run("estimate", *MODEL, *RANGES, "--plan", str(path), "--cost", "simulator", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for got, want in zip(doc["buckets"], tuned["buckets"], strict=True):
        assert got["dims"] == want["dims"]
        assert got["latency"]["us"] == pytest.approx(want["simulated_us"], rel=1e-9)
        assert [k["config"] for k in got["kernels"]] == want["configs"]


def test_a_shape_between_buckets_runs_at_the_next_buckets_configs(
    tuned: dict[str, Any], tmp_path: Path
) -> None:
    path = _saved(tuned, tmp_path)
    res = run("estimate", *MODEL, "--batch", "2", "--seq-len", "20", "--plan", str(path), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (bucket,) = [b for b in tuned["buckets"] if b["dims"] == {"batch": 2, "seq": 32}]
    assert [k["config"] for k in doc["kernels"]] == bucket["configs"]
    plan = read_plan(path, _bucket_graph({"batch": 2, "seq": 20}))  # it belongs to the model
    alone = plan.at_shape(_bucket_graph({"batch": 2, "seq": 20}))
    assert alone.meta["bucket"] == "batch=2,seq=32" and alone.measured_us is None
    exact = plan.at_shape(_bucket_graph({"batch": 2, "seq": 32}))
    assert exact.measured_us == bucket["simulated_us"] and not exact.buckets


@pytest.mark.parametrize(
    ("model", "says"),
    [
        (("--batch", "2", "--seq-len", "64"), "seq=64 is outside the range seq=16..32"),
        (("--batch", "3", "--seq-len", "16"), "batch=3 is outside the range batch=1..2"),
        (("--layers", "2", "--batch", "2", "--seq-len", "32"), "its ops differ from this model's"),
    ],
)
def test_a_range_plan_refuses_shapes_and_models_it_does_not_hold(
    tuned: dict[str, Any], tmp_path: Path, model: tuple[str, ...], says: str
) -> None:
    path = _saved(tuned, tmp_path)
    base = ["zoo:bert-base", "--scale", "0.25"]
    if "--layers" not in model:
        base += ["--layers", "1"]
    res = run("estimate", *base, *model, "--plan", str(path))
    assert res.exit_code == 1, res.output
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
