"""The event loop: units, a heap of timed events, the HBM fluid, and two shortcuts.

Shortcuts (checked against the full simulation in the tests):

* representative cores: when every load stream is private to a core (its key names every grid
  letter that varies) or a small/resident broadcast, and each private tensor is wholly
  resident or wholly absent in L2, all cores with the same tile count see the same hit pattern
  from the same start, so one unit per tile-count class stands for the class; its HBM flows
  count ``class size`` times (a broadcast fill once) and L2 is touched for every member.
* macro steps: when, for every unit, the last ``_PERIODS`` periods of ``p`` waves (``p`` <= 8)
  took equally long on every unit, with the same L2 hit patterns, bytes and write-back backlog
  growth, and every later wave is the same translate of the wave ``p`` before (all cores move
  alike through the grid), whole periods are skipped up to where that stops holding: pending
  times move by the skipped time, in-flight tiles are relabelled to later waves, busy/byte
  counters and the write-back backlog grow by the per-period amounts, and L2 replays the
  skipped waves' accesses so that it ends as the full run would leave it.

Neither applies where a load's blocks share L2 lines with their neighbours (shorter than a
line, or not a whole number of lines) in a tensor not wholly in L2 (:func:`shares_lines`).
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass
from typing import Any

from costmodel.exceptions import SimulationError
from costmodel.simulator.core import Unit
from costmodel.simulator.dma import Xfer
from costmodel.simulator.events import EV_OP, EV_WAKE, EV_XF, RING
from costmodel.simulator.hbm import Fluid
from costmodel.simulator.l2 import L2Cache
from costmodel.simulator.program import Program
from costmodel.spec import HardwareSpec

__all__ = ["Sim", "SimResult", "can_represent", "load_residency", "shares_lines"]

log = logging.getLogger(__name__)

_M = RING - 1
_TOL = 2e-3  # relative agreement of consecutive periods (and of units) before a macro step
_MAX_PERIOD = 8  # waves; RING must hold two periods and some slack
_PERIODS = 3  # consecutive agreeing periods a macro step needs
_SCAN = 4096  # waves looked ahead for a uniform translation


@dataclass(frozen=True)
class SimResult:
    """What one kernel run produced (cycles and bytes; all copies counted)."""

    cycles: float
    busy: tuple[float, ...]  # per pipe, the busiest core
    load_bytes: float
    hit_bytes: float
    hbm_bytes: float
    events: int
    representative: bool
    waves_skipped: int


def load_residency(prog: Program, l2: L2Cache) -> dict[int, float]:
    """The fraction of each loaded tensor already in L2 as the kernel starts (1.0 for its
    hand-offs, which live in their own workspace); the shortcut tests below read it."""
    sizes = dict(zip(prog.own, prog.own_bytes, strict=True))
    out: dict[int, float] = {}
    for side in prog.sides:
        for s in side.loads_tile + side.loads_step:
            if s.tid not in out:
                handoff = s.tid in l2.handoffs  # covers the handoff and readback streams too
                out[s.tid] = 1.0 if handoff else l2.resident_fraction(s.tid, sizes[s.tid])
    return out


def can_represent(prog: Program, l2: L2Cache, res: dict[int, float]) -> bool:
    """Whether cores with equal tile counts are interchangeable (see module docstring).

    Private streams must be wholly resident or wholly absent. A broadcast stream makes one core
    the filler and the others wait on its fill, which is not symmetric; it is tolerated when it
    is resident or small (at most 1/16 of a tile's load bytes). Cores whose loads share L2
    lines are not interchangeable either; the caller tests that (:func:`shares_lines`).
    ``res``: :func:`load_residency`.
    """
    resident = False
    for side in prog.sides:
        loads = side.loads_tile + side.loads_step
        per_tile = sum(s.nbytes * (side.steps if s.per_step else 1) for s in loads)
        for s in loads:
            if s.sharing == "shared":
                return False
            f = res[s.tid]
            if s.sharing == "broadcast":
                if f < 1.0 and 16 * s.nbytes * (side.steps if s.per_step else 1) > per_tile:
                    return False
            elif 0.0 < f < 1.0:
                return False
            elif s.tid not in l2.handoffs:
                resident = resident or f == 1.0
    return not resident or sum(prog.own_bytes) <= l2.capacity * l2.chunk


def shares_lines(prog: Program, l2: L2Cache, res: dict[int, float]) -> bool:
    """Whether some load's blocks share L2 sectors (lines) with their neighbours, in a tensor
    not wholly in L2: blocks smaller than a sector, or not a whole number of sectors long.
    Then a block's neighbours (other cores' tiles, or later ones) hit on the line it fetched,
    so cores are not interchangeable and the hit pattern repeats only every few lines' worth
    of blocks, which can be longer than a macro step's periods show."""
    if not l2.enabled:
        return False
    sizes = dict(zip(prog.own, prog.own_bytes, strict=True))
    for side in prog.sides:
        for s in side.loads_tile + side.loads_step:
            if sizes[s.tid] <= l2.sector or res[s.tid] >= 1.0:
                continue  # one line at most, or wholly in L2 (hand-offs included)
            lines = s.region / l2.sector
            if lines < 1.0 or abs(lines - round(lines)) >= 1e-9:
                return True  # not whole lines: a neighbour shares one
    return False


