"""DMA ports of a simulated core: transfers, their L2 lookups, latency and HBM phases.

Each core has three in-order DMA channels: MTE2 (loads), FIX and MTE3 (stores). A transfer is
issued when its flags allow; it reaches the memory system when it gets to the head of its
channel (that is when L2 is looked up), pays its first-byte latency counted from issue (so a
queue of back-to-back transfers hides the latencies behind each other's data), moves its L2-hit
bytes at the L2 path rate and its missed bytes as an HBM fluid flow, and frees the port. It
completes, in channel order, once every fill it merged into has landed.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from costmodel.simulator.events import EV_XF, RING, RING_MASK, Engine
from costmodel.simulator.program import LOAD, STORE_FIX, SStream

__all__ = ["DmaPorts", "WriteBack", "Xfer"]

P_MTE2, P_MTE1, P_M, P_FIX, P_V, P_MTE3 = range(6)
_CHAN_PIPE = (P_MTE2, P_FIX, P_MTE3)
_SIGMASK = (1 << 48) - 1


class Xfer:
    """One DMA transfer (also a fluid flow while its HBM part moves)."""

    __slots__ = (
        "cap",
        "chan",
        "done",
        "fill",
        "group",
        "hit_t",
        "hweight",
        "issue",
        "k",
        "nbytes",
        "ready",
        "rem",
        "s",
        "start",
        "step",
        "unit",
        "vf",
        "waiters",
        "waits",
        "wave",
    )

    def __init__(self, unit: DmaPorts, chan: int, issue: float) -> None:
        self.unit = unit
        self.chan = chan
        self.issue = issue
        self.group = -1  # step (loads) or tile (stores) index when last of its group
        self.done = self.ready = self.fill = self.step = False
        self.waits: list[Any] = []
        self.waiters: list[Xfer] = []
        self.hit_t = self.rem = self.start = self.nbytes = 0.0
        self.k = self.wave = 0
        self.s: SStream
        self.cap = self.hweight = 1.0
        self.vf = -1.0


class WriteBack:
    """A unit's L2 -> HBM write-back queue: one uncapped fluid flow fed by its stores."""

    __slots__ = ("cap", "hweight", "rem", "unit", "vf")

    def __init__(self, weight: float) -> None:
        self.unit = None
        self.rem = 0.0
        self.vf = -1.0
        self.cap = float("inf")
        self.hweight = weight


