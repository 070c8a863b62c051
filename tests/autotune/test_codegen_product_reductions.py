"""A product and a reduction of it in one kernel, checked against onnxruntime: a reduction of
the product's rows (``matmul_rows``: a projection and its norm, a classifier and its softmax)
and a pooling of its pixels, the rows of each of its columns (``matmul_cols``: a convolution
and its global pooling); a reduction that neither form holds runs as two kernels and stays
correct."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_helpers import check_whole, describe
from conftest import f32, i64, make, vi
from onnx import helper

from search_space.ir import KernelConfig

RNG = np.random.default_rng(2)
CUBE = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)


@pytest.mark.parametrize("base_n", [16, 128])  # three N tiles a row (looped), or one (whole)
def test_a_projection_and_the_norm_after_it_run_as_one_kernel(base_n: int, tmp_path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Add", ["p", "bias"], ["pb"], name="bias"),
        helper.make_node("Add", ["pb", "res"], ["s"], name="residual"),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1),
    ]
    inits = [f32("w", RNG.normal(size=[24, 40])), f32("bias", RNG.normal(size=[40])),
             f32("g", RNG.normal(1, 0.1, 40)), f32("b", RNG.normal(0, 0.1, 40))]  # fmt: skip
    model = make(nodes, [vi("x", [2, 7, 24]), vi("res", [2, 7, 40])],
                 [vi("s", [2, 7, 40]), vi("y", [2, 7, 40])], inits)  # fmt: skip
    config = KernelConfig(block_dim=3, base_m=4, base_n=base_n, base_k=16, m=4, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul_rows"]
    text = program.kernels[0].text
    assert ("for c0 in range" in text) == (base_n < 40) and "tl.debug_barrier()" in text


@pytest.mark.parametrize("kind", ["rmsnorm", "softmax"])
def test_a_row_reduction_of_a_product_hands_off_through_scratch(kind: str, tmp_path) -> None:
    mm = helper.make_node("Gemm", ["x", "w"], ["p"], name="gemm", transB=1)
    if kind == "softmax":  # a classifier: nothing but the probabilities leaves the kernel
        nodes = [mm, helper.make_node("Softmax", ["p"], ["y"], name="soft", axis=-1)]
        inits = []
    else:  # Llama's decomposed RMSNorm: the square is handed to the mean, p to the scaling
        nodes = [mm, helper.make_node("Pow", ["p", "two"], ["sq"], name="pow"),
                 helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean"),
                 helper.make_node("Add", ["ms", "eps"], ["v"], name="eps_add"),
                 helper.make_node("Sqrt", ["v"], ["rms"], name="sqrt"),
                 helper.make_node("Reciprocal", ["rms"], ["inv"], name="inv"),
                 helper.make_node("Mul", ["p", "inv"], ["n"], name="norm"),
                 helper.make_node("Mul", ["n", "g"], ["y"], name="scale")]  # fmt: skip
        inits = [f32("two", np.array(2.0)), i64("axes", [-1]), f32("eps", np.array(1e-5)),
                 f32("g", RNG.normal(1, 0.1, 36))]  # fmt: skip
    inits.append(f32("w", RNG.normal(size=[36, 20])))
    model = make(nodes, [vi("x", [9, 20])], [vi("y", [9, 36])], inits, opset=18)
    config = KernelConfig(block_dim=2, base_m=8, base_n=16, base_k=16, m=8, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    (kernel,) = program.kernels
    assert kernel.template == "matmul_rows" and kernel.scratch
    assert set(kernel.outputs) - {s.name for s in kernel.scratch} == {"y"}


def test_a_softmax_over_a_products_columns_runs_as_two_kernels(tmp_path) -> None:
    nodes = [  # square, so the sizes agree; the softmax's rows are the product's columns
        helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
        helper.make_node("Transpose", ["p"], ["t"], name="t", perm=[1, 0]),
        helper.make_node("Softmax", ["t"], ["y"], name="soft", axis=-1),
    ]
    model = make(nodes, [vi("x", [32, 32])], [vi("y", [32, 32])],
                 [f32("w", RNG.normal(size=[32, 32]))])  # fmt: skip
    config = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert "rows it owns" in program.unfused[0][1]


# (images, channels, side, groups, pool): a pool of 36 pixels in row tiles of 16; 64 channels
# on 8x8 (R = C = 64, where only the index tells rows from columns), the feature map an
# output too; a grouped convolution over two images (each group's channels a batch of the
# product); a ReduceSum that drops the pixel axes, then a Flatten and an activation
POOLS = [
    (1, 8, 6, 1, "GlobalAveragePool"),
    (1, 64, 8, 1, "GlobalMaxPool"),
    (2, 12, 5, 2, "ReduceMean"),
    (1, 40, 3, 1, "ReduceSum"),
]


def _pool(pool: str, images: int, channels: int) -> tuple[list[onnx.NodeProto], list[int]]:
    if pool.startswith("Global"):
        return [helper.make_node(pool, ["r"], ["y"], name="pool")], [images, channels, 1, 1]
    if pool == "ReduceMean":  # opset 17: axes an attribute
        node = helper.make_node(pool, ["r"], ["y"], name="pool", axes=[2, 3], keepdims=1)
        return [node], [images, channels, 1, 1]
    nodes = [helper.make_node(pool, ["r", "axes"], ["s"], name="pool", keepdims=0),
             helper.make_node("Flatten", ["s"], ["f"], name="flat"),
             helper.make_node("Sigmoid", ["f"], ["y"], name="gate")]  # fmt: skip
    return nodes, [images, channels]


@pytest.mark.parametrize(("images", "channels", "side", "groups", "pool"), POOLS)
def test_a_pooling_of_a_convolutions_pixels_is_one_kernel(
    images: int, channels: int, side: int, groups: int, pool: str, tmp_path
) -> None:
    nodes = [  # ResNet's last block: conv, batch norm, the shortcut, ReLU, the global pool
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], group=groups),
        helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"], name="bn"),
        helper.make_node("Add", ["bn", "short"], ["a"], name="shortcut"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
    ]
    pooled, out_shape = _pool(pool, images, channels)
    inits = [f32("w", RNG.normal(size=[channels, 4 // groups, 3, 3])),
             f32("g", RNG.normal(1, 0.1, channels)), f32("be", RNG.normal(0, 0.1, channels)),
             f32("mu", RNG.normal(0, 0.1, channels)), f32("var", RNG.uniform(0.5, 1.5, channels)),
             i64("axes", [2, 3])]  # fmt: skip
    fmap = [images, channels, side, side]
    outputs = [vi("y", out_shape)] + ([vi("r", fmap)] if pool == "GlobalMaxPool" else [])
    model = make([*nodes, *pooled], [vi("x", [images, 4, side, side]), vi("short", fmap)],
                 outputs, inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul_cols"]


def test_pools_of_a_product_in_two_row_orders_stay_correct(tmp_path) -> None:
    # found in review: both reductions pool the product's rows, one per (batch, column), the
    # other per (column, batch); one kernel would store both at the first one's rows
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Transpose", ["p"], ["t1"], name="t1", perm=[0, 2, 1]),
             helper.make_node("Transpose", ["p"], ["t2"], name="t2", perm=[2, 0, 1]),
             helper.make_node("ReduceSum", ["t1", "ax"], ["r1"], name="r1", keepdims=1),
             helper.make_node("ReduceMax", ["t2"], ["r2"], name="r2", axes=[-1],
                              keepdims=1)]  # fmt: skip
    model = make(nodes, [vi("x", [2, 6, 8])], [vi("r1", [2, 5, 1]), vi("r2", [5, 2, 1])],
                 [f32("w", RNG.normal(size=[8, 5])), i64("ax", [-1])])  # fmt: skip
    _, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
