"""The closed-form cost model (docs/cost-model.md), vectorised over the configs of one group.

Per kernel, in core cycles (``C`` active cores, ``W = ceil(tiles / C)`` waves, ``S`` steps)::

    double buffered:  gap + head + (W - 1) * tile + tile_last + max(chain - tile, 0)
        tile  = max(S * step_db + FIX per tile,            (L0C has one slot: the next tile's
                    busy time of every pipe per tile,       Mmads wait for this tile's FIX)
                    HBM,
                    slowest pair of adjacent tile stages / 2) + syncs
        step_db = max(max(step stages), step_sb / 2)
                  (two slots per queue: an item's round trip through a queue, producer with
                  its latency then consumer, is spread over two items, so a latency-bound
                  queue such as a stream of small loads runs at (latency + work) / 2)
        chain = first-load latency + per-tile loads + one step through every stage
                + (S - 1) * step_db + FIX + V + MTE3 of the tile + store latency
                + syncs                        (fill and drain: the first and last tile)
    single buffered:  gap + head + (W - 1) * tile_sb + tile_sb_last + max(chain_sb - tile_sb, 0)
        tile_sb = max(slowest pair of adjacent tile stages, the double-buffered tile) + syncs
        tile stages = per-tile loads, S * step_sb, FIX, vector-side loads, V, MTE3
        step_sb = slowest pair of adjacent step stages
                  (one slot per queue: a slot frees when its consumer finishes, so every
                  producer alternates with its consumer; latencies are exposed)
    tile_last, tile_sb_last: a tile of the last wave, whose ``tiles - (W - 1) C`` cores share
        HBM among themselves (the same tile when the wave is full; :mod:`.waves`)
    Loads expose their first-byte latency: a GM latency on a miss, an L2 latency on a hit, and
    on a concurrent hit (a block another core of the wave is fetching, never one already
    resident) the L2 latency plus ``share_latency`` of the difference, plus ``l2_fill_wait`` of
    the time the fetching core's fill takes beyond the sharer's own L2 read (the sharer's
    port is free meanwhile, so this is latency, not transfer time). A block smaller than an
    L2 line exposes the miss or concurrent part only where it opens a line its neighbours
    have not (``l2.line_openers``); elsewhere it pays an L2 latency. A tile's own loads
    go out in one queue with its first step's, so their latency counts only beyond the step
    loads' own. A prologue's step stages are the vector side's source loads, V, the operand
    store with its latency and the sync, the cube's read-back, MTE1, M; on a coupled core
    both sides share one MTE2, so the sources' stage is the queue's whole step.

Step stages are the per-step MTE2 loads (one pipe per side of a split mixed kernel), MTE1, M,
per-step FIX stores, V and per-step MTE3 stores. A load moves its burst-padded bytes at
``min(core_gm, hbm / C)`` on an L2 miss and ``l2_read`` on a hit (times ``nd2nz_rate`` when
converting). The HBM term is a core's misses plus write-backs over its share ``hbm / C``, and
its misses over its read path ``core_gm`` (every store is written back, except a kernel's own
L2 hand-off; stores themselves run at the FixPipe / L2 write rates). Hit fractions come from
:mod:`costmodel.analytic.l2`, the numpy evaluation from :mod:`costmodel.analytic.pipeline`.
Every number is a spec value times one factor of :class:`AnalyticConstants` (all 1.0 by
default), which calibration fits, but for two measured costs: the gap between kernels (its
factor is held at the spec's unless a fit names it) and a CANN library kernel's prologue
(``HardwareSpec.library_prologue_cycles``, charged as it is).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from costmodel.analytic.batching import layout, load_size, stack
from costmodel.analytic.constants import AnalyticConstants, calibrated_constants
from costmodel.analytic.pipeline import Breakdown, bound
from costmodel.analytic.waves import score
from costmodel.base import CostModel, KernelCost
from costmodel.exceptions import CostModelError, InfeasibleConfig
from costmodel.kernel import Kernel, KernelBatch
from costmodel.l2_context import L2Residency, L2Touches, contexts, l2_touches, touch
from costmodel.spec import Target

__all__ = ["AnalyticModel", "L2Touches", "l2_touches"]

STATE_SCHEMA = 1


class AnalyticModel(CostModel):
    """Closed-form per-kernel latency; :meth:`predict_batch` scores many configs at once.

    Args:
        target: hardware spec and precision mode.
        constants: the fitted factors (defaults: the spec as written).
    """

    kind = "analytic"

    def __init__(
        self, target: Target, constants: AnalyticConstants | str | None = "calibrated"
    ) -> None:
        super().__init__(target)
        if constants is None or constants == "calibrated":
            constants = calibrated_constants(target)
        elif constants == "raw":
            constants = AnalyticConstants()
        if not isinstance(constants, AnalyticConstants):
            raise CostModelError(
                f"constants must be 'calibrated', 'raw' or AnalyticConstants, got {constants!r}"
            )
        self.constants = constants
        self._version: tuple[Any, str] = (None, "")

    # -- state ------------------------------------------------------------------------------
    @property
    def version(self) -> str:
        # read on every trial: hashed once per set of constants (the record is frozen)
        if self._version[0] != (self.constants, self.target):
            digest = hashlib.sha256(json.dumps(self.state(), sort_keys=True).encode())
            self._version = (
                (self.constants, self.target),
                f"{super().version}-{digest.hexdigest()[:10]}",
            )
        return self._version[1]

    def state(self) -> dict[str, Any]:
        return {"schema_version": STATE_SCHEMA, "constants": self.constants.to_json()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Raises: CostModelError for another schema version or unknown constants."""
        version = state.get("schema_version", STATE_SCHEMA)
        if version != STATE_SCHEMA:
            raise CostModelError(
                f"analytic model state has schema_version {version}; this tool reads "
                f"{STATE_SCHEMA}"
            )
        self.constants = AnalyticConstants.from_json(state.get("constants", {}))

    # -- scoring ----------------------------------------------------------------------------
    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray:
        """Latency (us) of every config of ``batch``; ``+inf`` where a buffer overflows.

        Args:
            batch: one group lowered under many configs.
            resident: bytes of each tensor already in L2 (e.g. :meth:`residency_after` the
                plan's earlier kernels); ``None`` is a cold L2.
        """
        return self.scored(batch, self.breakdown_batch(batch, resident))

    def scored(self, batch: KernelBatch, breakdown: Breakdown) -> np.ndarray:
        """:meth:`predict_batch` from the batch's breakdown (for callers that keep it)."""
        return np.where(batch.feasible_mask(self.target.spec), breakdown.latency_us, np.inf)

    def breakdown_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> Breakdown:
        """Every term of the model for every config of ``batch`` (feasible or not)."""
        resident = resident or {}
        res = [
            np.minimum(1.0, resident.get(s.tensor, 0.0) / load_size(s, batch))
            for s in batch.streams
            if s.pipe == "MTE2"
        ]
        return score(self.target.spec, self.constants, batch, res)

    def evaluate(
        self, kernels: Sequence[Kernel], resident: Mapping[str, float] | None = None
    ) -> list[KernelCost]:
        """Cost of each kernel of a plan in order, carrying L2 residency between kernels
        (from ``resident``: what is in L2 when the plan starts, as ``CostModel.evaluate``).

        Kernels of one layout (e.g. the same op in every layer) are scored in one batch.

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        costs: list[KernelCost] = [KernelCost(0.0)] * len(kernels)
        res = self.residency(kernels, warm=resident) if resident else None
        for rows, _, b in self.breakdowns(kernels, res):
            for n, i in enumerate(rows):
                costs[i] = self._cost(b, n)
        return costs

    def latencies(
        self, kernels: Sequence[Kernel], resident: Sequence[Sequence[float]]
    ) -> np.ndarray:
        """Latency (us) of each kernel in the L2 context given for it (a row of
        :meth:`residency`), not carried from the kernels before it in ``kernels``: what
        :meth:`predict` returns when ``resident`` is the plan's own residency, for any subset
        of a plan's kernels (a search re-scores only the kernels a move changed).

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        out = np.empty(len(kernels), dtype=np.float64)
        for rows, _, b in self.breakdowns(kernels, resident):
            out[rows] = b.latency_us
        return out

    def breakdowns(
        self, kernels: Sequence[Kernel], resident: Sequence[Sequence[float]] | None = None
    ) -> list[tuple[list[int], KernelBatch, Breakdown]]:
        """The plan's kernels stacked by layout: (their positions, the batch, its breakdown).
        ``resident``: the plan's :meth:`residency`, when the caller has it already.

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        for kernel in kernels:
            ok, why = kernel.feasible(self.target.spec)
            if not ok:
                raise InfeasibleConfig(f"kernel '{kernel.name}' ({kernel.config.short()}): {why}")
        res_rows = self.residency(kernels) if resident is None else resident
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, kernel in enumerate(kernels):
            groups[layout(kernel)].append(i)
        out = []
        for rows in groups.values():
            res = list(np.array([res_rows[i] for i in rows], dtype=np.float64).T)
            batch = stack([kernels[i] for i in rows])
            out.append((rows, batch, score(self.target.spec, self.constants, batch, res)))
        return out

    def residency(
        self,
        kernels: Sequence[Kernel],
        touches: Sequence[L2Touches] | None = None,
        warm: Mapping[str, float] | None = None,
    ) -> list[list[float]]:
        """Per kernel of a plan, the fraction of each load stream's tensor that the earlier
        kernels left in L2 (what a measured row records as its context). ``touches``: each
        kernel's :func:`l2_touches`, when the caller keeps them (a search scores thousands
        of plans of the same kernels); ``warm``: what is in L2 when the plan starts (tensor
        -> bytes written, in order; ``CostModel.evaluate``'s ``resident``)."""
        return contexts(kernels, self._capacity, touches, warm)

    def residency_after(self, kernels: Sequence[Kernel]) -> L2Residency:
        """What the plan ``kernels`` leaves in L2 (to score the next group's configs)."""
        l2 = L2Residency(self._capacity)
        for kernel in kernels:
            touch(l2, l2_touches(kernel))
        return l2

    @property
    def _capacity(self) -> float:
        return self.target.spec.l2_bytes * self.constants.l2_capacity

    def _cost(self, b: Breakdown, row: int) -> KernelCost:
        to_us = 1e6 / self.target.spec.clock_hz
        return KernelCost(
            latency_us=float(b.latency_us[row]),
            pipes_us={p: float(v[row]) * to_us for p, v in b.busy.items()},
            bound=bound(b, row),
            hbm_bytes=float(b.hbm_bytes[row]),
            l2_hit_rate=float(b.hit_rate[row]),
            gap_us=self.target.spec.kernel_gap_s * self.constants.gap * 1e6,
        )
