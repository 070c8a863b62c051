"""Decode attention in the cost model: grouped-query K/V read once per KV head, flash-decoding
splits that fill the cores, and a cache updated inside the attention kernel read from HBM.

The oracles are equivalences of work, not figures of the models: a grouped-query attention
whose query heads share each KV head moves what a multi-head attention over the KV heads with
that many query rows moves; a split over the keys reads each key once."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make
from onnx import TensorProto, helper, numpy_helper

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.kernel import Kernel
from costmodel.learned import LearnedModel
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import Graph, KernelConfig, make_group

T910B = load_target("ascend910b")
CORES = T910B.spec.cube_cores
D = 128
F32 = 4


def _models() -> list[tuple[str, object]]:
    return [("analytic", AnalyticModel(T910B, "raw")), ("simulator", SimulatorModel(T910B))]


def _attention(batch: int, kv: int, rep: int, keys: int, rows: int = 1, update: bool = False):
    """softmax(Q K^T * scale) V over a cache of ``kv`` heads [B, kv, keys, D], repeated to
    ``kv * rep`` query heads as HF's repeat_kv exports it (Unsqueeze, Expand, Reshape), K then
    transposed; ``rows`` query rows per head. ``update`` first writes one new row into each
    cache in place (ScatterND at the last slot). Returns the graph and the attention ops."""
    vi, n = helper.make_tensor_value_info, helper.make_node
    heads = kv * rep
    ins = [vi("q", TensorProto.FLOAT, [batch, heads, rows, D])]
    inits = [numpy_helper.from_array(np.array([2], dtype=np.int64), "axes")]
    nodes, ops = [], []
    for name in ("k", "v"):
        ins.append(vi(f"{name}_cache", TensorProto.FLOAT, [batch, kv, keys, D]))
        src = f"{name}_cache"
        if update:
            ins.append(vi(f"{name}_new", TensorProto.FLOAT, [batch, kv, 1, D]))
            grid = np.meshgrid(np.arange(batch), np.arange(kv), indexing="ij")
            slot = np.stack([*grid, np.full_like(grid[0], keys - 1)], -1)[:, :, None]
            inits.append(numpy_helper.from_array(slot.astype(np.int64), f"{name}_slot"))
            nodes.append(
                n("ScatterND", [src, f"{name}_slot", f"{name}_new"], [f"{name}_all"], f"{name}_up")
            )
            ops.append(f"{name}_up")
            src = f"{name}_all"
        if rep > 1:
            shape = np.array([batch, kv, rep, keys, D], dtype=np.int64)
            inits += [
                numpy_helper.from_array(shape, f"{name}_shape5"),
                numpy_helper.from_array(np.array([batch, heads, keys, D]), f"{name}_shape4"),
            ]
            nodes += [
                n("Unsqueeze", [src, "axes"], [f"{name}_u"], f"{name}_unsq"),
                n("Expand", [f"{name}_u", f"{name}_shape5"], [f"{name}_e"], f"{name}_expand"),
                n("Reshape", [f"{name}_e", f"{name}_shape4"], [f"{name}_rep"], f"{name}_reshape"),
            ]
            ops += [f"{name}_unsq", f"{name}_expand", f"{name}_reshape"]
            src = f"{name}_rep"
        if name == "k":
            nodes.append(n("Transpose", [src], ["k_t"], "k_transpose", perm=[0, 1, 3, 2]))
            ops.append("k_transpose")
    inits.append(numpy_helper.from_array(np.array(D**-0.5, dtype=np.float32), "scale"))
    nodes += [
        n("MatMul", ["q", "k_t"], ["s"], "qk"),
        n("Mul", ["s", "scale"], ["s2"], "scale_mul"),
        n("Softmax", ["s2"], ["p"], "softmax", axis=-1),
        n("MatMul", ["p", "v_rep" if rep > 1 else "v_all" if update else "v_cache"], ["o"], "pv"),
    ]
    ops += ["qk", "scale_mul", "softmax", "pv"]
    outs = [vi("o", TensorProto.FLOAT, [batch, heads, rows, D])]
    if update:
        outs += [vi(f"{t}_all", TensorProto.FLOAT, [batch, kv, keys, D]) for t in "kv"]
    return load_graph(make(nodes, ins, outs, inits, opset=18)), ops


def _kernel(graph: Graph, ops: list[str], config: KernelConfig | None = None) -> Kernel:
    low = Lowering(graph, T910B)
    group = make_group(graph, ops)
    return low.kernel(group, config or low.default(group))


def _cost(model: object, kernel: Kernel) -> KernelCost:
    return model.evaluate([kernel])[0]  # type: ignore[attr-defined]


def _unsplit(config: KernelConfig) -> KernelConfig:
    knobs = tuple((k, v) for k, v in config.knobs if k != "kv_split")
    return KernelConfig(**{**config.__dict__, "knobs": knobs})


@pytest.mark.parametrize("rep", [2, 4, 8])
def test_grouped_query_heads_cost_what_their_kv_heads_cost_with_rep_query_rows(rep: int) -> None:
    """The query heads of a KV group folded into M: one step of a grouped-query attention
    (32 query heads over 32 / rep KV heads) moves and costs what a multi-head attention over
    the KV heads with rep query rows does, and it is cheaper than the multi-head attention over
    all 32 heads, which reads rep times the K/V bytes."""
    batch, heads, keys = 4, 32, 4096
    gqa = _kernel(*_attention(batch, heads // rep, rep, keys))
    same = _kernel(*_attention(batch, heads // rep, 1, keys, rows=rep))
    mha = _kernel(*_attention(batch, heads, 1, keys))
    cache = 2 * batch * (heads // rep) * keys * D * F32
    for name, model in _models():
        g, s, m = (_cost(model, k) for k in (gqa, same, mha))
        assert g.latency_us == pytest.approx(s.latency_us, rel=0.02), name
        assert g.hbm_bytes == pytest.approx(s.hbm_bytes, rel=0.02), name
        assert cache <= g.hbm_bytes < 1.1 * cache, name
        assert g.latency_us < 0.75 * m.latency_us, name


def test_a_kv_broadcast_outside_the_group_is_read_at_its_full_size() -> None:
    """Only an Expand inside the kernel can be folded: with it outside, the attention reads
    the materialised [B, heads, T, D] tensor, rep times the cache."""
    graph, ops = _attention(4, 8, 4, 4096)
    inner = [o for o in ops if o not in ("k_expand", "v_expand", "k_unsq", "v_unsq")]
    outside = _kernel(graph, inner)
    inside = _kernel(graph, ops)
    for name, model in _models():
        assert _cost(model, outside).latency_us > 2.5 * _cost(model, inside).latency_us, name


@pytest.mark.parametrize(("batch", "kv", "rep"), [(1, 8, 4), (1, 2, 8), (2, 4, 1)])
def test_flash_decoding_splits_the_keys_over_idle_cores(batch: int, kv: int, rep: int) -> None:
    """Batch x KV heads blocks fewer than the cube cores: the default cuts the keys into parts
    so that every core has a tile; the split reads each key once (the same HBM bytes, plus
    a few partial rows) and is faster than the same tiles unsplit, in both models: unsplit,
    the cache streams through batch x KV heads cores' GM ports at most, so the split gains
    at least half of what the chip's HBM rate has over those ports."""
    keys = 8192
    spec = T910B.spec
    ports = batch * kv * spec.gm_read_bytes_per_cycle("cube") * spec.clock_hz
    slower = min(1.0, ports / spec.hbm_bytes_per_s)  # unsplit read rate / split read rate
    graph, ops = _attention(batch, kv, rep, keys)
    split = _kernel(graph, ops)
    assert split.config.knob("kv_split", 1) > 1
    assert batch * kv < CORES <= split.tiles
    whole = _kernel(graph, ops, _unsplit(split.config))
    assert whole.tiles == batch * kv
    for name, model in _models():
        a, b = _cost(model, split), _cost(model, whole)
        assert a.hbm_bytes == pytest.approx(b.hbm_bytes, rel=0.03), name
        assert a.latency_us < (1.0 + slower) / 2 * b.latency_us, name


