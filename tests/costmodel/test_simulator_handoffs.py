"""Cross-core hand-offs in the simulator: attention, float dust at the wake, shared tensors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from costmodel.kernel import Stream
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target


def _attention_graph(b: int, h: int, s: int, d: int):
    """softmax(q @ kt / 8) @ v with q, kt, v graph inputs (fp16)."""
    from conftest import make
    from onnx import TensorProto as T
    from onnx import helper

    from search_space import load_graph

    vi = helper.make_tensor_value_info
    scale = helper.make_tensor("eight", T.FLOAT16, [], [8.0])
    nodes = [
        helper.make_node("MatMul", ["q", "kt"], ["s0"], name="qk"),
        helper.make_node("Constant", [], ["c"], name="const", value=scale),
        helper.make_node("Div", ["s0", "c"], ["s1"], name="scale"),
        helper.make_node("Softmax", ["s1"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"], name="pv"),
    ]
    ins = [
        vi("q", T.FLOAT16, [b, h, s, d]),
        vi("kt", T.FLOAT16, [b, h, d, s]),
        vi("v", T.FLOAT16, [b, h, s, d]),
    ]
    graph = load_graph(make(nodes, ins, [vi("o", T.FLOAT16, [b, h, s, d])]))
    return graph, ["qk", "scale", "softmax", "pv"]


def test_attention_hand_offs_never_reach_hbm_on_the_split_chip() -> None:
    """Fused attention on the 910B crosses cube and vector cores through L2 every step
    (scores, probabilities, the PV product). Those hand-offs live in L2 (kernel contract), so on
    a cold L2 HBM sees q, k, v read once and the output written once, for every config of the
    group's grid; the cube's read of the probabilities, which does not wait for their store,
    used to miss and fetch them from HBM (up to 3x the external bytes)."""
    from costmodel.lower import Lowering
    from search_space.ir import make_group

    b, h, s, d = 2, 8, 512, 256  # 512-byte rows: whole bursts, no waste
    graph, ops = _attention_graph(b, h, s, d)
    target = load_target("ascend910b")
    lowering = Lowering(graph, target)
    group = make_group(graph, ops)
    external = 4 * b * h * s * d * 2
    for config in lowering.grid(group):
        kernel = lowering.kernel(group, config)
        assert kernel.kind == "attention"
        cost = SimulatorModel(target).evaluate([kernel])[0]
        assert external <= cost.hbm_bytes <= 1.01 * external, config.short()


def test_an_extra_per_step_vector_store_does_not_make_attention_a_prologue() -> None:
    """On a coupled chip attention has no per-step FixPipe hand-off; an intermediate it also
    stores each step (needed outside the group) is not read back by the cube, so the vector
    side still waits for each step's Mmad: the extra store never makes the kernel faster."""
    from conftest import exporter_attention

    from costmodel.lower import Lowering
    from costmodel.simulator.l2 import L2Cache
    from costmodel.simulator.program import compile_kernel
    from search_space import load_graph
    from search_space.ir import make_group

    graph = load_graph(exporter_attention(), input_shapes={"x": (2, 512, 16)})
    ops = ["qk", "scale", "add_mask", "softmax", "isnan", "nan_guard", "pv"]
    target = load_target("ascend910")
    lowering = Lowering(graph, target)
    kernel = lowering.kernel(make_group(graph, ops), lowering.default(make_group(graph, ops)))
    assert kernel.unit == "mixed" and kernel.vector_cycles_step > 0
    blocks = kernel.steps * kernel.grid[0] * kernel.grid[1]
    extra = Stream("probs_out", "MTE3", 4096, "bik", "step", "vector", False, 4096 * blocks, 512)
    wider = replace(kernel, streams=(*kernel.streams, extra))
    l2 = L2Cache(target.spec.l2_bytes, 1 << 16, target.spec.l2_line_bytes)
    assert not any(side.feeds for side in compile_kernel(wider, target.spec, l2).sides)
    full = SimulatorModel(target, fast=False)
    assert full.evaluate([wider])[0].latency_us >= full.evaluate([kernel])[0].latency_us


def _shifted_triples(count: int) -> list[tuple[float, float, float]]:
    """(a, d, dt) where a macro step's shift rounds the wrong way: the ring time plus the
    sync delay, (a + dt) + d, lands after the wake the engine pushed, (a + d) + dt."""
    rng = np.random.default_rng(0)
    out = []
    while len(out) < count:
        a, d, dt = rng.uniform(1e3, 1e6), rng.uniform(1.0, 300.0), rng.uniform(1e4, 1e7)
        if (a + dt) + d > (a + d) + dt:
            out.append((a, d, dt))
    return out


