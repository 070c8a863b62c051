"""Compile a :class:`~costmodel.kernel.Kernel` into what one simulated core runs.

A kernel becomes one or two *sides* (the cube core and, for a mixed kernel, its vector cores;
otherwise one side with every pipe), each with its load and store streams resolved to byte
counts per copy, L2 block coordinates and path rates, and its per-step / per-tile cycles. On a
coupled chip the two sides of a mixed kernel are one core: they share its DMA queues.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.exceptions import CostModelError
from costmodel.kernel import Kernel, Stream, burst_bytes, handoffs, prologue_handoffs
from costmodel.simulator.l2 import L2Cache
from costmodel.spec import HardwareSpec

__all__ = ["LOAD", "STORE_FIX", "STORE_MTE3", "Program", "SStream", "Side", "compile_kernel"]

LOAD, STORE_FIX, STORE_MTE3 = 0, 1, 2
_PIPE_CODE = {"MTE2": LOAD, "FIX": STORE_FIX, "MTE3": STORE_MTE3}


@dataclass(frozen=True, slots=True)
class SStream:
    """A stream as one simulated core moves it.

    ``nbytes`` is per copy and per block and includes burst/alignment waste; block ``x`` of the
    tensor is ``cb*b + ci*i + cj*j + ck*k`` and covers ``[x, x+1) * region`` bytes.
    """

    tid: int
    chan: int  # LOAD, STORE_FIX or STORE_MTE3
    per_step: bool
    nbytes: float
    payload: float
    region: float
    cb: int
    ci: int
    cj: int
    ck: int
    rate: float  # L2-hit (loads) or store path, bytes/cycle per copy
    cap: float  # HBM path cap, bytes/cycle per copy
    sharing: str  # "private" | "broadcast" | "shared"
    handoff: bool  # vector-side load of what the cube side stores in this kernel
    readback: bool  # cube-side per-step load of what the vector side stores that step
    scratch: bool  # a store of what this kernel loads back: an L2 hand-off, never written back
    reread: float = 0.0  # share of nbytes re-reading the block this load just brought (L2 hits)


@dataclass(frozen=True, slots=True)
class Side:
    """What one core of a kernel runs (a mixed kernel has a cube side and a vector side).

    Stores are per tile (after the tile's last step) or per step (after that step's producer:
    M for FixPipe, V for MTE3). A *feeding* vector side computes a cube operand each step (a
    prologue) and stores it for the cube side to read back; its tile loads (an epilogue's
    hand-off and inputs) are issued after the tile's steps, since the hand-off needs the cube
    to have finished the tile.
    """

    kind: str  # "core" (cube or vector kernel), "cube", "vector"
    steps: int
    loads_tile: tuple[SStream, ...]
    loads_step: tuple[SStream, ...]
    fix: tuple[SStream, ...]  # per tile
    mte3: tuple[SStream, ...]  # per tile
    fix_step: tuple[SStream, ...]
    mte3_step: tuple[SStream, ...]
    feeds: bool
    mte1_cycles: float  # per step: L1 -> L0A/L0B moves
    cube_cycles: float  # per step: the Mmad
    vector_cycles: float  # per step: vector work
    epilogue_cycles: float  # per tile: vector work after the tile's last step
    copies: int  # identical cores per unit (the AIV pair of a split mixed kernel)


@dataclass(frozen=True, slots=True)
class Program:
    """A kernel ready to simulate."""

    grid: tuple[int, int, int]
    tiles: int
    cores: int
    slots: int
    sides: tuple[Side, ...]
    tile_delay: float  # cross-core sync cycles on the cube -> vector tile hand-off
    step_delay: float  # per step, when the vector side consumes the cube per step
    own: tuple[int, ...]  # L2 ids of the tensors the kernel touches (first appearance order)
    own_bytes: tuple[float, ...]
    shared_dma: bool = False  # the sides share one core's DMA channels (coupled mixed kernel)


def _waste(s: Stream, spec: HardwareSpec) -> float:
    """Bus bytes per payload byte: a run moves whole 512-byte bursts (640 bytes as 1024)."""
    row = s.row_bytes
    if row <= 0:
        return 1.0
    return float(burst_bytes(row, spec.gm_burst_bytes)) / row


def _coeffs(key: str, grid: tuple[int, int, int], steps: int) -> tuple[int, int, int, int, int]:
    """Row-major coefficients of ``b, i, j, k`` over the key letters, and the block count."""
    extent = {"b": grid[0], "i": grid[1], "j": grid[2], "k": steps}
    coef = {"b": 0, "i": 0, "j": 0, "k": 0}
    stride = 1
    for letter in reversed(key):
        if letter in coef:
            coef[letter] = stride
            stride *= extent[letter]
    return coef["b"], coef["i"], coef["j"], coef["k"], stride


def _sharing(key: str, grid: tuple[int, int, int], cores: int) -> str:
    varying = {letter for letter, n in zip("bij", grid, strict=True) if n > 1}
    used = set(key) & varying
    if used == varying or cores == 1:
        return "private"
    return "broadcast" if not used else "shared"


def compile_kernel(kernel: Kernel, spec: HardwareSpec, l2: L2Cache) -> Program:
    """Resolve a kernel's streams and cycles for the simulator (see kernel.py semantics)."""
    if kernel.unit not in ("cube", "vector", "mixed"):
        raise CostModelError(
            f"kernel '{kernel.name}': unit must be cube, vector or mixed, but got {kernel.unit!r}"
        )
    return _Compiler(kernel, spec, l2).program()


