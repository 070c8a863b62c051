"""Lowering: a fusion group + a kernel config + a target -> a tiled :class:`Kernel`.

Three templates cover every group kind: cube (single MatMul/Gemm/Conv, ``cube_epilogue``,
``horizontal_cube``), vector (single vector ops, ``vector_chain``, ``row_reduce``; depthwise
convolutions run here too) and attention. Each template analyses the group once, enumerates a
pruned grid of feasible configs, and lowers many configs at once (numpy over configs) for the
vectorised analytic model. :class:`Lowering` caches each group's analysis (which names the
group's own tensors, so L2 carry-over between kernels matches the right ones) and each
signature's grid, so the twelve identical layers of a BERT share one grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from costmodel.exceptions import CostModelError, InfeasibleConfig
from costmodel.kernel import Kernel, KernelBatch, KernelConfig
from costmodel.lower.attention import (
    analyse_attention,
    attention_default,
    attention_grid,
    lower_attention,
)
from costmodel.lower.cube import analyse_cube, cube_fits, cube_grid, lower_cube
from costmodel.lower.cube_gemv import cube_tiles, gemv_default, is_gemv
from costmodel.lower.cube_l2 import KNOB as L2_KNOB
from costmodel.lower.cube_l2 import default_groups
from costmodel.lower.vector import analyse_vector, lower_vector, vector_grid
from costmodel.spec import Target
from search_space.ir import FusionGroup, Graph, OpClass, empty_tensors

__all__ = ["Lowering", "config_grid", "default_config", "lower", "lower_many", "template_of"]


def template_of(graph: Graph, group: FusionGroup) -> str:
    """``cube``, ``vector`` or ``attention``: which lowering a group takes."""
    ops = [graph.op(n) for n in group.ops]
    cubes = [op for op in ops if op.op_class is OpClass.CUBE and op.unit == "cube"]
    if not cubes:
        return "vector"
    if len(cubes) >= 2 and (
        group.kind == "attention" or any(op.op_type in ("Softmax", "LogSoftmax") for op in ops)
    ):
        return "attention"
    return "cube"


class Lowering:
    """Lowers groups of one graph for one target.

    The analysis is cached per group, not per signature: it holds tensor names (operands,
    prologue sources, outputs), and two layers with one signature read different tensors. A
    kernel's lowering must not depend on which same-signature group was lowered first. Grids
    depend only on structure and are cached per signature.
    """

    def __init__(self, graph: Graph, target: Target) -> None:
        """Raises: CostModelError for a graph with an empty tensor (nothing to cost)."""
        empty = empty_tensors(graph)  # callers give an empty model no kernel (no work)
        if empty:
            flags = " ".join(
                f"--input-shape {t.name}=" + "x".join(str(d or 1) for d in t.shape or ())
                for t in empty
                if t.kind == "input"
            )
            raise CostModelError(
                f"tensor '{empty[0].name}' {list(empty[0].shape or ())} is empty (a zero "
                "dim): the model has no work to cost or tune; give it a non-zero size"
                + (f", e.g. {flags}" if flags else "")
            )
        self.graph = graph
        self.target = target
        self._work: dict[FusionGroup, tuple[str, Any]] = {}
        self._grid: dict[str, list[KernelConfig]] = {}
        self._sigs: dict[FusionGroup, str] = {}

    def signature(self, group: FusionGroup) -> str:
        """The group's structural signature (hashed once per group, then cached)."""
        sig = self._sigs.get(group)
        if sig is None:
            sig = self._sigs[group] = group.signature(self.graph)
        return sig

    def _analysed(self, group: FusionGroup) -> tuple[str, Any, str]:
        sig = self.signature(group)
        if group not in self._work:
            kind = template_of(self.graph, group)
            fn = {"cube": analyse_cube, "vector": analyse_vector, "attention": analyse_attention}[
                kind
            ]
            self._work[group] = (kind, fn(self.graph, group, self.target))
        kind, work = self._work[group]
        return kind, work, sig

    def grid(self, group: FusionGroup) -> list[KernelConfig]:
        """The pruned list of feasible configs for the group (always holds the default)."""
        kind, work, sig = self._analysed(group)
        if sig not in self._grid:
            if kind == "cube":
                configs = cube_grid(work, self.target)
            elif kind == "attention":
                configs = attention_grid(work, self.target)
            else:
                configs = vector_grid(work, self.target)
            if not configs:
                raise InfeasibleConfig(
                    f"no config of group {group.ops[0]}.. ({group.kind}) fits the buffers of "
                    f"{self.target.spec.name}"
                )
            self._grid[sig] = configs
        return self._grid[sig]

    def fits(self, group: FusionGroup) -> bool:
        """Whether :meth:`grid` has a config for the group (does not raise), without making
        the whole grid of a cube group that has none made yet.

        Raises:
            InfeasibleConfig: as :meth:`grid` raises it before it makes the grid.
        """
        kind, work, sig = self._analysed(group)
        if sig in self._grid:
            return True
        if kind == "cube":
            return cube_fits(work, self.target)
        try:
            self.grid(group)
        except InfeasibleConfig:
            return False
        return True

    def batch(self, group: FusionGroup, configs: Sequence[KernelConfig]) -> KernelBatch:
        """Lower ``configs`` of one group at once."""
        kind, work, sig = self._analysed(group)
        args = (list(configs), self.target, group.ops[0], group.ops, group.kind, sig)
        if kind == "cube":
            return lower_cube(work, *args)
        if kind == "attention":
            return lower_attention(work, *args)
        return lower_vector(work, *args)

    def kernel(self, group: FusionGroup, config: KernelConfig) -> Kernel:
        return self.batch(group, [config]).kernel(0)

    def default(self, group: FusionGroup, block_dim: int | None = None) -> KernelConfig:
        """What a hand-written kernel would use: the largest tiles that fit with double
        buffering, on all cores (vector kernels: no larger than needed to feed every core; a
        matmul whose largest tiles are fewer than the cores, and a GEMV: the tiling that loads
        the fewest bytes on its busiest core, as CANN's matmul tiling splits a small matmul
        over every core; attention: split over the keys when its blocks leave cores idle).

        ``block_dim`` (a kernel seen running on that many cores, as msprof reports it; 0 or
        None: all of them): the default on those cores, never more than the chip has. A
        vector kernel's rows are dealt over them, so fewer cores take larger tiles; a cube
        kernel keeps the tiles it takes on all cores (its tiling splits the work for every
        core the chip has); an attention kernel splits the keys only as far as those cores
        need (a flash kernel on ``S/128`` cores takes 128 query rows each over every key).

        Raises:
            CostModelError: a negative ``block_dim``.
        """
        if block_dim is not None and block_dim < 0:
            raise CostModelError(f"block_dim must be >= 0 (0: all cores), but got {block_dim}")
        configs = self.grid(group)
        kind, work, _ = self._analysed(group)
        top = max(c.block_dim for c in configs)
        pool = [c for c in configs if c.double_buffer and c.block_dim == top] or configs
        seen = min(block_dim, top) if block_dim else 0
        if kind == "cube":
            groups = default_groups(work, self.target)  # CANN's L2 tiling where B overflows
            chosen = max(
                pool,
                key=lambda c: (
                    c.base_m * c.base_n,
                    c.base_k,
                    c.base_n,
                    c.knob(L2_KNOB, 1) == groups,
                ),
            )
            if is_gemv(work, top) or cube_tiles(work, chosen) < top:
                # the largest tiles leave cores idle: split finer (cube_gemv)
                chosen = gemv_default(work, pool, top)
        elif kind == "attention":  # split over the keys to fill the cores it runs on
            chosen = attention_default(work, pool, seen or top)
        else:
            per_core = max(1, -(-work.rows // (seen or top)))
            fitting = [c for c in pool if c.ub_rows <= per_core] or pool
            chosen = max(fitting, key=lambda c: (c.ub_rows * c.ub_cols, c.ub_cols))
        if seen and seen < chosen.block_dim:  # never more cores than the default uses
            return replace(chosen, block_dim=seen)
        return chosen

    def kernels(
        self, groups: Sequence[FusionGroup], configs: Sequence[KernelConfig | None] | None = None
    ) -> list[Kernel]:
        """Lower a plan: each group at its given config, or its default."""
        chosen = configs or [None] * len(groups)
        return [self.kernel(g, c or self.default(g)) for g, c in zip(groups, chosen, strict=True)]


def config_grid(graph: Graph, group: FusionGroup, target: Target) -> list[KernelConfig]:
    return Lowering(graph, target).grid(group)


def default_config(graph: Graph, group: FusionGroup, target: Target) -> KernelConfig:
    return Lowering(graph, target).default(group)


def lower_many(
    graph: Graph, group: FusionGroup, configs: Sequence[KernelConfig], target: Target
) -> KernelBatch:
    return Lowering(graph, target).batch(group, configs)


def lower(graph: Graph, group: FusionGroup, config: KernelConfig, target: Target) -> Kernel:
    return Lowering(graph, target).kernel(group, config)
