"""Each template on graphs built for it: generated kernels against onnxruntime, on the
paths a zoo model may not take (looped reductions, Gemm's transposes and scalars, grouped and
dilated convolutions, pooling's padding rules, split attention, grouped-query heads), and
the groups a template must refuse, which then run as their ops and stay correct."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from causal_masks import grouped_attention
from codegen_helpers import check_groups, check_whole, describe
from conftest import f32, i64, make, vi
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from autotune.codegen import build_program
from autotune.codegen.check import check_package
from autotune.codegen.execute import load_package
from autotune.codegen.package import write_package
from search_space import load_graph
from search_space.ir import KernelConfig, make_group

FEW = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("ub_cols", [16, 24, 128])
def test_add_layernorm_and_softmax_rows_looped_or_whole(ub_cols: int, tmp_path) -> None:
    nodes = [
        helper.make_node("Add", ["x", "r"], ["s"], name="add"),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1),
        helper.make_node("Softmax", ["y"], ["p"], name="soft", axis=-1),
    ]
    inits = [f32("g", RNG.normal(1, 0.1, 80)), f32("b", RNG.normal(0, 0.1, 80))]
    model = make(nodes, [vi("x", [2, 5, 80]), vi("r", [1, 5, 80])],
                 [vi("s", [2, 5, 80]), vi("p", [2, 5, 80])], inits)  # fmt: skip
    config = KernelConfig(block_dim=3, ub_rows=4, ub_cols=ub_cols)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and len(program.kernels) == 1
    looped = "for c0 in range" in program.kernels[0].text
    assert looped == (ub_cols < 80)


def test_a_reduction_over_a_leading_axis_runs_as_its_ops(tmp_path) -> None:
    nodes = [
        helper.make_node("Exp", ["x"], ["e"], name="exp"),
        helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
        helper.make_node("Div", ["e", "s"], ["y"], name="div"),
    ]
    model = make(nodes, [vi("x", [6, 4, 8])], [vi("y", [6, 4, 8])], [i64("axes", [0])])
    program, result = check_whole(model, KernelConfig(block_dim=2, ub_rows=2, ub_cols=8), tmp_path)
    assert result.ok, describe(result)
    assert program.unfused and "not the last" in program.unfused[0][1]


@pytest.mark.parametrize(("ta", "tb", "alpha", "beta", "c_shape"), [
    (0, 0, 1.0, 1.0, [24]), (1, 0, 0.5, 2.0, [10, 1]), (0, 1, 1.0, 0.0, [10, 24]),
    (1, 1, -1.5, 1.0, [1]),
])  # fmt: skip
def test_gemm_transposes_scalars_and_bias(ta, tb, alpha, beta, c_shape, tmp_path) -> None:
    a_shape, b_shape = ([40, 10] if ta else [10, 40]), ([24, 40] if tb else [40, 24])
    node = helper.make_node("Gemm", ["a", "w", "c"], ["g"], name="gemm", transA=ta,
                            transB=tb, alpha=alpha, beta=beta)  # fmt: skip
    relu = helper.make_node("Relu", ["g"], ["y"], name="relu")
    inits = [f32("w", RNG.normal(size=b_shape)), f32("c", RNG.normal(size=c_shape))]
    model = make([node, relu], [vi("a", a_shape)], [vi("y", [10, 24])], inits)
    config = KernelConfig(block_dim=4, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert [k.template for k in program.kernels] == ["matmul"]


def test_batched_matmul_broadcasts_and_shares_its_input(tmp_path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("MatMul", ["x", "w2"], ["b"], name="mm2"),
        helper.make_node("Sigmoid", ["a"], ["sa"], name="sig"),
        helper.make_node("Mul", ["a", "sa"], ["silu"], name="mul1"),
        helper.make_node("Mul", ["silu", "b"], ["y"], name="mul2"),
    ]
    inits = [f32(w, RNG.normal(size=[3, 1, 12, 20])) for w in ("w1", "w2")]
    model = make(nodes, [vi("x", [2, 7, 12])], [vi("y", [3, 2, 7, 20])], inits)
    config = KernelConfig(block_dim=5, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    text = program.kernels[0].text
    assert text.count("tl.dot(") == 2 and text.count("for k0 in range") == 1


@FEW
@given(
    groups=st.sampled_from([1, 2, 4]), kernel=st.integers(1, 3), stride=st.integers(1, 2),
    dilation=st.integers(1, 2), pad=st.integers(0, 2), bias=st.booleans(),
)  # fmt: skip
def test_convolution_as_implicit_gemm_with_bn_and_relu(
    groups, kernel, stride, dilation, pad, bias, tmp_path_factory
) -> None:
    cin, cout = 4, 8
    w = f32("w", RNG.normal(size=[cout, cin // groups, kernel, kernel]) / 3)
    ins = ["x", "w", "cb"] if bias else ["x", "w"]
    conv = helper.make_node("Conv", ins, ["c"], name="conv", group=groups, strides=[stride] * 2,
                            dilations=[dilation] * 2, pads=[pad] * 4)  # fmt: skip
    bn = helper.make_node("BatchNormalization", ["c", "s", "o", "mu", "var"], ["n"], name="bn")
    relu = helper.make_node("Relu", ["n"], ["y"], name="relu")
    params = [f32(k, RNG.normal(1 if k in ("s", "var") else 0, 0.1, cout) ** (2 if k == "var"
                                                                          else 1))
              for k in ("s", "o", "mu", "var", "cb")]  # fmt: skip
    probe = make([conv], [vi("x", [2, cin, 9, 9])], [vi("c", None)], [w, *params])
    out = onnx.shape_inference.infer_shapes(probe).graph.output[0].type.tensor_type.shape
    shape = [d.dim_value for d in out.dim]
    if min(shape) <= 0:
        return
    model = make([conv, bn, relu], [vi("x", [2, cin, 9, 9])], [vi("y", shape)], [w, *params])
    config = KernelConfig(block_dim=6, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path_factory.mktemp("conv"))
    assert result.ok, describe(result)
    assert not program.unfused


@FEW
@given(
    kind=st.sampled_from(["MaxPool", "AveragePool"]), kernel=st.integers(2, 3),
    stride=st.integers(1, 3), pad=st.integers(0, 1), ceil=st.integers(0, 1),
    include=st.integers(0, 1),
)  # fmt: skip
def test_pooling_windows_padding_and_ceil_mode(
    kind, kernel, stride, pad, ceil, include, tmp_path_factory
) -> None:
    attrs = {"kernel_shape": [kernel] * 2, "strides": [stride] * 2, "pads": [pad] * 4,
             "ceil_mode": ceil}  # fmt: skip
    if kind == "AveragePool":
        attrs["count_include_pad"] = include
    pool = helper.make_node(kind, ["x"], ["p"], name="pool", **attrs)
    probe = make([pool], [vi("x", [1, 3, 7, 8])], [vi("p", None)])
    dims = onnx.shape_inference.infer_shapes(probe).graph.output[0].type.tensor_type.shape.dim
    # onnxruntime drops a ceil-mode window that starts in the end padding, onnx's shape
    # inference keeps it: the two disagree on the output's shape, so no oracle there
    assume(
        all(
            (d.dim_value - 1) * stride < size + pad
            for d, size in zip(dims[2:], (7, 8), strict=True)
        )
    )
    model = make([pool, helper.make_node("Neg", ["p"], ["y"], name="neg")],
                 [vi("x", [1, 3, 7, 8])], [vi("y", [d.dim_value for d in dims])])  # fmt: skip
    program, result = check_whole(model, KernelConfig(block_dim=3, ub_rows=1, ub_cols=32),
                                 tmp_path_factory.mktemp("pool"))  # fmt: skip
    assert result.ok, describe(result)
    assert not program.unfused


@pytest.mark.parametrize(("split", "sq", "sk"), [(1, 9, 9), (2, 9, 40), (3, 1, 40), (4, 2, 70)])
def test_attention_with_grouped_queries_a_causal_mask_and_a_key_split(
    split, sq, sk, tmp_path
) -> None:
    model = grouped_attention(4, 2, sq, sk)
    config = KernelConfig(block_dim=8, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16,
                          knobs=(("kv_split", split), ("kv_tile", 16)))  # fmt: skip
    program, result = check_whole(model, config, tmp_path, kind="attention")
    assert result.ok, describe(result)
    templates = [k.template for k in program.kernels]
    attention = [k for k in program.kernels if k.template == "attention"]
    assert len(attention) == (1 if split == 1 else 2), templates
    assert all(len(k.ops) > 1 for k in attention)


def test_an_epilogue_that_reads_the_product_off_its_tile_runs_as_its_ops(tmp_path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
        helper.make_node("Slice", ["a", "s0", "s1", "ax"], ["lo"], name="lo"),
        helper.make_node("Slice", ["a", "s1", "s2", "ax"], ["hi"], name="hi"),
        helper.make_node("Neg", ["hi"], ["nh"], name="neg"),
        helper.make_node("Concat", ["nh", "lo"], ["y"], name="rot", axis=-1),
    ]
    inits = [f32("w", RNG.normal(size=[8, 16])), i64("s0", [0]), i64("s1", [8]),
             i64("s2", [16]), i64("ax", [-1])]  # fmt: skip
    model = make(nodes, [vi("x", [5, 8])], [vi("y", [5, 16])], inits)
    config = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert "off its tile" in program.unfused[0][1]
    assert {k.template for k in program.kernels} == {"matmul", "pointwise"}


def test_a_model_with_an_empty_tensor_runs_in_the_framework(tmp_path) -> None:
    from codegen_helpers import check_plan

    model = make([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [0, 4])],
                 [vi("y", [0, 4])])  # fmt: skip
    gen, result = check_plan(model, "greedy", tmp_path / "pkg")
    assert result.ok and not gen.program.kernels and len(gen.program.externs) == 1


def test_a_config_with_more_programs_than_cores_is_refused_naming_the_group() -> None:
    from autotune.codegen import CodegenError
    from autotune.codegen.generate import check_cores
    from autotune.estimate import plan_kernels
    from costmodel.spec import load_target
    from search_space.zoo.catalog import build

    graph = load_graph(build("bert-base", weights="random", scale=0.05, layers=1, seq_len=8))
    target = load_target("ascend910b", (), "auto")
    _, kernels = plan_kernels(graph, "greedy", target)
    check_cores(kernels, target.spec)  # the plan's own configs fit
    cube = next(i for i, k in enumerate(kernels) if k.unit == "cube")
    too_many = dataclasses.replace(kernels[cube].config, block_dim=target.spec.cube_cores + 1)
    kernels[cube] = dataclasses.replace(kernels[cube], config=too_many)
    with pytest.raises(CodegenError, match=rf"group {cube} .*{kernels[cube].ops[0]}"):
        check_cores(kernels, target.spec)


def test_a_package_is_written_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    from autotune.codegen import package

    model = make([helper.make_node("Relu", ["x"], ["y"], name="relu")], [vi("x", [3, 4])],
                 [vi("y", [3, 4])])  # fmt: skip
    graph = load_graph(model)

    group = make_group(graph, ["relu"])
    program = build_program(graph, [group], [KernelConfig(block_dim=2, ub_rows=1, ub_cols=8)])

    def broken(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(package.np, "savez", broken)
    with pytest.raises(OSError):
        package.write_package(tmp_path / "pkg", model, program, {})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["slot", "diagonal", "shuffled"])
def test_a_kv_cache_update_scatters_in_a_kernel(kind: str, tmp_path) -> None:
    b, h, slots, d = 2, 3, 6, 8
    idx = np.zeros((b, h, 1, 3), np.int64)
    idx[..., 0] = np.arange(b)[:, None, None]
    idx[..., 1] = np.arange(h)[None, :, None]
    idx[..., 2] = {"slot": -2, "diagonal": np.arange(h)[None, :, None],
                   "shuffled": np.array([[5, 0, 3], [1, 4, 2]])[:, :, None]}[kind]  # fmt: skip
    nodes = [
        helper.make_node("Mul", ["new", "two"], ["upd"], name="scale"),
        helper.make_node("ScatterND", ["past", "slot", "upd"], ["present"], name="scatter"),
    ]
    model = make(nodes, [vi("past", [b, h, slots, d]), vi("new", [b, h, 1, d])],
                 [vi("present", [b, h, slots, d])],
                 [i64("slot", idx), f32("two", np.float32(2.0))])  # fmt: skip
    program, result = check_whole(model, KernelConfig(block_dim=4, ub_rows=1, ub_cols=32),
                                 tmp_path)  # fmt: skip
    assert result.ok, describe(result)
    # shuffled slots name no row by its index: the scatter runs in the framework
    assert bool(program.externs) == (kind == "shuffled")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_average_pool_counts_automatic_padding_on_both_sides(auto_pad: str, tmp_path) -> None:
    pool = helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[3, 2],
                            strides=[2, 3], auto_pad=auto_pad, count_include_pad=1)  # fmt: skip
    model = make([pool], [vi("x", [1, 2, 8, 7])], [vi("y", [1, 2, 4, 3])])
    program, result = check_whole(model, KernelConfig(block_dim=2, ub_rows=1, ub_cols=16),
                                 tmp_path)  # fmt: skip
    assert result.ok, describe(result)
    assert not program.unfused and not program.externs


@pytest.mark.parametrize(
    ("precision", "operands"), [("auto", "float16"), ("fp16", "float16"), ("fp32", "float32")]
)
def test_products_take_their_operands_in_the_plans_precision(
    precision: str, operands: str, tmp_path
) -> None:
    import torch

    x, w = RNG.normal(size=[24, 96]), RNG.normal(size=[96, 20])
    model, program = _matmul_at(precision, w)
    (kernel,) = program.kernels
    assert kernel.dot_dtype == operands and f"{operands} operands" in kernel.text
    path = write_package(tmp_path / "pkg", model, program, {"model": "test"})
    got = load_package(path).run({"x": x.astype(np.float32)})["y"]

    def rounded(a: np.ndarray) -> np.ndarray:  # float32, then the operand format
        return torch.from_numpy(a.astype(np.float32)).to(getattr(torch, operands)).double().numpy()

    want = rounded(x) @ rounded(w)  # float64 sums of the rounded operands: the cube's result
    rtol = 1e-5
    if precision == "fp16":  # stored in float16 too (test_codegen_precision): within an ulp
        want, rtol = torch.from_numpy(want).to(torch.float16).double().numpy(), 2.0**-10
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    assert check_package(path, model, program).ok  # within the operand format's tolerance


def test_bfloat16_products_are_written_but_not_checked_on_the_interpreter(tmp_path) -> None:
    from autotune.codegen import CodegenError

    model, program = _matmul_at("bf16", RNG.normal(size=[96, 20]))
    (kernel,) = program.kernels
    assert kernel.dot_dtype == "bfloat16" and ".to(tl.bfloat16)" in kernel.text
    path = write_package(tmp_path / "pkg", model, program, {"model": "test"})
    with pytest.raises(CodegenError, match=f"{kernel.name} computes in bfloat16"):
        check_package(path, model, program)


def _matmul_at(precision: str, w: np.ndarray):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = make([node], [vi("x", [24, 96])], [vi("y", [24, 20])], [f32("w", w)])
    graph = load_graph(model)
    config = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=32, m=16, n=16, k=32)
    return model, build_program(graph, [make_group(graph, ["mm"])], [config], precision=precision)


def test_an_integer_product_keeps_its_values_at_precision_auto(tmp_path) -> None:
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    # odd weights past 2048, which float16 cannot hold: a float16 product would be off
    odd = 2 * RNG.integers(1025, 2048, 240) + 1
    w = helper.make_tensor("w", T.INT32, [20, 12], (odd * RNG.choice([-1, 1], 240)).tolist())
    model = make([node], [vi("x", [9, 20], T.INT32)], [vi("y", [9, 12], T.INT32)], [w])
    graph = load_graph(model)
    config = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program = build_program(graph, [make_group(graph, ["mm"])], [config], precision="auto")
    assert program.kernels[0].dot_dtype == "float32"
    path = write_package(tmp_path / "pkg", model, program, {"model": "test"})
    assert check_package(path, model, program).ok  # integers compared exactly


def test_products_of_different_widths_run_side_by_side_in_one_kernel(tmp_path) -> None:
    nodes = [  # grouped-query projections: K and V narrower than Q, each with its epilogue
        helper.make_node("MatMul", ["x", "wq"], ["q0"], name="q_proj"),
        helper.make_node("Add", ["q0", "bq"], ["q"], name="q_bias"),
        helper.make_node("MatMul", ["x", "wk"], ["k0"], name="k_proj"),
        helper.make_node("Relu", ["k0"], ["k"], name="k_act"),
        helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj"),
    ]
    inits = [f32("wq", RNG.normal(size=[24, 40])), f32("bq", RNG.normal(size=[40])),
             f32("wk", RNG.normal(size=[24, 16])),
             f32("wv", RNG.normal(size=[24, 12]))]  # fmt: skip
    model = make(nodes, [vi("x", [2, 6, 24])], [vi("q", [2, 6, 40]), vi("k", [2, 6, 16]),
                 vi("v", [2, 6, 12])], inits)  # fmt: skip
    config = KernelConfig(block_dim=3, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]
    assert program.kernels[0].text.count("tl.dot(") == 3  # one K loop per product's tiles


def test_an_output_of_two_products_of_different_widths_runs_as_several_kernels(tmp_path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("Concat", ["q", "k"], ["y"], name="cat", axis=-1),
    ]
    inits = [f32("wq", RNG.normal(size=[24, 40])), f32("wk", RNG.normal(size=[24, 16]))]
    model = make(nodes, [vi("x", [6, 24])], [vi("y", [6, 56])], inits)
    config = KernelConfig(block_dim=3, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert "made from 2 products" in program.unfused[0][1]


def test_a_view_between_two_ops_of_a_group_is_the_groups(tmp_path) -> None:
    # found by fuzzing: the plan leaves the Flatten between the reduction and the Add out of
    # their group; the kernel must take it in, or it reads its own output through a later step
    nodes = [
        helper.make_node("ReduceSumSquare", ["x"], ["s"], name="sq", axes=[2], keepdims=1),
        helper.make_node("Flatten", ["s"], ["f"], name="flat", axis=1),
        helper.make_node("Add", ["f", "b"], ["y"], name="add"),
    ]
    model = make(nodes, [vi("x", [3, 4, 5])], [vi("s", [3, 4, 1]), vi("y", [3, 4])],
                 [f32("b", RNG.normal(size=[4]))], opset=12)  # fmt: skip
    graph = load_graph(model)
    group = make_group(graph, ["sq", "add"])  # the view left out, as the plan had it
    program, result = check_groups(model, [group], [KernelConfig(block_dim=2, ub_rows=4)],
                                   tmp_path / "pkg")  # fmt: skip
    assert result.ok, describe(result)
    assert len(program.kernels) == 1 and "flat" in program.kernels[0].ops


def test_float32_made_from_float16_is_held_to_float16s_tolerance(tmp_path) -> None:
    # found by fuzzing (opset 12, float16): onnxruntime's float32 Cast of GlobalMaxPool's
    # float16 output came out a float16 ulp off the value the generated kernel casts exactly
    h = T.FLOAT16
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["p"], name="pow"),
        helper.make_node("Unsqueeze", ["p"], ["u"], name="unsq", axes=[0]),
        helper.make_node("GlobalAveragePool", ["u"], ["gap"], name="gap"),
        helper.make_node("GlobalMaxPool", ["gap"], ["gmp"], name="gmp"),
        helper.make_node("Cast", ["gmp"], ["y"], name="cast", to=T.FLOAT),
    ]
    two = helper.make_tensor("two", h, [], [2.0])
    model = make(nodes, [vi("x", [16, 8], h)], [vi("u", [1, 16, 8], h), vi("y", [1, 16, 1])],
                 [two], opset=12)  # fmt: skip
    graph = load_graph(model)
    groups = [make_group(graph, ["pow", "unsq", "gap"]), make_group(graph, ["gmp", "cast"])]
    _, result = check_groups(model, groups, [KernelConfig(block_dim=2, ub_rows=4)] * 2,
                                   tmp_path / "pkg")  # fmt: skip
    assert result.ok, describe(result)


@pytest.mark.parametrize("split", [1, 2])
def test_the_exporters_nan_guard_after_the_softmax_stays_in_the_attention(
    split: int, tmp_path
) -> None:
    """SDPA's decomposition writes Where(IsNaN(p), 0, p) before the second matmul: a fully
    masked row is zeros, not NaN (onnxruntime's answer), in one kernel (or split and
    combined)."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Add", ["s", "mask"], ["sm"], name="mask"),
        helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
        helper.make_node("IsNaN", ["p"], ["bad"], name="isnan"),
        helper.make_node("Where", ["bad", "zero", "p"], ["pg"], name="guard"),
        helper.make_node("MatMul", ["pg", "v"], ["o"], name="pv"),
    ]
    mask = np.zeros([6, 32], dtype=np.float32)
    mask[2, :] = -np.inf  # a fully masked query
    mask[4, 20:] = -np.inf
    inits = [f32("mask", mask), f32("zero", np.array(0.0))]
    model = make(nodes, [vi("q", [2, 6, 16]), vi("k", [2, 32, 16]), vi("v", [2, 32, 16])],
                 [vi("o", [2, 6, 16])], inits)  # fmt: skip
    config = KernelConfig(block_dim=4, base_m=16, base_n=16, base_k=16,
                          knobs=(("kv_tile", 16), ("kv_split", split)))  # fmt: skip
    program, result = check_whole(model, config, tmp_path, kind="attention")
    assert result.ok, describe(result)
    assert not program.unfused and len(program.kernels) == split
