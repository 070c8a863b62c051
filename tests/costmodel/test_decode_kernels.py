"""Decode-step kernels from first principles: a KV cache updated in place, and GEMV-shaped
matmuls bound by one read of their weights (docs/cost-model.md, "Decode kernels")."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make, weight_matmul
from onnx import TensorProto, helper, numpy_helper

from costmodel import compulsory_bytes
from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import Graph, is_inplace_update, make_group, singleton_groups
from search_space.zoo import build

T910B = load_target("ascend910b")
SPEC = T910B.spec
HEAD_US = (SPEC.kernel_gap_s + SPEC.kernel_fixed_cycles / SPEC.clock_hz) * 1e6
B, KV, L, HD = 2, 8, 2048, 128  # batch, kv heads, cached tokens, head dim
F32 = 4
ROW_BYTES = B * KV * HD * F32  # one new token's K (or V) rows
BUFFER_BYTES = B * KV * (L + 1) * HD * F32


def _models() -> list[tuple[str, object]]:
    return [("analytic", AnalyticModel(T910B, "raw")), ("simulator", SimulatorModel(T910B))]


def _cost(model: object, kernel: Kernel) -> KernelCost:
    return model.evaluate([kernel])[0]  # type: ignore[attr-defined]


# -- the KV cache ------------------------------------------------------------------------------
def _cache(form: str = "static", data: str = "input", reduction: str = "none") -> Graph:
    """One decode step's cache update: ``past`` [B, KV, L+1, HD] updated in place at slot L
    by ScatterND (``static``), or ``past`` [B, KV, L, HD] with the new row appended
    (``concat``). ``data="intermediate"`` scatters into a tensor computed from ``past``."""
    vi, n = helper.make_tensor_value_info, helper.make_node
    slots = L + 1 if form == "static" else L
    ins = [
        vi("past", TensorProto.FLOAT, [B, KV, slots, HD]),
        vi("new", TensorProto.FLOAT, [B, KV, 1, HD]),
    ]
    out = [vi("present", TensorProto.FLOAT, [B, KV, L + 1, HD])]
    if form == "concat":
        return load_graph(make([n("Concat", ["past", "new"], ["present"], axis=2)], ins, out))
    grid = np.meshgrid(np.arange(B), np.arange(KV), indexing="ij")
    slot = np.stack([*grid, np.full_like(grid[0], L)], axis=-1)[:, :, None].astype(np.int64)
    nodes, src = [], "past"
    if data == "intermediate":
        nodes.append(n("Neg", ["past"], ["past_neg"], name="neg"))
        src = "past_neg"
    attrs = {} if reduction == "none" else {"reduction": reduction}
    nodes.append(n("ScatterND", [src, "slot", "new"], ["present"], name="update", **attrs))
    return load_graph(make(nodes, ins, out, [numpy_helper.from_array(slot, "slot")], opset=18))


def _kernel(graph: Graph, op_type: str) -> Kernel:
    low = Lowering(graph, T910B)
    group = next(g for g in singleton_groups(graph) if graph.op(g.ops[0]).op_type == op_type)
    return low.kernel(group, low.default(group))


def test_the_inplace_rule_names_a_caller_buffer_updated_in_place() -> None:
    static = _cache()
    assert is_inplace_update(static, static.op("update"))
    inner = _cache(data="intermediate")
    assert not is_inplace_update(inner, inner.op("update"))  # a copy of a computed tensor
    added = _cache(reduction="add")
    assert not is_inplace_update(added, added.op("update"))  # reads the rows it updates


def test_inplace_update_writes_only_the_new_rows() -> None:
    kernel = _kernel(_cache(), "ScatterND")
    slot_bytes = B * KV * 3 * 8  # int64 indices
    # the updates and indices read, the new rows written; the buffer neither read nor copied
    assert kernel.compulsory_bytes == 2 * ROW_BYTES + slot_bytes
    assert kernel.bytes_moved() == kernel.compulsory_bytes
    for name, model in _models():
        cost = _cost(model, kernel)
        assert 2 * ROW_BYTES <= cost.hbm_bytes <= 2 * ROW_BYTES + slot_bytes + 512, name
        assert cost.device_us <= 4.0, (name, cost.device_us)  # a tiny kernel's floor


def test_inplace_update_casts_only_the_rows_it_moves() -> None:
    """Under bf16 the vector unit casts what it moves (the new rows), not the buffer."""
    bf16 = load_target("ascend910b", (), "bf16")
    low = Lowering(_cache(), bf16)
    group = singleton_groups(low.graph)[0]
    cost = AnalyticModel(bf16, "raw").evaluate([low.kernel(group, low.default(group))])[0]
    assert cost.device_us <= 4.0, cost.device_us


def test_scatter_into_an_intermediate_is_still_a_full_copy() -> None:
    kernel = _kernel(_cache(data="intermediate"), "ScatterND")
    copy_us = 2 * BUFFER_BYTES / SPEC.hbm_bytes_per_s * 1e6
    for name, model in _models():
        cost = _cost(model, kernel)  # a cold L2: the buffer comes from HBM and goes back
        assert cost.hbm_bytes >= 0.98 * 2 * BUFFER_BYTES, name
        assert cost.device_us >= copy_us, (name, cost.device_us, copy_us)


def test_concat_cache_reads_the_past_and_writes_the_present() -> None:
    graph = _cache("concat")
    kernel = _kernel(graph, "Concat")
    past, present = B * KV * L * HD * F32, BUFFER_BYTES
    assert kernel.compulsory_bytes == past + ROW_BYTES + present
    assert compulsory_bytes(graph, T910B) == past + ROW_BYTES + present
    for name, model in _models():
        cost = _cost(model, kernel)
        assert cost.hbm_bytes == pytest.approx(past + ROW_BYTES + present, rel=0.01), name


def test_roofline_counts_an_inplace_buffer_once() -> None:
    """The graph's compulsory bytes: the new rows in and out; the buffer itself only where an
    op reads the updated cache."""
    assert compulsory_bytes(_cache(), T910B) == 2 * ROW_BYTES
    assert _cache().bytes_min == 2 * ROW_BYTES


def test_llama_decode_updates_its_static_cache_in_place() -> None:
    graph = load_graph(build("llama3-8b-decode", weights="inputs", layers=1, cache_len=L, batch=B))
    scatters = [op for op in graph.ops if op.op_type == "ScatterND"]
    assert len(scatters) == 2 and all(is_inplace_update(graph, op) for op in scatters)
    low, model = Lowering(graph, T910B), AnalyticModel(T910B, "raw")
    for op in scatters:
        group = make_group(graph, [op.name])
        cost = _cost(model, low.kernel(group, low.default(group)))
        assert cost.device_us <= 4.0, (op.name, cost.device_us)


# -- GEMV-shaped matmuls -----------------------------------------------------------------------
def _gemv(m: int, k: int, n: int, batch: int = 0) -> Graph:
    return load_graph(weight_matmul(m, k, n, batch))


def _best(graph: Graph) -> dict[str, float]:
    """Latency (us) at each model's best config of the grid (the simulator's among the
    analytic model's best few, as `costmodel eval` picks it) and at the default config."""
    low = Lowering(graph, T910B)
    group = singleton_groups(graph)[0]
    grid = low.grid(group)
    analytic, sim = AnalyticModel(T910B, "raw"), SimulatorModel(T910B)
    scores = analytic.predict_batch(low.batch(group, grid))
    few = [low.kernel(group, grid[i]) for i in np.argsort(scores, kind="stable")[:4]]
    default = low.kernel(group, low.default(group))
    return {
        "analytic": float(scores.min()),
        "simulator": min(_cost(sim, k).latency_us for k in few),
        "default": _cost(analytic, default).latency_us,
    }


