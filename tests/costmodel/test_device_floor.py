"""A kernel's device-side floor and its scalar unit's per-iteration work (docs/cost-model.md).

From first principles: a kernel's scalar unit reads its tiling data from GM (a dependent load)
and sets up its pipes before it can issue its first data load; that load pays its own
first-byte latency, and the result's store its own. Each loop iteration of a vector kernel
also runs the scalar unit's bookkeeping before its vector instructions issue. Both models must
charge all of it, and nothing of it may be counted as the gap between kernels.
"""

from __future__ import annotations

import math

import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernels_by_hand import add
from onnx import TensorProto, helper

from costmodel import make_cost_model
from costmodel.lower import Lowering
from costmodel.spec import Target, load_target
from search_space import load_graph
from search_space.ir import singleton_groups

KINDS = ("simulator", "analytic")
TARGETS = ("ascend910b", "ascend910b4", "ascend910", "ascend310p")


def _model(kind: str, target: Target):
    return make_cost_model(kind, target, **({"constants": "raw"} if kind == "analytic" else {}))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", TARGETS)
def test_a_tiny_kernel_pays_its_tiling_read_setup_first_load_and_store(kind, name) -> None:
    target = load_target(name)
    spec = target.spec
    cost = _model(kind, target).evaluate([add(1024, tile=1024, block_dim=1)])[0]
    serial = (
        spec.kernel_head_cycles
        + spec.gm_latency_cycles  # the tiling read
        + spec.scalar_setup_cycles
        + spec.gm_latency_cycles  # the first data load
        + spec.mte3_latency_cycles  # the store
    )
    assert cost.device_us >= serial / spec.clock_hz * 1e6
    assert cost.latency_us - cost.device_us == pytest.approx(spec.kernel_gap_s * 1e6)


@settings(max_examples=12, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    setup=st.integers(0, 20_000),
    elements=st.sampled_from([1024, 1 << 16, 1 << 20]),
)
def test_the_scalar_setup_adds_once_per_kernel_whatever_its_size(kind, setup, elements) -> None:
    """The set-up is paid once, before any data moves: it shifts the kernel, never its body."""
    kernel = add(elements, tile=min(elements, 16384))
    base = load_target("ascend910b", {"scalar_setup_cycles": 0})
    more = load_target("ascend910b", {"scalar_setup_cycles": setup})
    t0 = _model(kind, base).evaluate([kernel])[0].device_us
    t1 = _model(kind, more).evaluate([kernel])[0].device_us
    assert t1 - t0 == pytest.approx(setup / base.spec.clock_hz * 1e6, rel=1e-6, abs=1e-6)


def _softmax(rows: int, cols: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [rows, cols])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [rows, cols])
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=-1)
    graph = helper.make_graph([node], "softmax", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows_per_tile", [1, 4, 16])
def test_each_loop_iteration_adds_the_scalar_bookkeeping(kind, rows_per_tile) -> None:
    """A vector kernel that runs ``n`` iterations per core gets ``n`` x the per-iteration
    scalar work slower when that work dominates its iterations (single buffered, so it cannot
    hide behind the loads)."""
    graph = load_graph(_softmax(rows=4096, cols=256))
    group = singleton_groups(graph)[0]
    big = 200_000  # cycles: far above any other stage of these iterations
    times, kernels = [], []
    for per_iter in (0, big):
        target = load_target("ascend910b", {"scalar_iter_cycles": per_iter})
        low = Lowering(graph, target)
        config = next(
            c
            for c in low.grid(group)
            if c.ub_rows == rows_per_tile and not c.double_buffer and c.block_dim == 48
        )
        kernel = low.kernel(group, config)
        kernels.append(kernel)
        times.append(_model(kind, target).evaluate([kernel])[0].device_us)
    iterations = math.ceil(kernels[0].tiles / 48) * kernels[0].steps
    expected = iterations * big / load_target("ascend910b").spec.clock_hz * 1e6
    assert times[1] - times[0] == pytest.approx(expected, rel=0.05)
