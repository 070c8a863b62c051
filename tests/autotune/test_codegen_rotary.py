"""A rotary embedding in a projection's epilogue (``templates.rotary``): the kernel's paired
tiles hold each head's column ``n`` and ``n + R`` side by side, so Llama's ``rotate_half``
reads no other tile. Checked against onnxruntime: a projection and its RoPE in one kernel
(with a bias, several heads, a head wider than a tile), Q and a narrower K of grouped-query
attention in one kernel, and a shift that pairs no columns (run as its ops, still right)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from codegen_helpers import check_whole, describe
from conftest import f32, i64, make, vi
from hypothesis import given
from hypothesis import strategies as st
from onnx import helper

from autotune.codegen.source import Body
from autotune.codegen.templates.common import block_of
from autotune.codegen.templates.rotary import Pair
from search_space.ir import KernelConfig

RNG = np.random.default_rng(11)


def _cube(base_n: int) -> KernelConfig:
    return KernelConfig(block_dim=3, base_m=16, base_n=base_n, base_k=32, m=16, n=base_n, k=32)


def _rope(tag: str, x: str, heads: int, dim: int, seq: int, bias: bool) -> tuple[list, list]:
    """Nodes and initialisers of ``x @ w (+ b)`` split into heads and rotated as Llama's
    exporter writes it: q * cos + rotate_half(q) * sin, rotate_half = concat(-q2, q1)."""
    half = dim // 2
    p = f"{tag}_"
    nodes = [helper.make_node("MatMul", [x, p + "w"], [p + "mm"], name=p + "proj")]
    inits = [f32(p + "w", RNG.normal(size=[12, heads * dim]) / 4),
             i64(p + "shape", [1, seq, heads, dim])]  # fmt: skip
    out = p + "mm"
    if bias:
        nodes.append(helper.make_node("Add", [out, p + "b"], [p + "biased"], name=p + "bias"))
        inits.append(f32(p + "b", RNG.normal(size=[heads * dim])))
        out = p + "biased"
    nodes += [
        helper.make_node("Reshape", [out, p + "shape"], [p + "r"], name=p + "heads"),
        helper.make_node("Transpose", [p + "r"], [p + "t"], name=p + "tr", perm=[0, 2, 1, 3]),
        helper.make_node("Slice", [p + "t", "zero", "half", "last"], [p + "x1"], name=p + "s1"),
        helper.make_node("Slice", [p + "t", "half", "end", "last"], [p + "x2"], name=p + "s2"),
        helper.make_node("Neg", [p + "x2"], [p + "nx2"], name=p + "neg"),
        helper.make_node("Concat", [p + "nx2", p + "x1"], [p + "rot"], name=p + "cat", axis=-1),
        helper.make_node("Mul", [p + "t", "cos"], [p + "a"], name=p + "mcos"),
        helper.make_node("Mul", [p + "rot", "sin"], [p + "c"], name=p + "msin"),
        helper.make_node("Add", [p + "a", p + "c"], [tag], name=p + "add"),
    ]
    inits += [i64("zero", [0]), i64("half", [half]), i64("end", [dim]), i64("last", [-1])]
    return nodes, inits


def _tables(seq: int, dim: int) -> list[onnx.TensorProto]:
    angle = np.arange(seq)[:, None] * (1e-2 ** (np.arange(dim) % (dim // 2) / dim))[None, :]
    return [f32("cos", np.cos(angle)[None, None]), f32("sin", np.sin(angle)[None, None])]


def _uniq(inits: list[onnx.TensorProto]) -> list[onnx.TensorProto]:
    return list({t.name: t for t in inits}.values())


@pytest.mark.parametrize(
    ("heads", "dim", "seq", "base_n", "bias"),
    [(2, 104, 8, 32, False), (1, 16, 5, 16, True), (3, 64, 20, 64, True), (2, 40, 3, 128, False)],
)
def test_a_projection_and_its_rotary_embedding_are_one_kernel_of_paired_tiles(
    heads: int, dim: int, seq: int, base_n: int, bias: bool, tmp_path
) -> None:
    nodes, inits = _rope("q", "x", heads, dim, seq, bias)
    model = make(nodes, [vi("x", [1, seq, 12])], [vi("q", [1, heads, seq, dim])],
                 _uniq(inits + _tables(seq, dim)))  # fmt: skip
    program, result = check_whole(model, _cube(base_n), tmp_path)
    assert result.ok, describe(result)
    assert not program.unfused and len(program.kernels) == 1
    text = program.kernels[0].text
    assert text.count("tl.dot(") == 2 and "acc_lo" in text and "acc_hi" in text


def test_q_and_a_narrower_k_each_with_its_rotary_embedding_share_one_kernel(tmp_path) -> None:
    q_nodes, q_inits = _rope("q", "x", 4, 32, 6, False)
    k_nodes, k_inits = _rope("k", "x", 2, 32, 6, True)  # grouped-query: half as many heads
    v = helper.make_node("MatMul", ["x", "wv"], ["v"], name="v_proj")
    model = make(
        [*q_nodes, *k_nodes, v],
        [vi("x", [1, 6, 12])],
        [vi("q", [1, 4, 6, 32]), vi("k", [1, 2, 6, 32]), vi("v", [1, 6, 64])],
        _uniq([*q_inits, *k_inits, *_tables(6, 32), f32("wv", RNG.normal(size=[12, 64]))]),
    )
    program, result = check_whole(model, _cube(32), tmp_path, kind="horizontal_cube")
    assert result.ok, describe(result)
    assert not program.unfused and len(program.kernels) == 1
    assert program.kernels[0].text.count("tl.dot(") == 5  # two paired products and V


def test_a_roll_that_pairs_no_columns_runs_as_its_ops_and_stays_correct(tmp_path) -> None:
    nodes = [  # a third of each 24-column row moved to its end: shifts of 8 and 16
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Slice", ["p", "zero", "third", "last"], ["a"], name="head"),
        helper.make_node("Slice", ["p", "third", "end", "last"], ["b"], name="tail"),
        helper.make_node("Concat", ["b", "a"], ["r"], name="roll", axis=-1),
        helper.make_node("Relu", ["r"], ["y"], name="act"),
    ]
    inits = [f32("w", RNG.normal(size=[12, 24])), i64("zero", [0]), i64("third", [8]),
             i64("end", [24]), i64("last", [-1])]  # fmt: skip
    model = make(nodes, [vi("x", [1, 5, 12])], [vi("y", [1, 5, 24])], inits)
    program, result = check_whole(model, _cube(16), tmp_path)
    assert result.ok, describe(result)
    assert program.unfused and "off its tile" in program.unfused[0][1]


def _held(pair: Pair, width: int) -> list[int]:
    """Every column a paired tile stores, over all tiles, from the lines it generates."""
    row = Body(0)
    pair.lanes(row)
    held: list[int] = []
    block = block_of(pair.tile)
    for tn in range(pair.tiles(width)):
        env = {"tn": tn, "lane_n": np.arange(block), "TILE_H": pair.tile}
        for line in row.lines:
            name, expr = line.split(" = ", 1)
            env[name] = eval(expr, {}, env)  # the lines under test, on numpy arrays
        keep = env["nmask"][0]
        held += [int(c) for half in ("n_lo", "n_hi") for c in env[half][0][keep]]
    return held


@given(half=st.integers(1, 80), heads=st.integers(1, 4), tile_n=st.sampled_from([16, 32, 64]))
def test_paired_tiles_store_every_column_exactly_once(half: int, heads: int, tile_n: int) -> None:
    pair = Pair(half, min(half, max(16, tile_n // 2)))
    width = heads * 2 * half
    assert sorted(_held(pair, width)) == list(range(width))
    assert pair.tiles(width) == heads * math.ceil(half / pair.tile)


def test_an_interleaved_rotation_is_not_paired_one_column_at_a_time(tmp_path) -> None:
    nodes = [  # GPT-J: each column with its neighbour (a shift of 1), via [.., half, 2] pairs
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Reshape", ["p", "pairs"], ["tp"], name="pairs"),
        helper.make_node("Slice", ["tp", "zero", "one", "last"], ["ev"], name="even"),
        helper.make_node("Slice", ["tp", "one", "two", "last"], ["od"], name="odd"),
        helper.make_node("Neg", ["od"], ["nod"], name="neg"),
        helper.make_node("Concat", ["nod", "ev"], ["rp"], name="cat", axis=-1),
        helper.make_node("Reshape", ["rp", "flat"], ["y"], name="back"),
    ]
    inits = [f32("w", RNG.normal(size=[12, 32])), i64("pairs", [1, 5, 16, 2]),
             i64("flat", [1, 5, 32]), i64("zero", [0]), i64("one", [1]),
             i64("two", [2]), i64("last", [-1])]  # fmt: skip
    model = make(nodes, [vi("x", [1, 5, 12])], [vi("y", [1, 5, 32])], inits)
    program, result = check_whole(model, _cube(32), tmp_path)
    assert result.ok, describe(result)
    assert not any("acc_lo" in k.text for k in program.kernels)
