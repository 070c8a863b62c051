"""Short runs that lie back to back in GM: a decode attention's fp16 Key and Value blocks move
row by row (256-byte rows of D = 128, ND->NZ). The rows of a (T, D) cache matrix are
neighbours, so the DMA's requests fill each other's bursts: the port moves the block's
payload and HBM fetches each L2 line once. The same cache stored BSND and read as BNSD has gaps
between one head's rows: each row costs its core's port, and HBM, a whole 512-byte burst.

Oracles: the cache's own size (HBM fetches each byte of a contiguous cache once, where the
burst-padded count is twice that), and the port's own floor on one core (bytes over the port's
rate at the ND->NZ rate), which neither layout beats."""

from __future__ import annotations

import dataclasses

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


def test_one_core_moves_a_packed_blocks_payload_and_a_strided_blocks_bursts() -> None:
    """On one core the port, not HBM, sets the pace. A packed block costs the port its
    payload; a strided one a whole burst per 256-byte row, twice its payload. Neither beats
    its port floor, and the strided layout takes well over the packed one. (A PTO-ISA flash
    kernel on one 910B2 core streams K and V over 8192 keys in 68.8 us in all, where a whole
    burst per row would take 91 us for K and V alone: datasets/real/ascend_kernels_more.csv.)"""
    keys = 4096
    packed = _on_one_core(_decode(1, 4, keys))
    strided = _on_one_core(_decode(1, 4, keys, "bsnd"))
    spec = T910B.spec
    cache = 2 * 4 * keys * D * FP16
    floor_us = cache / (spec.cube_gm_bytes_per_cycle * spec.nd2nz_rate * spec.clock_hz) * 1e6
    for name, model in _models():
        p, s = _cost(model, packed), _cost(model, strided)
        assert p.device_us >= floor_us, name
        assert s.device_us >= 2 * floor_us, name
        assert s.device_us >= 1.5 * p.device_us, name


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


@pytest.mark.parametrize(("cols", "bursts"), [(256, 1.0), (320, 1024 / 640), (384, 1024 / 768)])
def test_a_row_moves_whole_bursts(cols: int, bursts: float) -> None:
    """A GEMM whose B is an activation, read ND in [K, N] tiles: each of a tile's K rows is a
    run of ``cols`` fp16 elements and moves whole 512-byte bursts, so B's bytes from HBM are
    its size times the bursts per row's bytes (one core, one tile of B per step: B is read
    once, L2 cannot serve it twice)."""
    k, n = 1024, 4 * cols
    vi_, node = helper.make_tensor_value_info, helper.make_node
    f16 = TensorProto.FLOAT16
    model = make(
        [node("MatMul", ["a", "b"], ["y"], "mm")],
        [vi_("a", f16, [16, k]), vi_("b", f16, [k, n])],
        [vi_("y", f16, [16, n])],
    )
    graph = load_graph(model)
    low = Lowering(graph, T910B)
    group = make_group(graph, ["mm"])
    config = dataclasses.replace(
        low.default(group), block_dim=1, base_n=cols, n=cols, base_k=128, k=32
    )
    kernel = low.kernel(group, config)
    (b_stream,) = [s for s in kernel.streams if s.tensor == "b"]
    assert b_stream.row_bytes == cols * FP16
    b_bytes = k * n * FP16
    for name, model_ in _models():
        hbm = _cost(model_, kernel).hbm_bytes - 16 * k * FP16 - 16 * n * FP16
        assert hbm == pytest.approx(b_bytes * bursts, rel=0.05), name
