"""Kernel configs and lowered kernels: the records the cost models read (docs/architecture.md).

A :class:`Kernel` is a *tile program*. Its ``grid = (B, I, J)`` output tiles are handed out
round robin: tile ``t`` (row-major over ``b, i, j``) runs on core ``t % cores`` in wave
``t // cores``. Each tile runs ``steps`` reduction steps (index ``k``). Execution semantics,
which the analytic model and the simulator both implement:

* per step ``k``: MTE2 loads every ``per="step"`` load stream's block (per-tile load streams
  are loaded before step 0); MTE1 moves ``mte1_l0a_bytes`` (at ``l1_to_l0a_bytes_per_cycle``)
  and ``mte1_l0b_bytes`` (at ``l1_to_l0b_bytes_per_cycle``) L1 -> L0; the cube (pipe ``M``)
  runs ``cube_cycles``; the vector unit (pipe ``V``) runs ``vector_cycles_step``. A step's
  MTE1 waits for its MTE2 loads, its M for its MTE1, its V for its M (when both exist).
* store streams may also be ``per="step"`` (attention's score/probability hand-offs, a
  prologue's operand): FIX after that step's M, MTE3 after that step's V, each step's block
  at its own ``k``.
* a prologue (a mixed kernel whose vector side stores, each step, a tensor the cube side loads
  that step) runs vector side first: the cube's step ``k`` loads wait for the vector side's
  step ``k`` store plus a cross-core sync; the vector side's step ``k`` store waits until the
  cube has read step ``k - slots`` back (a workspace of ``slots`` blocks). A vector side with
  both a prologue and an epilogue runs them in program order: a tile's steps, then its
  epilogue (whose hand-off loads come after the steps), then the next tile's steps.
* a store of a tensor the kernel also loads is a hand-off: it goes through a workspace of a
  few blocks per core that stays in L2, is never written back to HBM, and takes no L2 room
  from other tensors; its loads hit L2, also those of a side that does not wait for the store
  (attention's cube reads the probabilities without a per-step sync, see
  :func:`prologue_handoffs`). Lowerings name a workspace apart from the graph's tensors
  (:func:`workspace`), so a tensor that is handed off and also a group output (a prologue
  result or a split-chip epilogue's crossing tensor read by a later kernel) has a second,
  real store: written back, and found in L2 by the next kernel.
* after the last step: ``FIX`` stores the per-tile FIX streams (L0C -> GM); ``V`` runs
  ``vector_cycles_tile`` (the epilogue); ``MTE3`` stores the per-tile MTE3 streams (UB -> GM).
  L0C holds the tile's whole ``base_m x base_n`` fp32 accumulator in a single slot, so the next
  tile's first Mmad waits for this tile's FIX to drain it.
  A mixed kernel on a split chip expresses its L0C -> GM/L2 -> UB hand-off as a FIX store plus
  a vector-side MTE2 load of the same tensor, and pays ``cross_core_syncs`` x
  ``cross_core_sync_cycles`` per tile on its critical path.
* double buffering (``config.double_buffer``) gives every queue two slots, so loads for step
  ``k+1`` overlap compute of step ``k`` and the steady state is the slowest pipe (or, for a
  latency-bound queue, its producer's latency plus both stages over the two slots); without it
  each queue has one slot, freed only when the stage reading it finishes, so a step takes
  about the slowest *pair* of adjacent stages and DMA latencies are exposed.
* vector cycles are per vector core (AIV): a mixed kernel's lowering has already split a
  tile's vector work between the two AIVs of its AIC+2AIV group; its vector-side stream bytes
  are per group (the pair shares them).
* every DMA pays a first-byte latency (``gm_latency_cycles`` from HBM, ``l2_latency_cycles``
  on an L2 hit; ``mte3_latency_cycles`` for stores) that double buffering hides behind other
  work; every kernel pays ``kernel_gap_s`` + ``kernel_head_cycles`` + its device-side setup
  (``HardwareSpec.kernel_setup_cycles``: the tiling read and the scalar prologue; a CANN
  library kernel its longer prologue on top, ``library_prologue_cycles``).
* L2 identity: a stream's block for indices ``(b, i, j, k)`` is block number ``x`` of its
  tensor, ``x`` = the row-major index over the stream's ``key`` letters (extents ``B, I, J`` and
  ``steps``), and covers bytes ``[x, x + 1) * tensor_bytes / blocks`` where ``blocks`` is the
  product of those extents. So every core working on row ``i`` reads the same A-panel block
  (L2 panel sharing), and a tensor the previous kernel wrote (any tiling) is found resident.
* bandwidth: HBM (``hbm_bytes_per_s``) is shared by all active transfers (reads that miss L2
  and write-backs of stores other than hand-offs), a core's reads capped at
  ``core_gm_bytes_per_cycle``; an L2 hit moves at ``l2_read_bytes_per_cycle`` per core;
  stores at ``l2_write_bytes_per_cycle`` (FIX at ``fixpipe_bytes_per_cycle``); an ``nd2nz``
  load runs at ``nd2nz_rate`` x its rate; a contiguous run (``row_bytes``) moves whole
  ``gm_burst_bytes`` bursts, rounded up, unless the block's runs are ``packed``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from costmodel.spec import HardwareSpec
from search_space.ir import KernelConfig

__all__ = [
    "BATCH_ROWS",
    "BUFFERS",
    "PIPES",
    "Kernel",
    "KernelBatch",
    "KernelConfig",
    "Stream",
    "StreamBatch",
    "burst_bytes",
    "handoffs",
    "prologue_handoffs",
    "workspace",
]

PIPES = ("MTE2", "MTE1", "M", "FIX", "V", "MTE3")
BUFFERS = ("l1", "l0a", "l0b", "l0c", "ub")


@dataclass(frozen=True)
class Stream:
    """One operand moved block by block.

    Attributes:
        tensor: the tensor the bytes belong to (view chains resolved), the L2 identity.
        pipe: ``MTE2`` (GM -> L1/UB load), ``FIX`` (L0C -> GM store), ``MTE3`` (UB -> GM store).
        bytes: bytes of one block.
        key: the grid indices the block depends on, a subset of ``"bijk"`` (``k`` = step).
        per: ``"step"`` (moved every reduction step) or ``"tile"`` (once per tile).
        side: ``"cube"`` or ``"vector"``: which core of a mixed kernel issues it.
        nd2nz: converted to the fractal NZ layout on the fly (MTE2 at a reduced rate).
        tensor_bytes: size of the whole tensor (for L2 residency).
        row_bytes: length of one contiguous run in GM (a block is ``bytes / row_bytes`` runs);
            a run moves whole 512-byte bursts, so one that is not a whole number of them
            wastes bandwidth (640 bytes move as 1024).
        reread: the share of ``bytes`` that reads the block again after its first read in the
            same request (a split row's normalising pass): the core fetched those bytes moments
            ago, so they come from L2 (when it is on), not HBM.
        packed: the block's short runs lie back to back in GM (whole rows of a matrix, moved
            row by row, as an ND->NZ load of a (T, 128) fp16 Key block is): in a block of at
            least one L2 line neighbouring runs fill each other's bursts, so the port moves
            the payload and a miss fetches only the payload from HBM.
    """

    tensor: str
    pipe: str
    bytes: int
    key: str
    per: str = "step"
    side: str = "cube"
    nd2nz: bool = False
    tensor_bytes: int = 0
    row_bytes: int = 0
    reread: float = 0.0
    packed: bool = False

    @property
    def is_load(self) -> bool:
        return self.pipe == "MTE2"


@dataclass(frozen=True)
class Kernel:
    """One fused group lowered under one config on one target.

    Per-step work runs ``steps`` times per tile; per-tile work once per tile. Cycles are core
    cycles at the spec's clock. ``footprint`` is bytes per buffer as configured (both slots when
    double-buffered).
    """

    name: str
    ops: tuple[str, ...]
    kind: str
    unit: str  # "cube" | "vector" | "mixed"
    config: KernelConfig
    grid: tuple[int, int, int]
    steps: int
    streams: tuple[Stream, ...]
    mte1_l0a_bytes: int = 0  # per step
    mte1_l0b_bytes: int = 0  # per step
    mmads: int = 0  # Mmad instructions per step
    cube_cycles: float = 0.0  # per step, fixed costs included
    vector_cycles_step: float = 0.0
    vector_cycles_tile: float = 0.0
    vector_instrs: int = 0  # per tile (issue cost already inside vector cycles)
    cross_core_syncs: int = 0  # per tile, mixed kernels
    footprint: Mapping[str, int] = field(default_factory=dict)
    flops: int = 0
    cube_flops: int = 0
    compulsory_bytes: int = 0
    signature: str = ""

    @property
    def tiles(self) -> int:
        return math.prod(self.grid)

    @property
    def cores(self) -> int:
        return max(1, min(self.config.block_dim, self.tiles))

    @property
    def waves(self) -> int:
        return -(-self.tiles // self.cores)

    def bytes_moved(self) -> int:
        """Bytes through every load/store stream over the whole kernel (before any L2 reuse)."""
        total = 0
        for s in self.streams:
            total += s.bytes * self.tiles * (self.steps if s.per == "step" else 1)
        return total

    def feasible(self, spec: HardwareSpec) -> tuple[bool, str]:
        """Whether every buffer fits; otherwise which one overflows and by how much."""
        for buf in BUFFERS:
            need = self.footprint.get(buf, 0)
            have = int(getattr(spec, f"{buf}_bytes"))
            if need > have:
                return (
                    False,
                    f"{buf.upper()} overflow: needs {need} B, has {have} B (+{need - have} B)",
                )
        return True, ""


@dataclass(frozen=True)
class StreamBatch:
    """A :class:`Stream` across many configs of one group: ``bytes``/``row_bytes`` (and
    ``reread``, when given) are arrays."""

    tensor: str
    pipe: str
    bytes: np.ndarray
    row_bytes: np.ndarray
    key: str
    per: str = "step"
    side: str = "cube"
    nd2nz: bool = False
    tensor_bytes: int = 0
    reread: np.ndarray | None = None
    packed: bool = False

    @property
    def moves(self) -> np.ndarray:
        """Which configs move bytes on this stream (a flash-decoding hand-off of an unsplit
        config moves none: no kernel of that config has the stream)."""
        return np.asarray(self.bytes) > 0

    def reread_share(self) -> np.ndarray:
        """The re-read share of each config's block (zeros when the stream has none)."""
        if self.reread is None:
            return np.zeros(len(self.bytes))
        return self.reread.astype(np.float64)

    def at(self, i: int) -> Stream:
        return Stream(
            self.tensor,
            self.pipe,
            int(self.bytes[i]),
            self.key,
            self.per,
            self.side,
            self.nd2nz,
            self.tensor_bytes,
            int(self.row_bytes[i]),
            0.0 if self.reread is None else float(self.reread[i]),
            self.packed,
        )


