"""The analytic model's closed form: every term of a kernel's time, for many configs at once.

See :mod:`costmodel.analytic.model` for the formulas; this module evaluates them with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.analytic.constants import AnalyticConstants
from costmodel.analytic.l2 import GridView, line_openers, load_hit_fractions
from costmodel.kernel import KernelBatch, StreamBatch, burst_bytes, handoffs, prologue_handoffs
from costmodel.spec import HardwareSpec

__all__ = ["Breakdown", "active_cores", "bound", "load_hits", "score_wave"]


@dataclass(frozen=True)
class Breakdown:
    """What :func:`score_wave` derives for every config (cycles unless named)."""

    latency_us: np.ndarray
    busy: dict[str, np.ndarray]  # per pipe, over the busiest core's W tiles
    tile_terms: dict[str, np.ndarray]  # per-tile resource times the bound is read from
    fixed: np.ndarray  # gap + head, cycles
    body: np.ndarray  # everything else, cycles
    tile: np.ndarray  # one tile of a full wave, cycles
    serial: np.ndarray  # single-buffered tile time (0 where double-buffered)
    hbm_bytes: np.ndarray
    hit_rate: np.ndarray
    split_mte2: np.ndarray  # per tile: MTE2 time on misses, on hits
    split_hits: np.ndarray
    hbm_share_limited: np.ndarray
    resident_share: np.ndarray  # of the bytes loaded, the share earlier kernels left in L2


@dataclass
class _Transfers:
    """Stream traffic of every config, per tile: times in cycles, sizes in bytes."""

    step: dict[str, np.ndarray]  # per-step time of MTE2c/MTE2v (cube/vector side), FIX, MTE3
    tile: dict[str, np.ndarray]  # per-tile time of the same pipes (loads before step 0)
    lat_step: np.ndarray
    lat_pre: np.ndarray
    miss_time: np.ndarray
    hit_time: np.ndarray
    miss_bytes: np.ndarray  # from HBM
    miss_port_bytes: np.ndarray  # the same misses through the cores' ports (whole bursts)
    hit_bytes: np.ndarray
    raw_bytes: np.ndarray
    warm_bytes: np.ndarray  # loaded bytes of tensors earlier kernels left in L2
    writeback: np.ndarray
    lat_side: dict[str, np.ndarray]  # per-step load latency of the cube / vector side
    side_step: dict[str, np.ndarray]  # per-step load time each side issues (one queue or two)
    store_latency: float = 0.0

    @classmethod
    def zeros(cls, n: int) -> _Transfers:
        pipes = ("MTE2c", "MTE2v", "FIX", "MTE3")
        z = np.zeros(n)
        return cls(
            {p: z.copy() for p in pipes},
            {p: z.copy() for p in pipes},
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            z.copy(),
            {"cube": z.copy(), "vector": z.copy()},
            {"cube": z.copy(), "vector": z.copy()},
        )


@dataclass(frozen=True)
class _Steps:
    """One step's stages, cycles per config, in dependency order: the cube side's loads,
    MTE1, Mmad, its per-step FixPipe store, the vector side's loads, vector work and its
    per-step MTE3 store; with a tile's vector epilogue, the cross-core syncs per tile and
    per step, a store's latency, whether the group feeds the cube (a prologue) and whether
    it spans a split chip's AIC and AIVs."""

    ld_c: np.ndarray
    mte1: np.ndarray
    cube: np.ndarray
    fix: np.ndarray
    ld_v: np.ndarray
    vector: np.ndarray
    mte3: np.ndarray
    v_tile: np.ndarray
    sync: np.ndarray
    sync_step: np.ndarray
    lat3: float
    feeds: bool
    sides: bool

    @property
    def stages(self) -> list[np.ndarray]:
        return [self.ld_c, self.mte1, self.cube, self.fix, self.ld_v, self.vector, self.mte3]


