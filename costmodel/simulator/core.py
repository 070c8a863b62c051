"""One simulated core (a *unit*): in-order pipes, buffer slots as tokens, flags.

A unit runs its tiles' steps as kernel.py prescribes. Compute pipes (MTE1, M, V) run one
instruction at a time; DMA pipes are :class:`~costmodel.simulator.dma.DmaPorts`. Slots are
counters: with ``S`` slots a queue's producer may run ``S`` steps ahead of its consumer. A unit
can stand for ``weight`` identical cores (a representative core, or the AIV pair of a split
mixed kernel); its HBM flows then count that many times.
"""

from __future__ import annotations

from enum import IntEnum

from costmodel.simulator.dma import P_M, P_MTE1, P_V, STORE_FIX, DmaPorts, WriteBack
from costmodel.simulator.events import EV_OP, EV_WAKE, RING, RING_MASK, Engine
from costmodel.simulator.program import LOAD, STORE_MTE3, Side

__all__ = ["Stage", "Unit"]

HAIR = 1e-9  # relative slack (cycles per cycle of clock) when a wait compares float times


class Stage(IntEnum):
    """A unit's stage that frees a load slot (its loads' consumer) or finishes a tile (its
    tail)."""

    MTE1 = 0  # the L1 -> L0 move of a step
    CUBE = 1  # the Mmad of a step
    VECTOR = 2  # the vector work of a step
    EPILOGUE = 3  # the vector work after a tile's last step
    MTE3_TILE = 4  # the tile's MTE3 store (UB -> GM)
    FIX_TILE = 5  # the tile's FixPipe store (L0C -> GM)
    LOADS = 6  # none: the loads themselves (a slot frees on arrival)
    MTE3_STEP = 7  # a step's MTE3 store
    FIX_STEP = 8  # a step's FixPipe store


# the hot loop compares them as module names (a global, not a class attribute, lookup)
MTE1, CUBE, VECTOR, EPILOGUE, MTE3_TILE, FIX_TILE, LOADS, MTE3_STEP, FIX_STEP = Stage


