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


def _decode(batch: int, heads: int, keys: int, form: str = "bnsd") -> Kernel:
    """softmax(q K^T / sqrt(D)) V for one query row per head over fp16 caches stored
    [B, heads, keys, D] (``bnsd``), [B, keys, heads, D] transposed to BNSD inside the kernel
    (``bsnd``), or a [B, heads, keys - 1, D] past with one new row concatenated inside the
    kernel (``concat``, HF's dynamic cache); the attention at its default config."""
    vi, n = helper.make_tensor_value_info, helper.make_node
    f16 = TensorProto.FLOAT16
    ins = [vi("q", f16, [batch, heads, 1, D])]
    nodes, ops = [], []
    src = {t: f"{t}_cache" for t in "kv"}
    for t in "kv":
        if form == "bsnd":
            ins.append(vi(f"{t}_cache", f16, [batch, keys, heads, D]))
            nodes.append(n("Transpose", [src[t]], [f"{t}_bnsd"], f"{t}_bnsd", perm=[0, 2, 1, 3]))
            ops.append(f"{t}_bnsd")
            src[t] = f"{t}_bnsd"
        elif form == "concat":
            ins.append(vi(f"{t}_past", f16, [batch, heads, keys - 1, D]))
            ins.append(vi(f"{t}_new", f16, [batch, heads, 1, D]))
            nodes.append(n("Concat", [f"{t}_past", f"{t}_new"], [src[t]], f"{t}_cat", axis=2))
            ops.append(f"{t}_cat")
        elif form == "rotated":  # an elementwise op of the cache's shape (a rotary table)
            ins.append(vi(f"{t}_raw", f16, [batch, heads, keys, D]))
            ins.append(vi(f"{t}_table", f16, [1, 1, keys, D]))
            nodes.append(n("Mul", [f"{t}_raw", f"{t}_table"], [src[t]], f"{t}_rot"))
            ops.append(f"{t}_rot")
        else:
            ins.append(vi(f"{t}_cache", f16, [batch, heads, keys, D]))
    scale = numpy_helper.from_array(np.array(D**-0.5, dtype=np.float16), "scale")
    nodes += [
        n("Transpose", [src["k"]], ["k_t"], "k_t", perm=[0, 1, 3, 2]),
        n("MatMul", ["q", "k_t"], ["s"], "qk"),
        n("Mul", ["s", "scale"], ["s2"], "scale_mul"),
        n("Softmax", ["s2"], ["p"], "softmax", axis=-1),
        n("MatMul", ["p", src["v"]], ["o"], "pv"),
    ]
    ops += ["k_t", "qk", "scale_mul", "softmax", "pv"]
    outs = [vi("o", f16, [batch, heads, 1, D])]
    graph = load_graph(make(nodes, ins, outs, [scale], opset=18))
    low = Lowering(graph, T910B)
    group = make_group(graph, ops)
    return low.kernel(group, low.default(group))


def _kv_packed(kernel: Kernel) -> list[bool]:
    return [s.packed for s in kernel.streams if s.pipe == "MTE2" and s.tensor != "q"][:2]


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
    kernel = _decode(8, 32, 2048)
    cache = 2 * 8 * 32 * 2048 * D * FP16
    assert _kv_packed(kernel) == [True, True]
    for name, model in _models():
        hbm = _cost(model, kernel).hbm_bytes
        assert cache <= hbm < 1.1 * cache, (name, hbm / cache)


def test_a_strided_cache_is_never_cheaper_than_a_contiguous_one() -> None:
    """The same cache stored BSND has gaps between one head's rows: no model fetches less
    from HBM for it, nor finishes sooner."""
    packed, strided = _decode(8, 32, 2048), _decode(8, 32, 2048, "bsnd")
    assert _kv_packed(strided) == [False, False]
    for name, model in _models():
        p, s = _cost(model, packed), _cost(model, strided)
        assert s.hbm_bytes >= p.hbm_bytes, name
        assert s.device_us >= 0.99 * p.device_us, name


@pytest.mark.parametrize("keys", [1024, 4096])
def test_one_core_moves_the_same_bursts_in_either_layout(keys: int) -> None:
    """On one core the port, not HBM, sets the pace; it moves a whole burst per 256-byte row
    whichever layout the rows come from, so both layouts cost the same."""
    packed = _on_one_core(_decode(1, 4, keys))
    strided = _on_one_core(_decode(1, 4, keys, "bsnd"))
    for name, model in _models():
        p, s = _cost(model, packed), _cost(model, strided)
        assert p.device_us == pytest.approx(s.device_us, rel=0.03), name


@pytest.mark.parametrize(
    ("form", "heads", "keys", "packed"),
    [("concat", 8, 256, True), ("rotated", 8, 256, True), ("bnsd", 16, 16, True),
     ("bsnd", 16, 16, False), ("bsnd", 8, 256, False)],
)  # fmt: skip
def test_rows_are_packed_by_the_layout_they_are_read_in(form, heads, keys, packed) -> None:
    """Packed is a property of the layout, not of the shapes: a cache whose past and new rows
    are concatenated along the keys, or that an elementwise op of its shape transforms, is
    packed; a BSND cache is strided even where its heads and keys happen to be equal in number
    (its last two dims look like (keys, D))."""
    assert _kv_packed(_decode(1, heads, keys, form)) == [packed, packed]
