"""Shared fixtures: tiny ONNX graphs written the way exporters write them (onnx.helper)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import settings
from onnx import TensorProto as T
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

EXPORTS = Path(__file__).parent / "fixtures" / "exports"
EXPORT_FILES = sorted(p.name for p in EXPORTS.glob("*.onnx"))
_TOKEN_MODELS = ("bert", "gpt2", "llama")


def export_shapes(name: str, batch: int, seq: int) -> dict[str, tuple[int, ...]]:
    """Input shapes for an exported fixture model, by its file name."""
    if name.startswith(_TOKEN_MODELS):
        return {"input_ids": (batch, seq), "attention_mask": (batch, seq)}
    if name.startswith("encoder_layer"):
        return {"x": (batch, seq, 32)}
    return {"image": (batch, 3, 32, 32)}


# CI draws the same examples on every run (a red build is reproducible and never depends on
# luck); local runs keep drawing new ones. `.ci/run` sets HYPOTHESIS_PROFILE=ci. No example has
# a deadline: a test's verdict never depends on how busy the machine is (Hypothesis's own
# default fails an example that takes over 200 ms).
settings.register_profile("dev", deadline=None)
# CI: the same examples every run, half of them (a property's default 100 run under "dev")
settings.register_profile(
    "ci", deadline=None, derandomize=True, database=None, print_blob=True, max_examples=50
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def i64(name: str, values: list[int] | int) -> onnx.TensorProto:
    arr = np.asarray(values, dtype=np.int64)
    return numpy_helper.from_array(arr, name)


def f32(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name)


def vi(name: str, shape: list[int], elem: int = T.FLOAT) -> onnx.ValueInfoProto:
    """A graph input's or output's type: ``elem`` (float32 unless said) of ``shape``."""
    return helper.make_tensor_value_info(name, elem, shape)


def make(nodes, inputs, outputs, inits=(), opset: int = 17, name: str = "g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def exporter_attention(hidden: int = 16, heads: int = 2) -> onnx.ModelProto:
    """One attention block as the legacy torch exporter writes it, batch/seq dynamic.

    Shape->Gather->Unsqueeze->Concat->Reshape head splits, a mask built with ConstantOfShape,
    Equal, Where and an Expand to a run-time shape, Div by sqrt(d), Softmax with an
    IsNaN/Where guard, and a Reshape with -1 whose size comes from Div.
    """
    rng = np.random.default_rng(0)
    d = hidden // heads
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["x_shape"], name="shape_x"),
        n("Gather", ["x_shape", "c0"], ["batch"], name="gather_b", axis=0),
        n("Gather", ["x_shape", "c1"], ["seq"], name="gather_s", axis=0),
        n("Unsqueeze", ["batch", "ax0"], ["batch_u"], name="unsq_b"),
        n("Unsqueeze", ["seq", "ax0"], ["seq_u"], name="unsq_s"),
        n(
            "Concat",
            ["batch_u", "seq_u", "heads", "dh"],
            ["split_shape"],
            name="cat_split",
            axis=0,
        ),
        n("MatMul", ["x", "wq"], ["q0"], name="q_proj"),
        n("Add", ["q0", "bq"], ["q1"], name="q_bias"),
        n("Reshape", ["q1", "split_shape"], ["q2"], name="q_split"),
        n("Transpose", ["q2"], ["q"], name="q_t", perm=[0, 2, 1, 3]),
        n("MatMul", ["x", "wk"], ["k0"], name="k_proj"),
        n("Reshape", ["k0", "split_shape"], ["k2"], name="k_split"),
        n("Transpose", ["k2"], ["kt"], name="k_t", perm=[0, 2, 3, 1]),
        n("MatMul", ["q", "kt"], ["scores0"], name="qk"),
        n(
            "Constant",
            [],
            ["sqrt_d"],
            name="const_sqrt",
            value=helper.make_tensor("v", T.FLOAT, [], [float(np.sqrt(d))]),
        ),
        n("Div", ["scores0", "sqrt_d"], ["scores1"], name="scale"),
        # mask: ones of shape [batch, seq] -> Equal(mask, 0) -> Where(-inf, 0) -> Expand
        n("Concat", ["batch_u", "seq_u"], ["mask_shape"], name="cat_mask", axis=0),
        n(
            "ConstantOfShape",
            ["mask_shape"],
            ["ones"],
            name="cos_mask",
            value=helper.make_tensor("one", T.INT64, [1], [1]),
        ),
        n("Equal", ["ones", "c0"], ["is_pad"], name="eq_mask"),
        n("Where", ["is_pad", "neg_inf", "zero_f"], ["mask2d"], name="where_mask"),
        n("Unsqueeze", ["mask2d", "ax12"], ["mask4d"], name="unsq_mask"),
        n("Concat", ["batch_u", "one", "seq_u", "seq_u"], ["exp_shape"], name="cat_exp", axis=0),
        n("Expand", ["mask4d", "exp_shape"], ["mask"], name="expand_mask"),
        n("Add", ["scores1", "mask"], ["scores"], name="add_mask"),
        n("Softmax", ["scores"], ["probs0"], name="softmax", axis=-1),
        n("IsNaN", ["probs0"], ["nan"], name="isnan"),
        n("Where", ["nan", "zero_f", "probs0"], ["probs"], name="nan_guard"),
        n("MatMul", ["probs", "q"], ["ctx0"], name="pv"),
        n("Transpose", ["ctx0"], ["ctx1"], name="ctx_t", perm=[0, 2, 1, 3]),
        # merge heads: [batch, seq, -1] with -1 from hidden // 1 via Div on a Shape
        n("Shape", ["ctx1"], ["ctx_shape"], name="shape_ctx"),
        n("Gather", ["ctx_shape", "c2"], ["nh"], name="gather_h", axis=0),
        n("Gather", ["ctx_shape", "c3"], ["hd"], name="gather_d", axis=0),
        n("Mul", ["nh", "hd"], ["hid"], name="mul_hd"),
        n("Div", ["hid", "c1"], ["hid1"], name="div_hd"),
        n("Mod", ["hid1", "big"], ["hid2"], name="mod_hd"),
        n("Unsqueeze", ["hid2", "ax0"], ["hid_u"], name="unsq_h"),
        n("Concat", ["batch_u", "minus1", "hid_u"], ["merge_shape"], name="cat_merge", axis=0),
        n("Reshape", ["ctx1", "merge_shape"], ["ctx"], name="merge"),
        n("MatMul", ["ctx", "wo"], ["y"], name="o_proj"),
    ]
    inits = [
        i64("c0", 0),
        i64("c1", 1),
        i64("c2", 2),
        i64("c3", 3),
        i64("ax0", [0]),
        i64("ax12", [1, 2]),
        i64("heads", [heads]),
        i64("dh", [d]),
        i64("one", [1]),
        i64("minus1", [-1]),
        i64("big", 1 << 20),
        f32("neg_inf", np.float32(-np.inf)),
        f32("zero_f", np.float32(0)),
        f32("wq", rng.standard_normal((hidden, hidden)) * 0.1),
        f32("bq", rng.standard_normal(hidden) * 0.1),
        f32("wk", rng.standard_normal((hidden, hidden)) * 0.1),
        f32("wo", rng.standard_normal((hidden, hidden)) * 0.1),
    ]
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", "seq", hidden])
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", hidden])
    return make(nodes, [x], [y], inits, name="attention")


def conv_bn_relu(opset: int = 17) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> MatMul+Add head: ops that must not be rewritten."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    nodes = [
        n("Conv", ["img", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        n("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"], name="bn"),
        n("Relu", ["bn"], ["r"], name="relu"),
        n("GlobalAveragePool", ["r"], ["p"], name="gap"),
        n("Flatten", ["p"], ["f"], name="flatten", axis=1),
        n("MatMul", ["f", "fc_w"], ["fc"], name="fc"),
        n("Add", ["fc", "fc_b"], ["logits"], name="fc_bias"),
    ]
    inits = [
        f32("w", rng.standard_normal((8, 3, 3, 3)) * 0.2),
        f32("b", np.zeros(8)),
        f32("s", np.ones(8)),
        f32("bb", np.zeros(8)),
        f32("m", np.zeros(8)),
        f32("v", np.ones(8)),
        f32("fc_w", rng.standard_normal((8, 10))),
        f32("fc_b", np.zeros(10)),
    ]
    img = helper.make_tensor_value_info("img", T.FLOAT, ["N", 3, 16, 16])
    out = helper.make_tensor_value_info("logits", T.FLOAT, ["N", 10])
    return make(nodes, [img], [out], inits, opset=opset, name="cnn")


@pytest.fixture
def attention_model() -> onnx.ModelProto:
    return exporter_attention()


@pytest.fixture
def cnn_model() -> onnx.ModelProto:
    return conv_bn_relu()


def weight_inputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """Mark graph inputs as weights (what the zoo's weights=inputs mode does)."""
    import json

    entry = model.metadata_props.add()
    entry.key, entry.value = "ai.autofusion.weight_inputs", json.dumps(names)
    return model


def bert_ffn_block(tokens: int = 4096, hidden: int = 768, ffn: int = 3072) -> onnx.ModelProto:
    """BERT-base shapes: MatMul -> Add(bias) -> Relu, and MatMul -> Add(residual) -> LayerNorm.

    Weights are graph inputs (shape-only), as in the zoo's weights=inputs mode.
    """
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w1"], ["h0"], name="up"),
        n("Add", ["h0", "b1"], ["h1"], name="up_bias"),
        n("Relu", ["h1"], ["h"], name="relu"),
        n("MatMul", ["h", "w2"], ["y0"], name="down"),
        n("Add", ["y0", "x"], ["y1"], name="residual"),
        n("LayerNormalization", ["y1", "g", "beta"], ["y"], name="ln", axis=-1),
    ]
    vi = helper.make_tensor_value_info
    ins = [
        vi("x", T.FLOAT, [tokens, hidden]),
        vi("w1", T.FLOAT, [hidden, ffn]),
        vi("b1", T.FLOAT, [ffn]),
        vi("w2", T.FLOAT, [ffn, hidden]),
        vi("g", T.FLOAT, [hidden]),
        vi("beta", T.FLOAT, [hidden]),
    ]
    out = [vi("y", T.FLOAT, [tokens, hidden])]
    return weight_inputs(make(nodes, ins, out, name="ffn"), ["w1", "b1", "w2", "g", "beta"])


