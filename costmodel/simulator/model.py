"""``SimulatorModel``: the event-driven ground truth behind the ``CostModel`` interface."""

from __future__ import annotations

import logging
import math
import time
import zlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from costmodel.base import CostModel, KernelCost
from costmodel.exceptions import CostModelError, InfeasibleConfig, SimulationError
from costmodel.kernel import PIPES, Kernel
from costmodel.simulator.engine import Sim, SimResult
from costmodel.simulator.l2 import L2Cache
from costmodel.simulator.program import compile_kernel
from costmodel.spec import Target

__all__ = ["SHORTCUTS", "SimulatorModel"]

log = logging.getLogger(__name__)

SHORTCUTS = ("cores", "waves", "memo")
_MEMO_LIMIT = 20000
# tiles x steps one simulation may run: 40x the largest kernel of the zoo models at full size
# (llama3-8b's, 256512); beyond it a kernel is refused (a SimulationError: that candidate
# fails, not the study) instead of running for hours
MAX_WORK = 10_000_000


def _shortcuts(fast: bool | Collection[str]) -> frozenset[str]:
    if isinstance(fast, bool):
        return frozenset(SHORTCUTS) if fast else frozenset()
    chosen = frozenset(str(f) for f in fast)
    unknown = sorted(chosen - set(SHORTCUTS))
    if unknown:
        known = ", ".join(SHORTCUTS)
        raise CostModelError(
            f"unknown simulator shortcut(s) {', '.join(unknown)}; available: {known}"
        )
    return chosen


