"""Real measurements as measurement records, so that the cost models can be fitted on them.

Each row's kernel is lowered at its default config (the row's ``block_dim`` when it names one)
on its own chip's spec, cold L2, and measured at the row's time: a ``device`` row (msprof task
duration, the kernel alone) plus the spec's gap between kernels, which every model's latency
includes. A ``host`` row is left out (``costmodel eval --real`` still scores it): a wall clock
holds the launch and every kernel the framework ran for the op, so it does not say what the one
kernel the row is lowered to takes, and a correction fitted to it learns what no feature of the
kernel explains (docs/calibration.md). A ``library`` row's time loses the library prologue
(:func:`~.evaluate.library_prologue_us`): the row then measures the kernel the
tool would generate, on the chip's own spec, which is what the models are fitted to; an in-situ
row's time gains what its prologue's reads saved in L2 (the spec's prologue is timed alone,
:meth:`~costmodel.spec.HardwareSpec.in_situ`). An in-situ row records the L2 context it ran in
(its inputs resident as far as L2 holds them, :func:`~.evaluate.row_resident`); an
isolated row a cold one. The records are measured by hardware
(:data:`~costmodel.measure.record.HARDWARE_VERSION`, ``real``) on the row's chip as ``target``,
with its source and op family, so that a fit can weigh them up and an evaluation can hold out
whole sources. A row's measured busy times of the cube's pipes (``mac_us``,
``mte1_us``) are those pipes' busy times in the fit; its DMA and vector pipes' are not
(:data:`~costmodel.measure.MEASURED_PIPES` says why).
"""

from __future__ import annotations

from collections.abc import Sequence

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.measure.real.evaluate import (
    library_prologue_us,
    lowered,
    measured_config,
    row_resident,
)
from costmodel.measure.real.rows import RealRow
from costmodel.measure.record import HARDWARE_VERSION, Measurement, Provenance, measurements
from costmodel.measure.table import measured_pipes
from costmodel.spec import Target, fitted_lineage

__all__ = ["real_measurements"]


def _cold_prologue_us(row: RealRow, chip: Target) -> float:
    """What an in-situ row's generated kernel would add with its prologue timed alone (its
    tiling read from HBM, not L2): a fit row measures the kernel on the chip's own spec."""
    return chip.spec.in_situ_saving_us if row.context == "in-situ" else 0.0


def real_measurements(rows: Sequence[RealRow], chip: str) -> tuple[list[Measurement], list[str]]:
    """Records of the device-timed real rows measured on ``chip`` or a SKU of it, and one line
    per row left out (timed on the host, another chip, or a kernel that does not lower to one
    kernel)."""
    out: list[Measurement] = []
    problems: list[str] = []
    for row in rows:
        where = f"{row.path} row {row.row}"
        if row.timing != "device":
            how = (
                "timed on the host (launch and every kernel of the op in it)"
                if row.timing == "host"
                else "timed in a way its source does not state"
            )
            problems.append(
                f"{where}: {how}, not a kernel's device time (`costmodel eval --real` still "
                "scores it); skipped"
            )
            continue
        if chip not in fitted_lineage(row.target):
            problems.append(
                f"{where}: measured on {row.target}, not {chip} or a SKU of it; skipped"
            )
            continue
        try:
            target, lowering, groups = lowered(row)
            if len(groups) != 1:
                problems.append(
                    f"{where}: its {row.family} lowers to {len(groups)} kernels here; one "
                    "measured time cannot be split between them; skipped"
                )
                continue
            kernel = lowering.kernel(groups[0], measured_config(lowering, groups[0], row))
            context = AnalyticModel(target).residency([kernel], warm=row_resident(row, lowering))
        except Exception as err:  # one row that cannot be lowered is reported, never fatal
            problems.append(f"{where}: cannot be lowered ({type(err).__name__}: {err}); skipped")
            continue
        gap = target.spec.kernel_gap_s * 1e6
        generated_us = row.time_us - library_prologue_us(row, target, [kernel])
        generated_us += _cold_prologue_us(row, target)
        if generated_us <= 0:
            problems.append(f"{where}: {row.time_us} us is less than a library prologue; skipped")
            continue
        measured = Provenance.of(
            target, measured_by=HARDWARE_VERSION, source=row.source_name, family=row.family
        )
        cost = KernelCost(generated_us + gap, measured_pipes(row.pipes))
        out += measurements([kernel], [cost], context, measured)
    return out, problems
