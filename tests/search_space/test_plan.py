"""Plans round-trip as JSON and refuse to load against the wrong model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import conv_bn_relu
from hypothesis import given
from hypothesis import strategies as st

from search_space import load_graph
from search_space.ir import KernelConfig
from search_space.space import SCHEMA_VERSION, FusionPlan, PlanError, PlanGroup

configs = st.builds(
    KernelConfig,
    block_dim=st.integers(1, 64),
    base_m=st.sampled_from([0, 16, 128]),
    base_n=st.sampled_from([0, 16, 256]),
    base_k=st.sampled_from([0, 32, 64]),
    ub_rows=st.integers(0, 64),
    ub_cols=st.sampled_from([0, 8, 768]),
    double_buffer=st.booleans(),
    knobs=st.sampled_from([(), (("kv_tile", 128),)]),
)


@given(configs)
def test_config_json_round_trip(cfg: KernelConfig) -> None:
    assert KernelConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def _plan():
    graph = load_graph(conv_bn_relu(), input_shapes={"img": (2, 3, 16, 16)})
    groups = (
        PlanGroup(
            ("conv", "bn", "relu"), "cube_epilogue", KernelConfig(24, 64, 16, 32, 64, 16, 32)
        ),
        PlanGroup(("gap",), "single", KernelConfig(48, ub_rows=4, ub_cols=64)),
    )
    return graph, FusionPlan(graph.fingerprint(), "ascend910b", groups, predicted_us=12.5)


def test_plan_round_trips_through_a_file(tmp_path: Path) -> None:
    graph, plan = _plan()
    path = plan.save(tmp_path / "plan.json")
    assert FusionPlan.load(path, graph) == plan


def test_a_named_plan_keeps_its_kernel_names_and_an_unnamed_one_still_loads(
    tmp_path: Path,
) -> None:
    graph, plan = _plan()
    named = plan.named(graph)
    assert [g.name for g in named.groups] == ["Conv+BatchNormalization+Relu", "GlobalAveragePool"]
    assert FusionPlan.load(named.save(tmp_path / "named.json"), graph) == named
    written = json.loads((tmp_path / "named.json").read_text())
    assert [g["name"] for g in written["groups"]] == [g.name for g in named.groups]
    assert all("name" not in g for g in plan.to_json()["groups"])  # as older plans are
    assert FusionPlan.from_json(plan.to_json(), graph).groups[0].name == ""


def test_plan_for_another_model_is_refused(tmp_path: Path) -> None:
    _, plan = _plan()
    other = load_graph(conv_bn_relu(), input_shapes={"img": (4, 3, 16, 16)})
    with pytest.raises(PlanError, match="different model"):
        FusionPlan.load(plan.save(tmp_path / "p.json"), other)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "not supported"),
        (lambda d: d["groups"][0]["ops"].append("nope"), "does not have"),
        (lambda d: d["groups"][1]["ops"].append("conv"), "two groups"),
        (lambda d: d.pop("groups"), "missing"),
    ],
)
def test_hand_edited_plans_are_refused(tmp_path: Path, edit, needle: str) -> None:
    graph, plan = _plan()
    data = plan.to_json()
    edit(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match=needle):
        FusionPlan.load(path, graph)


def test_unreadable_plan_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="not found"):
        FusionPlan.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(PlanError, match="not valid JSON"):
        FusionPlan.load(bad)


def test_hand_edited_illegal_group_is_refused(tmp_path: Path) -> None:
    graph, plan = _plan()
    data = plan.to_json()
    data["groups"][1] = {"ops": ["gap", "fc"], "kind": "cube_epilogue"}  # a reduce prologue
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="not a legal fusion"):
        FusionPlan.load(path, graph)