class SimulatorModel(CostModel):
    """Cycle-approximate, event-driven simulation of a plan on Ascend AI cores
    (docs/cost-model.md).

    Every kernel runs tile by tile on per-core in-order pipes with buffer slots as tokens, HBM
    shared as a max-min fair fluid (each core capped at its GM path), and an LRU L2 of
    ``l2_chunk_bytes`` chunks that carries over from one kernel of the plan to the next.

    Args:
        target: hardware spec and precision mode.
        noise: relative standard deviation of a multiplicative, log-normal measurement noise on
            each kernel's latency (0 = exact). Reproducible: it depends only on ``seed``, the
            kernel's position in the plan and the kernel itself.
        seed: noise seed.
        l2_chunk_bytes: L2 replacement granularity.
        fast: ``True`` (all shortcuts), ``False`` (full simulation) or a subset of
            ``("cores", "waves", "memo")``: representative cores, macro-stepped steady-state
            waves, memoised kernel results.

    Raises:
        CostModelError: a negative noise, a non-positive chunk or an unknown shortcut.
    """

    kind = "simulator"

    def __init__(
        self,
        target: Target,
        *,
        noise: float = 0.0,
        seed: int = 0,
        l2_chunk_bytes: int = 65536,
        fast: bool | Collection[str] = True,
    ) -> None:
        super().__init__(target)
        self.noise = float(noise)
        self.seed = int(seed)
        self.l2_chunk_bytes = int(l2_chunk_bytes)
        self.fast = fast
        self._check()
        self._memo: dict[Any, tuple[KernelCost, Any, Any]] = {}
        self._counters = dict.fromkeys(
            ("kernels", "simulated", "memo_hits", "events", "representative", "waves_skipped"),
            0,
        )
        self._wall = 0.0

    def _check(self) -> None:
        if not (self.noise >= 0.0 and math.isfinite(self.noise)):
            raise CostModelError(f"`noise >= 0` must hold, but got noise={self.noise}")
        if self.l2_chunk_bytes <= 0:
            raise CostModelError(
                f"`l2_chunk_bytes > 0` must hold, but got l2_chunk_bytes={self.l2_chunk_bytes}"
            )
        self.shortcuts = _shortcuts(self.fast)

    # -- CostModel -----------------------------------------------------------------------------
    def evaluate(
        self, kernels: Sequence[Kernel], resident: Mapping[str, float] | None = None
    ) -> list[KernelCost]:
        spec = self.target.spec
        for k in kernels:
            ok, why = k.feasible(spec)
            if not ok:
                raise InfeasibleConfig(f"kernel '{k.name}' ({k.config.short()}): {why}")
            if min(k.grid) < 1 or k.steps < 1:
                raise InfeasibleConfig(
                    f"kernel '{k.name}': grid and steps must be >= 1, but got grid={k.grid}, "
                    f"steps={k.steps}"
                )
        l2 = L2Cache(spec.l2_bytes, self.l2_chunk_bytes, spec.l2_line_bytes)
        for name, size in (resident or {}).items():  # written in order, before the plan
            l2.store(l2.tid(name), 0.0, float(size))
        out = []
        for pos, k in enumerate(kernels):
            cost, key = self._one(k, l2)
            out.append(self._noisy(cost, pos, key))
        return out

    def state(self) -> dict[str, Any]:
        fast: Any = self.fast if isinstance(self.fast, bool) else sorted(self.shortcuts)
        return {
            "noise": self.noise,
            "seed": self.seed,
            "l2_chunk_bytes": self.l2_chunk_bytes,
            "fast": fast,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.noise = float(state.get("noise", self.noise))
        self.seed = int(state.get("seed", self.seed))
        self.l2_chunk_bytes = int(state.get("l2_chunk_bytes", self.l2_chunk_bytes))
        self.fast = state.get("fast", self.fast)
        self._check()
        self._memo.clear()

    @property
    def version(self) -> str:
        return f"{super().version}-c{self.l2_chunk_bytes}-n{self.noise:g}-s{self.seed}"

    @property
    def stats(self) -> dict[str, float]:
        """Counters since construction: kernels, memo hit rate, events and events/second."""
        c = dict(self._counters)
        looked = c["kernels"] if "memo" in self.shortcuts else 0
        out: dict[str, float] = {k: float(v) for k, v in c.items()}
        out["memo_hit_rate"] = c["memo_hits"] / looked if looked else 0.0
        out["sim_seconds"] = self._wall
        out["events_per_s"] = c["events"] / self._wall if self._wall > 0 else 0.0
        return out

    def reset_stats(self) -> None:
        for k in self._counters:
            self._counters[k] = 0
        self._wall = 0.0

    # -- one kernel ----------------------------------------------------------------------------
    def _one(self, kernel: Kernel, l2: L2Cache) -> tuple[KernelCost, tuple[Any, ...]]:
        spec = self.target.spec
        work = kernel.tiles * max(1, kernel.steps)
        if work > MAX_WORK:
            raise SimulationError(
                f"kernel '{kernel.name}' runs {work:.3g} tiles x steps, beyond the simulator's "
                f"budget of {MAX_WORK:.0e}; cost it with the analytic or learned model"
            )
        self._counters["kernels"] += 1
        names: list[str] = []
        for s in kernel.streams:
            if s.tensor not in names:
                names.append(s.tensor)
        canon = {n: i for i, n in enumerate(names)}
        skey = _structure(kernel, canon)
        use_memo = "memo" in self.shortcuts
        prog = compile_kernel(kernel, spec, l2)
        if use_memo:
            own = {l2.tid(n): canon[n] for n in names}
            chunks = sum(math.ceil(b / l2.chunk - 1e-9) for b in prog.own_bytes)
            key: tuple[Any, ...] = (skey, l2.digest(own, chunks))
            hit = self._memo.get(key)
            if hit is not None:
                cost, evicted, moved = hit
                l2.replay([l2.tid(n) for n in names], evicted, moved)
                self._counters["memo_hits"] += 1
                return cost, skey
            before = l2.own_chunks(own)
            l2.touched = set()
        sim = Sim(
            spec, l2, prog, represent="cores" in self.shortcuts, macro="waves" in self.shortcuts
        )
        t0 = time.perf_counter()
        res = sim.run()
        self._wall += time.perf_counter() - t0
        l2.settle()
        self._counters["simulated"] += 1
        self._counters["events"] += res.events
        self._counters["representative"] += int(res.representative)
        self._counters["waves_skipped"] += res.waves_skipped
        cost = self._cost(res)
        if use_memo:
            touched = l2.touched or set()
            l2.touched = None
            evicted, moved = l2.effect(own, before, touched)
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = (cost, evicted, moved)
        return cost, skey

    def _cost(self, res: SimResult) -> KernelCost:
        spec = self.target.spec
        clock = spec.clock_hz
        body_s = res.cycles / clock
        overhead_s = spec.kernel_gap_s + spec.kernel_fixed_cycles / clock
        pipes = {p: res.busy[i] / clock * 1e6 for i, p in enumerate(PIPES)}
        hit_rate = res.hit_bytes / res.load_bytes if res.load_bytes > 0 else 0.0
        if overhead_s >= body_s:
            bound = "launch"
        elif res.hbm_bytes >= 0.7 * spec.hbm_bytes_per_s * body_s:
            bound = "HBM"
        else:
            bound = max(PIPES, key=lambda p: res.busy[PIPES.index(p)])
            if bound == "MTE2" and hit_rate >= 0.5:
                bound = "L2"
        return KernelCost(
            latency_us=(overhead_s + body_s) * 1e6,
            pipes_us=pipes,
            bound=bound,
            hbm_bytes=res.hbm_bytes,
            l2_hit_rate=hit_rate,
            gap_us=spec.kernel_gap_s * 1e6,
        )

    def _noisy(self, cost: KernelCost, pos: int, key: tuple[Any, ...]) -> KernelCost:
        if self.noise <= 0.0:
            return cost
        sigma = math.sqrt(math.log1p(self.noise**2))
        crc = zlib.crc32(repr(key).encode())
        z = np.random.default_rng([self.seed, pos, crc]).standard_normal()
        factor = math.exp(sigma * z - sigma * sigma / 2)
        return KernelCost(
            latency_us=cost.latency_us * factor,
            pipes_us=cost.pipes_us,
            bound=cost.bound,
            hbm_bytes=cost.hbm_bytes,
            l2_hit_rate=cost.l2_hit_rate,
            gap_us=cost.gap_us,
        )


def _structure(kernel: Kernel, canon: Mapping[str, int]) -> tuple[Any, ...]:
    """Everything about a kernel that its timing depends on, tensor names made positional."""
    streams = tuple(
        (
            canon[s.tensor],
            s.pipe,
            s.bytes,
            s.key,
            s.per,
            s.side,
            s.nd2nz,
            s.tensor_bytes,
            s.row_bytes,
            s.reread,
            s.packed,
        )
        for s in kernel.streams
    )
    return (
        kernel.unit,
        kernel.grid,
        kernel.steps,
        kernel.config.block_dim,
        kernel.config.double_buffer,
        streams,
        kernel.mte1_l0a_bytes,
        kernel.mte1_l0b_bytes,
        kernel.cube_cycles,
        kernel.vector_cycles_step,
        kernel.vector_cycles_tile,
        kernel.cross_core_syncs,
    )