@pytest.mark.parametrize("wait", ["tile", "step", "readback"])
def test_a_hand_off_due_at_the_wake_is_ready_despite_float_dust(wait: str) -> None:
    """A cross-core wait compares a partner's done time plus a sync delay with the clock.
    After a macro step the two sides of that comparison are rounded differently; a hand-off
    due exactly at the wake must still count as landed (else the unit sleeps through its only
    wake-up)."""
    from types import SimpleNamespace

    from costmodel.simulator.core import Unit

    for a, d, dt in _shifted_triples(5):
        ring, wake = a + dt, (a + d) + dt
        eng = SimpleNamespace(tile_delay=d, step_delay=d)
        partner = SimpleNamespace(
            fix_tiles_landed=1,
            fix_time=[ring],
            fix_steps_landed=1,
            fs_time=[ring],
            mte3_steps_landed=1,
            ms_time=[ring],
        )
        me = SimpleNamespace(
            eng=eng,
            G=2,
            steps=1,
            late=False,
            handoff=wait == "tile",
            handoff_step=wait == "step",
            readback=wait == "readback",
        )
        assert Unit._inputs_ready(me, 0, partner, wake)  # type: ignore[arg-type]
        assert not Unit._inputs_ready(me, 0, partner, wake - 1e-3 * d)  # type: ignore[arg-type]


def _shared_handoff_graph(m: int, k: int, n: int, prologue: bool):
    """A fused group whose hand-off a later kernel also reads: x + y -> s -> MatMul(., w) with
    Relu(s) outside (a prologue), or MatMul(x, w) -> c0 -> Tanh with Relu(c0) outside (a
    split-chip epilogue's crossing tensor)."""
    from conftest import make, weight_inputs
    from onnx import TensorProto as T
    from onnx import helper

    from search_space import load_graph

    vi = helper.make_tensor_value_info
    if prologue:
        nodes = [
            helper.make_node("Add", ["x", "y"], ["s"], name="add"),
            helper.make_node("MatMul", ["s", "w"], ["c"], name="mm"),
            helper.make_node("Relu", ["s"], ["r"], name="relu"),
        ]
        ins = [vi(t, T.FLOAT16, [m, k]) for t in ("x", "y")]
        outs = [vi("c", T.FLOAT16, [m, n]), vi("r", T.FLOAT16, [m, k])]
        shared = m * k * 2
    else:
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["c0"], name="mm"),
            helper.make_node("Tanh", ["c0"], ["c"], name="act"),
            helper.make_node("Relu", ["c0"], ["r"], name="relu"),
        ]
        ins = [vi("x", T.FLOAT16, [m, k])]
        outs = [vi("c", T.FLOAT16, [m, n]), vi("r", T.FLOAT16, [m, n])]
        shared = m * n * 2
    ins.append(vi("w", T.FLOAT16, [k, n]))
    graph = load_graph(weight_inputs(make(nodes, ins, outs), ["w"]))
    fused = [node.name for node in nodes[:2]]
    return graph, fused, shared


@pytest.mark.parametrize("model", ["simulator", "analytic"])
@pytest.mark.parametrize(
    ("target_name", "prologue"),
    [("ascend910b", True), ("ascend910", True), ("ascend310p", True), ("ascend910b", False)],
)
def test_a_hand_off_a_later_kernel_reads_is_written_once_and_found_in_l2(
    model: str, target_name: str, prologue: bool
) -> None:
    """A fused kernel hands a tensor from one side to the other through a workspace; when a
    later kernel reads that tensor too, the fused kernel also writes it out once (its HBM bytes
    are its external tensors, the shared one included) and the later kernel finds it in a
    roomy L2 (its HBM bytes are its own output only). When the hand-off store doubled as the
    output store the tensor was never written back, and the later kernel read it from HBM."""
    from costmodel.analytic import AnalyticModel
    from costmodel.kernel import handoffs
    from costmodel.lower import Lowering
    from search_space.ir import make_group

    m, k, n = 1024, 1024, 1024
    graph, fused, shared = _shared_handoff_graph(m, k, n, prologue)
    target = load_target(target_name, {"l2_bytes": 1 << 30})
    lowering = Lowering(graph, target)
    first, later = make_group(graph, fused), make_group(graph, ["relu"])
    k2 = lowering.kernel(later, lowering.default(later))
    cost_model = SimulatorModel(target) if model == "simulator" else AnalyticModel(target, "raw")
    external = 2 * (m * k + k * n + m * n) + shared + (2 * m * k if prologue else 0)
    # rows of 512 bytes or more: whole bursts, no waste
    grid = [c for c in lowering.grid(first) if min(c.base_k, c.base_n) >= 256 and c.base_m >= 64]
    assert grid
    for config in grid[:: max(1, len(grid) // 5)]:
        k1 = lowering.kernel(first, config)
        assert k1.unit == "mixed" and handoffs(k1.streams), config.short()
        c1, c2 = cost_model.evaluate([k1, k2])
        assert external <= c1.hbm_bytes <= 1.01 * external, config.short()
        assert c2.hbm_bytes == pytest.approx(shared, rel=0.01), config.short()
