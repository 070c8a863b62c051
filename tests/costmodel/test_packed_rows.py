"""Short runs that lie back to back in GM: a decode attention's fp16 Key and Value blocks move
row by row (256-byte rows of D = 128, ND->NZ), so each row costs its core's port a whole
512-byte burst; but the rows of a (T, D) cache matrix are neighbours, so each L2 line they
share is fetched from HBM once. The same cache stored BSND and read as BNSD has gaps between
one head's rows.

Oracles: the cache's own size (HBM fetches each byte of a contiguous cache once, where the
burst-padded count is twice that), and equivalences (one core, far from the HBM limit, costs
the same in either layout: the port moves the same bursts)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make
from onnx import TensorProto, helper, numpy_helper

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import KernelConfig, make_group

T910B = load_target("ascend910b")
D, FP16 = 128, 2


def _decode(batch: int, heads: int, keys: int, bsnd: bool) -> Kernel:
    """softmax(q K^T / sqrt(D)) V for one query row per head over fp16 caches stored
    [B, heads, keys, D] (``bsnd`` False) or [B, keys, heads, D] transposed to BNSD inside the
    kernel; the attention at its default config."""
    vi, n = helper.make_tensor_value_info, helper.make_node
    cache = [batch, keys, heads, D] if bsnd else [batch, heads, keys, D]
    ins = [vi("q", TensorProto.FLOAT16, [batch, heads, 1, D])]
    ins += [vi(f"{t}_cache", TensorProto.FLOAT16, cache) for t in "kv"]
    nodes, ops = [], []
    src = {t: f"{t}_cache" for t in "kv"}
    if bsnd:
        for t in "kv":
            nodes.append(n("Transpose", [src[t]], [f"{t}_bnsd"], f"{t}_bnsd", perm=[0, 2, 1, 3]))
            ops.append(f"{t}_bnsd")
            src[t] = f"{t}_bnsd"
    scale = numpy_helper.from_array(np.array(D**-0.5, dtype=np.float16), "scale")
    nodes += [
        n("Transpose", [src["k"]], ["k_t"], "k_t", perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "k_t"], ["s"], "qk"),
        n("Mul", ["s", "scale"], ["s2"], "scale_mul"),
        n("Softmax", ["s2"], ["p"], "softmax", axis=-1),
        n("MatMul", ["p", src["v"]], ["o"], "pv"),
    ]
    ops += ["k_t", "qk", "scale_mul", "softmax", "pv"]
    outs = [vi("o", TensorProto.FLOAT16, [batch, heads, 1, D])]
    graph = load_graph(make(nodes, ins, outs, [scale], opset=18))
    low = Lowering(graph, T910B)
    group = make_group(graph, ops)
    return low.kernel(group, low.default(group))


def _models() -> list[tuple[str, object]]:
    return [("analytic", AnalyticModel(T910B, "raw")), ("simulator", SimulatorModel(T910B))]


def _cost(model: object, kernel: Kernel) -> KernelCost:
    return model.evaluate([kernel])[0]  # type: ignore[attr-defined]


def _on_one_core(kernel: Kernel) -> Kernel:
    config = KernelConfig(**{**kernel.config.__dict__, "block_dim": 1})
    return Kernel(**{**kernel.__dict__, "config": config})


def test_a_contiguous_caches_rows_are_fetched_from_hbm_once() -> None:
    """Eight sequences of 32 heads over 2048 keys: HBM moves the caches' bytes (plus Q and
    the output), not the twice as many that 512-byte bursts of 256-byte rows would be."""
    kernel = _decode(8, 32, 2048, bsnd=False)
    cache = 2 * 8 * 32 * 2048 * D * FP16
    assert all(s.packed for s in kernel.streams if s.tensor in ("k_cache", "v_cache"))
    for name, model in _models():
        hbm = _cost(model, kernel).hbm_bytes
        assert cache <= hbm < 1.1 * cache, (name, hbm / cache)


def test_a_strided_cache_is_never_cheaper_than_a_contiguous_one() -> None:
    """The same cache stored BSND has gaps between one head's rows: no model fetches less
    from HBM for it, nor finishes sooner."""
    packed, strided = _decode(8, 32, 2048, bsnd=False), _decode(8, 32, 2048, bsnd=True)
    assert not any(s.packed for s in strided.streams if s.tensor in ("k_cache", "v_cache"))
    for name, model in _models():
        p, s = _cost(model, packed), _cost(model, strided)
        assert s.hbm_bytes >= p.hbm_bytes, name
        assert s.device_us >= 0.99 * p.device_us, name


@pytest.mark.parametrize("keys", [1024, 4096])
def test_one_core_moves_the_same_bursts_in_either_layout(keys: int) -> None:
    """On one core the port, not HBM, sets the pace; it moves a whole burst per 256-byte row
    whichever layout the rows come from, so both layouts cost the same."""
    packed = _on_one_core(_decode(1, 4, keys, bsnd=False))
    strided = _on_one_core(_decode(1, 4, keys, bsnd=True))
    for name, model in _models():
        p, s = _cost(model, packed), _cost(model, strided)
        assert p.device_us == pytest.approx(s.device_us, rel=0.03), name
