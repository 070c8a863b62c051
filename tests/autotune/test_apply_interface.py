"""apply_plan's function interface on hand-built graphs, plan files, and bad plans."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from apply_helpers import _assert_same, _check_apply, _feeds, _max_plan, _zoo
from conftest import make
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from autotune.apply import FUSED_DOMAIN, apply_plan, apply_plan_file
from autotune.exceptions import AutotuneError
from search_space import Graph, load_graph
from search_space.ir import KernelConfig
from search_space.space import FusionPlan, PlanError, PlanGroup


# -- the function interface on hand-built graphs ---------------------------------------------
def _vi(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, T.FLOAT, shape)


def _interface_model() -> onnx.ModelProto:
    """x -> MatMul(w) = h (graph output) -> Add(b) -> Reshape(Constant target) -> Relu -> y;
    Neg reads the Add's output outside the group."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    target = helper.make_tensor("t", T.INT64, [2], [-1, 4])
    nodes = [
        n("MatMul", ["x", "w"], ["h"], name="mm"),
        n("Add", ["h", "b"], ["hb"], name="bias"),
        n("Constant", [], ["shape"], name="target", value=target),
        n("Reshape", ["hb", "shape"], ["r"], name="view"),
        n("Relu", ["r"], ["y"], name="relu"),
        n("Neg", ["hb"], ["z"], name="neg"),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
    ]
    return make(
        nodes,
        [_vi("x", ["N", 8])],
        [_vi("h", ["N", 8]), _vi("y", ["M", 4]), _vi("z", ["N", 8])],
        inits,
    )


def test_function_inputs_and_outputs() -> None:
    model = _interface_model()
    graph = load_graph(model, input_shapes={"x": (4, 8)})
    config = KernelConfig(24, 64, 64, 64, 32, 32, 32, knobs=(("kv_tile", 128),))
    groups = [PlanGroup(("mm", "bias", "view", "relu"), "cube_epilogue", config)]
    fused = _check_apply(model, graph, groups, {"x": np.ones((4, 8), np.float32)})
    (fn,) = fused.functions
    (call,) = [n for n in fused.graph.node if n.domain == FUSED_DOMAIN]
    # weights, bias and the Constant's reshape target enter as inputs, in first-use order
    assert list(fn.input) == list(call.input) == ["x", "w", "b", "shape"]
    # h is a graph output consumed inside; hb is read by Neg outside; y is a graph output
    assert list(fn.output) == list(call.output) == ["h", "hb", "y"]
    assert fn.name == call.name == call.op_type == "fused_0_cube_epilogue"
    assert [n.op_type for n in fn.node] == ["MatMul", "Add", "Reshape", "Relu"]
    assert [n.op_type for n in fused.graph.node] == ["Constant", call.op_type, "Neg"]
    attrs = {a.name: helper.get_attribute_value(a) for a in call.attribute}
    assert attrs == {
        "kind": b"cube_epilogue",
        "block_dim": 24,
        "base_m": 64,
        "base_n": 64,
        "base_k": 64,
        "m": 32,
        "n": 32,
        "k": 32,
        "double_buffer": 1,
        "knob_kv_tile": 128,
    }
    assert set(fn.attribute) == set(attrs)


def test_group_without_config_and_singletons() -> None:
    model = _interface_model()
    graph = load_graph(model, input_shapes={"x": (4, 8)})
    groups = [PlanGroup(("mm",), "single"), PlanGroup(("bias", "neg"), "vector_chain")]
    fused = _check_apply(model, graph, groups, {"x": np.ones((4, 8), np.float32)})
    (call,) = [n for n in fused.graph.node if n.domain == FUSED_DOMAIN]
    assert [a.name for a in call.attribute] == ["kind"]
    assert "mm" in [n.name for n in fused.graph.node]


