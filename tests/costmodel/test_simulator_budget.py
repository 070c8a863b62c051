"""The simulator never runs for ever: a kernel beyond its work budget is refused at once, and
what it does before that is bounded by L2's size, not by the tensor's bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from plan_helpers import plan_kernels

import costmodel.simulator.l2 as l2_module
from costmodel.exceptions import SimulationError
from costmodel.registry import make_cost_model
from costmodel.simulator.l2 import L2Cache
from costmodel.simulator.model import MAX_WORK
from costmodel.spec import load_target
from search_space import load_graph


def _brute(cache: L2Cache, tid: int, nbytes: float) -> float:
    """The resident fraction chunk by chunk (the slow path, kept as the oracle)."""
    have = total = 0
    for c in range(int(-(-nbytes // cache.chunk))):
        rm = cache._sectors(c * cache.chunk, 0.0, nbytes)
        total += rm.bit_count()
        entry = cache.lines.get((tid << l2_module._SHIFT) | c)
        if entry is not None:
            have += (entry[0] & rm).bit_count()
    return have / total if total else 0.0


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 40_000), st.integers(1, 9_000)), max_size=30
    ),
    st.integers(0, 2),
    st.integers(1, 60_000),
)
def test_the_resident_fraction_of_a_large_tensor_walks_only_what_is_resident(
    stores: list[tuple[int, int, int]], tid: int, nbytes: int
) -> None:
    cache = L2Cache(capacity_bytes=8 * 1024, chunk_bytes=1024, line_bytes=256)
    for t, lo, size in stores:
        cache.store(t, lo, lo + size)
    assert cache.resident_fraction(tid, nbytes) == pytest.approx(_brute(cache, tid, nbytes))


def test_a_kernel_beyond_the_budget_is_refused_before_any_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    huge = [2**31, 2**31]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, huge)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, huge)
    g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"], name="add")], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph, target = load_graph(model), load_target()
    _, kernels = plan_kernels(graph, "none", target)
    assert kernels[0].tiles * kernels[0].steps > MAX_WORK
    walked = []
    real = L2Cache._sectors
    monkeypatch.setattr(L2Cache, "_sectors", lambda *a: walked.append(1) or real(*a))
    with pytest.raises(SimulationError, match="beyond the simulator's budget"):
        make_cost_model("simulator", target).evaluate(kernels)
    assert len(walked) < 100  # refused before it walked the tensor's 2^62 elements