class DmaPorts:
    """The DMA half of a unit (see :class:`~costmodel.simulator.core.Unit`)."""

    eng: Engine
    core: int
    shadows: list[int]
    weight: float
    copies: float
    base: int
    steps: int
    G: int
    late: bool
    loads0: tuple[SStream, ...]
    loads_k: tuple[SStream, ...]
    loads_late: tuple[SStream, ...]
    busy: list[float]
    tile_sig: list[int]
    sig: int
    wb: WriteBack
    m_time: list[float]
    fix_time: list[float]
    fs_time: list[float]
    ms_time: list[float]
    tile_time: list[float]

    def _init_ports(self) -> None:
        self.chan_q: list[deque[Xfer]] = [deque(), deque(), deque()]
        self.chan_act: list[Xfer | None] = [None, None, None]
        self.chan_pend: list[deque[Xfer]] = [deque(), deque(), deque()]
        self.recent: deque[Xfer] = deque(maxlen=8 * RING)  # started transfers, for macro steps

    def share_ports(self, other: DmaPorts) -> None:
        """Queue on ``other``'s DMA channels: the two sides of a mixed kernel on a coupled
        core share its one MTE2, FIX and MTE3 (each transfer stays its own unit's)."""
        self.chan_q = other.chan_q
        self.chan_act = other.chan_act

    def _group_done(self, chan: int, idx: int, now: float, step: bool = False) -> None:
        raise NotImplementedError

    def _settle(self, now: float) -> None:
        raise NotImplementedError

    def _issue_loads(self, n: int, now: float) -> None:
        """Issue load group ``n`` (step ``k`` of tile ``t``; a late group carries tile loads
        and is labelled with the tile's last step)."""
        steps = self.steps
        t = n // self.G
        k = n - t * self.G
        if k == steps:
            streams = self.loads_late
            k = steps - 1
        else:
            streams = self.loads_k if k else self.loads0
        if not streams:
            self._group_done(LOAD, n, now)
            return
        wave = t + self.base
        q = self.chan_q[0]
        x: Xfer | None = None
        for s in streams:
            x = Xfer(self, LOAD, now)
            x.s = s
            x.wave = wave
            x.k = k
            q.append(x)
        assert x is not None
        x.group = n
        if self.chan_act[0] is None:
            self._start(0, now)

    def _issue_stores(
        self, streams: tuple[SStream, ...], chan: int, t: int, now: float, step: bool = False
    ) -> None:
        """Issue the stores of tile ``t`` (or, ``step``: of step ``t`` over all tiles)."""
        if not streams:
            self._group_done(chan, t, now, step)
            return
        c = 1 if chan == STORE_FIX else 2
        tile, k = divmod(t, self.steps) if step else (t, 0)
        wave = tile + self.base
        q = self.chan_q[c]
        x: Xfer | None = None
        for s in streams:
            x = Xfer(self, chan, now)
            x.s = s
            x.wave = wave
            x.k = k
            x.step = step
            q.append(x)
        assert x is not None
        x.group = t
        if self.chan_act[c] is None:
            self._start(c, now)

    def _shadow(self, s: SStream, wave: int, k: int) -> None:
        """Touch L2 for the cores this unit stands for (no timing: same pattern by symmetry)."""
        eng = self.eng
        for core in self.shadows:
            b, i, j = eng.coords(core + eng.cores * wave)
            lo = (s.cb * b + s.ci * i + s.cj * j + s.ck * k) * s.region
            eng.l2.store(s.tid, lo, lo + s.region)

    # -- DMA channels ---------------------------------------------------------------------------
    def _start(self, c: int, now: float) -> None:
        """The head transfer of channel ``c`` reaches the memory system (it may be the
        partner's, on shared channels)."""
        x = self.chan_q[c].popleft()
        self.chan_act[c] = x
        x.unit._begin(c, x, now)

    def _begin(self, c: int, x: Xfer, now: float) -> None:
        """Look L2 up for this unit's transfer ``x`` at the head of channel ``c``; time it."""
        eng = self.eng
        s = x.s
        k = x.k
        b, i, j = eng.coords(self.core + eng.cores * x.wave)
        lo = (s.cb * b + s.ci * i + s.cj * j + s.ck * k) * s.region
        l2 = eng.l2
        nb = s.nbytes
        x.nbytes = nb
        w = self.weight
        if c == LOAD:
            hit, x.waits = l2.load(s.tid, lo, lo + s.region, x)
            if s.reread:  # the second read of the block finds the first one's lines
                hit = s.reread * l2.enabled + (1.0 - s.reread) * hit
            hit_b = nb * hit
            # a miss moves its bus bytes through the port at ``cap`` and from HBM
            miss = nb - hit_b
            x.hit_t = hit_b / s.rate
            x.rem = miss if miss > 1e-9 * nb else 0.0
            x.fill = x.rem > 0.0
            x.cap = s.cap
            x.hweight = self.copies if s.sharing == "broadcast" else w
            lat = eng.gm_lat if x.rem else eng.l2_lat
            eng.load_b += nb * w
            # a broadcast block's other copies are hits, at the bytes they cross the port with
            eng.hit_b += hit_b * w + (nb - hit_b if x.rem else 0.0) * (w - x.hweight)
            eng.hbm_b += x.rem * x.hweight
            sig = int(hit * 1e6) * 2 + (1 if x.waits else 0)
            self.sig = (
                sig
                if k == 0 and self.loads0 and s is self.loads0[0]
                else (self.sig * 1000003 + sig) & _SIGMASK
            )
            if x.group >= 0 and k == self.steps - 1:
                self.tile_sig[(x.wave - self.base) & RING_MASK] = self.sig
        else:
            l2.store(s.tid, lo, lo + s.region)
            lat = eng.st_lat
            x.hweight = w
            x.cap = s.cap
            if l2.enabled:
                x.hit_t = nb / s.rate
            else:
                x.rem = nb
                eng.hbm_b += nb * w
        if self.shadows:
            self._shadow(s, x.wave, k)
        if eng.macro:
            self.recent.append(x)
        s0 = x.issue + lat
        if s0 < now:
            s0 = now
        x.start = s0
        eng.push(s0 + x.hit_t, EV_XF, x, 0)

    def fixed_done(self, x: Xfer, now: float) -> None:
        """The latency and L2/store-path part of ``x`` are over; its HBM part (if any) starts."""
        if x.rem > 0.0:
            self.eng.fluid.add(now, x)
        else:
            self.data_done(x, now)

    def data_done(self, x: Xfer, now: float) -> None:
        """All bytes of ``x`` moved: the port is free; ``x`` completes (in order) once the
        fills it hit on have landed too."""
        x.done = True  # landed: later loads that merged into this fill may proceed
        c = x.chan
        self.busy[_CHAN_PIPE[c]] += now - x.start
        self.chan_act[c] = None
        if self.chan_q[c]:
            self._start(c, now)
        if x.waiters:
            for w in x.waiters:
                w.unit.wake(w, now)
            x.waiters = []
        self.chan_pend[c].append(x)
        for f in x.waits:
            if not f.done:
                f.waiters.append(x)
                return
        x.ready = True
        self._drain(c, now)

    def wake(self, x: Xfer, now: float) -> None:
        """A fill ``x`` waited on has landed."""
        for f in x.waits:
            if not f.done:
                f.waiters.append(x)
                return
        x.ready = True
        self._drain(x.chan, now)

    def _drain(self, c: int, now: float) -> None:
        pend = self.chan_pend[c]
        progressed = False
        while pend and pend[0].ready:
            x = pend.popleft()
            progressed = True
            if c != LOAD and self.eng.l2.enabled and not x.s.scratch:
                self.eng.hbm_b += x.nbytes * self.weight
                self.eng.fluid.grow(now, self.wb, x.nbytes)
            if x.group >= 0:
                self._group_done(c, x.group, now, x.step)
        if progressed:
            self._settle(now)

    # -- macro steps ---------------------------------------------------------------------------
    def shift(self, dt: float, skip: int, done_wave: int) -> None:
        """Move every pending time by ``dt`` and relabel in-flight work ``skip`` waves on.

        Transfers of tiles after ``done_wave`` that already reached L2 touched their old
        blocks; their new blocks are touched here so that L2 sees the relabelled tiles whole.
        """
        l2 = self.eng.l2
        for x in self.recent:
            if x.wave > done_wave:
                x.wave += skip
                s = x.s
                b, i, j = self.eng.coords(self.core + self.eng.cores * x.wave)
                lo = (s.cb * b + s.ci * i + s.cj * j + s.ck * x.k) * s.region
                fill = None
                if x.chan == LOAD:  # a fill still in flight: later readers must wait for it
                    fill = x if not x.done else next((f for f in x.waits if not f.done), None)
                if fill is not None:
                    l2.load(s.tid, lo, lo + s.region, fill)
                else:
                    l2.store(s.tid, lo, lo + s.region)
                if self.shadows:
                    self._shadow(s, x.wave, x.k)
        self.recent.clear()
        self.m_time = [v + dt for v in self.m_time]
        self.fix_time = [v + dt for v in self.fix_time]
        self.fs_time = [v + dt for v in self.fs_time]
        self.ms_time = [v + dt for v in self.ms_time]
        self.tile_time = [v + dt for v in self.tile_time]
        for q in self.chan_q:  # (only this unit's transfers, on shared channels)
            for x in q:
                if x.unit is self:
                    x.issue += dt
                    x.wave += skip
        for act in self.chan_act:
            if act is not None and act.unit is self:
                act.issue += dt
                act.start += dt
