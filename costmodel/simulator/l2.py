"""The shared L2: LRU over fixed-size chunks of tensors, with per-sector validity.

A chunk is ``chunk_bytes`` of one tensor (tensor-relative, docs/cost-model.md / kernel.py "L2
identity"). Replacement is LRU over whole chunks; inside a chunk a bitmask of sectors (one L2
line each) says which bytes are valid, so a 1 KB block never makes its 63 KB neighbourhood look
resident, and a block smaller than a line validates the line its neighbours then hit on.
Loads that miss fill their sectors and leave a *pending* mark naming the transfer that fetches
them: a later load of those sectors hits L2 but cannot complete before the fill does (miss
merging, as an L2's MSHRs do). Stores write-allocate.
The cache lives for a whole plan, so a kernel finds what the previous one wrote.

A kernel's hand-offs (tensors it stores and loads back, ``handoffs``) pass through a workspace
of a few blocks per core, not through the tensor's own addresses: their loads hit and neither
they nor their stores take or evict lines (the workspace is small next to the L2; giving it
the whole tensor's footprint evicted the operands it feeds).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Protocol

__all__ = ["L2Cache", "Pending"]

_SHIFT = 32


class Pending(Protocol):
    """A fill in flight: done once its data has arrived."""

    done: bool


class L2Cache:
    """LRU chunk cache shared by all cores and carried across the kernels of one plan.

    Args:
        capacity_bytes: L2 size; below one chunk the cache is disabled (every load misses).
        chunk_bytes: replacement granularity.
        line_bytes: the L2 line; validity is tracked per line (a chunk smaller than a line
            is one sector).
    """

    def __init__(self, capacity_bytes: int, chunk_bytes: int, line_bytes: int) -> None:
        self.chunk = float(chunk_bytes)
        self.capacity = int(capacity_bytes // chunk_bytes)
        self.enabled = self.capacity > 0
        self.nsec = max(1, chunk_bytes // max(1, line_bytes))
        self.sector = self.chunk / self.nsec
        self.full = (1 << self.nsec) - 1
        # key -> [valid mask, pending mask, pending transfer]
        self.lines: OrderedDict[int, list[Any]] = OrderedDict()
        self.touched: set[int] | None = None
        self.handoffs: frozenset[int] = frozenset()  # the running kernel's, set by its compile
        self._tids: dict[str, int] = {}

    # -- identity ------------------------------------------------------------------------------
    def tid(self, tensor: str) -> int:
        """A small integer per tensor name (stable for the life of the cache)."""
        got = self._tids.get(tensor)
        if got is None:
            got = self._tids[tensor] = len(self._tids)
        return got

    # -- accesses ------------------------------------------------------------------------------
    def _sectors(self, base: float, lo: float, hi: float) -> int:
        s0 = int((max(lo, base) - base) / self.sector)
        s1 = min(
            self.nsec,
            max(s0 + 1, math.ceil((min(hi, base + self.chunk) - base) / self.sector - 1e-9)),
        )
        return ((1 << s1) - 1) ^ ((1 << s0) - 1)

    def load(
        self, tid: int, lo: float, hi: float, fill: Pending | None
    ) -> tuple[float, list[Any]]:
        """Read ``[lo, hi)`` of tensor ``tid``.

        Returns:
            (hit fraction of the region's sectors, fills in flight the hit part must wait for).
        """
        if not self.enabled or hi <= lo:
            return 0.0, []
        if tid in self.handoffs:
            return 1.0, []
        lines = self.lines
        chunk = self.chunk
        touched = self.touched
        waits: list[Any] = []
        hit = total = 0
        key0 = tid << _SHIFT
        for c in range(int(lo // chunk), math.ceil(hi / chunk - 1e-9)):
            rm = self._sectors(c * chunk, lo, hi)
            n = rm.bit_count()
            total += n
            key = key0 | c
            if touched is not None:
                touched.add(key)
            entry = lines.get(key)
            if entry is None:
                lines[key] = [rm, rm, fill]
                if len(lines) > self.capacity:
                    lines.popitem(last=False)
                continue
            lines.move_to_end(key)
            valid = entry[0] & rm
            if valid:
                hit += valid.bit_count()
                pend = entry[2]
                if pend is not None and not pend.done and valid & entry[1] and pend not in waits:
                    waits.append(pend)
            miss = rm & ~entry[0]
            if miss:
                entry[0] |= miss
                if fill is not None:
                    entry[1] = miss
                    entry[2] = fill
        return (hit / total if total else 0.0), waits

    def store(self, tid: int, lo: float, hi: float) -> None:
        """Write-allocate ``[lo, hi)`` (also used to replay accesses without timing)."""
        if not self.enabled or hi <= lo or tid in self.handoffs:
            return
        lines = self.lines
        chunk = self.chunk
        touched = self.touched
        key0 = tid << _SHIFT
        for c in range(int(lo // chunk), math.ceil(hi / chunk - 1e-9)):
            rm = self._sectors(c * chunk, lo, hi)
            key = key0 | c
            if touched is not None:
                touched.add(key)
            entry = lines.get(key)
            if entry is None:
                lines[key] = [rm, 0, None]
                if len(lines) > self.capacity:
                    lines.popitem(last=False)
            else:
                lines.move_to_end(key)
                entry[0] |= rm

    def resident_fraction(self, tid: int, nbytes: float) -> float:
        """Fraction of a tensor's sectors that are valid (0 when nothing, 1 when all)."""
        if not self.enabled or nbytes <= 0:
            return 0.0
        have = total = 0
        key0 = tid << _SHIFT
        chunks = math.ceil(nbytes / self.chunk - 1e-9)
        if chunks > len(self.lines):  # walk what is resident, not every chunk of the tensor
            last = self._sectors((chunks - 1) * self.chunk, 0.0, nbytes)
            total = (chunks - 1) * self.nsec + last.bit_count()
            for key, resident in self.lines.items():
                c = key - key0
                if 0 <= c < min(chunks, 1 << _SHIFT):
                    have += (resident[0] & (last if c == chunks - 1 else self.full)).bit_count()
            return have / total if total else 0.0
        for c in range(chunks):
            rm = self._sectors(c * self.chunk, 0.0, nbytes)
            total += rm.bit_count()
            entry = self.lines.get(key0 | c)
            if entry is not None:
                have += (entry[0] & rm).bit_count()
        return have / total if total else 0.0

    # -- memo support --------------------------------------------------------------------------
    def settle(self) -> None:
        """Forget pending fills (a kernel has finished: every fill has landed)."""
        for entry in self.lines.values():
            entry[1] = 0
            entry[2] = None

    def digest(self, own: dict[int, int], own_total: int) -> tuple[Any, ...]:
        """What a kernel touching tensors ``own`` (tid -> canonical index) can observe.

        ``own_total`` counts the chunks those tensors span. When the kernel cannot evict its
        own chunks (it allocates at most the non-resident ones, and there are that many free
        slots or foreign chunks older than its oldest own chunk), only the own chunks'
        validity matters; otherwise their LRU interleaving with foreign chunks does too.
        """
        if not self.enabled:
            return ("off",)
        rows: list[tuple[int, int, int, int]] = []
        foreign = 0
        first_own = -1
        for key, entry in self.lines.items():
            canon = own.get(key >> _SHIFT)
            if canon is None:
                foreign += 1
                continue
            if first_own < 0:
                first_own = foreign
            rows.append((canon, key & 0xFFFFFFFF, entry[0], foreign))
        free = self.capacity - len(self.lines)
        older = foreign if first_own < 0 else first_own
        if own_total - len(rows) <= free + older:
            return ("safe", tuple(sorted(r[:3] for r in rows)))
        return ("exact", free, tuple(rows))

    def own_chunks(self, own: dict[int, int]) -> dict[int, int]:
        """Key -> valid mask of every resident chunk of the tensors ``own``."""
        return {k: e[0] for k, e in self.lines.items() if (k >> _SHIFT) in own}

    def effect(
        self, own: dict[int, int], before: dict[int, int], touched: set[int]
    ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, int], ...]]:
        """How a finished kernel changed the own chunks, tensor-name free (for replay)."""
        evicted = tuple((own[k >> _SHIFT], k & 0xFFFFFFFF) for k in before if k not in self.lines)
        moved = tuple(
            (own[k >> _SHIFT], k & 0xFFFFFFFF, e[0]) for k, e in self.lines.items() if k in touched
        )
        return evicted, moved

    def replay(
        self,
        canon_tids: list[int],
        evicted: tuple[tuple[int, int], ...],
        moved: tuple[tuple[int, int, int], ...],
    ) -> None:
        """Apply a memoised :meth:`effect` to this cache, as if the kernel had run."""
        if not self.enabled:
            return
        lines = self.lines
        for canon, c in evicted:
            lines.pop((canon_tids[canon] << _SHIFT) | c, None)
        for canon, c, mask in moved:
            key = (canon_tids[canon] << _SHIFT) | c
            entry = lines.get(key)
            if entry is None:
                lines[key] = [mask, 0, None]
            else:
                entry[0] = mask
                lines.move_to_end(key)
        while len(lines) > self.capacity:
            lines.popitem(last=False)