@pytest.mark.parametrize(("k", "n"), [(4096, 4096), (4096, 14336)])
def test_gemv_at_its_best_config_streams_its_weights_at_the_hbm_rate(k: int, n: int) -> None:
    bound = k * n * 2 / SPEC.hbm_bytes_per_s * 1e6 + HEAD_US
    for name, us in _best(_gemv(1, k, n)).items():
        assert 1.0 <= us / bound <= 1.5, (name, us, bound)


def test_gemv_cost_is_linear_in_the_weights_and_flat_in_m() -> None:
    base = _best(_gemv(1, 4096, 4096))
    wide = _best(_gemv(1, 4096, 8192))
    rows = _best(_gemv(16, 4096, 4096))
    for name in base:
        ratio = (wide[name] - HEAD_US) / (base[name] - HEAD_US)
        assert 1.7 <= ratio <= 2.3, (name, ratio)  # twice the weights, twice the time
        assert rows[name] / base[name] <= 1.1, (name, rows[name], base[name])  # padded rows


def test_batched_rows_against_one_weight_read_it_once() -> None:
    """[B, 1, K] x [K, N] is one matmul of B rows (a decode step at batch B), not B GEMVs
    that each read the weights."""
    flat, batched = _best(_gemv(32, 4096, 4096)), _best(_gemv(1, 4096, 4096, batch=32))
    for name in flat:
        assert batched[name] == pytest.approx(flat[name], rel=0.02), name
    graph = _gemv(1, 4096, 4096, batch=32)
    low = Lowering(graph, T910B)
    group = singleton_groups(graph)[0]
    kernel = low.kernel(group, low.default(group))
    assert kernel.grid[0] == 1  # one batch of 32 rows


@pytest.mark.parametrize(("m", "batch"), [(128, 0), (1024, 0), (32, 8)])
def test_prefill_shaped_configs_stay_as_they_were(m: int, batch: int) -> None:
    """Only a GEMV-shaped matmul (at most 32 rows against its B) gets the even column split
    and its own default: a prefill matmul, also 8 sequences of 32 tokens, keeps power-of-two
    tiles and the largest as its default."""
    graph = _gemv(m, 1024, 4096, batch)
    low = Lowering(graph, T910B)
    group = singleton_groups(graph)[0]
    grid = low.grid(group)
    assert {c.base_n for c in grid} <= {16, 32, 64, 128, 256, 512}
    default = low.default(group)
    assert default.base_m * default.base_n == max(c.base_m * c.base_n for c in grid)
