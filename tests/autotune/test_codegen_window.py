"""A convolution and the window after it in one kernel of overlapping bands
(``matmul_window``), checked against onnxruntime: ResNet's stem (conv 7x7 stride 2, batch norm,
ReLU, max pool 3x3 stride 2) over several images and core counts, an average pool with an
activation after it, a 1x1 expansion and a depthwise 3x3 convolution, a conv output the
group also returns; and the bands' geometry against the window's own definition."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_helpers import check_whole, describe
from conftest import f32, make, vi
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from autotune.codegen.templates.matmul_window import Band
from search_space.ir import KernelConfig

RNG = np.random.default_rng(5)


def _cube(block_dim: int) -> KernelConfig:
    return KernelConfig(block_dim=block_dim, base_m=16, base_n=16, base_k=32, m=16, n=16, k=32)


def _stem(images: int, side: int, keep_relu: bool) -> onnx.ModelProto:
    ch = 8
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[7, 7],
                         strides=[2, 2], pads=[3, 3, 3, 3]),
        helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    inits = [f32("w", RNG.normal(size=[ch, 3, 7, 7]) / 8), f32("g", RNG.uniform(0.5, 2, ch)),
             f32("b", RNG.normal(size=ch)), f32("mu", RNG.normal(size=ch)),
             f32("var", RNG.uniform(0.5, 2, ch))]  # fmt: skip
    half, quarter = (side + 1) // 2, (side + 3) // 4
    outputs = [vi("y", [images, ch, quarter, quarter])]
    if keep_relu:
        outputs.append(vi("r", [images, ch, half, half]))
    return make(nodes, [vi("x", [images, 3, side, side])], outputs, inits)


@pytest.mark.parametrize(
    ("images", "side", "block_dim", "keep_relu"),
    [(1, 32, 24, False), (2, 30, 3, False), (3, 17, 1, True), (1, 32, 5, True)],
)
def test_resnets_stem_runs_as_one_kernel_of_overlapping_bands(
    images: int, side: int, block_dim: int, keep_relu: bool, tmp_path
) -> None:
    program, result = check_whole(_stem(images, side, keep_relu), _cube(block_dim), tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused
    assert [k.template for k in program.kernels] == ["matmul_window"]
    assert program.kernels[0].launch.grid <= block_dim


@pytest.mark.parametrize("include_pad", [0, 1])
def test_an_average_pool_and_the_activation_after_it_join_the_convolution(
    include_pad: int, tmp_path
) -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c"], ["a"], name="pool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=include_pad),
        helper.make_node("Sigmoid", ["a"], ["y"], name="act"),
    ]  # fmt: skip
    inits = [f32("w", RNG.normal(size=[12, 4, 3, 3])), f32("bias", RNG.normal(size=12))]
    model = make(nodes, [vi("x", [2, 4, 11, 9])], [vi("y", [2, 12, 6, 5])], inits)
    program, result = check_whole(model, _cube(4), tmp_path)
    assert result.ok, describe(result)
    assert [k.template for k in program.kernels] == ["matmul_window"]


def test_an_expansion_and_the_depthwise_convolution_after_it_are_one_kernel(tmp_path) -> None:
    nodes = [  # MobileNet's inverted residual: 1x1 expansion, ReLU6, depthwise 3x3 stride 2
        helper.make_node("Conv", ["x", "we"], ["e"], name="expand"),
        helper.make_node("Clip", ["e", "lo", "hi"], ["r"], name="relu6"),
        helper.make_node("Conv", ["r", "wd"], ["y"], name="dw", group=16, strides=[2, 2],
                         pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    inits = [f32("we", RNG.normal(size=[16, 4, 1, 1])), f32("lo", np.array(0.0)),
             f32("hi", np.array(6.0)), f32("wd", RNG.normal(size=[16, 1, 3, 3]))]  # fmt: skip
    model = make(nodes, [vi("x", [1, 4, 9, 9])], [vi("y", [1, 16, 5, 5])], inits)
    program, result = check_whole(model, _cube(3), tmp_path)
    assert result.ok, describe(result)
    assert [k.template for k in program.kernels] == ["matmul_window"]


@given(
    kernel=st.integers(1, 7),
    stride=st.integers(1, 3),
    dil=st.integers(1, 2),
    height=st.integers(1, 40),
    cores=st.integers(1, 30),
    cover=st.booleans(),
    data=st.data(),
)
def test_every_conv_row_a_window_reads_is_in_its_band(
    kernel: int, stride: int, dil: int, height: int, cores: int, cover: bool, data: st.DataObject
) -> None:
    reach = (kernel - 1) * dil
    pad = data.draw(st.integers(0, reach))
    out_rows = (height + 2 * pad - reach - 1) // stride + 1
    if out_rows < 1:
        return
    rows = -(-out_rows // min(out_rows, cores))
    band = Band(rows, stride, pad, reach, height, out_rows, cover)
    covered, computed = [], set()
    for b in range(band.bands):
        p0 = b * rows
        first, end = int(band.first(np.asarray(p0))), int(band.end(np.asarray(p0)))
        computed |= set(range(first, end))
        for p in range(p0, min(p0 + rows, out_rows)):
            covered.append(p)
            read = [p * stride - pad + t * dil for t in range(kernel)]
            assert all(first <= r < end for r in read if 0 <= r < height)
    assert covered == list(range(out_rows))
    if cover:  # the group outputs the conv: every row of it is computed
        assert computed == set(range(height))


@pytest.mark.parametrize(("pool", "block_dim"), [((2, 2, 0), 1), ((2, 2, 0), 4), ((2, 3, 0), 3)])
def test_a_conv_output_the_group_returns_is_whole_where_no_window_reads_it(
    pool: tuple[int, int, int], block_dim: int, tmp_path
) -> None:
    kernel, stride, pad = pool  # UNet's skip: returned, and pooled over an odd height
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["skip"], name="relu"),
        helper.make_node("MaxPool", ["skip"], ["y"], name="pool", kernel_shape=[kernel] * 2,
                         strides=[stride] * 2, pads=[pad] * 4),
    ]  # fmt: skip
    out = (13 + 2 * pad - kernel) // stride + 1, (12 + 2 * pad - kernel) // stride + 1
    model = make(nodes, [vi("x", [1, 3, 13, 12])],
                 [vi("y", [1, 8, *out]), vi("skip", [1, 8, 13, 12])],
                 [f32("w", RNG.normal(size=[8, 3, 3, 3]))])  # fmt: skip
    program, result = check_whole(model, _cube(block_dim), tmp_path)
    assert result.ok, describe(result)
    assert [k.template for k in program.kernels] == ["matmul_window"]


def test_a_window_over_the_transposed_convolution_runs_as_two_kernels(tmp_path) -> None:
    nodes = [  # the pool slides over the conv's columns: rows no band of conv rows holds
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c"], ["t"], name="swap", perm=[0, 1, 3, 2]),
        helper.make_node("MaxPool", ["t"], ["y"], name="pool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    model = make(nodes, [vi("x", [1, 4, 10, 7])], [vi("y", [1, 8, 4, 5])],
                 [f32("w", RNG.normal(size=[8, 4, 3, 3]))])  # fmt: skip
    program, result = check_whole(model, _cube(4), tmp_path)
    assert result.ok, describe(result)
    assert program.unfused and "order" in program.unfused[0][1]