@dataclass(frozen=True)
class KernelBatch:
    """One group lowered under many configs at once: per-config fields are numpy arrays.

    This is what the vectorised analytic model scores; :meth:`kernel` gives row ``i`` as a
    :class:`Kernel` (what the simulator runs).
    """

    name: str
    ops: tuple[str, ...]
    kind: str
    unit: str
    configs: tuple[KernelConfig, ...]
    grid: np.ndarray  # (n, 3) int
    steps: np.ndarray
    streams: tuple[StreamBatch, ...]
    mte1_l0a_bytes: np.ndarray
    mte1_l0b_bytes: np.ndarray
    mmads: np.ndarray
    cube_cycles: np.ndarray
    vector_cycles_step: np.ndarray
    vector_cycles_tile: np.ndarray
    vector_instrs: np.ndarray
    cross_core_syncs: np.ndarray
    footprint: Mapping[str, np.ndarray]
    flops: int = 0
    cube_flops: int = 0
    compulsory_bytes: int = 0
    signature: str = ""

    def __len__(self) -> int:
        return len(self.configs)

    @property
    def tiles(self) -> np.ndarray:
        return np.prod(self.grid, axis=1)

    @property
    def block_dim(self) -> np.ndarray:
        return np.array([c.block_dim for c in self.configs], dtype=np.int64)

    @property
    def double_buffer(self) -> np.ndarray:
        return np.array([c.double_buffer for c in self.configs], dtype=bool)

    @property
    def cores(self) -> np.ndarray:
        return np.maximum(1, np.minimum(self.block_dim, self.tiles))

    def feasible_mask(self, spec: HardwareSpec) -> np.ndarray:
        ok = np.ones(len(self), dtype=bool)
        for buf in BUFFERS:
            if buf in self.footprint:
                ok &= self.footprint[buf] <= int(getattr(spec, f"{buf}_bytes"))
        return ok

    def kernel(self, i: int) -> Kernel:
        return Kernel(
            name=self.name,
            ops=self.ops,
            kind=self.kind,
            unit=self.unit,
            config=self.configs[i],
            grid=tuple(int(g) for g in self.grid[i]),  # type: ignore[arg-type]
            steps=int(self.steps[i]),
            # a stream with no bytes under this config (a flash-decoding hand-off of an
            # unsplit attention) moves nothing, so the kernel has no such stream
            streams=tuple(s.at(i) for s in self.streams if s.bytes[i] > 0),  # as s.moves[i]
            mte1_l0a_bytes=int(self.mte1_l0a_bytes[i]),
            mte1_l0b_bytes=int(self.mte1_l0b_bytes[i]),
            mmads=int(self.mmads[i]),
            cube_cycles=float(self.cube_cycles[i]),
            vector_cycles_step=float(self.vector_cycles_step[i]),
            vector_cycles_tile=float(self.vector_cycles_tile[i]),
            vector_instrs=int(self.vector_instrs[i]),
            cross_core_syncs=int(self.cross_core_syncs[i]),
            footprint={k: int(v[i]) for k, v in self.footprint.items()},
            flops=self.flops,
            cube_flops=self.cube_flops,
            compulsory_bytes=self.compulsory_bytes,
            signature=self.signature,
        )