def _shape_bridge_model() -> onnx.ModelProto:
    """A Reshape target computed from Shape(h) of a tensor the group itself computes, and a
    view of the group read both inside and outside it (as exporters write them)."""
    n = helper.make_node
    w = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
    nodes = [
        n("MatMul", ["x", "w"], ["h"], name="mm"),
        n("Shape", ["h"], ["hs"], name="shape"),
        n("Gather", ["hs", "zero"], ["rows"], name="rows", axis=0),
        n("Unsqueeze", ["rows", "zero1"], ["rows1"], name="unsq"),
        n("Concat", ["rows1", "two", "four"], ["target"], name="cat", axis=0),
        n("Relu", ["h"], ["a"], name="relu"),
        n("Reshape", ["a", "target"], ["r"], name="split"),
        n("Sigmoid", ["r"], ["s"], name="sig"),
        n("Flatten", ["h"], ["hf"], name="flat", axis=1),
        n("Reshape", ["s", "flat_shape"], ["s2"], name="merge"),
        n("Add", ["hf", "s2"], ["y"], name="add"),
        n("Exp", ["hf"], ["z"], name="exp"),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([-1, 8], np.int64), "flat_shape"),
    ]
    return make(nodes, [_vi("x", ["N", 8])], [_vi("y", ["N", 8]), _vi("z", ["N", 8])], inits)


def test_shape_nodes_and_shared_views_go_into_the_body() -> None:
    model = _shape_bridge_model()
    graph = load_graph(model, input_shapes={"x": (3, 8)})
    assert not graph.has_op("shape")  # folded by the loader
    ops = ("mm", "relu", "split", "sig", "merge", "add")
    fused = _check_apply(
        model, graph, [PlanGroup(ops, "cube_epilogue")], _feeds(model, {"x": (3, 8)})
    )
    (fn,) = fused.functions
    body = [n.name for n in fn.node]
    assert {"shape", "rows", "unsq", "cat", "flat"} <= set(body)
    assert list(fn.output) == ["hf", "y"]  # Exp reads the shared Flatten outside
    assert [n.name for n in fused.graph.node] == ["fused_0_cube_epilogue", "exp"]
    _assert_same(model, fused, _feeds(model, {"x": (5, 8)}, seed=3))  # batch stays dynamic


def test_custom_domain_opsets_are_imported_by_every_function() -> None:
    model = _interface_model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph = load_graph(model, input_shapes={"x": (4, 8)})
    fused = _check_apply(
        model,
        graph,
        [PlanGroup(("mm", "bias"), "cube_epilogue"), PlanGroup(("relu", "neg"), "vector_chain")],
        {"x": np.ones((4, 8), np.float32)},
    )
    for fn in fused.functions:
        assert {(o.domain, o.version) for o in fn.opset_import} == {("", 17), ("com.microsoft", 1)}


def test_tensors_read_by_subgraphs_outside_are_outputs() -> None:
    n = helper.make_node
    branch = [
        helper.make_graph([n("Identity", [src], [f"{tag}_o"])], tag, [], [_vi(f"{tag}_o", [2, 4])])
        for src, tag in (("a", "then"), ("x", "other"))
    ]
    nodes = [
        n("Relu", ["x"], ["a"], name="A"),
        n("Neg", ["a"], ["b"], name="B"),
        n("If", ["cond"], ["c"], name="branch", then_branch=branch[0], else_branch=branch[1]),
    ]
    cond = helper.make_tensor_value_info("cond", T.BOOL, [])
    model = make(nodes, [_vi("x", [2, 4]), cond], [_vi("b", [2, 4]), _vi("c", [2, 4])])
    graph = load_graph(model)
    feeds = {"x": _feeds(model)["x"], "cond": np.array(True)}
    fused = _check_apply(model, graph, [PlanGroup(("A", "B"), "vector_chain")], feeds)
    assert list(fused.functions[0].output) == ["a", "b"]