def test_enough_blocks_are_not_split() -> None:
    """With batch x KV heads at least the cube cores, the default does not split the keys."""
    graph, ops = _attention(CORES // 4, 4, 4, 2048)
    assert _kernel(graph, ops).config.knob("kv_split", 1) == 1


def test_a_cache_updated_inside_the_attention_is_read_from_hbm() -> None:
    """The kernel writes the new rows into the cache and reads the whole cache: the write is
    not a hand-off that would serve the reads from L2 (the cache is cold)."""
    batch, kv, keys = 1, 8, 8192
    graph, ops = _attention(batch, kv, 4, keys, update=True)
    kernel = _kernel(graph, ops)
    cache = 2 * batch * kv * keys * D * F32
    q_out = 2 * batch * kv * 4 * D * F32  # 32 query heads in, 32 rows out
    for name, model in _models():
        moved = _cost(model, kernel).hbm_bytes
        assert 0.95 * cache <= moved <= 1.05 * (cache + q_out) + 64 * 1024, name


def test_a_config_costs_the_same_in_a_batch_of_split_and_unsplit_configs() -> None:
    """The grid's split configs carry partial-output streams that its unsplit configs move no
    bytes on: scored together, each config costs what it costs lowered alone, in the batched
    analytic and learned models (the oracle scores grids in batches, the evaluator one
    kernel at a time)."""
    graph, ops = _attention(1, 8, 4, 8192)
    low = Lowering(graph, T910B)
    group = make_group(graph, ops)
    grid = low.grid(group)
    assert {c.knob("kv_split", 1) > 1 for c in grid} == {True, False}
    for model in (AnalyticModel(T910B), LearnedModel(T910B)):
        together = model.predict_batch(low.batch(group, grid))
        alone = [model.predict_batch(low.batch(group, [c]))[0] for c in grid]
        np.testing.assert_allclose(together, alone, rtol=1e-9, err_msg=type(model).__name__)


def _masked_attention(reuse: bool) -> tuple[Graph, list[str]]:
    """Decode attention over 4096 keys with an additive mask [1, 1, 1, T]; with ``reuse``,
    the mask's mean also scales Q inside the group (the mask feeds Q as well)."""
    vi, n = helper.make_tensor_value_info, helper.make_node
    ins = [
        vi("q", TensorProto.FLOAT, [1, 8, 1, D]),
        vi("kt", TensorProto.FLOAT, [1, 8, D, 4096]),
        vi("v", TensorProto.FLOAT, [1, 8, 4096, D]),
        vi("m", TensorProto.FLOAT, [1, 1, 1, 4096]),
    ]
    nodes = [n("MatMul", ["q2" if reuse else "q", "kt"], ["s"], "qk")]
    ops = ["qk"]
    if reuse:
        nodes = [
            n("ReduceMean", ["m"], ["mm"], "mean", keepdims=1),
            n("Mul", ["q", "mm"], ["q2"], "q_scale"),
            *nodes,
        ]
        ops = ["mean", "q_scale", *ops]
    nodes += [
        n("Add", ["s", "m"], ["s2"], "add_mask"),
        n("Softmax", ["s2"], ["p"], "softmax", axis=-1),
        n("MatMul", ["p", "v"], ["o"], "pv"),
    ]
    ops += ["add_mask", "softmax", "pv"]
    outs = [vi("o", TensorProto.FLOAT, [1, 8, 1, D])]
    return load_graph(make(nodes, ins, outs, opset=17)), ops


@pytest.mark.parametrize("reuse", [False, True])
def test_a_mask_is_streamed_with_the_scores_even_when_it_also_feeds_q(reuse: bool) -> None:
    graph, ops = _masked_attention(reuse)
    kernel = _kernel(graph, ops)
    masks = [s for s in kernel.streams if s.tensor == "m" and s.per == "step"]
    assert len(masks) == 1 and masks[0].side == "vector"
