"""The Optuna search space over fusion decisions and tile configs (docs/fusion.md).

Decision variables are one boolean per fusible-edge *class* (:mod:`.classes`): edges whose
endpoint ops have identical types, attributes and shapes in identical neighbourhoods share a
class, so twelve identical BERT layers cost one layer of variables; each is named for what it
fuses and where (``fuse/30 epilogue MatMul>Add: encoder/layer.0/intermediate/dense (+11
alike)``, :mod:`.names`). Chosen edges are repaired deterministically into a legal partition
(:meth:`FusionContext.repair`). Each group signature then gets one categorical
``config/<sig> <kind> <op types>`` indexing its pruned feasible-config list (``joint``),
or its best config under the vectorised analytic model (``bilevel``). A plan replays through
the same code (:meth:`SearchSpace.replay`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from search_space.fusion import Edge, FusionContext
from search_space.ir import FusionGroup, KernelConfig
from search_space.rules import Policy, edges_of, greedy, match, policy_rules
from search_space.space.classes import edge_classes
from search_space.space.names import config_name, fuse_names

__all__ = ["GroupOracle", "SearchSpace", "SpacePlan", "build_space"]

STRATEGIES = ("joint", "bilevel")
REPAIRED = 4096  # repaired plans a space remembers


class GroupOracle(Protocol):
    """What the space needs from a cost model (``costmodel.oracle.CostOracle`` provides it)."""

    def feasible(self, ops: Iterable[str]) -> bool: ...

    def grid(self, group: FusionGroup) -> list[KernelConfig]: ...

    def default(self, group: FusionGroup) -> KernelConfig: ...

    def best(self, group: FusionGroup) -> tuple[KernelConfig, float]: ...

    def cost(self, group: FusionGroup, config: KernelConfig) -> float: ...


class TrialLike(Protocol):
    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...

    def suggest_int(self, name: str, low: int, high: int) -> int: ...


@dataclass(frozen=True)
class SpacePlan:
    """What one trial chose: groups (repaired, legal) and one config per group."""

    groups: tuple[FusionGroup, ...]
    configs: tuple[KernelConfig, ...]

    def key(self) -> str:
        """Hash of the plan: trials that repair to the same plan share one evaluation."""
        h = hashlib.sha256()
        for g, c in zip(self.groups, self.configs, strict=True):
            h.update(("|".join(g.ops) + "#" + repr(c)).encode())
        return h.hexdigest()[:16]

    @property
    def fused_groups(self) -> int:
        return sum(1 for g in self.groups if len(g.ops) > 1)


class SearchSpace:
    """Fusion booleans per edge class, repair, and per-signature config categoricals.

    Args:
        ctx: the kernel graph and hard limits.
        oracle: feasibility, grids and analytic costs of groups.
        open_edges: edges the search may decide (default: every fusible edge).
        fixed_edges: edges always fused (``always`` rules, fusion level 1).
        share: share classes across repeated layers (``--no-share`` turns it off).
        strategy: ``joint`` (configs in the trial) or ``bilevel`` (best config per group).
        numeric: integer parameters (0/1 and config rank) for samplers that need numbers
            (CMA-ES, GP); categorical otherwise.
        blocks: op sets that make sense fused whole (rule matches): the local search's block
            moves (:meth:`block_moves`) switch all of a block's classes on at once.
    """

    def __init__(
        self,
        ctx: FusionContext,
        oracle: GroupOracle,
        *,
        open_edges: Iterable[Edge] | None = None,
        fixed_edges: Iterable[Edge] = (),
        share: bool = True,
        strategy: str = "joint",
        numeric: bool = False,
        blocks: Iterable[Iterable[str]] = (),
    ) -> None:
        if strategy not in STRATEGIES:
            from search_space.exceptions import AutofusionError

            raise AutofusionError(f"unknown strategy '{strategy}'; available: joint, bilevel")
        self.ctx = ctx
        self.oracle = oracle
        self.strategy = strategy
        self.share = share
        self.numeric = numeric
        self.fixed = frozenset(fixed_edges)
        opened = ctx.edges if open_edges is None else tuple(open_edges)
        self.open = tuple(e for e in opened if e not in self.fixed)
        every = edge_classes(ctx, dict.fromkeys((*ctx.edges, *self.open)), share)
        key_of = {e: key for key, edges in every.items() for e in edges}
        self.classes: dict[str, list[Edge]] = {}
        for e in self.open:
            self.classes.setdefault(key_of[e], []).append(e)
        self.class_of = {e: key_of[e] for e in self.open}
        # class key -> its Optuna parameter (search_space.space.names), named after the class's
        # edges in the whole graph: a class keeps its name whichever edges a policy opens
        named = fuse_names(ctx.graph, every)
        self.param_of = {key: named[key] for key in self.classes}
        self.known_params = frozenset(named.values())  # every class's, open or not
        self._feasible = oracle.feasible
        self.forbidden: dict[str, str] = {}  # group signature -> why (see :meth:`forbid`)
        self._repaired: dict[tuple[frozenset[Edge], frozenset[str]], tuple[FusionGroup, ...]] = {}
        self._by_names: dict[tuple[frozenset[str], frozenset[str]], tuple[FusionGroup, ...]] = {}
        self._fuse_keys = [(self.param_of[name], name) for name in self.classes]
        # block (its open classes) -> (one occurrence's ops, occurrences); a block with one
        # class is a single flip already
        self._blocks: dict[tuple[str, ...], tuple[frozenset[str], int]] = {}
        for ops in blocks:
            members = frozenset(ops)
            open_edges = (e for e in edges_of(ctx, members) if e in self.class_of)
            names = tuple(sorted({self.class_of[e] for e in open_edges}))
            if len(names) > 1:
                first, count = self._blocks.get(names, (members, 0))
                self._blocks[names] = (first, count + 1)

    @property
    def decision_vars(self) -> int:
        """Number of fusion booleans in the space."""
        return len(self.classes)

    def block_moves(self) -> list[tuple[str, ...]]:
        """The blocks' fusion parameters, largest expected saving first: occurrences x (the
        block's ops as separate kernels - the block as one kernel), each at its best config
        under the oracle's model (ties by class key). Blocks that cannot be one kernel are left
        out."""
        ranked = []
        for names, (ops, count) in self._blocks.items():
            if not self.ctx.check(ops).ok or not self._feasible(ops):
                continue
            alone = sum(self.oracle.best(self.ctx.group([n]))[1] for n in ops)
            fused = self.oracle.best(self.ctx.group(ops))[1]
            ranked.append((count * (alone - fused), names))
        ranked.sort(key=lambda r: (-r[0], r[1]))
        return [tuple(self.param_of[n] for n in names) for _, names in ranked]

    def swap_moves(self) -> list[tuple[str, str]]:
        """Pairs of fusion parameters whose classes' edges share an operator, sorted by class
        key (which the names sort as): exchanging such a
        pair (one on, the other off) moves the operator from one neighbour's group to the
        other's, e.g. an activation from a convolution's epilogue into the prologue of the
        convolution that reads it."""
        touching: dict[str, set[str]] = {}
        for e, name in self.class_of.items():
            for op in (e.src, e.dst):
                touching.setdefault(op, set()).add(name)
        pairs = {(a, b) for names in touching.values() for a in names for b in names if a < b}
        return [(self.param_of[a], self.param_of[b]) for a, b in sorted(pairs)]

    # -- one trial ---------------------------------------------------------------------------
    def forbid(self, signatures: Mapping[str, str]) -> None:
        """Forbid fused groups of these signatures (signature -> the reason, e.g. a failed
        verification): from now on every trial is repaired around them (:meth:`_groups`);
        groups of other signatures, in any layer, are untouched."""
        self.forbidden.update(signatures)

    def _groups(self, chosen: Iterable[Edge]) -> tuple[FusionGroup, ...]:
        """:meth:`_repair`, remembered for up to ``REPAIRED`` sets of chosen edges (a descent
        and its prior's hedge ask again) under the same forbidden signatures."""
        key = (frozenset(chosen), frozenset(self.forbidden))
        if key not in self._repaired:
            if len(self._repaired) >= REPAIRED:
                self._repaired.clear()
            self._repaired[key] = self._repair(key[0])
        return self._repaired[key]

    def _repair(self, chosen: Iterable[Edge]) -> tuple[FusionGroup, ...]:
        """Repair ``chosen`` (plus the fixed edges) into the plan's groups. A group of a
        forbidden signature is split into its ops, each a kernel of its own; every other group
        stays as the repair made it (splitting a convex group keeps the plan acyclic)."""
        partition = self.ctx.repair(set(chosen) | self.fixed, self._feasible)
        groups = tuple(self.ctx.to_groups(partition))
        if not self.forbidden:
            return groups
        graph = self.ctx.graph
        banned = {
            i
            for i, g in enumerate(groups)
            if len(g.ops) > 1 and g.signature(graph) in self.forbidden
        }
        if not banned:
            return groups
        parts: list[frozenset[str]] = []
        for i, g in enumerate(groups):
            nodes = frozenset(n for n in g.ops if n in self.ctx.index)
            if i in banned:
                parts.extend(frozenset([n]) for n in sorted(nodes))
            else:
                parts.append(nodes)
        return tuple(self.ctx.to_groups(parts))

    def plan(self, chosen: Iterable[Edge]) -> SpacePlan:
        """Repair ``chosen`` edges into groups, each at its best (bilevel) or default config."""
        return self._configured(self._groups(chosen))

    def _configured(self, groups: tuple[FusionGroup, ...]) -> SpacePlan:
        if self.strategy == "bilevel":
            best = self.oracle.best
            return SpacePlan(groups, tuple(best(g)[0] for g in groups))
        return SpacePlan(groups, tuple(self.oracle.default(g) for g in groups))

    def plan_for(self, params: Mapping[str, Any]) -> SpacePlan:
        """:meth:`plan` of :meth:`chosen`, its groups remembered by the fusion classes the
        parameters switch on (what a local search asks of thousands of moves)."""
        return self._configured(self.groups_for(params))

    def groups_for(self, params: Mapping[str, Any]) -> tuple[FusionGroup, ...]:
        """The groups of :meth:`plan_for` (repaired, before their configs are picked)."""
        names = frozenset(n for key, n in self._fuse_keys if params[key])
        key = (names, frozenset(self.forbidden))
        if key not in self._by_names:
            if len(self._by_names) >= REPAIRED:
                self._by_names.clear()
            edges = [e for n in self.classes if n in names for e in self.classes[n]]
            self._by_names[key] = self._groups(edges)
        return self._by_names[key]

    def prefetch(self, groups: Iterable[FusionGroup]) -> None:
        """Let an oracle that can (``CostOracle.prefetch``) cost the groups' grids at once."""
        if hasattr(self.oracle, "prefetch"):
            self.oracle.prefetch(groups)

    def chosen(self, params: Mapping[str, Any]) -> list[Edge]:
        """The open edges a trial's fusion parameters switch on."""
        return [e for key, name in self._fuse_keys if params[key] for e in self.classes[name]]

    def _fuse(self, trial: TrialLike, name: str) -> bool:
        if self.numeric:
            return bool(trial.suggest_int(self.param_of[name], 0, 1))
        return bool(trial.suggest_categorical(self.param_of[name], [False, True]))

    def config_param(self, group: FusionGroup) -> str:
        """The config parameter of the group's signature (:func:`names.config_name`)."""
        return config_name(self.ctx.graph, group, group.signature(self.ctx.graph))

    def _index(self, trial: TrialLike, group: FusionGroup, n: int) -> int:
        if self.numeric:
            return int(trial.suggest_int(self.config_param(group), 0, n - 1))
        return int(trial.suggest_categorical(self.config_param(group), list(range(n))))

    def suggest(self, trial: TrialLike) -> SpacePlan:
        """Define-by-run: ask the trial for every fusion boolean, repair, then the configs."""
        chosen = [
            e for name, edges in self.classes.items() if self._fuse(trial, name) for e in edges
        ]
        groups = self._groups(chosen)
        if self.strategy == "bilevel":  # each group at its best config
            self.prefetch(groups)
            return self._configured(groups)
        configs = []
        for g in groups:
            grid = self.oracle.grid(g)
            configs.append(grid[self._index(trial, g, len(grid))])
        return SpacePlan(groups, tuple(configs))

    def replay(self, params: Mapping[str, Any]) -> SpacePlan:
        """The plan a finished trial's parameters make now. A group the trial had no config
        for (its repair has changed since: a signature forbidden after it ran) takes its
        grid's first, the ranking model's favourite."""
        return self.suggest(_Replay(params))

    def params_for(
        self, partition: Iterable[frozenset[str]], configs: str = "default"
    ) -> dict[str, Any]:
        """Trial parameters that reproduce (as closely as sharing allows) a given partition:
        a class is fused when every one of its edges lies inside one group. Used to enqueue
        the none / greedy / max baselines as warm starts."""
        where = {n: p for p in partition for n in p}
        params: dict[str, Any] = {}
        for name, edges in self.classes.items():
            fused = all(where.get(e.src) is where.get(e.dst) for e in edges)
            params[self.param_of[name]] = int(fused) if self.numeric else fused
        if self.strategy == "joint":
            plan = self.plan(self.chosen(params))
            for g in plan.groups:
                grid = self.oracle.grid(g)
                cfg = self.oracle.best(g)[0] if configs == "best" else self.oracle.default(g)
                params[self.config_param(g)] = grid.index(cfg)
        return params


class _Replay:
    """A trial that answers from stored parameters, and with the first choice (the lowest
    value) for a parameter it never had."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        return self.params.get(name, choices[0])

    def suggest_int(self, name: str, low: int, high: int) -> int:
        return int(self.params.get(name, low))


def build_space(
    ctx: FusionContext,
    oracle: GroupOracle,
    policy: Policy,
    *,
    strategy: str = "joint",
    numeric: bool = False,
) -> SearchSpace:
    """The space a policy opens (docs/fusion.md).

    ``fusion_level`` 0: nothing fuses; 1: the preset's rule-based (greedy) groups are fixed and
    only configs are searched; 2: edges inside rule matches are open to search; 3: every legal
    edge is. Per-rule ``always`` fixes a rule's edges on, ``never`` closes them;
    ``benefit_threshold`` closes an edge whose two ops fused alone save less than that fraction
    of their time; ``share_repeated`` shares classes across repeated layers.
    """
    rules = policy_rules(policy)
    share = policy.share_repeated
    if policy.fusion_level == 0:
        return SearchSpace(
            ctx, oracle, open_edges=(), share=share, strategy=strategy, numeric=numeric
        )
    if policy.fusion_level == 1:
        _, applied = greedy(ctx, rules, oracle.feasible)
        fixed = set().union(*(edges_of(ctx, m.ops) for m in applied)) if applied else set()
        return SearchSpace(
            ctx,
            oracle,
            open_edges=(),
            fixed_edges=fixed,
            share=share,
            strategy=strategy,
            numeric=numeric,
        )
    matches = match(ctx, rules)
    by_mode: dict[str, set[Edge]] = {"always": set(), "never": set(), "search": set()}
    for m in matches:
        by_mode[policy.mode(m.rule)] |= edges_of(ctx, m.ops)
    opened = set(ctx.edges) if policy.fusion_level == 3 else by_mode["search"] | by_mode["always"]
    opened -= by_mode["never"] - by_mode["always"]
    if policy.benefit_threshold > 0:
        opened = {e for e in opened if _pair_benefit(ctx, oracle, e) >= policy.benefit_threshold}
    return SearchSpace(
        ctx,
        oracle,
        open_edges=[e for e in ctx.edges if e in opened],
        fixed_edges=by_mode["always"],
        share=share,
        strategy=strategy,
        numeric=numeric,
        blocks=[m.ops for m in matches if policy.mode(m.rule) != "never"],
    )


def _pair_benefit(ctx: FusionContext, oracle: GroupOracle, edge: Edge) -> float:
    """Fraction of the two ops' time saved by fusing just them (1.0 when the pair is not a
    legal group on its own: its benefit shows only inside a larger group)."""
    pair = frozenset((edge.src, edge.dst))
    if not ctx.check(pair).ok or not oracle.feasible(pair):
        return 1.0
    alone = sum(oracle.best(ctx.group([n]))[1] for n in pair)
    fused = oracle.best(ctx.group(pair))[1]
    return (alone - fused) / alone if alone > 0 else 0.0
