"""Fusion rules applied: matching, resolution and the greedy (rule-based) plan.

A :class:`~search_space.rules.registry.Rule` names a pattern (language:
:mod:`search_space.rules.pattern`) and a priority. :func:`match` finds every occurrence on the
kernel graph of a :class:`~search_space.fusion.FusionContext`, :func:`resolve` keeps the
highest-priority non-overlapping ones (equal priorities claiming the same ops are a
``RuleConflict``, never a silent pick), and :func:`greedy` is the seed tools' rule-based plan
built from them.

    >>> reg = default_registry()
    >>> reg.register(Rule("my_gelu", 77, "Gelu > Mul[scalar]", presets=("transformer",)))
    >>> groups, applied = greedy(ctx, reg.rules("transformer"))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from search_space.fusion import Edge, FusionContext
from search_space.rules.match import PatternMatcher
from search_space.rules.pattern import compile_pattern
from search_space.rules.registry import Rule, RuleConflict

__all__ = [
    "Match",
    "edges_of",
    "greedy",
    "match",
    "resolve",
    "unmatched_report",
]

log = logging.getLogger(__name__)


# -- matching ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Match:
    """One occurrence of a rule: the kernel ops it claims."""

    rule: str
    priority: int
    ops: frozenset[str]

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "priority": self.priority, "ops": sorted(self.ops)}


def _occurrences(m: PatternMatcher, ctx: FusionContext, rule: Rule) -> list[frozenset[str]]:
    pat = compile_pattern(rule.name, rule.pattern, rule.kind)
    if rule.kind == "siblings":
        lo, hi = pat.count or (2, -1)
        return [frozenset(ops) for ops, n in m.siblings(pat) if n >= lo and (hi < 0 or n <= hi)]
    found: dict[frozenset[str], None] = {}
    first = pat.first_types
    for name in ctx.nodes:
        if ctx.graph.op(name).op_type in first:
            hit = m.chain_at(pat, name)
            if hit is not None:
                found.setdefault(frozenset(hit))
    # a match started inside a larger one of the same rule (after its optional steps) is noise
    kept: list[frozenset[str]] = []
    by_op: dict[str, list[frozenset[str]]] = {}
    for ops in sorted(found, key=len, reverse=True):
        anchor = next(iter(ops))
        if any(ops < big for big in by_op.get(anchor, ())):
            continue
        kept.append(ops)
        for n in ops:
            by_op.setdefault(n, []).append(ops)
    return kept


def match(ctx: FusionContext, rules: Iterable[Rule]) -> list[Match]:
    """Every match of every rule (overlaps included), ordered by first op, priority, rule."""
    m = PatternMatcher(ctx)
    out = [
        Match(rule.name, rule.priority, ops)
        for rule in rules
        for ops in _occurrences(m, ctx, rule)
    ]
    idx = ctx.index
    return sorted(
        out,
        key=lambda x: (
            min(idx[n] for n in x.ops),
            -x.priority,
            x.rule,
            sorted(idx[n] for n in x.ops),
        ),
    )


def _shared(ops: frozenset[str], limit: int = 3) -> str:
    names = sorted(ops)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(f"'{n}'" for n in names[:limit]) + more


def resolve(matches: Iterable[Match]) -> list[Match]:
    """Highest priority first (then larger, then input order); drop any match overlapping one
    already taken.

    Raises:
        RuleConflict: two matches of equal priority from different rules overlap.
    """
    order = sorted(enumerate(matches), key=lambda im: (-im[1].priority, -len(im[1].ops), im[0]))
    taken: list[Match] = []
    owner: dict[str, Match] = {}
    for _, m in order:
        clash = {owner[n] for n in m.ops if n in owner}
        for other in sorted(clash, key=lambda o: o.rule):
            if other.priority == m.priority and other.rule != m.rule:
                raise RuleConflict(
                    f"rules '{other.rule}' and '{m.rule}' (priority {m.priority}) both claim "
                    f"ops {_shared(other.ops & m.ops)}; give one a higher priority"
                )
        if clash:
            continue
        taken.append(m)
        for n in m.ops:
            owner[n] = m
    return taken


class _Contraction:
    """The groups formed so far, to keep the contracted kernel graph acyclic."""

    def __init__(self, ctx: FusionContext) -> None:
        self.ctx = ctx
        self.group_of: dict[str, frozenset[str]] = {}
        self.span: dict[frozenset[str], tuple[int, int]] = {}

    def add(self, ops: frozenset[str]) -> None:
        idx = [self.ctx.index[n] for n in ops]
        self.span[ops] = (min(idx), max(idx))
        for n in ops:
            self.group_of[n] = ops

    def closes_cycle(self, members: frozenset[str]) -> bool:
        """Would contracting ``members`` with the groups already formed make a cycle?

        A path out of ``members`` can only come back through ops before its last op, or by
        jumping inside a group that holds such an op; nothing past ``bound`` can do either.
        """
        ctx, idx = self.ctx, self.ctx.index
        last = max(idx[n] for n in members)
        bound = max([last] + [hi for lo, hi in self.span.values() if lo <= last])
        todo = [s for n in members for s in ctx.succ[n] if s not in members]
        seen: set[str] = set(todo)
        while todo:
            n = todo.pop()
            group = self.group_of.get(n)
            if idx[n] > bound and (group is None or self.span[group][0] > bound):
                continue
            for x in group or (n,):
                seen.add(x)
                for s in ctx.succ[x]:
                    if s in members:
                        return True
                    if s not in seen:
                        seen.add(s)
                        todo.append(s)
        return False


def _usable(
    ctx: FusionContext,
    matches: Iterable[Match],
    feasible: Callable[[frozenset[str]], bool] | None,
) -> list[Match]:
    """The matches that fuse something and are legal and feasible on their own."""
    out = []
    for m in matches:
        if len(m.ops) < 2:
            continue
        verdict = ctx.check(m.ops)
        if not verdict.ok:
            log.debug("rule '%s' skipped: %s", m.rule, verdict.reason)
        elif feasible is not None and not feasible(m.ops):
            log.debug("rule '%s' skipped: no config fits", m.rule)
        else:
            out.append(m)
    return out


def greedy(
    ctx: FusionContext,
    rules: Iterable[Rule],
    feasible: Callable[[frozenset[str]], bool] | None = None,
) -> tuple[list[frozenset[str]], list[Match]]:
    """The seed tools' rule-based plan: resolved matches applied in priority order.

    Matches that are illegal on their own (``ctx.check``) or that ``feasible`` rejects are set
    aside first, so they never shadow a legal lower-priority match; the rest are resolved
    (:func:`resolve`) and applied in priority order unless contracting one would close a cycle
    between kernels. Every other op stays a singleton.

    Returns:
        The partition of ``ctx.nodes`` (groups ordered by their first op) and the applied
        matches (in the order they were applied).

    Raises:
        RuleConflict: see :func:`resolve`.
    """
    plan = _Contraction(ctx)
    applied: list[Match] = []
    for m in resolve(_usable(ctx, match(ctx, rules), feasible)):
        if plan.closes_cycle(m.ops):
            log.debug("rule '%s' skipped: it would close a cycle between kernels", m.rule)
            continue
        applied.append(m)
        plan.add(m.ops)
    parts: dict[frozenset[str], None] = {}
    for n in ctx.nodes:
        parts.setdefault(plan.group_of.get(n, frozenset([n])))
    return list(parts), applied


def edges_of(ctx: FusionContext, ops: Iterable[str]) -> set[Edge]:
    """The fusible edges of ``ctx.edges`` with both ends in ``ops``."""
    members = frozenset(ops)
    return {e for e in ctx.edges if e.src in members and e.dst in members}


def unmatched_report(ctx: FusionContext, rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """Why rules did not fire where a user might expect them to.

    Reasons: ``illegal`` (a full match ``ctx.check`` rejects, unless a legal match of at least
    its priority was applied over it), ``partial`` (a chain matched at least three ops and half
    its required steps, at least two, then a step found another op type) and ``siblings`` (more
    sibling matmuls share an input than the rule's count allows). Each distinct
    (rule, reason, detail) is reported once, with a count and the first occurrence's ops.
    """
    rules = list(rules)
    full = match(ctx, rules)
    try:
        _, applied = greedy(ctx, rules)
    except RuleConflict:
        applied = []
    owner = {n: m for m in applied for n in m.ops}
    covered: dict[str, set[str]] = {}
    for m in full:
        covered.setdefault(m.rule, set()).update(m.ops)
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    idx = ctx.index

    def add(rule: str, reason: str, detail: str, ops: Iterable[str]) -> None:
        e = entries.setdefault(
            (rule, reason, detail),
            {
                "rule": rule,
                "reason": reason,
                "detail": detail,
                "count": 0,
                "ops": sorted(ops, key=idx.__getitem__),
            },
        )
        e["count"] += 1

    for m in full:
        verdict = ctx.check(m.ops)
        shadowed = any(owner[n].priority >= m.priority for n in m.ops if n in owner)
        if not verdict.ok and not shadowed:
            add(m.rule, "illegal", f"ctx.check rejects the match: {verdict.reason}", m.ops)
    pm = PatternMatcher(ctx)
    g = ctx.graph
    for rule in rules:
        pat = compile_pattern(rule.name, rule.pattern, rule.kind)
        if rule.kind == "siblings":
            lo, hi = pat.count or (2, -1)
            for ops, n in pm.siblings(pat):
                shadowed = any(owner[x].priority >= rule.priority for x in ops if x in owner)
                if hi >= 0 and n > hi and not shadowed:
                    detail = f"{n} sibling matmuls share an input; the rule takes {lo}..{hi}"
                    add(rule.name, "siblings", detail, ops)
            continue
        need = max(2, (sum(st.lo > 0 for st in pat.steps) + 1) // 2)
        seen: set[str] = set(covered.get(rule.name, ()))
        for name in ctx.nodes:
            if name in seen or g.op(name).op_type not in pat.first_types:
                continue
            if pm.chain_at(pat, name, diagnose=True) is not None or pm.failure is None:
                continue
            f = pm.failure
            if f.depth[0] < need or f.depth[1] < 3:
                continue
            seen.update(f.ops)
            path = " > ".join(g.op(n).op_type for n in f.ops)
            found = ", ".join(f.found) if f.found else "no candidate"
            where = f"step {f.index + 1} '{f.step.text}'"
            if f.side is None:
                detail = f"matched {path}; {where} found {found}"
            else:
                detail = f"matched {path}; {where} has no producer '<{f.side}' (found {found})"
            add(rule.name, "partial", detail, f.ops)
    return list(entries.values())