class Unit(DmaPorts):
    """The pipes of one core (or of a class of identical cores).

    Its progress is counted per stage, each a running count (an instruction, a step or a
    tile, as named): ``*_issued`` started, ``*_landed`` / ``*_done`` finished (a DMA landed,
    a compute instruction done). ``loads_*`` count load groups (a tile's or a step's loads),
    ``mte1_*``, ``cube_*`` and ``vector_*`` steps, ``epilogues_done`` tiles' epilogues,
    ``fix_steps_*`` / ``mte3_steps_*`` per-step stores, ``fix_tiles_*`` / ``mte3_tiles_*``
    per-tile stores, ``tiles_done`` finished tiles; ``*_busy`` says a compute pipe is running
    an instruction. ``cons`` and ``tail`` are the :class:`Stage` that frees a load slot and
    the one that finishes a tile.
    """

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
        self.mte1_cycles, self.cube_cycles, self.vector_cycles, self.epilogue_cycles = (
            side.mte1_cycles,
            side.cube_cycles,
            side.vector_cycles,
            side.epilogue_cycles,
        )
        self.handoff = any(s.handoff for s in side.loads_tile)
        self.handoff_step = any(s.handoff for s in side.loads_step)
        self.readback = any(s.readback for s in side.loads_step)
        self.partner: Unit | None = None
        self.cons = self._consumer()
        self.tail = self._tail()
        self.loads_issued = self.mte1_issued = self.cube_issued = self.vector_issued = (
            self.fix_tiles_issued
        ) = self.mte3_tiles_issued = 0
        self.fix_steps_issued = self.mte3_steps_issued = self.fix_steps_landed = (
            self.mte3_steps_landed
        ) = 0
        self.loads_landed = self.mte1_done = self.cube_done = self.vector_done = (
            self.epilogues_done
        ) = 0
        self.fix_tiles_landed = self.mte3_tiles_landed = self.tiles_done = 0
        self.mte1_busy = self.cube_busy = self.vector_busy = self.v_is_ve = False
        self.lv = (self.steps if self.vector_cycles else 0) + (1 if self.epilogue_cycles else 0)
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
    def _consumer(self) -> Stage:
        if self.mte1_cycles:
            return MTE1
        if self.cube_cycles:
            return CUBE
        if self.vector_cycles:
            return VECTOR
        if self.side.feeds or (self.side.mte3_step and not self.epilogue_cycles):
            return MTE3_STEP  # a prologue's sources go straight to its per-step store
        if self.epilogue_cycles:
            return EPILOGUE
        if self.side.mte3:
            return MTE3_TILE
        return FIX_TILE if self.side.fix else LOADS

    def _tail(self) -> Stage:
        side = self.side
        if side.mte3:
            return MTE3_TILE
        if side.fix:
            return FIX_TILE
        if self.epilogue_cycles:
            return EPILOGUE
        if side.mte3_step:
            return MTE3_STEP
        if side.fix_step:
            return FIX_STEP
        if self.vector_cycles:
            return VECTOR
        return CUBE if self.cube_cycles else LOADS

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
                return self.epilogues_done > t if self.epilogue_cycles else self.tiles_done > t
            n = t * steps + k
        cons = self.cons
        if cons == MTE1:
            return self.mte1_done > n
        if cons == CUBE:
            return self.cube_done > n
        if cons == VECTOR:
            return self.vector_done > n
        if cons == MTE3_STEP:
            return self.mte3_steps_landed > n
        if steps > 1 and n % steps != steps - 1:
            return self.loads_landed > g  # no per-step consumer: the slot frees on arrival
        t = n // steps
        if cons == EPILOGUE:
            return self.epilogues_done > t
        if cons == MTE3_TILE:
            return self.mte3_tiles_landed > t
        if cons == FIX_TILE:
            return self.fix_tiles_landed > t
        return self.loads_landed > g

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
            and (
                partner.fix_tiles_landed <= t
                or partner.fix_time[t & RING_MASK] + eng.tile_delay > now
            )
        ):
            return False
        if k < self.steps:
            n = t * self.steps + k
            if self.handoff_step and (
                partner.fix_steps_landed <= n
                or partner.fs_time[n & RING_MASK] + eng.step_delay > now
            ):
                return False
            if self.readback and (
                partner.mte3_steps_landed <= n
                or partner.ms_time[n & RING_MASK] + eng.step_delay > now
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
            g = self.loads_issued
            if (
                g < tiles * self.G
                and (g < slots or self._freed(g - slots))
                and (partner is None or self._inputs_ready(g, partner, now))
            ):
                self.loads_issued = g + 1
                self._issue_loads(g, now)
                progress = True
            if self.mte1_cycles and not self.mte1_busy:
                n = self.mte1_issued
                if (
                    n < limit
                    and self.loads_landed > n
                    and (n < slots or self.cube_done > n - slots)
                ):
                    self.mte1_busy = True
                    self.mte1_issued = n + 1
                    self.busy[P_MTE1] += self.mte1_cycles
                    eng.push(now + self.mte1_cycles, EV_OP, self, P_MTE1)
                    progress = True
            if self.cube_cycles and not self.cube_busy:
                n = self.cube_issued
                if n < limit and (
                    self.mte1_done > n if self.mte1_cycles else self.loads_landed > n
                ):
                    ok = True
                    if n % steps == 0 and n >= slots * steps:
                        t = n // steps - slots
                        if side.fix:
                            ok = self.fix_tiles_landed > t
                        elif self.epilogue_cycles:
                            ok = self.epilogues_done > t
                        elif (
                            partner is not None and partner.epilogue_cycles and not partner.handoff
                        ):
                            ok = partner.epilogues_done > t  # coupled: the epilogue empties L0C
                    if ok and side.fix_step and n >= slots:
                        ok = self.fix_steps_landed > n - slots
                    if (
                        ok
                        and partner is not None
                        and partner.vector_cycles
                        and not partner.side.feeds
                    ):
                        ok = partner.vector_done > n - 8
                    if ok:
                        self.cube_busy = True
                        self.cube_issued = n + 1
                        self.busy[P_M] += self.cube_cycles
                        eng.push(now + self.cube_cycles, EV_OP, self, P_M)
                        progress = True
            if self.lv and not self.vector_busy and self.vector_issued < tiles * self.lv:
                progress = self._try_v(now, slots) or progress
            if side.fix_step and self.fix_steps_issued < limit:
                n = self.fix_steps_issued
                ok = self.cube_done > n if self.cube_cycles else self.loads_landed > n
                if ok and side.fix:
                    ok = self.fix_tiles_issued >= n // steps  # earlier tiles' stores went first
                if ok:
                    self.fix_steps_issued = n + 1
                    self._issue_stores(side.fix_step, STORE_FIX, n, now, step=True)
                    progress = True
            if side.fix and self.fix_tiles_issued < tiles:
                t = self.fix_tiles_issued
                last = t * steps + steps - 1
                ok = self.cube_done > last if self.cube_cycles else self.loads_landed > last
                if ok and side.fix_step:
                    ok = self.fix_steps_issued > last
                if ok and partner is not None and partner.handoff and t >= slots:
                    ok = partner.loads_landed > partner.tile_group(t - slots)
                if ok:
                    self.fix_tiles_issued = t + 1
                    self._issue_stores(side.fix, STORE_FIX, t, now)
                    progress = True
            if side.mte3_step and self.mte3_steps_issued < limit:
                n = self.mte3_steps_issued
                t = n // steps
                if self.vector_cycles:
                    ok = self.vector_done > n
                elif self.cube_cycles:
                    ok = self.cube_done > n
                else:
                    ok = self.loads_landed > t * self.G + n - t * steps
                if ok and side.mte3:
                    ok = self.mte3_tiles_issued >= t
                if ok and side.feeds and partner is not None and n >= slots:
                    ok = partner.loads_landed > n - slots  # the workspace slot was read back
                if ok:
                    self.mte3_steps_issued = n + 1
                    self._issue_stores(side.mte3_step, STORE_MTE3, n, now, step=True)
                    progress = True
            if side.mte3 and self.mte3_tiles_issued < tiles:
                t = self.mte3_tiles_issued
                last = t * steps + steps - 1
                if self.epilogue_cycles:
                    ok = self.epilogues_done > t
                elif self.vector_cycles:
                    ok = self.vector_done > last
                elif self.cube_cycles:
                    ok = self.cube_done > last
                else:
                    ok = self.loads_landed > last
                if ok and side.mte3_step:
                    ok = self.mte3_steps_issued > last
                if ok:
                    self.mte3_tiles_issued = t + 1
                    self._issue_stores(side.mte3, STORE_MTE3, t, now)
                    progress = True

    def _try_v(self, now: float, slots: int) -> bool:
        q = self.vector_issued
        lv = self.lv
        t = q // lv
        r = q - t * lv
        steps = self.steps
        partner = self.partner
        out_slot = bool(self.side.mte3) and t >= slots
        if self.vector_cycles and r < steps:
            n = t * steps + r
            if self.cube_cycles:
                ok = self.cube_done > n
            elif partner is not None and partner.cube_cycles and not self.side.feeds:
                ok = partner.cube_done > n
                landed = partner.m_time[n & RING_MASK] + self.eng.step_delay
                ok = ok and landed <= now + HAIR * (1.0 + now)  # (see _inputs_ready)
                ok = ok and (not self.loads_k or self.loads_landed > n)
            else:
                ok = self.loads_landed > t * self.G + r
            if ok and self.side.mte3_step and n >= slots:
                ok = self.mte3_steps_landed > n - slots
            if ok and out_slot and r == steps - 1 and not self.epilogue_cycles:
                ok = self.mte3_tiles_landed > t - slots
            if not ok:
                return False
            self.v_is_ve = False
            cycles = self.vector_cycles
        else:
            last = t * steps + steps - 1
            if self.late:
                ok = self.loads_landed > self.tile_group(t)
            elif self.vector_cycles:
                ok = self.vector_done > last
            elif self.cube_cycles:
                ok = self.cube_done > last
            else:
                ok = self.loads_landed > last
            if (
                ok
                and not self.cube_cycles
                and not self.handoff
                and partner is not None
                and partner.cube_cycles
            ):
                # coupled chip: the tile's accumulator reaches UB after its last Mmad
                ok = partner.cube_done > t * partner.steps + partner.steps - 1
            if ok and out_slot:
                ok = self.mte3_tiles_landed > t - slots
            if not ok:
                return False
            self.v_is_ve = True
            cycles = self.epilogue_cycles
        self.vector_busy = True
        self.vector_issued = q + 1
        self.busy[P_V] += cycles
        self.eng.push(now + cycles, EV_OP, self, P_V)
        return True

    def _group_done(self, chan: int, idx: int, now: float, step: bool = False) -> None:
        if chan == LOAD:
            self.loads_landed += 1
            if self.tail == LOADS and idx % self.steps == self.steps - 1:
                self._tile_done(idx // self.steps, now)
            return
        if step:  # a per-step store: the partner may read it back after a sync
            if chan == STORE_FIX:
                self.fix_steps_landed += 1
                self.fs_time[idx & RING_MASK] = now
                tail = self.tail == FIX_STEP
            else:
                self.mte3_steps_landed += 1
                self.ms_time[idx & RING_MASK] = now
                tail = self.tail == MTE3_STEP
            partner = self.partner
            if partner is not None and self.eng.step_delay > 0:
                self.eng.push(now + self.eng.step_delay, EV_WAKE, partner, 0)
            if tail and idx % self.steps == self.steps - 1:
                self._tile_done(idx // self.steps, now)
        elif chan == STORE_FIX:
            self.fix_tiles_landed += 1
            self.fix_time[idx & RING_MASK] = now
            partner = self.partner
            if partner is not None and self.eng.tile_delay > 0:
                self.eng.push(now + self.eng.tile_delay, EV_WAKE, partner, 0)
            if self.tail == FIX_TILE:
                self._tile_done(idx, now)
        else:
            self.mte3_tiles_landed += 1
            if self.tail == MTE3_TILE:
                self._tile_done(idx, now)

    def op_done(self, pipe: int, now: float) -> None:
        """A compute instruction (MTE1, M or V) finished at ``now``."""
        if pipe == P_M:
            self.cube_busy = False
            n = self.cube_done
            self.m_time[n & RING_MASK] = now
            self.cube_done = n + 1
            partner = self.partner
            if partner is not None and partner.vector_cycles and self.eng.step_delay > 0:
                self.eng.push(now + self.eng.step_delay, EV_WAKE, partner, 0)
            if self.tail == CUBE and n % self.steps == self.steps - 1:
                self._tile_done(n // self.steps, now)
        elif pipe == P_MTE1:
            self.mte1_busy = False
            self.mte1_done += 1
        elif self.v_is_ve:
            self.vector_busy = False
            self.epilogues_done += 1
            if self.tail == EPILOGUE:
                self._tile_done(self.epilogues_done - 1, now)
        else:
            self.vector_busy = False
            n = self.vector_done
            self.vector_done = n + 1
            if self.tail == VECTOR and n % self.steps == self.steps - 1:
                self._tile_done(n // self.steps, now)
        self._settle(now)

    def _settle(self, now: float) -> None:
        self.advance(now)
        if self.partner is not None:
            self.partner.advance(now)

    def _tile_done(self, t: int, now: float) -> None:
        self.tiles_done += 1
        self.tile_time[t & RING_MASK] = now
        self.tile_busy[t & RING_MASK] = list(self.busy)
        self.eng.on_tile(t, now)

    @property
    def finished(self) -> bool:
        return self.tiles_done >= self.ntiles - self.base