def _steps(
    spec: HardwareSpec, c: AnalyticConstants, batch: KernelBatch, t: _Transfers, sides: bool
) -> _Steps:
    mte1 = batch.mte1_l0a_bytes / (spec.l1_to_l0a_bytes_per_cycle * c.mte1) + (
        batch.mte1_l0b_bytes / (spec.l1_to_l0b_bytes_per_cycle * c.mte1)
    )
    sync_cycles = spec.cross_core_sync_cycles * c.sync
    feeds = bool(prologue_handoffs(batch.streams))
    # a prologue syncs once per step inside its loop; what is left is per tile
    step_syncs = np.minimum(batch.steps, batch.cross_core_syncs) if feeds else 0
    return _Steps(
        ld_c=t.step["MTE2c"],
        mte1=mte1,
        cube=batch.cube_cycles / c.cube,
        fix=t.step["FIX"],
        ld_v=t.step["MTE2v"],
        vector=batch.vector_cycles_step / c.vector,
        mte3=t.step["MTE3"],
        v_tile=batch.vector_cycles_tile / c.vector,
        sync=(batch.cross_core_syncs - step_syncs) * sync_cycles,
        sync_step=np.where(np.asarray(step_syncs) > 0, sync_cycles, 0.0),
        lat3=t.store_latency,
        feeds=feeds,
        sides=sides,
    )


def _step_chain(t: _Transfers, s: _Steps) -> list[np.ndarray]:
    """A step's stages, each with the latency its queue exposes, in the order an item goes
    through them. A prologue: the vector side loads its sources, computes the operand block,
    stores it and syncs; the cube reads it back, then MTE1 and Mmad. On a coupled core both
    sides queue on its one MTE2: the sources wait behind the cube's loads of the step before,
    so their stage is the queue's whole step; the read-back is the cube's own."""
    if s.feeds:
        src, back = t.side_step["vector"], t.side_step["cube"]
        if not s.sides:
            src = np.where(src > 0, s.ld_c, 0.0)
        return [
            src + np.where(src > 0, t.lat_side["vector"], 0.0),
            s.vector,
            _plus(s.mte3, s.lat3 + s.sync_step),
            back + np.where(back > 0, t.lat_side["cube"], 0.0),
            s.mte1,
            s.cube,
            _plus(s.fix, s.lat3),
        ]
    lat_c = np.where(s.ld_c > 0, t.lat_step, 0.0)
    lat_v = np.where((s.ld_c == 0) & (s.ld_v > 0), t.lat_step, 0.0)
    return [
        s.ld_c + lat_c,
        s.mte1,
        s.cube,
        _plus(s.fix, s.lat3),
        s.ld_v + lat_v,
        s.vector,
        _plus(s.mte3, s.lat3),
    ]


