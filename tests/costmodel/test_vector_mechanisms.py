"""Vector-kernel mechanisms from first principles (docs/cost-model.md): reductions over few,
long rows spread over all cores, a plain reduction streams its input once, and bf16 data is
computed in fp32 (the vector unit has no bf16 arithmetic) at the cost of casts."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import rmsnorm_model
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from costmodel import make_cost_model
from costmodel.lower import Lowering
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.ir import singleton_groups

KINDS = ("simulator", "analytic")
T910B = load_target("ascend910b")


def _reduce_sum(shape: list[int]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-1] or [1])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [len(shape) - 1])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="rsum", keepdims=0)
    graph = helper.make_graph([node], "rsum", [x], [y], initializer=[axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _binary(op: str, dtype: int, shape: list[int]) -> onnx.ModelProto:
    a = helper.make_tensor_value_info("a", dtype, shape)
    b = helper.make_tensor_value_info("b", dtype, shape)
    y = helper.make_tensor_value_info("y", dtype, shape)
    graph = helper.make_graph(
        [helper.make_node(op, ["a", "b"], ["y"], name="op")], "g", [a, b], [y]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _default_kernel(model: onnx.ModelProto, target=T910B):
    graph = load_graph(model)
    group = singleton_groups(graph)[0]
    low = Lowering(graph, target)
    return low.kernel(group, low.default(group))


@settings(max_examples=10, deadline=None)
@given(
    rows=st.sampled_from([1, 2, 3, 5, 7]),
    log_cols=st.integers(21, 24),
    kind=st.sampled_from(KINDS),
)
def test_few_long_rows_are_reduced_at_chip_bandwidth(rows: int, log_cols: int, kind: str) -> None:
    """A ReduceSum over a few rows of millions of elements is bound by the chip's HBM, not by
    one core's GM path: each row is split over several cores that combine their partial sums
    (as CANN's reduce kernels do)."""
    kernel = _default_kernel(_reduce_sum([rows, 1 << log_cols]))
    spec = T910B.spec
    assert kernel.tiles >= spec.vector_cores // 2
    cost = make_cost_model(kind, T910B).evaluate([kernel])[0]
    nbytes = rows * (1 << log_cols) * 4
    bandwidth = nbytes / (cost.device_us * 1e-6)
    assert bandwidth >= 0.6 * spec.hbm_bytes_per_s
    assert bandwidth <= spec.hbm_peak_bytes_per_s


@pytest.mark.parametrize("shape", [[1 << 24], [3, 1 << 22], [64, 1 << 18]])
def test_a_plain_reduction_reads_its_input_once(shape: list[int]) -> None:
    """Nothing but the statistics is written, so nothing needs a second pass over a row that
    does not fit in UB: the simulated HBM traffic is the input (and the tiny result)."""
    kernel = _default_kernel(_reduce_sum(shape))
    cost = make_cost_model("simulator", T910B).evaluate([kernel])[0]
    numel = 1
    for d in shape:
        numel *= d
    assert cost.hbm_bytes == pytest.approx(numel * 4, rel=0.05)


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sigmoid"])
def test_bf16_moves_like_fp16_but_computes_like_fp32_plus_casts(op: str) -> None:
    shape = [4096, 1024]
    unary = op == "Sigmoid"

    def kernel(dtype: int):
        if unary:
            x = helper.make_tensor_value_info("x", dtype, shape)
            y = helper.make_tensor_value_info("y", dtype, shape)
            node = helper.make_node(op, ["x"], ["y"], name="op")
            model = helper.make_model(
                helper.make_graph([node], "g", [x], [y]),
                opset_imports=[helper.make_opsetid("", 17)],
            )
        else:
            model = _binary(op, dtype, shape)
        return _default_kernel(model)

    bf16, fp16, fp32 = (
        kernel(d) for d in (TensorProto.BFLOAT16, TensorProto.FLOAT16, TensorProto.FLOAT)
    )

    def vector(k) -> float:
        return (k.vector_cycles_tile + k.vector_cycles_step * k.steps) * k.tiles

    def moved(k) -> int:
        return sum(s.bytes for s in k.streams) * k.tiles

    assert moved(bf16) == moved(fp16) < moved(fp32)
    # the same arithmetic on fp32 data, plus one cast per bf16 element read or written
    assert vector(bf16) > vector(fp32) > vector(fp16)


@pytest.mark.parametrize("shape", [[4, 1 << 20], [4096, 256]])
def test_elementwise_work_never_waits_for_other_cores(shape: list[int]) -> None:
    """Only the parts of a split reduction exchange partials: an elementwise op's kernels, at
    every config of its grid, cost the same however slow a cross-core sync is."""
    graph = load_graph(_binary("Add", TensorProto.FLOAT16, shape))
    group = singleton_groups(graph)[0]
    kernels = []
    for sync in (0, 10**6):
        target = load_target("ascend910b", {"cross_core_sync_cycles": sync})
        low = Lowering(graph, target)
        kernels.append([low.kernel(group, c) for c in low.grid(group)])
    assert any(k.grid[2] > 1 for k in kernels[0])  # some configs split the columns
    assert [k.vector_cycles_tile for k in kernels[0]] == [k.vector_cycles_tile for k in kernels[1]]


@pytest.mark.parametrize("kind", KINDS)
def test_a_split_row_reads_its_chunks_again_from_l2(kind: str) -> None:
    """A norm whose row does not fit in UB reads each chunk twice (statistics, then the
    normalising pass). The second read follows the first by one row's chunks on the same core,
    far less than L2 holds, so it is an L2 hit: HBM moves x and y once. With no L2 it moves x
    twice, and gamma once per row (L2 no longer keeps it between rows)."""
    rows, cols = 192, 1 << 17  # 256 KB rows of fp16: more than a 192 KB UB
    graph = load_graph(rmsnorm_model(rows, cols))
    ctx = FusionContext(graph)
    assert ctx.check(ctx.nodes).ok  # the whole norm is one kernel
    (group,) = ctx.to_groups([frozenset(ctx.nodes)])
    x_bytes = rows * cols * 2
    no_l2 = load_target(overrides={"l2_bytes": 0})
    for target, want in ((T910B, 2 * x_bytes), (no_l2, 3 * x_bytes + rows * cols * 2)):
        low = Lowering(graph, target)
        kernel = low.kernel(group, low.default(group))
        assert kernel.steps > 1  # the row is split into chunks
        cost = make_cost_model(kind, target).evaluate([kernel])[0]
        assert cost.hbm_bytes == pytest.approx(want, rel=0.03)


def _gather(table: list[int], rows: int, table_is_weight: bool) -> onnx.ModelProto:
    """``y = table[ids]``: an embedding lookup of ``rows`` ids; the table a graph input (a
    runtime table: a paged KV cache, an activation) or a weight initializer."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [rows])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [rows, table[1]])
    node = helper.make_node("Gather", ["table", "ids"], ["y"], name="gather", axis=0)
    if table_is_weight:
        init = [numpy_helper.from_array(np.zeros(table, dtype=np.float16), "table")]
        graph = helper.make_graph([node], "g", [ids], [y], initializer=init)
    else:
        t = helper.make_tensor_value_info("table", TensorProto.FLOAT16, table)
        graph = helper.make_graph([node], "g", [t, ids], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", KINDS)
def test_a_gather_moves_its_gathered_rows_whatever_its_table_is(kind: str) -> None:
    """A gather touches only the rows it gathers: a lookup of 1024 rows of 2 KB from a table
    of 16K rows costs what the same lookup from a weight costs, within the time its 4 MB of
    rows in and out take at the chip's HBM rate past the kernel's head, and nothing like a
    walk over the table."""
    table, rows = [16384, 1024], 1024
    costs = [
        make_cost_model(kind, T910B).evaluate([_default_kernel(_gather(table, rows, w))])[0]
        for w in (False, True)
    ]
    assert costs[0].device_us == pytest.approx(costs[1].device_us, rel=0.05)
    moved = 2 * rows * table[1] * 2  # the rows read and the rows written, fp16
    head_us = T910B.spec.kernel_fixed_cycles / T910B.spec.clock_hz * 1e6
    assert costs[0].device_us <= head_us + 2 * moved / T910B.spec.hbm_bytes_per_s * 1e6
