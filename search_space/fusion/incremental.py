"""The repair (:func:`~search_space.fusion.repair.repair`), incremental: the same partition,
its first pass resumed from the longest prefix of chosen edges an earlier repair took.

The repair takes the chosen edges in :attr:`FusionContext.edges` order, merging or skipping
each, then retries the skipped ones until a pass merges nothing. Its first pass over the first
``k`` edges of that order depends on those ``k`` edges alone, so two repairs whose sorted
chosen edges share a prefix share the state after it. A local search repairs hundreds of moves
of one plan, each a class of edges switched on or off: each shares with the plan (repaired
just before, as a move of the plan before) every edge before the first it changes, half of
them on average. The states after every ``CHUNK`` edges are kept in a trie keyed by the
chunks' edges, and a repair resumes from the deepest one its own chunks reach.

Groups are numbers here (a node's group is a list entry, a group's nodes and bounds are kept
once per group), each merge of two groups is one new number whose legality and feasibility
are asked once, and the cycle check walks numbers: the decisions, and so the partition, are
the plain repair's (tests hold the two equal on random edge sets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate

from search_space.fusion.kernel_graph import Edge, KernelGraph
from search_space.fusion.legality import legal

__all__ = ["Repairer"]

CHUNK = 32  # edges of the first pass between kept states
KEPT = 4000  # kept states before the trie starts again
GROUPS = 400_000  # groups numbered before everything starts again

Feasible = Callable[[frozenset[str]], bool]
_State = tuple[tuple[int, ...], tuple[int, ...]]  # each node's group, the edges skipped
_Trie = dict[tuple[int, ...], tuple[_State, "_Trie"]]  # a chunk -> the state after it, below


class Repairer:
    """Repairs chosen edges of one kernel graph into its legal partition, with one
    feasibility callback (a pure function of the group's ops, e.g. ``CostOracle.feasible``).
    """

    def __init__(self, kg: KernelGraph, edges: Sequence[Edge], feasible: Feasible | None):
        self.kg, self.edges, self.feasible = kg, tuple(edges), feasible
        self.order = {e: i for i, e in enumerate(self.edges)}
        index = kg.index
        self.ends = [(index[e.src], index[e.dst]) for e in self.edges]
        self.succ = [tuple(index[m] for m in kg.succ[n]) for n in kg.nodes]
        self._reset()

    def _reset(self) -> None:
        n = len(self.kg.nodes)
        self.members = [frozenset([name]) for name in self.kg.nodes]  # group -> its ops
        self.nodes: list[tuple[int, ...]] = [(i,) for i in range(n)]  # group -> its nodes
        self.lo, self.hi = list(range(n)), list(range(n))  # group -> its first, last node
        self.allowed: list[bool | None] = [None] * n  # group -> legal and feasible
        self.unions: dict[tuple[int, int], int] = {}  # (a, b) -> the group a | b
        self.trie: _Trie = {}
        self.kept = 0

    def covers(self, chosen: Iterable[Edge]) -> bool:
        """Whether every chosen edge is a fusible edge (else the plain repair runs)."""
        return all(e in self.order for e in chosen)

    def repair(self, chosen: Iterable[Edge]) -> list[frozenset[str]]:
        """The plain repair's partition of the kernel ops, in the same order."""
        if len(self.members) > GROUPS or self.kept > KEPT:
            self._reset()
        pending = sorted({self.order[e] for e in chosen})
        gid, skipped, done, level = self._resume(pending)
        reach = list(accumulate((self.hi[g] for g in gid), max))  # see _path
        for start in range(done, len(pending), CHUNK):
            chunk = tuple(pending[start : start + CHUNK])
            for k in chunk:
                self._take(k, gid, reach, skipped)
            if len(chunk) == CHUNK:  # keep the state after it, under the chunks before
                level = level.setdefault(chunk, ((tuple(gid), tuple(skipped)), {}))[1]
                self.kept += 1
        if len(skipped) < len(pending):  # the first pass made progress: retry as the plain one
            pending = skipped
            while pending:
                skipped = []
                for k in pending:
                    self._take(k, gid, reach, skipped)
                if len(skipped) == len(pending):
                    break
                pending = skipped
        return [self.members[g] for g in dict.fromkeys(gid)]

    def _resume(self, pending: list[int]) -> tuple[list[int], list[int], int, _Trie]:
        """The state after the longest kept prefix of ``pending``: each node's group, the
        skipped edges, how many edges it covers, and the trie below it."""
        level, state, done = self.trie, None, 0
        while done + CHUNK <= len(pending):
            hit = level.get(tuple(pending[done : done + CHUNK]))
            if hit is None:
                break
            state, level = hit
            done += CHUNK
        if state is None:
            return list(range(len(self.kg.nodes))), [], 0, level
        return list(state[0]), list(state[1]), done, level

    def _take(self, k: int, gid: list[int], reach: list[int], skipped: list[int]) -> None:
        """One edge of a pass: merge its two groups, skip it, or drop it (one group already).
        ``reach[i]`` is the last node of any group with a node at or before node ``i``."""
        s, d = self.ends[k]
        a, b = gid[s], gid[d]
        if a == b:
            return
        if self._path(a, b, gid, reach) or self._path(b, a, gid, reach) or not self._allowed(a, b):
            skipped.append(k)
            return
        g = self.unions[(a, b)]
        for n in self.nodes[g]:
            gid[n] = g
        hi, i = self.hi[g], self.lo[g]
        while reach[i] < hi:  # reach is non-decreasing and reach[hi] >= hi: a run from lo
            reach[i] = hi
            i += 1

    def _allowed(self, a: int, b: int) -> bool:
        """Is the union of groups ``a`` and ``b`` legal and feasible (asked once per union)?"""
        g = self.unions.get((a, b))
        if g is None:
            g = self.unions[(a, b)] = len(self.members)
            self.members.append(self.members[a] | self.members[b])
            self.nodes.append(self.nodes[a] + self.nodes[b])
            self.lo.append(min(self.lo[a], self.lo[b]))
            self.hi.append(max(self.hi[a], self.hi[b]))
            self.allowed.append(None)
        ok = self.allowed[g]
        if ok is None:
            merged = self.members[g]
            ok = legal(self.kg, merged) and (self.feasible is None or self.feasible(merged))
            self.allowed[g] = ok
        return ok

    def _path(self, a: int, b: int, gid: list[int], reach: list[int]) -> bool:
        """Would merging ``a`` and ``b`` close a cycle through other groups: is there a path
        from ``a`` to ``b`` through them? Groups starting after the plain repair's bound
        (``_reach_bound``: past ``b``'s end and every group spanning it) cannot reach ``b``."""
        limit, lo, succ, nodes = self.hi[b], self.lo, self.succ, self.nodes
        while reach[limit] > limit:
            limit = reach[limit]
        start = {gid[m] for n in nodes[a] for m in succ[n]}
        start.discard(a)
        start.discard(b)
        todo = [g for g in start if lo[g] <= limit]
        seen = set(todo)
        while todo:
            for n in nodes[todo.pop()]:
                for m in succ[n]:
                    nxt = gid[m]
                    if nxt == b:
                        return True
                    if nxt == a or nxt in seen or lo[nxt] > limit:
                        continue
                    seen.add(nxt)
                    todo.append(nxt)
        return False
