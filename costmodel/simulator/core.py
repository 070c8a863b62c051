"""One simulated core (a *unit*): in-order pipes, buffer slots as tokens, flags.

A unit runs its tiles' steps as kernel.py prescribes. Compute pipes (MTE1, M, V) run one
instruction at a time; DMA pipes are :class:`~costmodel.simulator.dma.DmaPorts`. Slots are
counters: with ``S`` slots a queue's producer may run ``S`` steps ahead of its consumer. A unit
can stand for ``weight`` identical cores (a representative core, or the AIV pair of a split
mixed kernel); its HBM flows then count that many times.
"""

from __future__ import annotations

from costmodel.simulator.dma import P_M, P_MTE1, P_V, STORE_FIX, DmaPorts, WriteBack
from costmodel.simulator.events import EV_OP, EV_WAKE, RING, RING_MASK, Engine
from costmodel.simulator.program import LOAD, STORE_MTE3, Side

__all__ = ["Unit"]

HAIR = 1e-9  # relative slack (cycles per cycle of clock) when a wait compares float times

# what frees a load slot / what finishes a tile
C_M1, C_M, C_V, C_VE, C_MTE3, C_FIX, C_SELF, C_MS, C_FS = range(9)


class Unit(DmaPorts):
    """The pipes of one core (or of a class of identical cores)."""

    def __init__(
        self, eng: Engine, side: Side, core: int, members: list[int], ntiles: int, copies_w: int
    ) -> None:
        self.eng = eng
        self.side = side
        self.core = core
        self.shadows = [m for m in members if m != core]
        self.weight = float(len(members) * copies_w)
        self.copies = float(side.copies)
        self.ntiles = ntiles
        self.base = 0
        self.steps = side.steps
        # a feeding (prologue) side issues its tile loads after the tile's steps: G load
        # groups per tile, group S being the late one
        self.late = side.feeds and bool(side.loads_tile)
        self.G = side.steps + (1 if self.late else 0)
        self.loads0 = side.loads_step if self.late else side.loads_tile + side.loads_step
        self.loads_k = side.loads_step
        self.loads_late = side.loads_tile if self.late else ()
        self.c_m1, self.c_m, self.c_v, self.c_ve = side.c_m1, side.c_m, side.c_v, side.c_ve
        self.handoff = any(s.handoff for s in side.loads_tile)
        self.handoff_step = any(s.handoff for s in side.loads_step)
        self.readback = any(s.readback for s in side.loads_step)
        self.partner: Unit | None = None
        self.cons = self._consumer()
        self.tail = self._tail()
        self.n_ld = self.n_m1 = self.n_m = self.q_v = self.t_fix = self.t_mte3 = 0
        self.n_fs = self.n_ms = self.cnt_fs = self.cnt_ms = 0
        self.cnt_ld = self.cnt_m1 = self.cnt_m = self.cnt_v = self.cnt_ve = 0
        self.cnt_fix = self.cnt_mte3 = self.cnt_tail = 0
        self.b_m1 = self.b_m = self.b_v = self.v_is_ve = False
        self.lv = (self.steps if self.c_v else 0) + (1 if self.c_ve else 0)
        self._init_ports()
        self.m_time = [0.0] * RING
        self.fix_time = [0.0] * RING
        self.fs_time = [0.0] * RING  # per-step FixPipe stores landed
        self.ms_time = [0.0] * RING  # per-step MTE3 stores landed
        self.tile_time = [0.0] * RING
        self.tile_busy: list[list[float]] = [[0.0] * 6 for _ in range(RING)]
        self.tile_sig = [0] * RING
        self.sig = 0
        self.busy = [0.0] * 6
        self.wb = WriteBack(self.weight)

    # -- static structure ----------------------------------------------------------------------
    def _consumer(self) -> int:
        if self.c_m1:
            return C_M1
        if self.c_m:
            return C_M
        if self.c_v:
            return C_V
        if self.side.feeds or (self.side.mte3_step and not self.c_ve):
            return C_MS  # a prologue's sources go straight to its per-step store
        if self.c_ve:
            return C_VE
        if self.side.mte3:
            return C_MTE3
        return C_FIX if self.side.fix else C_SELF

    def _tail(self) -> int:
        side = self.side
        if side.mte3:
            return C_MTE3
        if side.fix:
            return C_FIX
        if self.c_ve:
            return C_VE
        if side.mte3_step:
            return C_MS
        if side.fix_step:
            return C_FS
        if self.c_v:
            return C_V
        return C_M if self.c_m else C_SELF

    def tile_group(self, t: int) -> int:
        """The load group of tile ``t`` that carries its tile loads (the late one, if any)."""
        return t * self.G + (self.steps if self.late else 0)

    def _freed(self, g: int) -> bool:
        """Whether load group ``g`` has released its slot (its consumer finished)."""
        steps = self.steps
        n = g
        if self.late:
            t, k = divmod(g, self.G)
            if k == steps:
                return self.cnt_ve > t if self.c_ve else self.cnt_tail > t
            n = t * steps + k
        cons = self.cons
        if cons == C_M1:
            return self.cnt_m1 > n
        if cons == C_M:
            return self.cnt_m > n
        if cons == C_V:
            return self.cnt_v > n
        if cons == C_MS:
            return self.cnt_ms > n
        if steps > 1 and n % steps != steps - 1:
            return self.cnt_ld > g  # no per-step consumer: the slot frees on arrival
        t = n // steps
        if cons == C_VE:
            return self.cnt_ve > t
        if cons == C_MTE3:
            return self.cnt_mte3 > t
        if cons == C_FIX:
            return self.cnt_fix > t
        return self.cnt_ld > g

    def _inputs_ready(self, g: int, partner: Unit, now: float) -> bool:
        """Whether load group ``g`` may issue: what it reads from the partner has landed (a
        tile hand-off, a per-step hand-off, or a prologue's per-step operand)."""
        eng = self.eng
        t, k = divmod(g, self.G)
        # the hand-off landed a sync delay after it was done; the hair absorbs float dust (a
        # macro step shifts ring times as (a + dt) + d but the wake as (a + d) + dt)
        now = now + HAIR * (1.0 + now)
        if (
            self.handoff
            and k == (self.steps if self.late else 0)
            and (partner.cnt_fix <= t or partner.fix_time[t & RING_MASK] + eng.tile_delay > now)
        ):
            return False
        if k < self.steps:
            n = t * self.steps + k
            if self.handoff_step and (
                partner.cnt_fs <= n or partner.fs_time[n & RING_MASK] + eng.step_delay > now
            ):
                return False
            if self.readback and (
                partner.cnt_ms <= n or partner.ms_time[n & RING_MASK] + eng.step_delay > now
            ):
                return False
        return True

    # -- issue ---------------------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Start every instruction whose flags and slots allow it at ``now``."""
        # Long by design: the simulator's innermost loop, every pipe's issue rule in one place
        # (no call per instruction on the hot path).
        eng = self.eng
        side = self.side
        steps = self.steps
        slots = eng.slots
        tiles = self.ntiles - self.base
        limit = tiles * steps
        partner = self.partner
        progress = True
        while progress:
            progress = False
            g = self.n_ld
            if (
                g < tiles * self.G
                and (g < slots or self._freed(g - slots))
                and (partner is None or self._inputs_ready(g, partner, now))
            ):
                self.n_ld = g + 1
                self._issue_loads(g, now)
                progress = True
            if self.c_m1 and not self.b_m1:
                n = self.n_m1
                if n < limit and self.cnt_ld > n and (n < slots or self.cnt_m > n - slots):
                    self.b_m1 = True
                    self.n_m1 = n + 1
                    self.busy[P_MTE1] += self.c_m1
                    eng.push(now + self.c_m1, EV_OP, self, P_MTE1)
                    progress = True
            if self.c_m and not self.b_m:
                n = self.n_m
                if n < limit and (self.cnt_m1 > n if self.c_m1 else self.cnt_ld > n):
                    ok = True
                    if n % steps == 0 and n >= slots * steps:
                        t = n // steps - slots
                        if side.fix:
                            ok = self.cnt_fix > t
                        elif self.c_ve:
                            ok = self.cnt_ve > t
                        elif partner is not None and partner.c_ve and not partner.handoff:
                            ok = partner.cnt_ve > t  # coupled: the epilogue empties L0C
                    if ok and side.fix_step and n >= slots:
                        ok = self.cnt_fs > n - slots
                    if ok and partner is not None and partner.c_v and not partner.side.feeds:
                        ok = partner.cnt_v > n - 8
                    if ok:
                        self.b_m = True
                        self.n_m = n + 1
                        self.busy[P_M] += self.c_m
                        eng.push(now + self.c_m, EV_OP, self, P_M)
                        progress = True
            if self.lv and not self.b_v and self.q_v < tiles * self.lv:
                progress = self._try_v(now, slots) or progress
            if side.fix_step and self.n_fs < limit:
                n = self.n_fs
                ok = self.cnt_m > n if self.c_m else self.cnt_ld > n
                if ok and side.fix:
                    ok = self.t_fix >= n // steps  # earlier tiles' stores went first
                if ok:
                    self.n_fs = n + 1
                    self._issue_stores(side.fix_step, STORE_FIX, n, now, step=True)
                    progress = True
            if side.fix and self.t_fix < tiles:
                t = self.t_fix
                last = t * steps + steps - 1
                ok = self.cnt_m > last if self.c_m else self.cnt_ld > last
                if ok and side.fix_step:
                    ok = self.n_fs > last
                if ok and partner is not None and partner.handoff and t >= slots:
                    ok = partner.cnt_ld > partner.tile_group(t - slots)
                if ok:
                    self.t_fix = t + 1
                    self._issue_stores(side.fix, STORE_FIX, t, now)
                    progress = True
            if side.mte3_step and self.n_ms < limit:
                n = self.n_ms
                t = n // steps
                if self.c_v:
                    ok = self.cnt_v > n
                elif self.c_m:
                    ok = self.cnt_m > n
                else:
                    ok = self.cnt_ld > t * self.G + n - t * steps
                if ok and side.mte3:
                    ok = self.t_mte3 >= t
                if ok and side.feeds and partner is not None and n >= slots:
                    ok = partner.cnt_ld > n - slots  # the workspace slot was read back
                if ok:
                    self.n_ms = n + 1
                    self._issue_stores(side.mte3_step, STORE_MTE3, n, now, step=True)
                    progress = True
            if side.mte3 and self.t_mte3 < tiles:
                t = self.t_mte3
                last = t * steps + steps - 1
                if self.c_ve:
                    ok = self.cnt_ve > t
                elif self.c_v:
                    ok = self.cnt_v > last
                elif self.c_m:
                    ok = self.cnt_m > last
                else:
                    ok = self.cnt_ld > last
                if ok and side.mte3_step:
                    ok = self.n_ms > last
                if ok:
                    self.t_mte3 = t + 1
                    self._issue_stores(side.mte3, STORE_MTE3, t, now)
                    progress = True

    def _try_v(self, now: float, slots: int) -> bool:
        q = self.q_v
        lv = self.lv
        t = q // lv
        r = q - t * lv
        steps = self.steps
        partner = self.partner
        out_slot = bool(self.side.mte3) and t >= slots
        if self.c_v and r < steps:
            n = t * steps + r
            if self.c_m:
                ok = self.cnt_m > n
            elif partner is not None and partner.c_m and not self.side.feeds:
                ok = partner.cnt_m > n
                landed = partner.m_time[n & RING_MASK] + self.eng.step_delay
                ok = ok and landed <= now + HAIR * (1.0 + now)  # (see _inputs_ready)
                ok = ok and (not self.loads_k or self.cnt_ld > n)
            else:
                ok = self.cnt_ld > t * self.G + r
            if ok and self.side.mte3_step and n >= slots:
                ok = self.cnt_ms > n - slots
            if ok and out_slot and r == steps - 1 and not self.c_ve:
                ok = self.cnt_mte3 > t - slots
            if not ok:
                return False
            self.v_is_ve = False
            cycles = self.c_v
        else:
            last = t * steps + steps - 1
            if self.late:
                ok = self.cnt_ld > self.tile_group(t)
            elif self.c_v:
                ok = self.cnt_v > last
            elif self.c_m:
                ok = self.cnt_m > last
            else:
                ok = self.cnt_ld > last
            if ok and not self.c_m and not self.handoff and partner is not None and partner.c_m:
                # coupled chip: the tile's accumulator reaches UB after its last Mmad
                ok = partner.cnt_m > t * partner.steps + partner.steps - 1
            if ok and out_slot:
                ok = self.cnt_mte3 > t - slots
            if not ok:
                return False
            self.v_is_ve = True
            cycles = self.c_ve
        self.b_v = True
        self.q_v = q + 1
        self.busy[P_V] += cycles
        self.eng.push(now + cycles, EV_OP, self, P_V)
        return True

    def _group_done(self, chan: int, idx: int, now: float, step: bool = False) -> None:
        if chan == LOAD:
            self.cnt_ld += 1
            if self.tail == C_SELF and idx % self.steps == self.steps - 1:
                self._tile_done(idx // self.steps, now)
            return
        if step:  # a per-step store: the partner may read it back after a sync
            if chan == STORE_FIX:
                self.cnt_fs += 1
                self.fs_time[idx & RING_MASK] = now
                tail = self.tail == C_FS
            else:
                self.cnt_ms += 1
                self.ms_time[idx & RING_MASK] = now
                tail = self.tail == C_MS
            partner = self.partner
            if partner is not None and self.eng.step_delay > 0:
                self.eng.push(now + self.eng.step_delay, EV_WAKE, partner, 0)
            if tail and idx % self.steps == self.steps - 1:
                self._tile_done(idx // self.steps, now)
        elif chan == STORE_FIX:
            self.cnt_fix += 1
            self.fix_time[idx & RING_MASK] = now
            partner = self.partner
            if partner is not None and self.eng.tile_delay > 0:
                self.eng.push(now + self.eng.tile_delay, EV_WAKE, partner, 0)
            if self.tail == C_FIX:
                self._tile_done(idx, now)
        else:
            self.cnt_mte3 += 1
            if self.tail == C_MTE3:
                self._tile_done(idx, now)

    def op_done(self, pipe: int, now: float) -> None:
        """A compute instruction (MTE1, M or V) finished at ``now``."""
        if pipe == P_M:
            self.b_m = False
            n = self.cnt_m
            self.m_time[n & RING_MASK] = now
            self.cnt_m = n + 1
            partner = self.partner
            if partner is not None and partner.c_v and self.eng.step_delay > 0:
                self.eng.push(now + self.eng.step_delay, EV_WAKE, partner, 0)
            if self.tail == C_M and n % self.steps == self.steps - 1:
                self._tile_done(n // self.steps, now)
        elif pipe == P_MTE1:
            self.b_m1 = False
            self.cnt_m1 += 1
        elif self.v_is_ve:
            self.b_v = False
            self.cnt_ve += 1
            if self.tail == C_VE:
                self._tile_done(self.cnt_ve - 1, now)
        else:
            self.b_v = False
            n = self.cnt_v
            self.cnt_v = n + 1
            if self.tail == C_V and n % self.steps == self.steps - 1:
                self._tile_done(n // self.steps, now)
        self._settle(now)

    def _settle(self, now: float) -> None:
        self.advance(now)
        if self.partner is not None:
            self.partner.advance(now)

    def _tile_done(self, t: int, now: float) -> None:
        self.cnt_tail += 1
        self.tile_time[t & RING_MASK] = now
        self.tile_busy[t & RING_MASK] = list(self.busy)
        self.eng.on_tile(t, now)

    @property
    def finished(self) -> bool:
        return self.cnt_tail >= self.ntiles - self.base
