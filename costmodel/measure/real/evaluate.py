"""The cost models against real measured kernel times.

Each row's kernel (:func:`~.kernels.one_kernel`) is costed on its chip's spec, in
its dtype, by the simulator, the calibrated analytic model and the learned model, each at the
kernel's default config (what a hand-written kernel would use) and at that model's own
favourite config; and by a naive baseline, the kernel's roofline plus a fixed floor. A
``device`` row (msprof task duration) is compared with the model's ``device_us`` (the kernel
without the gap before it), a ``host`` row (wall clock, launch included) with ``latency_us``.
A ``library`` row (CANN's own op kernel) is costed on the chip's library spec
(:meth:`~costmodel.spec.HardwareSpec.library`). An ``in-situ`` row (a kernel inside a real step)
is costed with its inputs in L2 as their producers just wrote them
(:func:`~costmodel.residency.written_inputs`), an ``isolated`` one from a cold L2.
How close the predictions come is scored by :mod:`costmodel.measure.real.scores`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodel.analytic import AnalyticModel
from costmodel.analytic.l2 import L2Residency
from costmodel.base import CostModel
from costmodel.exceptions import MeasurementError
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.lower.attention import at_query_block
from costmodel.measure.real.kernels import one_kernel
from costmodel.measure.real.rows import ATTENTION_KNOBS, RealRow, source_name
from costmodel.residency import inside_step, written_inputs
from costmodel.spec import Target, load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, KernelConfig

__all__ = [
    "MODELS",
    "NAIVE_FLOOR_US",
    "LibraryPair",
    "RealPrediction",
    "as_run",
    "favourite",
    "has_library_prologue",
    "library_pairs",
    "library_prologue_us",
    "lowered",
    "measured_config",
    "measured_kernels",
    "model_makers",
    "model_time",
    "predict_row",
    "predict_rows",
    "row_resident",
]

log = logging.getLogger(__name__)
MODELS = ("simulator", "analytic", "learned")
NAIVE_FLOOR_US = 2.0  # the naive baseline's fixed cost per kernel on the device
SIMULATED_CONFIGS = 6  # the simulator's own favourite: among the analytic model's best few
PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
CUBE_TILES = ("base_m", "base_n", "base_k", "m", "n", "k")  # a row's tiling a cube config takes


@dataclass(frozen=True)
class RealPrediction:
    """What each model predicts for one real row (us, in the row's timing), or why not.

    ``predicted`` maps ``<model>/default`` and ``<model>/best`` (and ``naive``) to a time.
    """

    row: RealRow
    predicted: Mapping[str, float] = field(default_factory=dict)
    kernels: int = 0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        r = self.row
        return {
            "row": r.row,
            "file": r.path,
            "source": r.source_name,
            "family": r.family,
            "chip": r.target,
            "op": r.op,
            "dtype": r.dtype,
            "timing": r.timing,
            "impl": r.impl,
            "context": r.context,
            "measured_us": r.time_us,
            "predicted_us": dict(self.predicted),
            "n_kernels": self.kernels,
            **({"error": self.error} if self.error else {}),
        }


def _target(row: RealRow) -> Target:
    return load_target(row.target, (), PRECISION.get(row.dtype, "auto"))


def has_library_prologue(row: RealRow, kernels: Sequence[Kernel]) -> bool:
    """Whether the row's kernels pay CANN's library prologue (docs/cost-model.md): a library
    row's vector or mixed kernel does, a cube-only one (a plain matmul) does not. Beside
    kernels written for the same shapes on the same 910B4 (PyAsc's Linear), torch_npu's
    Linear is a median 0.1 us slower (-0.6 to +0.3 us at 128 rows, where a prologue would
    show whole), while its RMSNorm is a median 2.8 us slower in the same run."""
    return row.impl == "library" and any(k.unit != "cube" for k in kernels)


def as_run(row: RealRow, target: Target, kernels: Sequence[Kernel]) -> Target:
    """The target the row's kernels ran on: with the library prologue where they pay one,
    inside a step (:func:`~costmodel.residency.inside_step`) for an in-situ row."""
    if has_library_prologue(row, kernels):
        target = Target(target.spec.library(), target.precision)
    return inside_step(target) if row.context == "in-situ" else target


def library_prologue_us(row: RealRow, target: Target, kernels: Sequence[Kernel]) -> float:
    """What the row's time holds beyond a generated kernel's: the library prologue, or 0."""
    return as_run(row, target, kernels).spec.library_prologue_us


@dataclass(frozen=True)
class LibraryPair:
    """One op at one shape timed in one run both as CANN's library kernel and as a kernel
    written for the shape (medians where a column was timed more than once)."""

    source: str  # the run: a source file at one commit
    target: str
    family: str
    dtype: str
    data: tuple[int, ...]  # the first tensor's dims
    library_us: float
    custom_us: float

    @property
    def diff_us(self) -> float:
        return self.library_us - self.custom_us

    @property
    def source_name(self) -> str:
        """The source without its commit and path (as :attr:`RealRow.source_name`)."""
        return source_name(self.source)


def library_pairs(rows: Iterable[RealRow]) -> list[LibraryPair]:
    """The device-timed vector kernels that a run timed both as CANN's library kernel and as
    one written for the shape, paired by op, dtype and data (the first tensor: side tables
    such as RoPE's cos and sin are laid out differently by different kernels). Rows of another
    run (another commit of a source: another CANN version) are never paired across."""
    groups: dict[tuple[str, str, str, str, tuple[int, ...]], dict[str, list[float]]] = {}
    for row in rows:
        if row.timing != "device" or any(k.unit != "vector" for k in measured_kernels(row)[1]):
            continue
        data = next(iter(row.tensors.values()))
        key = (row.source, row.target, row.family, row.dtype, data)
        groups.setdefault(key, {}).setdefault(row.impl, []).append(row.time_us)
    return [
        LibraryPair(
            source=source,
            target=target,
            family=family,
            dtype=dtype,
            data=data,
            library_us=float(np.median(t["library"])),
            custom_us=float(np.median(t["custom"])),
        )
        for (source, target, family, dtype, data), t in groups.items()
        if "library" in t and "custom" in t
    ]


def lowered(row: RealRow) -> tuple[Target, Lowering, list[FusionGroup]]:
    """The row's target (its chip in its dtype, as generated kernels run on it), a lowering of
    its one-kernel model and the model's fusion groups (one, unless the chain cannot be fused
    as the real kernel is)."""
    graph = load_graph(one_kernel(row))
    target = _target(row)
    ctx = FusionContext(graph)
    verdict = ctx.check(ctx.nodes)
    parts = [frozenset(ctx.nodes)] if verdict.ok else ctx.repair(ctx.edges)
    groups = ctx.to_groups(parts)
    if not groups:
        raise MeasurementError(f"row {row.row}: {row.op!r} leaves no kernel to run (a no-op)")
    return target, Lowering(graph, target), groups


def measured_config(lowering: Lowering, group: FusionGroup, row: RealRow) -> KernelConfig:
    """The config the real kernel ran at, as far as the row tells: the group's default config
    on as many cores as the row's ``block_dim`` names (never more than the chip has), with
    the tiles a kernel on that many cores takes; a cube kernel's L1 and L0 tiles where the row
    names them (a GEMM template's tiling)."""
    default = lowering.default(group, block_dim=row.block_dim)
    if default.knob("kv_tile"):
        return _attention_tiles(default, row.tiling)
    tiles = [row.tiling.get(k, getattr(default, k)) for k in CUBE_TILES]
    if not any(k in row.tiling for k in CUBE_TILES) or not default.base_m:
        return default
    base_m, base_n, base_k, m, n, k = tiles
    return dataclasses.replace(default, base_m=base_m, base_n=base_n, base_k=base_k, m=m, n=n, k=k)


def _attention_tiles(default: KernelConfig, tiling: Mapping[str, int]) -> KernelConfig:
    """An attention's default config at the tiles the row names: its query block
    (``base_m``), key step (``kv_tile``), the rows a vector core softmaxes at a time
    (``vec_rows``) and whether it skips the key blocks a causal mask hides (``causal_skip``);
    the default's where the row names none."""
    knobs = {k: tiling[k] for k in ATTENTION_KNOBS if k in tiling}
    return at_query_block(default, tiling.get("base_m", default.base_m), knobs)


def row_resident(row: RealRow, lowering: Lowering) -> dict[str, float] | None:
    """What L2 holds when the row's kernel starts (``CostModel.evaluate``'s ``resident``):
    an in-situ row's inputs as their producers just wrote them, nothing for an isolated row."""
    if row.context != "in-situ":
        return None
    return written_inputs(lowering.graph, lowering.target)


def measured_kernels(row: RealRow) -> tuple[Target, list[Kernel]]:
    """The row's kernels at the config they ran at (:func:`measured_config`), and the target
    they ran on (:func:`as_run`: with the library prologue where they pay one)."""
    chip, lowering, groups = lowered(row)
    kernels = [lowering.kernel(g, measured_config(lowering, g, row)) for g in groups]
    return as_run(row, chip, kernels), kernels


def _time(cost: Any, timing: str) -> float:
    return float(cost.device_us if timing == "device" else cost.latency_us)


def _naive(kernels: Sequence[Kernel], target: Target, timing: str, itemsize: int) -> float:
    """Roofline (nominal peaks) plus a fixed floor per kernel, and the gap for rows not timed
    on the device (as :func:`_time` costs them)."""
    spec = target.spec
    peak = spec.cube_peak_flops * target.cube_rate(itemsize)
    us = 0.0
    for k in kernels:
        roof = max(k.cube_flops / peak, k.compulsory_bytes / spec.hbm_peak_bytes_per_s) * 1e6
        us += roof + NAIVE_FLOOR_US + (spec.kernel_gap_s * 1e6 if timing != "device" else 0.0)
    return us


def model_time(
    model: CostModel,
    kernels: Sequence[Kernel],
    timing: str,
    resident: dict[str, float] | None = None,
) -> float:
    """What ``model`` says the kernels take, as a row timed that way measures it: each kernel's
    ``device_us`` (``device``) or ``latency_us`` (``host``), summed; ``resident``: what L2
    holds when they start (:func:`row_resident`)."""
    return sum(_time(c, timing) for c in model.evaluate(kernels, resident))


def predict_row(
    row: RealRow, models: Mapping[str, Callable[[Target], CostModel]], best: bool = True
) -> RealPrediction:
    """Every model's prediction for one row (an error, not an exception, when it fails): at
    the row's config (``<model>/default``) and, with ``best``, at the model's favourite."""
    try:
        chip, lowering, groups = lowered(row)
        defaults = [measured_config(lowering, g, row) for g in groups]
        grids = [lowering.grid(g) for g in groups]
        out: dict[str, float] = {}
        default_kernels = [lowering.kernel(g, c) for g, c in zip(groups, defaults, strict=True)]
        target = as_run(row, chip, default_kernels)
        warm = row_resident(row, lowering)
        for name, make in models.items():
            model = make(target)
            out[f"{name}/default"] = model_time(model, default_kernels, row.timing, warm)
            if best:
                run = (target, row.timing)
                out[f"{name}/best"] = _best(model, name, lowering, groups, grids, run, warm)
        itemsize = 4 if row.dtype == "float32" else 2
        out["naive"] = _naive(default_kernels, target, row.timing, itemsize)
        return RealPrediction(row, out, kernels=len(groups))
    except Exception as err:  # one row that cannot be costed is reported, never fatal
        log.warning("real row %d: %s: %s", row.row, type(err).__name__, err)
        return RealPrediction(row, error=f"{type(err).__name__}: {err}")


def _best(
    model: CostModel,
    name: str,
    lowering: Lowering,
    groups: Sequence[Any],
    grids: Sequence[Sequence[Any]],
    run: tuple[Target, str],
    warm: dict[str, float] | None = None,
) -> float:
    """The model's own favourite config of each group, costed by the model: the argmin of its
    batch prediction over the grid (analytic, learned), or of a simulation of the analytic
    model's few best configs (the simulator: every config would take minutes). ``run``: the
    target and the row's timing; ``warm``: what L2 holds when the kernel starts."""
    target, timing = run
    total = 0.0
    for group, grid in zip(groups, grids, strict=True):
        if name == "simulator":
            ranker = AnalyticModel(target)
            batch = lowering.batch(group, list(grid))
            scores = ranker.predict_batch(batch, _held(target, warm))
            order = np.argsort(scores, kind="stable")[:SIMULATED_CONFIGS]
            candidates = [lowering.kernel(group, grid[i]) for i in order]
            total += min(model_time(model, [k], timing, warm) for k in candidates)
        else:
            pick = favourite(model, lowering, group, grid, _held(target, warm))
            total += model_time(model, [pick], timing, warm)
    return total


def _held(target: Target, warm: dict[str, float] | None) -> L2Residency | None:
    """The bytes of each tensor the target's L2 holds of ``warm`` (written in order)."""
    return None if not warm else L2Residency.written(warm, target.spec.l2_bytes)


def favourite(
    model: CostModel,
    lowering: Lowering,
    group: Any,
    grid: Sequence[Any],
    resident: L2Residency | None = None,
) -> Kernel:
    """The kernel of ``group`` at the config of ``grid`` a batch-costing model (analytic,
    learned) puts fastest, with ``resident`` bytes of its inputs in L2: what a tuner on that
    model picks."""
    batch = lowering.batch(group, list(grid))
    scores = model.predict_batch(batch, resident)
    return lowering.kernel(group, grid[int(np.argmin(scores))])


def model_makers(
    kinds: Sequence[str], build: Callable[[str, Target], CostModel]
) -> dict[str, Callable[[Target], CostModel]]:
    """Per model kind, a factory of ``build(kind, target)`` that makes one model object per
    spec and precision (the rows of one chip and kind of kernel share it). ``build`` is
    :func:`costmodel.registry.make_cost_model` or one like it: the measurements sit below the
    models that are fitted on them (the learned model), so they are handed the registry."""
    cache: dict[tuple[str, str, str], CostModel] = {}

    def maker(kind: str) -> Callable[[Target], CostModel]:
        def make(target: Target) -> CostModel:
            key = (kind, target.spec.digest(), target.precision)  # the digest names the chip
            if key not in cache:
                cache[key] = build(kind, target)
            return cache[key]

        return make

    return {k: maker(k) for k in kinds}


def predict_rows(
    rows: Iterable[RealRow],
    build: Callable[[str, Target], CostModel],
    models: Sequence[str] = MODELS,
    best: bool = True,
) -> list[RealPrediction]:
    """Predictions for every row by every model (one model object per chip and precision,
    made by ``build``: :func:`model_makers`)."""
    makers = model_makers(models, build)
    return [predict_row(r, makers, best) for r in rows]