def _tile_pairs(t: _Transfers, s: _Steps, steps: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """A tile's stages (its own loads, its steps at a period, its stores and epilogue) as a
    function of the step period: their slowest adjacent pair (:func:`_pairs`). A tile's own
    loads go out with its first step's (one group, one queue), so their first-byte latency
    hides behind that queue's step loads' own (on a coupled core a prologue's go out after
    the steps, on their own)."""
    queue_lat = t.lat_side["cube"] if s.sides else t.lat_step
    with_step = np.where((s.ld_c > 0) & (s.sides or not s.feeds), queue_lat, 0.0)
    pre_lat_c = np.where(t.tile["MTE2c"] > 0, np.maximum(t.lat_pre - with_step, 0.0), 0.0)
    pre_lat_v = np.where(t.tile["MTE2c"] > 0, 0.0, np.where(t.tile["MTE2v"] > 0, t.lat_pre, 0.0))

    def pairs(step_period: np.ndarray) -> np.ndarray:
        return _pairs(
            [
                t.tile["MTE2c"] + pre_lat_c,
                steps * step_period,
                _plus(t.tile["FIX"], s.lat3),
                t.tile["MTE2v"] + pre_lat_v,
                s.v_tile,
                _plus(t.tile["MTE3"], s.lat3),
            ]
        )

    return pairs


def _prologue_serial(t: _Transfers, s: _Steps, chain: list[np.ndarray]) -> np.ndarray:
    """A prologue and an epilogue share the vector cores in program order: the next tile's
    prologue waits for this tile's epilogue, which waits for this tile's last Mmad; its first
    sources find no cube loads queued ahead of them. The serial part of a tile (0 without an
    epilogue)."""
    own = t.side_step["vector"]
    step_chain = np.add.reduce([own + np.where(own > 0, t.lat_side["vector"], 0.0), *chain[1:-1]])
    epi = _plus(t.tile["FIX"], s.lat3) + s.sync + t.tile["MTE2v"] + t.lat_pre + s.v_tile
    return np.where(s.v_tile > 0, step_chain + epi, 0.0)


def _busy(t: _Transfers, s: _Steps, steps: np.ndarray) -> dict[str, np.ndarray]:
    """Each pipe's busy time over a tile: its steps' share and the tile's own."""
    return {
        "MTE2": np.maximum(steps * s.ld_c + t.tile["MTE2c"], steps * s.ld_v + t.tile["MTE2v"]),
        "MTE1": steps * s.mte1,
        "M": steps * s.cube,
        "FIX": steps * s.fix + t.tile["FIX"],
        "V": steps * s.vector + s.v_tile,
        "MTE3": steps * s.mte3 + t.tile["MTE3"],
    }


def _fixed_cycles(spec: HardwareSpec, c: AnalyticConstants) -> float:
    """The launch gap and the kernel's head and set-up. The fitted factor scales the spec's
    own set-up; a library kernel's longer prologue is a measured task-time difference,
    charged as it is (as the simulator does)."""
    return (
        spec.kernel_gap_s * c.gap * spec.clock_hz
        + spec.kernel_head_cycles * c.head
        + spec.kernel_setup_cycles * c.setup
        + spec.library_prologue_cycles
    )


def _gm_paths(
    spec: HardwareSpec,
    c: AnalyticConstants,
    batch: KernelBatch,
    sides: bool,
    sharing: np.ndarray,
) -> tuple[float, np.ndarray]:
    """A tile's read paths from GM, bytes per cycle: a core's own (capped; an AIC's may be
    wider than an AIV's, and a split chip's mixed group reads through its AIC and AIVs), and
    its share of the chip's HBM among ``sharing`` cores (write-backs share only that)."""
    port = spec.gm_read_bytes_per_cycle("vector" if batch.unit == "vector" else "cube")
    aivs = spec.aivs_per_aic if sides else 0
    read_cap = (port + aivs * spec.gm_read_bytes_per_cycle("vector")) * c.core_gm
    return read_cap, spec.hbm_bytes_per_cycle * c.hbm / sharing


def score_wave(
    spec: HardwareSpec,
    c: AnalyticConstants,
    batch: KernelBatch,
    resident: Sequence[np.ndarray],
    sharing: np.ndarray | None = None,
    hits: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> Breakdown:
    """Every term of the model for every config (``resident``: per load stream, the
    fraction of its tensor already in L2), a tile's HBM share that of ``sharing`` cores
    (default: a full wave's; :func:`costmodel.analytic.waves.score` costs a short last
    wave's tiles at its own);
    ``hits``: :func:`load_hits`, where the caller has them. The steps: a tile's transfers,
    a step's stages, the steady period of a tile double and single buffered, then a wave's
    body and the fixed costs."""
    steps = batch.steps.astype(np.float64)
    tiles = batch.tiles.astype(np.float64)
    cores = active_cores(spec, batch)
    waves = np.ceil(tiles / cores)
    # a mixed group on a split chip is 1 AIC + 2 AIV: two MTE2 pipes, three GM paths
    sides = batch.unit == "mixed" and spec.is_split
    read_cap, hbm_share = _gm_paths(spec, c, batch, sides, cores if sharing is None else sharing)
    hits = load_hits(spec, c, batch, resident) if hits is None else hits
    t = _transfers(spec, c, batch, resident, cores, sides, hbm_share, hits)
    s = _steps(spec, c, batch, t, sides)
    hbm = np.maximum((t.miss_bytes + t.writeback) / hbm_share, t.miss_port_bytes / read_cap)
    step_sum, step_max = np.add.reduce(s.stages), np.maximum.reduce(s.stages)
    busy = _busy(t, s, steps)
    pre = t.tile["MTE2c"] + t.tile["MTE2v"]
    epilogue = t.tile["FIX"] + s.v_tile + t.tile["MTE3"] + s.lat3 + s.sync
    # a queue of S slots lets its producer run S items ahead: an item's round trip through a
    # queue (producer with its latency, then consumer) is spread over S items, so the period
    # is at least the slowest adjacent pair over S (S = 1: the pair itself; loads expose
    # their first-byte latency, stores theirs)
    chain = _step_chain(t, s)
    step_sb = _pairs(chain)
    tile_pairs = _tile_pairs(t, s, steps)
    # double buffered: the slowest pipe, or a queue's round trip over its two slots; L0C
    # holds one tile's accumulator, so the next tile's Mmads also wait for this tile's FIX
    step_db = np.maximum(step_max, step_sb / 2.0)
    steady = np.maximum.reduce([steps * step_db + t.tile["FIX"], hbm, *busy.values()])
    tile_db = np.maximum(steady, tile_pairs(step_db) / 2.0) + s.sync
    first = np.maximum(t.lat_pre, t.lat_step)
    chain_db = first + pre + step_sum + (steps - 1) * step_db + epilogue
    # single buffered: a slot frees when its consumer finishes, so a queue's producer and
    # consumer alternate: the period is the slowest pair of adjacent stages
    tile_sb = np.maximum(tile_pairs(step_sb), steady) + s.sync
    if s.feeds and bool(np.any(s.v_tile > 0)):
        serial = _prologue_serial(t, s, chain)
        tile_db = np.maximum(tile_db, serial + (steps - 1) * step_db)
        tile_sb = np.maximum(tile_sb, serial + (steps - 1) * step_sb)
    chain_sb = chain_db + (steps - 1) * (step_sb - step_db)
    body_db = waves * tile_db + np.maximum(chain_db - tile_db, 0.0)
    body_sb = waves * tile_sb + np.maximum(chain_sb - tile_sb, 0.0)
    body = np.where(batch.double_buffer, body_db, body_sb)
    fixed = _fixed_cycles(spec, c)
    loaded = t.raw_bytes * tiles
    return Breakdown(
        latency_us=(fixed + body) / spec.clock_hz * 1e6,
        busy={p: v * waves for p, v in busy.items()},
        tile_terms={**busy, "HBM": hbm},
        fixed=np.full(len(batch), fixed),
        tile=np.where(batch.double_buffer, tile_db, tile_sb),
        body=body,
        serial=np.where(batch.double_buffer, 0.0, tile_sb),
        hbm_bytes=(t.miss_bytes + t.writeback) * tiles,
        hit_rate=np.divide(
            t.hit_bytes * tiles, loaded, out=np.zeros(len(batch)), where=loaded > 0
        ),
        split_mte2=t.miss_time,
        split_hits=t.hit_time,
        hbm_share_limited=hbm_share < read_cap,
        resident_share=np.divide(
            t.warm_bytes, t.raw_bytes, out=np.zeros(len(batch)), where=t.raw_bytes > 0
        ),
    )


def active_cores(spec: HardwareSpec, batch: KernelBatch) -> np.ndarray:
    """Cores a full wave of each config runs on."""
    phys = spec.vector_cores if batch.unit == "vector" else spec.cube_cores
    tiles = batch.tiles.astype(np.float64)
    return np.clip(np.minimum(batch.block_dim, tiles), 1, phys).astype(np.float64)


def load_hits(
    spec: HardwareSpec, c: AnalyticConstants, batch: KernelBatch, resident: Sequence[np.ndarray]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per load stream, its L2 hit fraction and concurrent-hit fraction
    (:func:`~costmodel.analytic.l2.load_hit_fractions`); a tensor the kernel stores and
    loads is its own L2 hand-off (mixed kernels), resident."""
    loads = [s for s in batch.streams if s.pipe == "MTE2"]
    handed = handoffs(batch.streams)
    res = [1.0 if s.tensor in handed else r for s, r in zip(loads, resident, strict=True)]
    gv = GridView.of(batch.grid, batch.steps, active_cores(spec, batch))
    return load_hit_fractions(
        batch.streams, gv, spec.l2_bytes * c.l2_capacity, c.l2_window, res, handed
    )


def _transfers(
    spec: HardwareSpec,
    c: AnalyticConstants,
    batch: KernelBatch,
    resident: Sequence[np.ndarray],
    cores: np.ndarray,
    sides: bool,
    hbm_share: np.ndarray,
    hits: list[tuple[np.ndarray, np.ndarray]],
) -> _Transfers:
    """Per-step and per-tile time of every load and store stream, and the bytes behind it
    (``hits``: :func:`load_hits`)."""
    # Long by design: every load and store stream's per-step and per-tile time in one vectorised
    # pass (miss, hit and concurrent-hit parts).
    steps = batch.steps.astype(np.float64)
    hit_bw = spec.l2_read_bytes_per_cycle * c.l2_read
    gm_lat, l2_lat = (
        spec.gm_latency_cycles * c.gm_latency,
        spec.l2_latency_cycles * c.l2_latency,
    )
    share_lat = l2_lat + (gm_lat - l2_lat) * c.share_latency
    loads = [s for s in batch.streams if s.pipe == "MTE2"]
    handed = handoffs(batch.streams)
    gv = GridView.of(batch.grid, batch.steps, cores)
    slots = np.where(batch.double_buffer, 2.0, 1.0)
    # the AIV pair of a split mixed group shares each vector-side block, half each
    pair = float(spec.aivs_per_aic) if sides else 1.0
    t = _Transfers.zeros(len(batch))
    for s, (h, hc), r in zip(loads, hits, resident, strict=True):
        padded = _padded(spec, s)
        conv = spec.nd2nz_rate * c.nd2nz if s.nd2nz else 1.0
        conv *= pair if s.side == "vector" else 1.0
        port = spec.gm_read_bytes_per_cycle(s.side) * c.core_gm
        # packed short runs share their lines: HBM fetches the payload, the port the bursts
        fetched = s.bytes if s.packed else padded
        # the whole block: ND->NZ conversion and the AIV pair's halves slow (or share) each
        # core's port, not the HBM share its bytes draw on
        fill = np.maximum(padded / (port * conv), fetched / hbm_share)
        read = padded / (hit_bw * conv)
        tm, th = fill * (1 - h), read * h
        # a concurrent hit reads L2 as the fill another core has in flight lands: its first
        # byte comes a (share_latency) GM latency after the request, and it completes no
        # sooner than the fill (the port is free meanwhile)
        wait = np.maximum(fill - read, 0.0)
        # a block smaller than a line waits for a fetch only where it opens the line
        opens = line_openers(s, gv, float(spec.l2_line_bytes), slots)
        hl, hcl = 1 - (1 - h) * opens, hc * opens
        lat = (1 - hl) * gm_lat + hcl * (share_lat + c.l2_fill_wait * wait) + (hl - hcl) * l2_lat
        lat = np.where(s.moves, lat, 0.0)  # a config that moves nothing on this stream
        reps = steps if s.per == "step" else 1.0
        pipe = "MTE2v" if sides and s.side == "vector" else "MTE2c"
        (t.step if s.per == "step" else t.tile)[pipe] += tm + th
        if s.per == "step":
            t.lat_step = np.maximum(t.lat_step, lat)
            side = "vector" if s.side == "vector" else "cube"
            t.lat_side[side] = np.maximum(t.lat_side[side], lat)
            t.side_step[side] += tm + th
        else:
            t.lat_pre = np.maximum(t.lat_pre, lat)
        t.miss_time += tm * reps
        t.hit_time += th * reps
        t.miss_bytes += fetched * (1 - h) * reps
        t.miss_port_bytes += padded * (1 - h) * reps
        t.hit_bytes += s.bytes * h * reps
        t.raw_bytes += s.bytes * reps
        if s.tensor not in handed:
            t.warm_bytes += s.bytes * reps * r
    for s in batch.streams:
        if s.pipe == "MTE2":
            continue
        padded = _padded(spec, s)
        bw = (
            spec.fixpipe_bytes_per_cycle * c.fixpipe
            if s.pipe == "FIX"
            else spec.l2_write_bytes_per_cycle * c.l2_write
        )
        bw *= pair if s.side == "vector" else 1.0
        (t.step if s.per == "step" else t.tile)[s.pipe] += padded / bw
        if s.tensor not in handed:  # a hand-off is overwritten in L2, never written back
            t.writeback += padded * (steps if s.per == "step" else 1.0)
        t.store_latency = spec.mte3_latency_cycles * c.store_latency
    return t


def _padded(spec: HardwareSpec, s: StreamBatch) -> np.ndarray:
    """Bytes a block really moves: each run whole bursts (a 256-byte row one 512-byte
    burst, a 640-byte row two), unless the runs lie back to back (``packed``) in a block of
    at least one L2 line: the DMA's requests for neighbouring runs fill each other's
    bursts."""
    run = s.row_bytes.astype(np.float64)
    if s.packed:
        return np.where(s.bytes >= spec.l2_line_bytes, s.bytes, _burst_padded(spec, s, run))
    return _burst_padded(spec, s, run)


def _burst_padded(spec: HardwareSpec, s: StreamBatch, run: np.ndarray) -> np.ndarray:
    """Each run rounded up to whole bursts (:func:`~costmodel.kernel.burst_bytes`)."""
    bad = (run > 0) & (np.mod(run, spec.gm_burst_bytes) != 0)
    runs = np.divide(s.bytes, run, out=np.ones(len(run)), where=run > 0)
    return np.where(bad, np.ceil(runs) * burst_bytes(run, spec.gm_burst_bytes), s.bytes)


def _plus(stage: np.ndarray, latency: float | np.ndarray) -> np.ndarray:
    """A store stage with its latency, where the store exists."""
    return np.where(stage > 0, stage + latency, 0.0)


def _pairs(stages: Sequence[np.ndarray]) -> np.ndarray:
    """Period of a single-slot pipeline: the largest sum of two adjacent present stages (a
    lone stage on its own); absent (zero) stages are skipped."""
    best = prev = np.zeros_like(stages[0])
    for x in stages:
        here = x > 0
        best = np.where(here, np.maximum(best, prev + x), best)
        prev = np.where(here, x, prev)
    return best


def bound(b: Breakdown, row: int) -> str:
    """The pipe or resource that dominates one config of a breakdown."""
    if b.fixed[row] >= b.body[row]:
        return "launch"
    terms = {k: float(v[row]) for k, v in b.tile_terms.items()}
    if b.serial[row] > terms["HBM"]:  # single-buffered: the largest stage of the sum
        del terms["HBM"]
    name = max(terms, key=lambda k: terms[k])
    if name == "MTE2":
        if b.split_hits[row] > b.split_mte2[row]:
            return "L2"
        return "HBM" if b.hbm_share_limited[row] else "MTE2"
    if name == "HBM" and not b.hbm_share_limited[row]:
        return "MTE2"  # one core's GM path, not the chip's HBM, is the limit
    return name
