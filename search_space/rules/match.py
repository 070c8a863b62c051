"""Matching compiled rule patterns on the kernel graph (see :mod:`search_space.rules.pattern`).

The search is a backtracking regular-expression match along ``ctx.succ`` (steps) and
``ctx.pred`` (side branches), greedy for optional and repeated steps; it returns the first full
match from a start op. Per-op facts (compile-time inputs, reduce axes) are computed once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from search_space.fusion import FusionContext
from search_space.ir import alias_root
from search_space.rules.pattern import INF, Pattern, Side, Step

__all__ = ["Failure", "PatternMatcher"]


@dataclass
class Failure:
    """Where a chain search got furthest before failing (for unmatched reports).

    ``index`` is the failing step (0-based), ``at`` the op it had to follow (or, for a missing
    side branch, the op whose producer it wanted), ``found`` the op types it saw instead.
    """

    depth: tuple[int, int]  # (required steps matched, ops matched)
    ops: tuple[str, ...]
    index: int
    step: Step
    at: str
    found: tuple[str, ...]
    side: str | None = None


class PatternMatcher:
    """Matches compiled patterns on one kernel graph; per-op facts are computed once."""

    def __init__(self, ctx: FusionContext) -> None:
        self.ctx, self.g = ctx, ctx.graph
        self._facts: dict[tuple[str, str], bool] = {}
        self._ops: list[str] = []
        self._used: set[str] = set()
        self._start = ""
        self.failure: Failure | None = None
        self._diagnose = False
        self._required: tuple[int, ...] = ()

    # -- facts about one op -----------------------------------------------------------------
    def _const_inputs(self, name: str) -> list[tuple[int, ...] | None]:
        g, out = self.g, []
        for t in g.op(name).inputs:
            if not t:
                continue
            root = alias_root(g, t)
            src = g.producer(root)
            if (src is None and g.tensors[root].kind != "input") or (src and src.constant):
                shape = g.tensors[root].shape
                ok = shape is not None and all(isinstance(d, int) for d in shape)
                out.append(tuple(int(d) for d in shape or ()) if ok else None)
        return out

    def _fact(self, name: str, pred: str) -> bool:
        key = (name, pred)
        if key not in self._facts:
            self._facts[key] = self._compute(name, pred)
        return self._facts[key]

    def _compute(self, name: str, pred: str) -> bool:
        consts = self._const_inputs(name)
        if pred == "const":
            return bool(consts)
        if pred == "scalar":
            return any(s is not None and math.prod(s) <= 1 for s in consts)
        if pred == "bias":
            out = self.g.tensors[self.g.op(name).outputs[0]].shape or ()
            dims = {out[-1], out[1] if len(out) > 1 else out[-1]} if out else set()
            for s in consts:
                rest = [d for d in s or () if d != 1]
                if s is not None and len(rest) == 1 and rest[0] in dims:
                    return True
            return False
        if pred == "last_axis":
            return self._last_axis(name)
        raise AssertionError(pred)  # "inner" depends on the match, see _inner_ok

    def _last_axis(self, name: str) -> bool:
        op, g = self.g.op(name), self.g
        shape = g.tensors[op.inputs[0]].shape if op.inputs and op.inputs[0] else None
        if not shape:
            return False
        rank = len(shape)
        axes = op.attr("axes")
        if axes is None and len(op.inputs) > 1 and op.inputs[1] in g.constants:
            axes = g.constants[op.inputs[1]].reshape(-1).tolist()
        if axes is None and op.op_type in ("Softmax", "LogSoftmax", "LayerNormalization"):
            axes = [op.attr("axis", -1 if g.opset >= 13 or op.op_type[0] == "L" else 1)]
        return axes is not None and [int(a) % rank for a in axes] == [rank - 1]

    def _accept(self, st: Step, name: str) -> bool:
        op_type = self.g.op(name).op_type
        for atom in st.atoms:
            if atom.op_type == op_type and all(
                p == "inner" or self._fact(name, p) is want for p, want in atom.preds
            ):
                return True
        return False

    def _inner_ok(self, st: Step, name: str) -> bool:
        if not st.has_inner:
            return True
        op_type = self.g.op(name).op_type
        for atom in st.atoms:
            if atom.op_type != op_type:
                continue
            if all(p != "inner" or self._is_inner(name) is want for p, want in atom.preds) and all(
                p == "inner" or self._fact(name, p) is want for p, want in atom.preds
            ):
                return True
        return False

    def _is_inner(self, name: str) -> bool:
        g = self.g
        for t in g.op(name).inputs:
            if not t:
                continue
            root = alias_root(g, t)
            src = g.producer(root)
            if src is None:
                if g.tensors[root].kind == "input":
                    return False
            elif not src.constant and src.name not in self._used:
                return False
        return True

    def _has_view(self, name: str, types: frozenset[str]) -> bool:
        g = self.g
        stack = [c for t in g.op(name).outputs if t for c in g.consumers(t) if c.is_view]
        while stack:
            v = stack.pop()
            if v.op_type in types:
                return True
            stack += [c for t in v.outputs if t for c in g.consumers(t) if c.is_view]
        return False

    # -- search -----------------------------------------------------------------------------
    def chain_at(
        self, pat: Pattern, start: str, taken: Iterable[str] = (), diagnose: bool = False
    ) -> list[str] | None:
        """The greedy match of ``pat`` whose first op is ``start``, or None.

        With ``diagnose``, :attr:`failure` holds the deepest dead end of a failed search. A
        step with several sides is tried with its sides in every order (``side_orders``) and
        the largest match is kept.
        """
        best, failure = None, None
        for variant in pat.side_orders:
            found = self._chain_at(variant, start, taken, diagnose)
            if self.failure is not None and (
                failure is None or self.failure.depth > failure.depth
            ):
                failure = self.failure
            if found is not None and (best is None or len(found) > len(best)):
                best = found
        self.failure = None if best is not None else failure
        return best

    def _chain_at(
        self, pat: Pattern, start: str, taken: Iterable[str], diagnose: bool
    ) -> list[str] | None:
        self._ops, self._used, self._start = [], set(taken), start
        self.failure, self._diagnose = None, diagnose
        steps = pat.steps
        req = [0]
        for st in steps:
            req.append(req[-1] + (1 if st.lo > 0 else 0))
        self._required = tuple(req)
        found: list[str] = []

        def done() -> bool:
            if not self._ops:
                return False
            found.extend(self._ops)
            return True

        return found if self._fwd(steps, 0, None, 0, done) else None

    def _push(self, name: str) -> None:
        self._ops.append(name)
        self._used.add(name)

    def _pop(self, name: str) -> None:
        self._ops.pop()
        self._used.discard(name)

    def _fail(
        self, st: Step, i: int, at: str, cands: Iterable[str], side: Side | None = None
    ) -> None:
        if not self._diagnose:
            return
        depth = (self._required[i] + (side is not None and st.lo > 0), len(self._ops))
        if self.failure is None or depth > self.failure.depth:
            found = tuple(sorted({self.g.op(n).op_type for n in cands if n not in self._used}))
            text = None if side is None else " > ".join(s.text for s in side.steps)
            self.failure = Failure(depth, tuple(self._ops), i, st, at, found, text)

    def _fwd(
        self, steps: tuple[Step, ...], i: int, prev: str | None, count: int, k: Callable[[], bool]
    ) -> bool:
        if i == len(steps):
            return k()
        st = steps[i]
        if st.is_view:
            if (prev is not None and self._has_view(prev, st.types)) or st.lo == 0:
                return self._fwd(steps, i + 1, prev, 0, k)
            if prev is not None:
                self._fail(st, i, prev, ())
            return False
        cands = (self._start,) if prev is None else tuple(self.ctx.succ[prev])
        if st.hi == INF or count < st.hi:
            for n in cands:
                if n in self._used or not self._accept(st, n):
                    continue
                self._push(n)

                def rest(n: str = n) -> bool:
                    return self._inner_ok(st, n) and self._fwd(steps, i, n, count + 1, k)

                if self._sides(st, i, 0, n, rest):
                    return True
                self._pop(n)
        if count >= st.lo:
            return self._fwd(steps, i + 1, prev, 0, k)
        if prev is not None:
            self._fail(st, i, prev, cands)
        return False

    def _sides(self, st: Step, i: int, j: int, name: str, k: Callable[[], bool]) -> bool:
        if j == len(st.sides):
            return k()
        side = st.sides[j]

        def rest() -> bool:
            return self._sides(st, i, j + 1, name, k)

        if self._bwd(side.steps, len(side.steps) - 1, name, 0, rest):
            return True
        if side.optional:
            return rest()
        self._fail(st, i, name, self.ctx.pred[name], side)
        return False

    def _bwd(
        self, steps: tuple[Step, ...], i: int, anchor: str, count: int, k: Callable[[], bool]
    ) -> bool:
        """Match a side chain backwards: element ``i`` feeds ``anchor``."""
        if i < 0:
            return k()
        st = steps[i]
        if st.hi == INF or count < st.hi:
            for p in self.ctx.pred[anchor]:
                if p in self._used or not self._accept(st, p):
                    continue
                self._push(p)
                if self._inner_ok(st, p) and self._bwd(steps, i, p, count + 1, k):
                    return True
                self._pop(p)
        if count >= st.lo:
            return self._bwd(steps, i - 1, anchor, 0, k)
        return False

    def siblings(self, pat: Pattern) -> list[tuple[list[str], int]]:
        """Per shared activation: the union of sibling chains and how many siblings matched."""
        readers: dict[str, list[str]] = {}
        for e in self.ctx.edges:
            if e.kind == "horizontal":
                names = readers.setdefault(e.tensor, [])
                names += [n for n in (e.src, e.dst) if n not in names]
        out = []
        for names in readers.values():
            taken: list[str] = []
            n_match = 0
            for name in sorted(names, key=self.ctx.index.__getitem__):
                if self.g.op(name).op_type not in pat.steps[0].types:
                    continue
                ops = self.chain_at(pat, name, taken)
                if ops is not None:
                    taken += ops
                    n_match += 1
            if n_match:
                out.append((taken, n_match))
        return out
