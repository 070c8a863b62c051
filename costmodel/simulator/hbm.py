"""HBM as a shared fluid resource: weighted max-min fair shares with per-flow caps.

Every active HBM transfer is a *flow* with bytes to move (per copy), a per-copy rate cap (the
core's GM path, scaled for nd2nz; write-backs are uncapped) and a weight (how many identical
copies it stands for when one representative core is simulated for a class of cores). Rates
are piecewise constant, recomputed by water-filling whenever a flow starts or ends.

Water-filling gives equal rates to flows with equal caps, so flows are grouped by cap and
each group keeps a *virtual clock* (bytes per copy any member has moved since the group was
created): a flow finishes when its group's clock reaches the flow's virtual finish time. An
event then costs O(groups + log flows) instead of touching every flow.
"""

from __future__ import annotations

import heapq
import math
from typing import Protocol

__all__ = ["Flow", "Fluid"]

_INF = math.inf


class Flow(Protocol):
    """What the fluid needs from a flow (a DMA transfer or a write-back queue)."""

    rem: float  # bytes per copy to move when added (or grown)
    cap: float  # bytes/cycle per copy, inf = uncapped
    hweight: float  # copies sharing the HBM
    vf: float  # virtual finish in its group's clock; < 0 when not in the fluid


class _Group:
    __slots__ = ("cap", "heap", "rate", "v", "weight")

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.v = 0.0
        self.rate = 0.0
        self.weight = 0.0
        self.heap: list[tuple[float, int, Flow]] = []


class Fluid:
    """Water-filling HBM bandwidth shared by the active flows.

    Args:
        capacity: chip HBM bandwidth in bytes per core cycle (effective rate).
    """

    __slots__ = ("capacity", "groups", "next_t", "seq", "t")

    def __init__(self, capacity: float) -> None:
        self.capacity = capacity
        self.groups: list[_Group] = []  # sorted by cap
        self.t = 0.0
        self.next_t = _INF
        self.seq = 0

    def _advance(self, now: float) -> None:
        dt = now - self.t
        if dt > 0.0:
            for g in self.groups:
                g.v += g.rate * dt
        self.t = now

    def _recompute(self) -> None:
        left = self.capacity
        weight = 0.0
        for g in self.groups:
            weight += g.weight
        level = -1.0
        nxt = _INF
        for g in self.groups:
            if not g.heap:
                g.rate = 0.0
                continue
            if level < 0.0 and g.cap * weight <= left:
                g.rate = g.cap
                left -= g.cap * g.weight
                weight -= g.weight
            else:
                if level < 0.0:
                    level = left / weight
                g.rate = level
            if g.rate > 0.0:
                dt = (g.heap[0][0] - g.v) / g.rate
                if dt < nxt:
                    nxt = dt
        self.next_t = self.t + max(nxt, 0.0)

    def _group(self, cap: float) -> _Group:
        for g in self.groups:
            if g.cap == cap:
                return g
        g = _Group(cap)
        self.groups.append(g)
        self.groups.sort(key=_cap_of)
        return g

    def _push(self, g: _Group, flow: Flow, vf: float) -> None:
        flow.vf = vf
        heapq.heappush(g.heap, (vf, self.seq, flow))
        self.seq += 1

    def add(self, now: float, flow: Flow) -> None:
        """Start ``flow`` at ``now`` with ``rem`` bytes per copy."""
        self._advance(now)
        g = self._group(flow.cap)
        g.weight += flow.hweight
        self._push(g, flow, g.v + flow.rem)
        self._recompute()

    def grow(self, now: float, flow: Flow, nbytes: float) -> None:
        """Add ``nbytes`` per copy to a flow, starting it if it is not active."""
        if flow.vf < 0.0:
            flow.rem = nbytes
            self.add(now, flow)
            return
        self._advance(now)
        g = self._group(flow.cap)
        self._push(g, flow, flow.vf + nbytes)  # the old heap entry goes stale
        self._recompute()

    def pop_done(self, now: float) -> list[Flow]:
        """Advance to ``now`` (= :attr:`next_t`) and remove the flows that have finished."""
        self._advance(now)
        done: list[Flow] = []
        # a flow finishing within a hair of now is done (float dust, not physics); the hair
        # grows with the clock so that now + hair > now always holds
        hair = 1e-9 * (1.0 + now)
        for g in self.groups:
            heap = g.heap
            edge = g.v + g.rate * hair + 1e-9
            while heap and heap[0][0] <= edge:
                vf, _, flow = heapq.heappop(heap)
                if vf != flow.vf:
                    continue  # stale entry of a grown flow
                flow.vf = -1.0
                flow.rem = 0.0
                g.weight -= flow.hweight
                done.append(flow)
            if not heap:
                g.weight = 0.0
        self._recompute()
        return done

    def backlog(self, now: float, flow: Flow) -> float:
        """Bytes per copy ``flow`` still has to move at ``now`` (0 when not in the fluid)."""
        if flow.vf < 0.0:
            return 0.0
        self._advance(now)
        return max(0.0, flow.vf - self._group(flow.cap).v)

    def shift(self, dt: float) -> None:
        """Move the clock by ``dt`` without moving bytes (a macro-step jump)."""
        self.t += dt
        if self.next_t < _INF:
            self.next_t += dt

    @property
    def active(self) -> int:
        return sum(len(g.heap) for g in self.groups)


def _cap_of(g: _Group) -> float:
    return g.cap
