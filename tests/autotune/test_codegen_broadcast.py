"""A product spread over a larger output in one kernel (``matmul_broadcast``), checked against
onnxruntime: a squeeze-excitation gate (a 1x1 convolution of pooled channels, its activation,
and the multiply scaling every pixel of the feature map by its channel's gate) and a
per-sample projection added to every row of a sequence; a spread that reads the product
elsewhere than at the tile's own element runs as two kernels and stays correct."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_helpers import check_whole, describe
from conftest import f32, make, vi
from onnx import TensorProto as T
from onnx import helper

from search_space.ir import KernelConfig

RNG = np.random.default_rng(3)
CUBE = KernelConfig(block_dim=2, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)


@pytest.mark.parametrize(("images", "channels", "gate_out"), [(1, 8, False), (2, 24, True)])
def test_a_squeeze_excitation_gate_scales_the_feature_map_in_one_kernel(
    images: int, channels: int, gate_out: bool, tmp_path
) -> None:
    nodes = [  # MobileNetV3's gate: fc2 (a 1x1 conv of the squeezed channels), hard sigmoid
        helper.make_node("Conv", ["s", "w", "bias"], ["c"], name="fc2"),
        helper.make_node("HardSigmoid", ["c"], ["g"], name="gate", alpha=1 / 6),
        helper.make_node("Mul", ["g", "fmap"], ["y"], name="scale"),
    ]
    inits = [f32("w", RNG.normal(size=[channels, 4, 1, 1])),
             f32("bias", RNG.normal(size=[channels]))]  # fmt: skip
    outputs = [vi("y", [images, channels, 5, 5])] + (
        [vi("g", [images, channels, 1, 1])] if gate_out else []
    )
    model = make(nodes, [vi("s", [images, 4, 1, 1]), vi("fmap", [images, channels, 5, 5])],
                 outputs, inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul_broadcast"]


def test_a_per_sample_projection_is_added_to_every_row_in_one_kernel(tmp_path) -> None:
    nodes = [  # a conditioning vector per sample, projected and added to each token
        helper.make_node("MatMul", ["cond", "w"], ["p"], name="proj"),
        helper.make_node("Sigmoid", ["p"], ["a"], name="act"),
        helper.make_node("Add", ["h", "a"], ["y"], name="shift"),
    ]
    model = make(nodes, [vi("cond", [3, 1, 12]), vi("h", [3, 7, 20])], [vi("y", [3, 7, 20])],
                 [f32("w", RNG.normal(size=[12, 20]))])  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul_broadcast"]


def test_a_spread_that_reads_the_product_off_its_tile_runs_as_two_kernels(tmp_path) -> None:
    nodes = [  # the gate of the reversed channel order: another tile's element
        helper.make_node("Conv", ["s", "w"], ["c"], name="fc2"),
        helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["r"], name="flip"),
        helper.make_node("Mul", ["r", "fmap"], ["y"], name="scale"),
    ]
    inits = [f32("w", RNG.normal(size=[8, 4, 1, 1])),
             *(helper.make_tensor(n, T.INT64, [1], [v]) for n, v in
               (("starts", -1), ("ends", -9), ("axes", 1), ("steps", -1)))]  # fmt: skip
    model = make(nodes, [vi("s", [1, 4, 1, 1]), vi("fmap", [1, 8, 3, 3])],
                 [vi("y", [1, 8, 3, 3])], inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert program.unfused and len(program.kernels) == 2


# found in review: a spread reading the product transposed (stored at another tile's place),
# and one reading another batch's tile where the batch and broadcast sizes agree (3 and 3)
def _transposed() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Transpose", ["p"], ["t"], name="tr", perm=[0, 2, 1]),
             helper.make_node("Add", ["t", "h"], ["y"], name="spread")]  # fmt: skip
    return make(nodes, [vi("x", [1, 32, 12]), vi("h", [3, 32, 32])], [vi("y", [3, 32, 32])],
                [f32("w", RNG.normal(size=[12, 32]))])  # fmt: skip


def _other_batch() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Add", ["h", "p"], ["y"], name="spread"),
             helper.make_node("Transpose", ["y"], ["z"], name="tr", perm=[1, 0, 2])]  # fmt: skip
    return make(nodes, [vi("x", [3, 1, 12]), vi("h", [3, 3, 20])], [vi("z", [3, 3, 20])],
                [f32("w", RNG.normal(size=[12, 20]))])  # fmt: skip


@pytest.mark.parametrize("build", [_transposed, _other_batch], ids=["transposed", "other batch"])
def test_a_spread_of_another_tiles_elements_stays_correct(build, tmp_path) -> None:
    _, result = check_whole(build(), CUBE, tmp_path)
    assert result.ok, describe(result)