class Sim:
    """Runs one compiled kernel on a spec, against a plan-wide L2."""

    def __init__(
        self, spec: HardwareSpec, l2: L2Cache, prog: Program, *, represent: bool, macro: bool
    ) -> None:
        self.l2 = l2
        self.prog = prog
        self.cores = prog.cores
        self.ij = prog.grid[1] * prog.grid[2]
        self.gj = prog.grid[2]
        self.slots = prog.slots
        self.tile_delay = prog.tile_delay
        self.step_delay = prog.step_delay
        self.gm_lat = spec.gm_latency_cycles
        self.l2_lat = spec.l2_latency_cycles
        self.st_lat = spec.mte3_latency_cycles
        self.fluid = Fluid(spec.hbm_bytes_per_cycle)
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.seq = 0
        self.now = 0.0
        self.load_b = self.hit_b = self.hbm_b = 0.0
        # a tensor only partly in L2 makes the hit pattern drift along the kernel, which the
        # periods before a macro step cannot show: step only over all-or-nothing residency
        res = load_residency(prog, l2)
        lines = shares_lines(prog, l2, res)
        uniform = all(f in (0.0, 1.0) for f in res.values())
        self.macro = macro and uniform and not lines
        self.represent = represent and not lines and can_represent(prog, l2, res)
        self.jump: tuple[int, int, float] | None = None
        self.jumped = 0
        self.next_check = 1  # first wave a period may start from (after a jump: past it)
        self.wave_cnt: dict[int, int] = {}
        self.snaps: list[tuple[float, float, float]] = [(0.0, 0.0, 0.0)] * RING
        self.wb_snaps: list[list[float]] = [[] for _ in range(RING)]
        self.units = self._build_units()

    def _build_units(self) -> list[Unit]:
        prog = self.prog
        q, r = divmod(prog.tiles, prog.cores)
        if self.represent:
            classes = [list(range(r)), list(range(r, prog.cores))]
        else:
            classes = [[c] for c in range(prog.cores)]
        units: list[Unit] = []
        for members in classes:
            if not members or q + (1 if members[0] < r else 0) == 0:
                continue
            core = members[0]
            ntiles = q + (1 if core < r else 0)
            group = [Unit(self, side, core, members, ntiles, side.copies) for side in prog.sides]
            if len(group) == 2:
                group[0].partner, group[1].partner = group[1], group[0]
                if prog.shared_dma:
                    group[1].share_ports(group[0])
            units += group
        return units

    # -- helpers used by units -----------------------------------------------------------------
    def coords(self, g: int) -> tuple[int, int, int]:
        b, rest = divmod(g, self.ij)
        i, j = divmod(rest, self.gj)
        return b, i, j

    def push(self, t: float, code: int, obj: Any, arg: int) -> None:
        heapq.heappush(self.heap, (t, self.seq, code, obj, arg))
        self.seq += 1

    def on_tile(self, t: int, now: float) -> None:
        """A unit finished its local tile ``t``; when every unit has, wave ``t`` is complete."""
        cnt = self.wave_cnt.get(t, 0) + 1
        if cnt < len(self.units):
            self.wave_cnt[t] = cnt
            return
        self.wave_cnt.pop(t, None)
        self.snaps[t & _M] = (self.load_b, self.hit_b, self.hbm_b)
        self.wb_snaps[t & _M] = [self.fluid.backlog(now, u.wb) for u in self.units]
        if self.macro and self.jump is None and t >= self.next_check:
            for p in range(1, _MAX_PERIOD + 1):
                if t < self.next_check + _PERIODS * p:
                    break
                period = self._period(t, p)
                if period > 0.0:
                    self.jump = (t, p, period)
                    break

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> SimResult:
        for u in self.units:
            u.advance(0.0)
        heap = self.heap
        fluid = self.fluid
        pop = heapq.heappop
        events = 0
        inf = math.inf
        while True:
            if self.jump is not None:
                self._do_jump()
                heap = self.heap
            th = heap[0][0] if heap else inf
            tf = fluid.next_t
            if th == inf and tf == inf:
                break
            events += 1
            if tf <= th:
                self.now = tf
                for f in fluid.pop_done(tf):
                    if isinstance(f, Xfer):
                        f.unit.data_done(f, tf)
                continue
            now, _, code, obj, arg = pop(heap)
            self.now = now
            if code == EV_XF:
                obj.unit.fixed_done(obj, now)
            elif code == EV_OP:
                obj.op_done(arg, now)
            elif code == EV_WAKE:
                obj.advance(now)
        stuck = [u for u in self.units if not u.finished]
        if stuck:
            u = stuck[0]
            raise SimulationError(
                f"simulator deadlock: core {u.core} ({u.side.kind}) finished {u.tiles_done} of "
                f"{u.ntiles - u.base} tiles (load groups landed {u.loads_landed}, cube steps "
                f"{u.cube_done}, vector steps {u.vector_done})"
            )
        # a pipe's busy time on the busiest core: the sides of a coupled core share its pipes
        per = len(self.prog.sides) if self.prog.shared_dma else 1
        cores = [self.units[n : n + per] for n in range(0, len(self.units), per)]
        busy = tuple(max(sum(u.busy[p] for u in c) for c in cores) for p in range(6))
        return SimResult(
            cycles=self.now,
            busy=busy,
            load_bytes=self.load_b,
            hit_bytes=self.hit_b,
            hbm_bytes=self.hbm_b,
            events=events,
            representative=self.represent,
            waves_skipped=self.jumped,
        )

    # -- macro steps ---------------------------------------------------------------------------
    def _period(self, t: int, p: int) -> float:
        """Duration of ``p`` waves if the last ``_PERIODS`` periods ending at wave ``t`` agree
        (every unit, tile times, L2 hit patterns, bytes and write-back backlog), else 0."""
        n = _PERIODS
        w = t + self.units[0].base
        d = self._displacement(w, p)
        if d is None or any(self._displacement(w - i, p) != d for i in range(1, n * p)):
            return 0.0
        ref = 0.0
        for u in self.units:
            if u.tiles_done - 1 - t > RING - (n + 1) * p - 2:
                return 0.0
            tt = u.tile_time
            ds = [tt[(t - m * p) & _M] - tt[(t - (m + 1) * p) & _M] for m in range(n)]
            d1 = ds[0]
            if d1 <= 0.0 or any(abs(d1 - x) > _TOL * d1 for x in ds[1:]):
                return 0.0
            if ref == 0.0:
                ref = d1
            elif abs(d1 - ref) > _TOL * ref:
                return 0.0
            sig = u.tile_sig
            for i in range(p * (n - 1)):
                if sig[(t - i) & _M] != sig[(t - p - i) & _M]:
                    return 0.0
        snaps = [self.snaps[(t - m * p) & _M] for m in range(n + 1)]
        wbs = [sum(self.wb_snaps[(t - m * p) & _M]) for m in range(n + 1)]
        for series in ([s[0] for s in snaps], [s[1] for s in snaps], [s[2] for s in snaps], wbs):
            deltas = [series[m] - series[m + 1] for m in range(n)]
            scale = max(max(abs(x) for x in deltas), 1.0, 1e-3 * abs(snaps[0][0]))
            if max(deltas) - min(deltas) > _TOL * scale:
                return 0.0
        return ref

    def _displacement(self, w: int, p: int) -> tuple[int, int, int] | None:
        """How every core's tile moves from logical wave ``w - p`` to ``w`` (None: not alike)."""
        cores = self.cores
        d: tuple[int, int, int] | None = None
        for c in range(min(cores, self.prog.tiles - cores * w)):
            b1, i1, j1 = self.coords(c + cores * w)
            b0, i0, j0 = self.coords(c + cores * (w - p))
            cd = (b1 - b0, i1 - i0, j1 - j0)
            if d is None:
                d = cd
            elif cd != d:
                return None
        return d

    def _do_jump(self) -> None:
        """Skip whole periods ending at wave ``t``, as far as every later wave is a translate."""
        assert self.jump is not None
        t, p, period = self.jump
        self.jump = None
        units = self.units
        base = units[0].base
        ahead = max(u.loads_issued // u.G for u in units)
        left = min(u.ntiles - u.base for u in units)
        most = (left - 2 - ahead) // p
        if most < 1:
            self.next_check = t + 1
            return
        # every core must move alike from one period to the next, from the reference periods
        # through the skipped waves to one period past the relabelled in-flight tiles
        ref = self._displacement(t + base, p)
        last = t + base - _PERIODS * p + 1
        reps = 0
        w = last
        while ref is not None and reps < most and w - last < _SCAN:
            w += 1
            if self._displacement(w, p) != ref:
                break
            if w >= ahead + base + p * (reps + 2):
                reps += 1
        if reps < 1:
            self.next_check = t + 1
            return
        skip = reps * p
        dt = reps * period
        # the skipped waves, and the old labels of the in-flight tiles (their later accesses
        # happen under the new labels), before the in-flight tiles' new blocks
        self._replay(t + 1 + base, t + skip + 1 + base)
        for u in units:
            now_b, prev_b = u.tile_busy[t & _M], u.tile_busy[(t - p) & _M]
            for i in range(6):
                u.busy[i] += reps * (now_b[i] - prev_b[i])
            u.shift(dt, skip, t + u.base)
            u.base += skip
        a, b = self.snaps[t & _M], self.snaps[(t - p) & _M]
        self.load_b += reps * (a[0] - b[0])
        self.hit_b += reps * (a[1] - b[1])
        self.hbm_b += reps * (a[2] - b[2])
        # a uniform shift keeps the heap ordered
        self.heap = [(e[0] + dt, e[1], e[2], e[3], e[4]) for e in self.heap]
        self.fluid.shift(dt)
        self.now += dt
        # write-back the cores outran in the skipped periods is still owed to HBM
        grown, before = self.wb_snaps[t & _M], self.wb_snaps[(t - p) & _M]
        for u, g1, g0 in zip(units, grown, before, strict=True):
            if g1 > g0:
                self.fluid.grow(self.now, u.wb, reps * (g1 - g0))
        self.jumped += skip
        self.next_check = t + 1
        log.debug("macro step: skipped %d waves (period %d, %.0f cycles)", skip, p, period)

    def _replay(self, lo: int, hi: int) -> None:
        """Touch L2 for logical waves ``[lo, hi)`` (only the last ones can still be resident)."""
        l2 = self.l2
        if not l2.enabled or hi <= lo:
            return
        per_wave = 0.0
        for u in self.units:
            side = u.side
            each = sum(s.region for s in side.loads_tile + side.fix + side.mte3)
            step = side.loads_step + side.fix_step + side.mte3_step
            each += u.steps * sum(s.region for s in step)
            per_wave += each * (1 + len(u.shadows))
        if per_wave > 0:
            lo = max(lo, hi - int(2 * l2.capacity * l2.chunk / per_wave) - 2)
        for wave in range(lo, hi):
            for u in self.units:
                side = u.side
                for core in [u.core, *u.shadows]:
                    b, i, j = self.coords(core + self.cores * wave)
                    for k in range(u.steps):
                        for s in (
                            (side.loads_tile + side.loads_step if k == 0 else side.loads_step)
                            + side.fix_step
                            + side.mte3_step
                        ):
                            x = (s.cb * b + s.ci * i + s.cj * j + s.ck * k) * s.region
                            l2.store(s.tid, x, x + s.region)
                    for s in side.fix + side.mte3:
                        x = (s.cb * b + s.ci * i + s.cj * j) * s.region
                        l2.store(s.tid, x, x + s.region)
