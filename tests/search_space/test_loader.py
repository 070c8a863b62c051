"""The loader makes exporter graphs static without touching the user's compute ops."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import conv_bn_relu, exporter_attention, i64, make
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper
from oracles import random_feeds, run_all

from search_space import (
    DynamicShapeError,
    GraphError,
    ModelLoadError,
    OpClass,
    load_graph,
)


def _assert_shapes_match_runtime(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]):
    graph = load_graph(model, input_shapes=shapes)
    assert graph.dynamic_tensors == ()
    names = [t for t, ten in graph.tensors.items() if ten.kind == "intermediate"]
    got = run_all(model, random_feeds(model, shapes), names)
    for name in names:
        assert graph.tensors[name].static_shape == got[name].shape, name
    for name, value in graph.constants.items():  # every folded value is what the runtime computes
        if name in got:
            np.testing.assert_array_equal(value, got[name], err_msg=name)
    return graph


@settings(max_examples=15, deadline=None)
@given(batch=st.integers(1, 4), seq=st.integers(1, 33))
def test_attention_shapes_equal_onnxruntime(batch: int, seq: int) -> None:
    model = exporter_attention()
    _assert_shapes_match_runtime(model, {"x": (batch, seq, 16)})


def test_attention_folds_shape_math_and_keeps_compute_ops(attention_model) -> None:
    graph = load_graph(attention_model, input_shapes={"x": (2, 7, 16)})
    types = graph.op_type_histogram()
    for gone in ("Shape", "Gather", "Concat", "ConstantOfShape", "Equal", "Mod", "Constant"):
        assert gone not in types, gone
    assert types["MatMul"] == 5 and types["Softmax"] == 1 and types["IsNaN"] == 1
    assert graph.tensors["mask"].static_shape == (2, 1, 7, 7)
    assert graph.tensors["ctx"].static_shape == (2, 7, 16)
    original = {node.name for node in attention_model.graph.node}
    assert {op.name for op in graph.ops} <= original  # plans speak the user's op names
    assert graph.folded > 10


def test_compute_ops_are_not_rewritten(cnn_model) -> None:
    graph = load_graph(cnn_model, input_shapes={"img": (4, 3, 16, 16)})
    assert [op.op_type for op in graph.ops] == [
        "Conv",
        "BatchNormalization",
        "Relu",
        "GlobalAveragePool",
        "Flatten",
        "MatMul",
        "Add",
    ]
    assert graph.op("conv").op_class is OpClass.CUBE and graph.op("flatten").is_view
    assert graph.tensors["logits"].static_shape == (4, 10)


def test_conv_and_matmul_flops_by_hand(cnn_model) -> None:
    graph = load_graph(cnn_model, input_shapes={"img": (4, 3, 16, 16)})
    # Conv: out [4, 8, 8, 8]; each output needs 3*3*3 MACs, plus one bias add.
    assert graph.op("conv").cube_flops == 2 * (4 * 8 * 8 * 8) * 27 + 4 * 8 * 8 * 8
    assert graph.op("fc").cube_flops == 2 * 4 * 8 * 10
    assert graph.op("flatten").flops == 0 and graph.op("flatten").bytes == 0


def test_large_constant_subgraph_is_not_materialised() -> None:
    n = helper.make_node
    nodes = [
        n(
            "ConstantOfShape",
            ["mshape"],
            ["full"],
            name="cos",
            value=helper.make_tensor("v", T.FLOAT, [1], [1.0]),
        ),
        n("Trilu", ["full"], ["tri"], name="tril", upper=0),
        n("Add", ["x", "tri"], ["y"], name="add"),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 512, 512])
    y = helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 512, 512])
    graph = load_graph(make(nodes, [x], [y], [i64("mshape", [1, 1, 512, 512])]))
    assert [op.name for op in graph.ops] == ["cos", "tril", "add"]
    assert graph.op("cos").constant and graph.op("tril").constant and not graph.op("add").constant
    assert "full" not in graph.constants and graph.tensors["tri"].static_shape == (1, 1, 512, 512)


def test_old_opset9_with_attribute_forms_loads() -> None:
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"], name="shape"),
        n("Slice", ["s"], ["s01"], name="slice", starts=[0], ends=[2], axes=[0]),
        n("Concat", ["s01", "m1"], ["target"], name="cat", axis=0),
        n("Reshape", ["x", "target"], ["r"], name="reshape"),
        n("Unsqueeze", ["r"], ["u"], name="unsq", axes=[0]),
        n("Relu", ["u"], ["y"], name="relu"),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, ["a", 3, 4, 5])
    y = helper.make_tensor_value_info("y", T.FLOAT, None)
    model = make(nodes, [x], [y], [i64("m1", [-1])], opset=9)
    graph = _assert_shapes_match_runtime(model, {"x": (2, 3, 4, 5)})
    assert graph.tensors["y"].static_shape == (1, 2, 3, 20) and graph.opset == 9


def test_opset9_conv_bn() -> None:
    graph = load_graph(conv_bn_relu(opset=9), input_shapes={"img": (1, 3, 16, 16)})
    assert graph.tensors["logits"].static_shape == (1, 10)


def test_dynamic_inputs_are_named_with_the_flag(attention_model) -> None:
    with pytest.raises(DynamicShapeError) as err:
        load_graph(attention_model)
    msg = str(err.value)
    assert "x [batch, seq, 16]" in msg and "--input-shape x=1x1x16" in msg
    assert "\n" not in msg


def test_the_example_shapes_agree_with_dims_written_as_arithmetic() -> None:
    """A decode export names its mask's length `past + 1`: the example gives past 1 and that
    mask 2, so the example shapes fit together; a dim that is no arithmetic of names is 1."""
    past = helper.make_tensor_value_info("past", T.FLOAT, ["batch", 2, "past", 8])
    mask = helper.make_tensor_value_info("mask", T.INT64, ["batch", "past + 1"])
    odd = helper.make_tensor_value_info("odd", T.FLOAT, ["2*seq - 1", "f(x)", "__import__('os')"])
    y = helper.make_tensor_value_info("y", T.FLOAT, None)
    nodes = [helper.make_node("Identity", ["past"], ["y"], name="id")]
    graph = helper.make_graph(nodes, "g", [past, mask, odd], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(DynamicShapeError) as err:
        load_graph(model)
    msg = str(err.value)
    assert "--input-shape past=1x2x1x8" in msg and "--input-shape mask=1x2" in msg
    assert "--input-shape odd=1x1x1" in msg


@pytest.mark.parametrize(
    ("shapes", "needle"),
    [({"nope": (1,)}, "not a graph input"), ({"x": (2, 3)}, "rank"), ({"x": (2, 3, 8)}, "16")],
)
def test_bad_input_shapes(attention_model, shapes, needle) -> None:
    with pytest.raises(ModelLoadError, match=needle):
        load_graph(attention_model, input_shapes=shapes)


def test_unknown_op_is_opaque_and_kept() -> None:
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["a"], name="relu"),
        n("MyOp", ["a"], ["b"], name="custom", domain="com.example"),
        n("Relu", ["b"], ["y"], name="relu2"),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 4])
    model = make(nodes, [x], [y])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    graph = load_graph(model)
    assert graph.op("custom").op_class is OpClass.OPAQUE
    assert graph.dynamic_tensors == ("b",)  # nothing declares its shape: reported, not guessed
    model.graph.value_info.append(helper.make_tensor_value_info("b", T.FLOAT, [2, 4]))
    assert load_graph(model).dynamic_tensors == ()


def test_group_normalization_keeps_its_input_shape() -> None:
    """onnx infers no shape for GroupNormalization-21; its output (and all after it) had none,
    and its kernel went unverified (found by tests/reliability/test_fuzz.py)."""
    n = helper.make_node
    nodes = [
        n("GroupNormalization", ["x", "s", "b"], ["g"], name="gn", num_groups=2),
        n("Elu", ["g"], ["y"], name="elu"),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 4, 3, 5])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 4, 3, 5])
    ones = onnx.numpy_helper.from_array(np.ones(4, np.float32), "s")
    zeros = onnx.numpy_helper.from_array(np.zeros(4, np.float32), "b")
    model = make(nodes, [x], [y], [ones, zeros], opset=21)
    onnx.checker.check_model(model, full_check=True)
    graph = _assert_shapes_match_runtime(model, {})
    assert graph.tensors["g"].static_shape == (2, 4, 3, 5) and graph.op("gn").vector_flops > 0


def test_cycle_is_reported_by_op_names() -> None:
    n = helper.make_node
    nodes = [n("Add", ["x", "b"], ["a"], name="first"), n("Relu", ["a"], ["b"], name="second")]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2])
    y = helper.make_tensor_value_info("b", T.FLOAT, [2])
    with pytest.raises(
        GraphError, match=r"cycle: (first -> second -> first|second -> first -> second)"
    ):
        load_graph(make(nodes, [x], [y]))


def test_duplicate_tensor_is_reported() -> None:
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["a"], name="r1"), n("Neg", ["x"], ["a"], name="r2")]
    x = helper.make_tensor_value_info("x", T.FLOAT, [2])
    y = helper.make_tensor_value_info("a", T.FLOAT, [2])
    with pytest.raises(GraphError, match="'a' is produced by both 'r1' and 'r2'"):
        load_graph(make(nodes, [x], [y]))


def test_unsupported_opset_says_how_to_convert(cnn_model) -> None:
    cnn_model.opset_import[0].version = 7
    with pytest.raises(ModelLoadError, match=r"unsupported opset 7.*version_converter"):
        load_graph(cnn_model, input_shapes={"img": (1, 3, 16, 16)})


def test_file_errors(tmp_path, cnn_model) -> None:
    with pytest.raises(ModelLoadError, match="not found"):
        load_graph(tmp_path / "missing.onnx")
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is not a model")
    with pytest.raises(ModelLoadError, match="not a readable ONNX model"):
        load_graph(bad)
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(cnn_model.SerializeToString()[:200])
    with pytest.raises(ModelLoadError):
        load_graph(cut)


def test_external_data_is_read_from_the_model_folder(tmp_path, attention_model) -> None:
    path = tmp_path / "m.onnx"
    copy = onnx.ModelProto()
    copy.CopyFrom(attention_model)  # save_model moves the copy's weights out of the proto
    onnx.save_model(
        copy,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    shapes = {"x": (2, 5, 16)}
    assert (
        load_graph(path, input_shapes=shapes).summary()
        == load_graph(attention_model, input_shapes=shapes).summary()
    )
    (tmp_path / "m.data").unlink()
    with pytest.raises(ModelLoadError, match=r"external data file 'm\.data'"):
        load_graph(path, input_shapes=shapes)


def test_bytes_and_path_and_proto_agree(tmp_path, cnn_model) -> None:
    path = tmp_path / "c.onnx"
    onnx.save_model(cnn_model, str(path))
    shapes = {"img": (2, 3, 16, 16)}
    a = load_graph(cnn_model, input_shapes=shapes)
    b = load_graph(path.read_bytes(), input_shapes=shapes)
    c = load_graph(str(path), input_shapes=shapes)
    assert a.summary() == b.summary() == c.summary()
