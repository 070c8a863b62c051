"""Outputs stored where the tile computed them, through the layout ops after a template's
anchor (placement): pieces of a product cut by Split or Slice (GPT-2's fused QKV), rows
picked by a constant Gather after a norm (BERT's and ViT's class token), and a product
concatenated with other tensors (ViT's class token before its patches), whose other
elements the kernel writes apart. Each generated
kernel is checked against onnxruntime; a pick the placement cannot follow (indices that are
not a run of consecutive positions) runs as its ops and stays correct."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_helpers import check_whole, describe
from conftest import f32, i64, make, vi
from onnx import helper

from search_space.ir import KernelConfig

RNG = np.random.default_rng(1)
CUBE = KernelConfig(block_dim=3, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)


def _picked_shape(shape: list[int], axis: int, index: list[int] | int) -> list[int]:
    kept = [] if isinstance(index, int) else [len(index)]
    return [*shape[:axis], *kept, *shape[axis + 1 :]]


@pytest.mark.parametrize("cut", ["split", "slice"])
def test_pieces_of_a_product_are_stored_from_its_tile(cut: str, tmp_path) -> None:
    # GPT-2's fused QKV projection: its output cut into Q, K and V, each into heads, K^T
    mm = [helper.make_node("MatMul", ["x", "w"], ["p"], name="qkv"),
          helper.make_node("Add", ["p", "bias"], ["pb"], name="bias")]  # fmt: skip
    if cut == "split":
        cuts = [helper.make_node("Split", ["pb", "sizes"], ["q", "k", "v"], name="cut", axis=-1)]
        inits = [i64("sizes", [16, 16, 8])]
    else:
        cuts = [helper.make_node("Slice", ["pb", f"s{i}", f"e{i}", "ax"], [t], name=f"cut{i}")
                for i, t in enumerate(["q", "k", "v"])]  # fmt: skip
        inits = [i64("s0", [0]), i64("e0", [16]), i64("s1", [16]), i64("e1", [32]),
                 i64("s2", [32]), i64("e2", [40]), i64("ax", [-1])]  # fmt: skip
    heads = [helper.make_node("Reshape", ["k", "hs"], ["kh"], name="k_heads"),
             helper.make_node("Transpose", ["kh"], ["kt"], name="k_t", perm=[0, 2, 3, 1]),
             helper.make_node("Relu", ["v"], ["va"], name="v_act")]  # fmt: skip
    inits += [f32("w", RNG.normal(size=[24, 40])), f32("bias", RNG.normal(size=[40])),
              i64("hs", [2, 6, 2, 8])]  # fmt: skip
    model = make([*mm, *cuts, *heads], [vi("x", [2, 6, 24])],
                 [vi("q", [2, 6, 16]), vi("kt", [2, 2, 8, 6]), vi("va", [2, 6, 8])],
                 inits)  # fmt: skip
    config = KernelConfig(block_dim=3, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16)
    program, result = check_whole(model, config, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]
    assert program.kernels[0].text.count("for tile in range") == 1  # no side loop re-reads


# (axis, index): the class token (scalar 0), the last token (-1), a run of positions
PICKS = [(1, 0), (1, -1), (1, [2, 3, 4]), (0, [1])]


@pytest.mark.parametrize(("axis", "index"), PICKS)
@pytest.mark.parametrize("ub_cols", [16, 64])  # the row in chunks, or whole
def test_a_row_picked_after_a_norm_is_stored_from_the_reduction(
    axis: int, index: list[int] | int, ub_cols: int, tmp_path
) -> None:
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1),
        helper.make_node("Gather", ["y", "at"], ["cls"], name="pick", axis=axis),
    ]
    inits = [f32("g", RNG.normal(1, 0.1, 40)), f32("b", RNG.normal(0, 0.1, 40)), i64("at", index)]
    shape = [2, 7, 40]
    picked = _picked_shape(shape, axis, index)
    model = make(nodes, [vi("x", shape)], [vi("y", shape), vi("cls", picked)], inits)
    program, result = check_whole(model, KernelConfig(block_dim=3, ub_rows=4, ub_cols=ub_cols),
                                 tmp_path)  # fmt: skip
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["reduction"]


def test_the_class_token_after_a_projection_and_its_norm_is_one_kernel(tmp_path) -> None:
    nodes = [  # BERT's last layer and its pooler's input: the norm's row 0 of every sequence
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Add", ["p", "res"], ["s"], name="residual"),
        helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1),
        helper.make_node("Gather", ["y", "at"], ["cls"], name="pick", axis=1),
    ]
    inits = [f32("w", RNG.normal(size=[24, 40])), f32("g", RNG.normal(1, 0.1, 40)),
             f32("b", RNG.normal(0, 0.1, 40)), i64("at", 0)]  # fmt: skip
    model = make(nodes, [vi("x", [2, 7, 24]), vi("res", [2, 7, 40])],
                 [vi("y", [2, 7, 40]), vi("cls", [2, 40])], inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul_rows"]


@pytest.mark.parametrize("index", [[3, 4], -2])
def test_rows_of_a_product_picked_by_a_gather_are_stored_from_its_tile(
    index: list[int] | int, tmp_path
) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
        helper.make_node("Relu", ["p"], ["r"], name="act"),
        helper.make_node("Gather", ["r", "at"], ["y"], name="pick", axis=1),
    ]
    inits = [f32("w", RNG.normal(size=[24, 20])), i64("at", index)]
    model = make(nodes, [vi("x", [2, 9, 24])], [vi("y", _picked_shape([2, 9, 20], 1, index))],
                 inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]


def test_a_gather_of_scattered_rows_runs_as_its_ops(tmp_path) -> None:
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1),
        helper.make_node("Gather", ["y", "at"], ["z"], name="pick", axis=1),
    ]  # rows 5 and 1: no run of positions, so no tile element lands on one output element
    inits = [f32("g", RNG.normal(1, 0.1, 40)), f32("b", RNG.normal(0, 0.1, 40)), i64("at", [5, 1])]
    model = make(nodes, [vi("x", [2, 7, 40])], [vi("z", [2, 2, 40])], inits)
    program, result = check_whole(model, KernelConfig(block_dim=3, ub_rows=4, ub_cols=64),
                                 tmp_path)  # fmt: skip
    assert result.ok, describe(result)
    assert program.unfused and "elements in a 14-row reduction" in program.unfused[0][1]


# (axis, where): the tile's rows after a class token (ViT), its columns between two others
CONCATS = [(1, "after"), (-1, "between")]


@pytest.mark.parametrize(("axis", "where"), CONCATS)
def test_a_product_concatenated_with_other_tensors_is_stored_from_its_tile(
    axis: int, where: str, tmp_path
) -> None:
    # ViT's embedding: patches projected, the class token put before them, positions added
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
             helper.make_node("Add", ["p", "bias"], ["pb"], name="bias")]  # fmt: skip
    if where == "after":
        pieces, cat = ["cls", "pb"], [2, 5, 20]
        extra = [vi("cls", [2, 1, 20])]
    else:
        pieces, cat = ["left", "pb", "right"], [2, 4, 27]
        extra = [vi("left", [2, 4, 3]), vi("right", [2, 4, 4])]
    nodes += [helper.make_node("Concat", pieces, ["c"], name="cat", axis=axis),
              helper.make_node("Add", ["c", "pos"], ["y"], name="pos_add")]  # fmt: skip
    inits = [f32("w", RNG.normal(size=[24, 20])), f32("bias", RNG.normal(size=[20])),
             f32("pos", RNG.normal(size=cat[1:]))]  # fmt: skip
    model = make(nodes, [vi("x", [2, 4, 24]), *extra], [vi("y", cat)], inits)
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]


@pytest.mark.parametrize("slot", [0, 5, -1])
def test_a_projection_scattered_into_a_cache_is_stored_from_its_tile(slot: int, tmp_path) -> None:
    # GPT-2's decode step: the new key row written to its slot of the cache, the cache also
    # read transposed (K^T); the other rows are the past cache, copied beside the tile
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="k_proj"),
        helper.make_node("Reshape", ["p", "heads"], ["k"], name="k_heads"),
        helper.make_node("ScatterND", ["past", "slot", "k"], ["present"], name="update"),
        helper.make_node("Transpose", ["present"], ["kt"], name="k_t", perm=[0, 1, 3, 2]),
    ]
    inits = [f32("w", RNG.normal(size=[24, 16])), i64("heads", [2, 2, 1, 8]),
             i64("slot", [[[[b, h, slot]] for h in range(2)] for b in range(2)])]  # fmt: skip
    model = make(nodes, [vi("x", [2, 1, 24]), vi("past", [2, 2, 6, 8])],
                 [vi("present", [2, 2, 6, 8]), vi("kt", [2, 2, 8, 6])], inits)  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]


def test_a_rotation_of_a_product_beside_a_wider_one_stays_correct(tmp_path) -> None:
    # Llama's rotate-half of the K projection beside the wider Q projection: the concat's
    # first piece is the tile's (negated) second half, its second piece the tile's first
    # half, which no template writing products of different widths stores from the tile
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("Slice", ["k", "s0", "e0", "ax"], ["k1"], name="first_half"),
        helper.make_node("Slice", ["k", "e0", "e1", "ax"], ["k2"], name="second_half"),
        helper.make_node("Neg", ["k2"], ["nk2"], name="neg"),
        helper.make_node("Concat", ["nk2", "k1"], ["rot"], name="rotate", axis=-1),
    ]
    inits = [f32("wq", RNG.normal(size=[24, 32])), f32("wk", RNG.normal(size=[24, 16])),
             i64("s0", [0]), i64("e0", [8]), i64("e1", [16]), i64("ax", [-1])]  # fmt: skip
    model = make(nodes, [vi("x", [2, 5, 24])], [vi("q", [2, 5, 32]), vi("rot", [2, 5, 16])],
                 inits)  # fmt: skip
    _, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)


# found in review: a tile's piece the holes loop would read again (a concat of it twice, as
# Llama's rotary table is built; a concat of it and an activation of it), and two concats on
# the way (the outer one's input holds the inner one's holes)
def _rotary_table() -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["inv", "pos"], ["f"], name="freqs"),
             helper.make_node("Transpose", ["f"], ["ft"], name="tr", perm=[0, 2, 1]),
             helper.make_node("Concat", ["ft", "ft"], ["emb"], name="cat", axis=-1),
             helper.make_node("Cos", ["emb"], ["cos"], name="cos")]  # fmt: skip
    inv = 1.0 / 10000 ** (np.arange(0, 16, 2) / 16)
    return make(nodes, [vi("pos", [1, 1, 24])], [vi("cos", [1, 24, 16])],
                [f32("inv", inv.reshape(1, 8, 1))])  # fmt: skip


def _concat_of(pieces: list[str], extra: list[onnx.NodeProto], out: list[int]) -> onnx.ModelProto:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Add", ["p", "bias"], ["pb"], name="bias"), *extra,
             helper.make_node("Concat", pieces, ["y"], name="cat", axis=1)]  # fmt: skip
    inputs = [vi("x", [2, 4, 24]), vi("a", [2, 1, 20]), vi("b2", [2, 3, 20])]
    used = [i for i in inputs if i.name in {"x", *pieces, *(t for n in extra for t in n.input)}]
    inits = [f32("w", RNG.normal(size=[24, 20])), f32("bias", RNG.normal(size=[20]))]
    return make(nodes, used, [vi("y", out)], inits)


HOLED = {
    "rotary table": _rotary_table,
    "concat of itself and its relu": lambda: _concat_of(
        ["pb", "r"], [helper.make_node("Relu", ["pb"], ["r"], name="act")], [2, 8, 20]),
    "nested concats": lambda: _concat_of(
        ["c1", "b2"], [helper.make_node("Concat", ["a", "pb"], ["c1"], name="in", axis=1)],
        [2, 8, 20]),
}  # fmt: skip


@pytest.mark.parametrize("case", list(HOLED))
def test_holes_that_are_not_one_region_beside_the_tile_stay_correct(case: str, tmp_path) -> None:
    _, result = check_whole(HOLED[case](), CUBE, tmp_path)
    assert result.ok, describe(result)


def test_rows_picked_on_a_products_batch_axis_are_stored_from_its_tile(tmp_path) -> None:
    # the guard is on the batch, one value per program: Triton's interpreter takes no scalar
    # in a mask, so it selects the mask whole
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"], name="mm"),
             helper.make_node("Relu", ["p"], ["r"], name="act"),
             helper.make_node("Gather", ["r", "at"], ["g"], name="pick", axis=0)]  # fmt: skip
    model = make(nodes, [vi("x", [2, 9, 24])], [vi("g", [9, 20])],
                 [f32("w", RNG.normal(size=[24, 20])), i64("at", 1)])  # fmt: skip
    program, result = check_whole(model, CUBE, tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["matmul"]


def test_a_picked_row_of_as_many_elements_as_the_norm_has_rows_is_a_pick(tmp_path) -> None:
    # found in review: [2, 20, 20] normalised over its last axis has R = 40 rows; its class
    # token [2, 20] has 40 elements too, and was taken for one value per row
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1),
        helper.make_node("Gather", ["y", "at"], ["cls"], name="pick", axis=1),
    ]
    inits = [f32("g", RNG.normal(1, 0.1, 20)), f32("b", RNG.normal(0, 0.1, 20)), i64("at", 0)]
    model = make(nodes, [vi("x", [2, 20, 20])], [vi("y", [2, 20, 20]), vi("cls", [2, 20])],
                 inits)  # fmt: skip
    program, result = check_whole(model, KernelConfig(block_dim=3, ub_rows=4, ub_cols=64),
                                 tmp_path)  # fmt: skip
    assert result.ok, describe(result)
    assert not program.unfused and [k.template for k in program.kernels] == ["reduction"]