def weight_matmul(m: int, k: int, n: int, batch: int = 0) -> onnx.ModelProto:
    """``y = x @ W`` in fp16, W a weight [K, N]; x [M, K], or [batch, M, K] when given."""
    rows = [batch, m] if batch else [m]
    ins = [
        helper.make_tensor_value_info("x", T.FLOAT16, [*rows, k]),
        helper.make_tensor_value_info("w", T.FLOAT16, [k, n]),
    ]
    out = [helper.make_tensor_value_info("y", T.FLOAT16, [*rows, n])]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return weight_inputs(make(nodes, ins, out), ["w"])


def rmsnorm_model(rows: int, cols: int) -> onnx.ModelProto:
    """y = x / sqrt(mean(x^2) + eps) * gamma in fp16, as exporters write it."""
    x = helper.make_tensor_value_info("x", T.FLOAT16, [rows, cols])
    y = helper.make_tensor_value_info("y", T.FLOAT16, [rows, cols])
    gamma = helper.make_tensor("gamma", T.FLOAT16, [cols], [1.0] * cols)
    eps = helper.make_tensor("eps", T.FLOAT16, [], [1e-5])
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="sq"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean", keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"], name="add"),
        helper.make_node("Sqrt", ["mse"], ["rms"], name="sqrt"),
        helper.make_node("Div", ["x", "rms"], ["xn"], name="div"),
        helper.make_node("Mul", ["xn", "gamma"], ["y"], name="scale"),
    ]
    return make(nodes, [x], [y], [gamma, eps, i64("axes", [1])], opset=18, name="rms")


@pytest.fixture(autouse=True)
def _codegen_check_budget(request, monkeypatch):
    """Studies in tests skip safe mode's generated-code check (policy codegen_check = auto:
    its work budget is set to 0) unless the test file is about code generation: each check runs
    the kernels under Triton's CPU interpreter, tens of seconds per study, and
    tests/autotune/test_safety_codegen.py covers it. The tests of the packages below the tuner
    run no study and never load it (tests/test_architecture.py: they import only their own
    package and those below)."""
    path = Path(str(request.node.fspath))
    if "codegen" in path.name or path.parent.name in ("search_space", "costmodel"):
        return
    monkeypatch.setattr("autotune.tuner.safety_codegen.CODEGEN_CHECK_FLOPS", 0)
