"""Lowering: templates, config grids and defaults, feasibility, and the vectorised batch."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from conftest import bert_ffn_block, conv_bn_relu, exporter_attention, weight_matmul
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from costmodel.analytic import AnalyticModel
from costmodel.exceptions import CostModelError
from costmodel.kernel import KernelConfig
from costmodel.lower import Lowering, template_of
from costmodel.simulator import SimulatorModel
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import Graph, alias_root, make_group, singleton_groups
from search_space.zoo import build, list_models

T910B = load_target("ascend910b")


@pytest.fixture(scope="module")
def ffn():
    return load_graph(bert_ffn_block())


@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_every_zoo_kernel_lowers_with_a_feasible_default_in_its_grid(name: str) -> None:
    graph = load_graph(build(name, weights="inputs", scale=0.25))
    low = Lowering(graph, T910B)
    for group in singleton_groups(graph):
        grid = low.grid(group)
        assert 1 <= len(grid) <= 600, (group.ops, len(grid))
        default = low.default(group)
        assert default in grid
        kernel = low.kernel(group, default)
        assert kernel.feasible(T910B.spec) == (True, "")
        assert kernel.flops == sum(graph.op(o).flops for o in group.ops)
        assert kernel.tiles >= 1 and kernel.steps >= 1
        assert all(s.bytes > 0 for s in kernel.streams)


def test_batch_rows_equal_single_lowerings(ffn) -> None:
    low = Lowering(ffn, T910B)
    group = make_group(ffn, ["up", "up_bias", "relu"])
    grid = low.grid(group)
    batch = low.batch(group, grid)
    for i in range(0, len(grid), max(1, len(grid) // 25)):
        assert batch.kernel(i) == low.kernel(group, grid[i])
    assert batch.feasible_mask(T910B.spec).all()


def test_matmul_bias_relu_rides_on_fixpipe(ffn) -> None:
    group = make_group(ffn, ["up", "up_bias", "relu"])
    assert group.kind == "cube_epilogue"
    k = Lowering(ffn, T910B).kernel(group, Lowering(ffn, T910B).default(group))
    assert k.unit == "cube" and k.vector_cycles_tile == 0
    assert [s.pipe for s in k.streams].count("FIX") == 1  # only the final output is stored
    assert {s.tensor for s in k.streams} == {"x", "w1", "b1", "h"}


def test_residual_layernorm_is_mixed_with_an_l2_handoff_on_910b_only(ffn) -> None:
    group = make_group(ffn, ["down", "residual", "ln"])
    split = Lowering(ffn, T910B)
    k = split.kernel(group, split.default(group))
    assert k.unit == "mixed" and k.cross_core_syncs == 1 and k.vector_cycles_tile > 0
    hand = [s for s in k.streams if s.tensor == "y0#fix"]
    assert {(s.pipe, s.side) for s in hand} == {("FIX", "cube"), ("MTE2", "vector")}
    assert k.footprint["ub"] <= T910B.spec.ub_bytes  # rows assembled from L2 in chunks
    coupled_target = load_target("ascend910")
    coupled = Lowering(ffn, coupled_target)
    kc = coupled.kernel(group, coupled.default(group))
    assert kc.cross_core_syncs == 0 and not any(s.tensor.startswith("y0") for s in kc.streams)


def test_conv_is_an_implicit_im2col_matmul() -> None:
    graph = load_graph(conv_bn_relu(), input_shapes={"img": (4, 3, 16, 16)})
    group = make_group(graph, ["conv", "bn", "relu"])
    low = Lowering(graph, T910B)
    cfg = KernelConfig(block_dim=24, base_m=64, base_n=16, base_k=32, m=64, n=16, k=32)
    k = low.kernel(group, cfg)
    # M = 4*8*8 output pixels, N = 8 channels, K = 3*3*3 = 27
    assert k.grid == (1, math.ceil(256 / 64), 1) and k.steps == 1
    assert k.unit == "cube"  # BatchNorm's per-channel affine and Relu ride on FixPipe


def test_overflowing_config_is_named_with_the_overflow(ffn) -> None:
    group = make_group(ffn, ["up"])
    big = KernelConfig(block_dim=24, base_m=512, base_n=512, base_k=512, m=256, n=256, k=256)
    ok, why = Lowering(ffn, T910B).kernel(group, big).feasible(T910B.spec)
    assert not ok and why.startswith("L1 overflow") and "+" in why


def test_default_is_double_buffered_on_all_cores_and_largest(ffn) -> None:
    low = Lowering(ffn, T910B)
    group = make_group(ffn, ["up"])
    d = low.default(group)
    assert d.double_buffer and d.block_dim == T910B.spec.cube_cores
    area = max(c.base_m * c.base_n for c in low.grid(group) if c.double_buffer)
    assert d.base_m * d.base_n == area


@pytest.mark.parametrize("seen", [0, 1, 6, 24, 1000])
def test_a_matmul_seen_on_some_cores_keeps_its_tiles_on_at_most_the_chips(ffn, seen) -> None:
    """A cube kernel seen on ``seen`` cores (an msprof block_dim; 0: all) runs its default
    tiles on that many, never on more than the chip has; a negative count is refused."""
    low = Lowering(ffn, T910B)
    group = make_group(ffn, ["up"])
    full = low.default(group)
    d = low.default(group, block_dim=seen)
    assert d.block_dim == (min(seen, full.block_dim) if seen else full.block_dim)
    assert (d.base_m, d.base_n, d.base_k) == (full.base_m, full.base_n, full.base_k)
    with pytest.raises(CostModelError, match="block_dim must be >= 0"):
        low.default(group, block_dim=-1)


def test_attention_group_is_flash_tiled() -> None:
    graph = load_graph(exporter_attention(), input_shapes={"x": (2, 64, 16)})
    names = ["qk", "scale", "add_mask", "softmax", "isnan", "nan_guard", "pv"]
    group = make_group(graph, names)
    assert template_of(graph, group) == "attention"
    low = Lowering(graph, T910B)
    k = low.kernel(group, low.default(group))
    kv = [s for s in k.streams if s.per == "step" and s.side == "cube" and s.pipe == "MTE2"]
    assert {s.key for s in kv} >= {"bjk"}  # per (batch x head, key part, step)
    assert k.grid[0] == 2 * 2  # batch x heads


def test_fp32_precision_quarter_cube_rate(ffn) -> None:
    group = make_group(ffn, ["up"])
    cfg = Lowering(ffn, T910B).default(group)
    fp16 = Lowering(ffn, T910B).kernel(group, cfg)
    fp32 = Lowering(ffn, load_target(precision="fp32")).kernel(group, cfg)
    work16 = fp16.cube_cycles - fp16.mmads * T910B.spec.mmad_fixed_cycles
    work32 = fp32.cube_cycles - fp32.mmads * T910B.spec.mmad_fixed_cycles
    assert work32 == pytest.approx(4 * work16)
    assert np.isfinite(work32)


@pytest.mark.parametrize("name", ["transformer-base", "bert-base"])
def test_a_kernel_names_its_own_groups_tensors_whatever_was_lowered_before(name: str) -> None:
    """Repeated layers share a signature but read different tensors: each kernel's streams
    name only tensors of its own group (so L2 carry-over matches the right ones), and a plan
    lowered after other groups equals the plan lowered on a fresh Lowering."""
    from plan_helpers import plan_kernels

    graph = load_graph(build(name, weights="inputs", scale=0.25))
    groups, fresh = plan_kernels(graph, "max", T910B)
    assert len({g.signature(graph) for g in groups}) < len(groups)  # layers do repeat
    warm = Lowering(graph, T910B)
    for g in reversed(groups):  # last layer's groups analysed first
        warm.kernel(g, fresh[groups.index(g)].config)
    for group, kernel in zip(groups, fresh, strict=True):
        named = {*group.inputs, *group.outputs}
        named |= {t for op in group.ops for t in graph.op(op).outputs if t}
        own = named | {alias_root(graph, t) for t in named}
        # workspaces are named after the group or the tensor they hand off
        owners = {s.tensor: s.tensor.rpartition("#")[0] for s in kernel.streams}
        scratch = {t for t, o in owners.items() if o in own or o == group.ops[0]}
        assert set(owners) - scratch <= own, group.ops
        assert warm.kernel(group, kernel.config) == kernel


def test_a_constant_of_a_zero_dim_is_no_empty_model() -> None:
    """Reshape to a scalar reads a shape vector of [0]: the model has work (it was refused as
    empty; found by tests/reliability/test_fuzz.py). An empty activation is still refused."""

    def model(n: int) -> onnx.ModelProto:
        nodes = [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "s"], ["y"], name="to_scalar"),
            helper.make_node("Sigmoid", ["y"], ["z"], name="sig"),
        ]
        return helper.make_model(
            helper.make_graph(
                nodes,
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                [helper.make_tensor_value_info("z", TensorProto.FLOAT, [] if n else [0])],
                [numpy_helper.from_array(np.zeros(0 if n else 1, np.int64), "s")],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )

    graph = load_graph(model(1))
    assert graph.tensors["s"].shape == (0,)
    low = Lowering(graph, T910B)
    assert all(low.kernel(g, low.default(g)).tiles >= 1 for g in singleton_groups(graph))
    with pytest.raises(CostModelError, match="is empty"):
        Lowering(load_graph(model(0)), T910B)


def _matmul(m: int, k: int, n: int) -> Graph:
    return load_graph(weight_matmul(m, k, n))


def _tiles(m: int, n: int, c: KernelConfig) -> int:
    return -(-m // c.base_m) * -(-n // c.base_n)


def _busiest_panels(m: int, n: int, c: KernelConfig) -> int:
    """Rows plus columns of the A and B panels the busiest core loads (waves x one tile's)."""
    waves = -(-_tiles(m, n, c) // c.block_dim)
    return waves * (min(c.base_m, m) + min(c.base_n, n))


@settings(max_examples=25, deadline=None)
@given(
    m=st.sampled_from([64, 128, 256, 512, 1024, 4096]),
    n=st.sampled_from([256, 512, 1536, 4096]),
    k=st.sampled_from([256, 512, 1024]),
)
def test_default_matmul_feeds_the_cores_the_largest_tiles_would_leave_idle(
    m: int, n: int, k: int
) -> None:
    """A hand-written matmul (CANN's tiling) splits a small matmul over every core: when the
    largest tiles are fewer than the cores, the default has at least as many tiles and its
    busiest core loads no more panel rows and columns; otherwise it is the largest tiling."""
    graph = _matmul(m, k, n)
    low = Lowering(graph, T910B)
    group = make_group(graph, ["mm"])
    pool = [c for c in low.grid(group) if c.double_buffer and c.block_dim == T910B.spec.cube_cores]
    largest = max(pool, key=lambda c: (c.base_m * c.base_n, c.base_k, c.base_n))
    d = low.default(group)
    if _tiles(m, n, largest) >= T910B.spec.cube_cores:
        assert d == largest
    else:
        assert _tiles(m, n, d) >= _tiles(m, n, largest)
        fewest = min(_busiest_panels(m, n, c) for c in pool)
        assert _busiest_panels(m, n, d) <= _busiest_panels(m, n, largest)
        if fewest < _busiest_panels(m, n, largest):  # a finer tiling unloads the busiest core
            assert _busiest_panels(m, n, d) < _busiest_panels(m, n, largest)


def test_a_small_matmul_runs_faster_at_its_default_than_on_two_cores() -> None:
    """[128, 512] x [512, 512]: the largest tiles (128 x 256) make two tiles, so two of the
    24 cores would do all the work; the default spreads it and both models agree it is faster.
    """
    graph = _matmul(128, 512, 512)
    low = Lowering(graph, T910B)
    group = make_group(graph, ["mm"])
    pool = [c for c in low.grid(group) if c.double_buffer and c.block_dim == T910B.spec.cube_cores]
    largest = max(pool, key=lambda c: (c.base_m * c.base_n, c.base_k, c.base_n))
    d = low.default(group)
    assert _tiles(128, 512, largest) == 2 and _tiles(128, 512, d) > 2
    for model in (SimulatorModel(T910B), AnalyticModel(T910B)):
        at_default = model.evaluate([low.kernel(group, d)])[0].device_us
        at_largest = model.evaluate([low.kernel(group, largest)])[0].device_us
        assert at_default < at_largest