class _Compiler:
    """One kernel made a :class:`Program`: each stream resolved (its channel, rates, waste,
    block coefficients and sharing), the streams gathered into sides, the sides into the
    program; the tensors it touches are recorded as they are resolved."""

    def __init__(self, kernel: Kernel, spec: HardwareSpec, l2: L2Cache) -> None:
        self.kernel, self.spec, self.l2 = kernel, spec, l2
        self.steps = max(1, kernel.steps)
        self.mixed = kernel.unit == "mixed"
        physical = spec.cube_cores if kernel.unit in ("cube", "mixed") else spec.vector_cores
        self.cores = max(1, min(kernel.cores, physical))
        streams = kernel.streams
        self.fix_tensors = {s.tensor for s in streams if s.pipe == "FIX" and s.side == "cube"}
        self.handed = handoffs(streams)
        l2.handoffs = frozenset(l2.tid(t) for t in self.handed)
        self.fed_tensors = prologue_handoffs(streams) if self.mixed else set()
        self.own: dict[str, int] = {}
        self.own_bytes: dict[str, float] = {}

    def stream(self, s: Stream, copies: int) -> SStream:
        kernel, spec, grid = self.kernel, self.spec, self.kernel.grid
        chan = _PIPE_CODE.get(s.pipe, -1)
        if chan < 0 or s.per not in ("step", "tile") or set(s.key) - set("bijk"):
            raise CostModelError(
                f"kernel '{kernel.name}': stream of '{s.tensor}' has pipe={s.pipe!r}, "
                f"per={s.per!r}, key={s.key!r}; pipes are MTE2, FIX, MTE3, per is step or "
                "tile, keys use the letters bijk"
            )
        cb, ci, cj, ck, blocks = _coeffs(s.key, grid, self.steps)
        if s.per != "step":
            ck = 0
        tensor_bytes = float(s.tensor_bytes or s.bytes * blocks)
        tid = self.l2.tid(s.tensor)
        self.own.setdefault(s.tensor, tid)
        self.own_bytes[s.tensor] = max(self.own_bytes.get(s.tensor, 0.0), tensor_bytes)
        rate, cap = self._rates(s, chan)
        payload = s.bytes / copies
        # back-to-back runs of a block of at least one line fill each other's bursts: the
        # port and HBM both move the payload (a smaller block shares its lines through the
        # L2's sectors, and its port still pays whole bursts)
        whole = s.packed and chan == LOAD and payload >= spec.l2_line_bytes
        waste = 1.0 if whole else _waste(s, spec)
        load = chan == LOAD
        return SStream(
            tid=tid,
            chan=chan,
            per_step=s.per == "step",
            nbytes=payload * waste,
            payload=payload,
            region=tensor_bytes / blocks,
            cb=cb,
            ci=ci,
            cj=cj,
            ck=ck,
            rate=rate,
            cap=cap,
            sharing=_sharing(s.key, grid, self.cores),
            handoff=self.mixed and s.side == "vector" and load and s.tensor in self.fix_tensors,
            readback=s.side != "vector"
            and load
            and s.per == "step"
            and s.tensor in self.fed_tensors,
            scratch=not load and s.tensor in self.handed,
            reread=s.reread if load else 0.0,
        )

    def _rates(self, s: Stream, chan: int) -> tuple[float, float]:
        """A stream's rate through L2 and its cap through the core's own GM path."""
        spec = self.spec
        nd2nz = spec.nd2nz_rate if s.nd2nz else 1.0
        if chan == LOAD:
            return spec.l2_read_bytes_per_cycle * nd2nz, spec.gm_read_bytes_per_cycle(
                s.side
            ) * nd2nz
        rate = spec.fixpipe_bytes_per_cycle if chan == STORE_FIX else spec.l2_write_bytes_per_cycle
        return rate, min(rate, spec.core_gm_bytes_per_cycle)

    def side(self, kind: str, streams: list[Stream], copies: int) -> Side:
        kernel, spec = self.kernel, self.spec
        mte1_cycles = cube_cycles = vector_cycles = epilogue_cycles = 0.0
        if kind in ("core", "cube"):
            mte1_cycles = (
                kernel.mte1_l0a_bytes / spec.l1_to_l0a_bytes_per_cycle
                + kernel.mte1_l0b_bytes / spec.l1_to_l0b_bytes_per_cycle
            )
            cube_cycles = float(kernel.cube_cycles)
        if kind in ("core", "vector"):
            # vector cycles are per AIV already (the lowering split the tile between the
            # pair); only the stream bytes are per AIC+2AIV group and divided here
            vector_cycles = kernel.vector_cycles_step
            epilogue_cycles = kernel.vector_cycles_tile
        rs = [self.stream(s, copies) for s in streams]
        fed_ids = {self.l2.tid(t) for t in self.fed_tensors}
        per_step_work = (
            mte1_cycles > 0 or cube_cycles > 0 or vector_cycles > 0 or any(s.per_step for s in rs)
        )
        return Side(
            kind=kind,
            steps=self.steps if per_step_work else 1,
            loads_tile=tuple(s for s in rs if s.chan == LOAD and not s.per_step),
            loads_step=tuple(s for s in rs if s.chan == LOAD and s.per_step),
            fix=tuple(s for s in rs if s.chan == STORE_FIX and not s.per_step),
            mte3=tuple(s for s in rs if s.chan == STORE_MTE3 and not s.per_step),
            fix_step=tuple(s for s in rs if s.chan == STORE_FIX and s.per_step),
            mte3_step=tuple(s for s in rs if s.chan == STORE_MTE3 and s.per_step),
            feeds=kind == "vector" and any(s.tid in fed_ids for s in rs),
            mte1_cycles=mte1_cycles,
            cube_cycles=cube_cycles,
            vector_cycles=vector_cycles,
            epilogue_cycles=epilogue_cycles,
            copies=copies,
        )

    def program(self) -> Program:
        kernel, spec, steps = self.kernel, self.spec, self.steps
        if self.mixed:
            aiv = spec.aivs_per_aic
            cube = self.side("cube", [s for s in kernel.streams if s.side != "vector"], 1)
            vec = self.side("vector", [s for s in kernel.streams if s.side == "vector"], aiv)
            sides: tuple[Side, ...] = (cube, vec)
            # one sync for a tile hand-off (cube -> vector after the tile), the rest per step
            syncs = max(0, kernel.cross_core_syncs)
            tile_syncs = min(syncs, 1) if any(s.handoff for s in vec.loads_tile) else 0
            tile_delay = tile_syncs * spec.cross_core_sync_cycles
            step_delay = (syncs - tile_syncs) * spec.cross_core_sync_cycles / steps
        else:
            sides = (self.side("core", list(kernel.streams), 1),)
            tile_delay = step_delay = 0.0
        return Program(
            grid=kernel.grid,
            tiles=max(1, math.prod(kernel.grid)),
            cores=self.cores,
            slots=2 if kernel.config.double_buffer else 1,
            sides=sides,
            tile_delay=tile_delay,
            step_delay=step_delay,
            own=tuple(self.own.values()),
            own_bytes=tuple(self.own_bytes[t] for t in self.own),
            shared_dma=self.mixed and not spec.is_split,
        )