BATCH_ROWS = (
    "grid",
    "steps",
    "mte1_l0a_bytes",
    "mte1_l0b_bytes",
    "mmads",
    "cube_cycles",
    "vector_cycles_step",
    "vector_cycles_tile",
    "vector_instrs",
    "cross_core_syncs",
)
"""The :class:`KernelBatch` fields that hold one array entry per config (besides its streams'
arrays and the footprint): what joining or reordering the rows of batches must carry."""


def burst_bytes(run: float | np.ndarray, burst: int) -> np.ndarray:
    """Bytes one contiguous GM run of ``run`` bytes moves: whole ``burst``-byte bursts,
    rounded up (a 640-byte row moves 1024); a number or an array of them."""
    return np.ceil(np.asarray(run, dtype=np.float64) / burst) * burst


def workspace(owner: str, role: str) -> str:
    """The name of a hand-off's workspace: a tensor of the kernel's own, apart from the graph's
    tensors, so that a hand-off which is also a group output keeps a real store."""
    return f"{owner}#{role}"


def handoffs(streams: Sequence[Stream] | Sequence[StreamBatch]) -> set[str]:
    """Tensors a kernel both stores and loads: its hand-offs, which live in a small L2
    workspace (the module docstring) and so leave nothing resident for later kernels."""
    loaded = {s.tensor for s in streams if s.pipe == "MTE2"}
    return {s.tensor for s in streams if s.pipe != "MTE2" and s.tensor in loaded}


def prologue_handoffs(streams: Sequence[Stream] | Sequence[StreamBatch]) -> set[str]:
    """Tensors a vector side stores each step for the cube side to load back that step (a
    prologue's operands); none when the vector side itself loads a FixPipe result each step
    (attention: one Mmad per step covers both matmuls, so neither side waits on the other's
    step). The simulator and the analytic model both read a kernel's prologue from this."""
    fix = {s.tensor for s in streams if s.pipe == "FIX"}
    vec_step = [s for s in streams if s.side == "vector" and s.per == "step"]
    if any(s.pipe == "MTE2" and s.tensor in fix for s in vec_step):
        return set()
    made = {s.tensor for s in vec_step if s.pipe == "MTE3"}
    return {
        s.tensor
        for s in streams
        if s.pipe == "MTE2" and s.side != "vector" and s.per == "step" and s.tensor in made
    }
