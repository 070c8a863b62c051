"""The incremental repair (search_space/fusion/incremental.py) gives the plain repair's
partition (search_space/fusion/repair.py), in the same order, for any chosen edges: on walks
of edge sets like a local search's (each set a few edges or a class from the one before, so
the kept prefixes are resumed), on model-zoo CNNs and on random DAGs."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import pytest
from conftest import make
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper

from search_space import load_graph
from search_space.fusion import FusionContext, incremental
from search_space.fusion.incremental import CHUNK, Repairer
from search_space.fusion.repair import repair as plain

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
EXPORTS = Path(__file__).parents[1] / "fixtures" / "exports"


def _fits(ops: frozenset[str]) -> bool:
    """A pure stand-in for buffer feasibility that refuses some merges (so edges are
    skipped, and retried in later passes): no group of more than 5 ops whose names' lengths
    sum to a multiple of 3."""
    return len(ops) <= 5 or sum(len(n) for n in ops) % 3 != 0


def densenet121_two_blocks() -> onnx.ModelProto:
    """densenet121's stem, first two dense blocks and their transitions (328 of its 1026 ops,
    233 of its 725 edges): every layer of a block reads the concat of all before it, as in
    the whole model, and the plain repair the walks check against is 8x cheaper."""
    model = onnx.shape_inference.infer_shapes(onnx.load(LIGHT / "light_densenet121.onnx"))
    inputs = [i.name for i in model.graph.input]
    return onnx.utils.Extractor(model).extract_model(inputs, ["r293"])  # the 2nd transition


@pytest.fixture(scope="module", params=["inception_v2", "densenet121_two_blocks", "resnet18"])
def ctx(request: pytest.FixtureRequest) -> FusionContext:
    if request.param == "resnet18":
        path = EXPORTS / "resnet18_legacy_op14.onnx"
        return FusionContext(load_graph(path, input_shapes={"image": (1, 3, 32, 32)}))
    if request.param == "densenet121_two_blocks":
        return FusionContext(load_graph(densenet121_two_blocks()), max_fused_ops=6)
    return FusionContext(load_graph(LIGHT / f"light_{request.param}.onnx"), max_fused_ops=6)


# 6 walks per graph in CI (the whole densenet121's plain repairs dominated: 25 walks took 106 s
# of the suite); `pytest --hypothesis-seed=N` or a larger max_examples draws more locally
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_walk_of_edge_sets_repairs_as_the_plain_repair(ctx: FusionContext, data) -> None:
    edges = list(ctx.edges)
    feasible = data.draw(st.sampled_from([None, _fits]))
    density = data.draw(st.sampled_from([0.3, 0.7, 0.95, 1.0]))
    draws = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).random(len(edges))
    chosen = {e for e, u in zip(edges, draws, strict=True) if u < density}
    for _ in range(data.draw(st.integers(4, 12))):
        flips = data.draw(st.lists(st.sampled_from(edges), min_size=1, max_size=4))
        move = chosen ^ set(flips)
        assert ctx.repair(move, feasible) == plain(ctx, ctx.edges, move, feasible)
        if data.draw(st.booleans()):  # the move is taken: the next ones start from it
            chosen = move


def test_resumed_prefixes_are_used_and_still_exact(ctx: FusionContext) -> None:
    """A move changing only the last edges resumes from a kept state past the first chunk."""
    edges = list(ctx.edges)
    repairer = Repairer(ctx, ctx.edges, _fits)
    base = set(edges)
    assert repairer.repair(base) == plain(ctx, ctx.edges, base, _fits)
    for e in reversed(edges[-5:]):
        move = base - {e}
        assert repairer._resume(sorted(repairer.order[x] for x in move))[2] >= CHUNK
        assert repairer.repair(move) == plain(ctx, ctx.edges, move, _fits)


def test_an_edge_that_is_not_fusible_takes_the_plain_repair() -> None:
    graph = load_graph(
        make(
            [
                helper.make_node("Relu", ["x"], ["a"], name="r0"),
                helper.make_node("Relu", ["a"], ["b"], name="r1"),
                helper.make_node("Add", ["a", "b"], ["y"], name="add"),
            ],
            [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
            [helper.make_tensor_value_info("y", T.FLOAT, [4, 8])],
        )
    )
    ctx = FusionContext(graph)
    stray = type(ctx.edges[0])("r0", "add", "vector", "nowhere")  # not one of ctx.edges
    chosen = [*ctx.edges, stray]
    assert ctx.repair(chosen) == plain(ctx, ctx.edges, chosen)


@st.composite
def dags(draw: st.DrawFn) -> FusionContext:
    """Random graphs of matmuls (siblings reading one input fuse horizontally), elementwise
    ops and row reductions, whose branches join again (paths around a merge close cycles)."""
    tensors, nodes, inits = ["x"], [], []
    for i in range(draw(st.integers(6, 30))):
        kind = draw(st.sampled_from(["MatMul", "MatMul", "Add", "Relu", "Mul", "Softmax"]))
        # an early tensor (sibling matmuls: horizontal groups, which paths jump through) or
        # a recent one (chains whose branches join again: paths around a merge)
        a = draw(st.sampled_from(tensors[:2] if draw(st.booleans()) else tensors[-6:]))
        if kind == "MatMul":
            inits.append(onnx.numpy_helper.from_array(np.ones((8, 8), np.float32), f"w{i}"))
            nodes.append(helper.make_node("MatMul", [a, f"w{i}"], [f"t{i}"], name=f"n{i}"))
        elif kind in ("Add", "Mul"):
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node(kind, [a, b], [f"t{i}"], name=f"n{i}"))
        elif kind == "Softmax":
            nodes.append(helper.make_node(kind, [a], [f"t{i}"], name=f"n{i}", axis=-1))
        else:
            nodes.append(helper.make_node(kind, [a], [f"t{i}"], name=f"n{i}"))
        tensors.append(f"t{i}")
    model = make(
        nodes,
        [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
        [helper.make_tensor_value_info(t, T.FLOAT, None) for t in tensors[1:]],
        inits,
    )
    return FusionContext(load_graph(model), max_fused_ops=draw(st.integers(2, 6)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=dags(), data=st.data())
def test_random_dags_repair_as_the_plain_repair(ctx: FusionContext, data) -> None:
    edges = list(ctx.edges)
    if not edges:
        return
    draws = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1))).random(len(edges))
    density = data.draw(st.sampled_from([0.5, 0.8, 1.0]))
    chosen = {e for e, u in zip(edges, draws, strict=True) if u < density}
    for _ in range(data.draw(st.integers(1, 6))):
        move = chosen ^ set(data.draw(st.lists(st.sampled_from(edges), max_size=3)))
        for feasible in (None, _fits):
            assert ctx.repair(move, feasible) == plain(ctx, ctx.edges, move, feasible)
        chosen = move


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=dags(), data=st.data(), chunk=st.integers(1, 4))
def test_walks_resumed_every_few_edges_repair_as_the_plain_repair(
    ctx: FusionContext, data, chunk: int
) -> None:
    """Kept states every ``chunk`` edges (not every 32): on these small graphs a repair then
    resumes mid-way nearly every time, with edges skipped before the resume point that a
    later pass takes (``_fits`` refuses merges that other merges make feasible again)."""
    edges = list(ctx.edges)
    if not edges:
        return
    with mock.patch.object(incremental, "CHUNK", chunk):
        repairer = Repairer(ctx, ctx.edges, _fits)
        chosen = set(data.draw(st.lists(st.sampled_from(edges))))
        for _ in range(data.draw(st.integers(2, 10))):
            move = chosen ^ set(data.draw(st.lists(st.sampled_from(edges), max_size=3)))
            assert repairer.repair(move) == plain(ctx, ctx.edges, move, _fits)
            if data.draw(st.booleans()):
                chosen = move


def test_an_edge_refused_twice_is_taken_in_a_third_pass() -> None:
    """A chain whose merges become feasible one after another: each pass takes one more."""
    graph = load_graph(
        make(
            [
                helper.make_node("Relu", [s], [d], name=d)
                for s, d in zip("xabc", "abcd", strict=True)
            ],
            [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
            [helper.make_tensor_value_info("d", T.FLOAT, [4, 8])],
        )
    )
    ctx = FusionContext(graph)
    refused = {frozenset("ab"), frozenset("bc")}

    def feasible(ops: frozenset[str]) -> bool:
        return ops not in refused

    got = ctx.repair(ctx.edges, feasible)
    assert got == plain(ctx, ctx.edges, ctx.edges, feasible) == [frozenset("abcd")]
