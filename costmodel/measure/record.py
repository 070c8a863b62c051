"""One measured kernel as a typed record: what ran, what it cost, the L2 context it started in
and what measured it where.

A :class:`Measurement` is what crosses package seams: a calibration run, a study's measured
plans, a real NPU's profile and the real-data rows all make them, a table stores them
(:mod:`costmodel.measure.table`, the only way to disk and back) and a cost model that learns
takes them (:meth:`costmodel.base.CostModel.update`). A record holds what a table row holds,
so that a record written and read back is the record again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from costmodel.base import KernelCost
from costmodel.kernel import PIPES, Kernel
from costmodel.spec import Target
from search_space.ir import KernelConfig

__all__ = [
    "HARDWARE_VERSION",
    "PROFILE_VERSION",
    "SIMULATOR_VERSION",
    "Measurement",
    "Provenance",
    "measured_cost",
    "measurements",
]

# sim-8: packed short runs (a (T, D) fp16 cache read row by row) cost the port whole bursts but
# HBM only their bytes;
# sim-7: a norm's split row re-read from L2, grouped-query attention reading each KV head once,
# flash-decoding splits, in-place cache updates costed as the rows written, GEMV row folding;
# sim-6: a kernel's device-side set-up (tiling read, scalar prologue) and per-iteration scalar
# work, few-long-row reductions split over cores, bf16 computed in fp32 with casts;
# sim-5: a coupled core's cube and vector halves share its DMA queues, L2 validity per line;
# sim-4: a hand-off also read outside the kernel keeps a real store; sim-3: hand-offs go
# through a workspace (hit L2, take no lines)
SIMULATOR_VERSION = "sim-9"
HARDWARE_VERSION = "real"  # measured on an NPU: a real-data CSV row (datasets/real/)
PROFILE_VERSION = "msprof"  # measured on an NPU: a row of an msprof profile of a model


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a measurement comes from: the target it ran on and what measured it.

    Attributes:
        target: the spec's name (``ascend910b``; a real row's own SKU, ``ascend910b4``).
        spec_digest: :meth:`~costmodel.spec.HardwareSpec.digest` of the spec as run (a spec
            changed by ``--set`` is another).
        precision: the precision mode it ran in (``auto``, ``fp16``, ``bf16``...).
        measured_by: what measured it: the simulator's version (:data:`SIMULATOR_VERSION`),
            or hardware (:data:`HARDWARE_VERSION`, :data:`PROFILE_VERSION`); the table's
            ``simulator_version`` column.
        seed: the seed of the calibration run that sampled it (0 for any other).
        source: where the kernel came from: a model (``zoo:gpt2``, ``synthetic:...``), a
            study (``tune:NAME``), a profile (``msprof:FILE``), a real row's source.
        family: the model family, or a real row's op family.
    """

    target: str
    spec_digest: str
    precision: str
    measured_by: str
    seed: int = 0
    source: str = ""
    family: str = ""

    @classmethod
    def of(
        cls,
        target: Target,
        *,
        measured_by: str = SIMULATOR_VERSION,
        seed: int = 0,
        source: str = "",
        family: str = "",
    ) -> Provenance:
        """The provenance of kernels run on ``target`` (its spec's name and digest, its
        precision)."""
        spec = target.spec
        return cls(spec.name, spec.digest(), target.precision, measured_by, seed, source, family)

    @property
    def on_hardware(self) -> bool:
        """Measured on an NPU, not simulated."""
        return not self.measured_by.startswith("sim-")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One kernel as measured.

    Attributes:
        kernel: the lowered kernel as run (:attr:`config` and :attr:`signature`, its
            canonical group signature, are its own).
        cost: what was measured: the latency (us, the gap before the kernel included) and
            every pipe's busy time on the busiest core (:data:`~costmodel.kernel.PIPES`, 0
            where idle or not measured; a hardware row has only the pipes a fit compares,
            :data:`~costmodel.measure.table.MEASURED_PIPES`).
        resident: per load stream of the kernel, the fraction of its tensor in L2 when the
            kernel started (all 0: a cold L2), to six decimals as a table keeps it.
        provenance: the target it ran on and what measured it.
        group_id: what a record is ranked within (configs of one group in one L2 context);
            the kernel's signature unless the caller names one.
    """

    kernel: Kernel
    cost: KernelCost
    resident: tuple[float, ...]
    provenance: Provenance
    group_id: str

    @property
    def signature(self) -> str:
        return self.kernel.signature

    @property
    def config(self) -> KernelConfig:
        return self.kernel.config

    @property
    def latency_us(self) -> float:
        return self.cost.latency_us


def measured_cost(cost: KernelCost) -> KernelCost:
    """What a record keeps of a cost: the latency and every pipe's busy time (0 where the
    cost names none), as floats."""
    return KernelCost(float(cost.latency_us), {p: float(cost.pipes_us.get(p, 0.0)) for p in PIPES})


def measurements(
    kernels: Sequence[Kernel],
    costs: Sequence[KernelCost],
    resident: Sequence[Sequence[float]],
    provenance: Provenance,
    group_ids: Sequence[str] | None = None,
) -> list[Measurement]:
    """One record per measured kernel.

    Args:
        kernels: the kernels as run.
        costs: what the simulator (or profiler) measured for each.
        resident: per kernel, the fraction of each load stream's tensor already in L2 when it
            started (all zeros for a standalone run on a cold L2).
        provenance: what they ran on and what measured them.
        group_ids: what records are ranked within (configs of one group in one context);
            the kernel signature when omitted.
    """
    return [
        Measurement(
            kernel=k,
            cost=measured_cost(c),
            resident=tuple(round(float(r), 6) for r in res),
            provenance=provenance,
            group_id=group_ids[i] if group_ids is not None else k.signature,
        )
        for i, (k, c, res) in enumerate(zip(kernels, costs, resident, strict=True))
    ]