def test_a_fused_model_can_be_loaded_and_fused_again() -> None:
    model = _zoo("bert-base")
    graph = load_graph(model)
    groups = _max_plan(graph)
    once = apply_plan(model, graph, groups[: len(groups) // 2])
    graph2 = load_graph(once)  # the loader inlines the functions again
    assert len(graph2.ops) == len(graph.ops)
    groups2 = _max_plan(graph2)
    twice = apply_plan(once, graph2, groups2)
    onnx.checker.check_model(twice, full_check=True)
    assert len(twice.functions) == sum(len(g.ops) > 1 for g in groups2) > 0
    _assert_same(model, twice, _feeds(model))


def test_apply_plan_file(tmp_path: Path) -> None:
    model = _interface_model()
    graph = load_graph(model, input_shapes={"x": (4, 8)})
    groups = (PlanGroup(("mm", "bias", "view", "relu"), "cube_epilogue"),)
    plan = FusionPlan(graph.fingerprint(), "ascend910b", groups)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for source in (path, model):
        fused = apply_plan_file(source, plan, graph)
        assert len(fused.functions) == 1
    wrong = FusionPlan("0" * 16, "ascend910b", groups)
    with pytest.raises(PlanError, match="different model"):
        apply_plan_file(model, wrong, graph)


# -- errors ----------------------------------------------------------------------------------
def _chain() -> tuple[onnx.ModelProto, Graph]:
    """A = Relu(x), B = Neg(a) (output), C = Abs(y), D = Add(a, c) (output), E = Exp(d)."""
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"], name="A"),
        n("Neg", ["a"], ["b"], name="B"),
        n("Abs", ["y"], ["c"], name="C"),
        n("Add", ["b", "c"], ["d"], name="D"),
        n("Exp", ["d"], ["e"], name="E"),
        n("Shape", ["e"], ["es"], name="S"),
    ]
    model = make(nodes, [_vi("x", [2, 4]), _vi("y", [2, 4])], [_vi("a", [2, 4]), _vi("e", [2, 4])])
    return model, load_graph(model)


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ([("A", "nope")], "names op 'nope', which graph 'g' does not have"),
        ([("A", "B"), ("B", "D")], "op 'B' is in group 0 and group 1"),
        ([("A", "B", "A")], "group 0 lists op 'A' twice"),
        ([("A", "D")], "not convex in the model: op 'B' \\(Neg\\)"),
        ([("A", "B"), ("C", "D", "E", "S")], "the loader folded into a constant"),
        ([("A", "D", "E"), ("B",)], "op 'B' \\(Neg\\) of group 1"),
    ],
)
def test_bad_groups_raise(groups: list[tuple[str, ...]], message: str) -> None:
    model, graph = _chain()
    plan = [PlanGroup(g, "vector_chain") for g in groups]
    with pytest.raises(AutotuneError, match=message):
        apply_plan(model, graph, plan)


def test_groups_that_contract_into_a_cycle_raise() -> None:
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"], name="A"),
        n("Neg", ["a"], ["b"], name="B"),
        n("Abs", ["y"], ["c"], name="C"),
        n("Add", ["a", "c"], ["d"], name="D"),
    ]
    model = make(nodes, [_vi("x", [2, 4]), _vi("y", [2, 4])], [_vi("b", [2, 4]), _vi("d", [2, 4])])
    graph = load_graph(model)
    ok = apply_plan(model, graph, [PlanGroup(("A", "D"), "vector_chain")])
    onnx.checker.check_model(ok, full_check=True)
    plan = [PlanGroup(("A", "D"), "vector_chain"), PlanGroup(("B", "C"), "vector_chain")]
    with pytest.raises(AutotuneError, match="cycle"):
        apply_plan(model, graph, plan)


def test_graph_of_another_model_raises() -> None:
    model, _ = _chain()
    other = load_graph(_interface_model(), input_shapes={"x": (4, 8)})
    with pytest.raises(AutotuneError, match="not loaded from this model"):
        apply_plan(model, other, [PlanGroup(("mm", "bias"), "cube_epilogue")])


def test_every_tensor_between_fused_nodes_has_its_inferred_shape() -> None:
    """Viewers see shapes at the fused nodes: each output of a node of the fused model has a
    value_info, of the shape the tool itself read for it (its static graph)."""
    model = _zoo("bert-base")
    graph = load_graph(model)
    fused = apply_plan(model, graph, _max_plan(graph))
    given = {vi.name: vi.type.tensor_type for vi in [*fused.graph.value_info, *fused.graph.output]}
    outputs = [t for n in fused.graph.node for t in n.output if t]
    assert any(n.domain == "ai.autofusion" for n in fused.graph.node)
    for name in outputs:
        assert name in given, name
        dims = tuple(d.dim_value for d in given[name].shape.dim)
        assert dims == graph.tensors[name].shape, name
    onnx.checker.check_model(fused, full_check=True)
