"""The cost oracle the search space consults: feasibility, config grids and group costs.

The search space (``search_space``) cannot import the cost model; it receives this object.
Everything is cached by group signature, so repeated layers are lowered and scored once.
Costs here are *standalone* kernel costs on a cold L2 (the additive model the exact
optimum is defined for); whole plans are re-scored with L2 carry-over by the tuner.

The model is any cost model (what it calls is ``predict_batch``, which every
:class:`~costmodel.base.CostModel` has; a learned model's batch terms are a faster path). Grids are
ordered by ``rank_model`` (the model itself by default): a config index is an Optuna parameter
value and must mean the same config for the whole study, resumes included, so a study whose
model learns ranks with a model that does not. :meth:`CostOracle.refresh` re-scores the grids
after the model has been refitted, so ``best`` follows the current model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from costmodel.analytic import AnalyticModel, Breakdown, batch_layout, concat
from costmodel.exceptions import CostModelError, InfeasibleConfig
from costmodel.kernel import KernelBatch
from costmodel.lower import Lowering
from costmodel.spec import Target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group

__all__ = ["BatchModel", "CostOracle"]

BEST_IDS = 200_000  # groups whose best config is found by identity, before starting again
TERMS_BYTES = 128 << 20  # a learned model's batch terms kept across refits, in bytes


class BatchModel(Protocol):
    """A cost model that scores many configs of one group at once."""

    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray: ...


@runtime_checkable
class TermsModel(Protocol):
    """A model whose batch costs split into terms a refit keeps and a cheap finish (the
    learned model: :meth:`~costmodel.learned.LearnedModel.batch_terms`)."""

    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray: ...

    def batch_terms(
        self,
        batch: KernelBatch,
        *,
        breakdown: Breakdown | None = None,
        sizes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> Any: ...

    def from_terms(self, terms: Any) -> np.ndarray: ...


class _TermsCache:
    """Batch terms by signature, the least recently used dropped past ``limit`` bytes."""

    def __init__(self, limit: int = TERMS_BYTES) -> None:
        self.limit, self.used = limit, 0
        self._kept: OrderedDict[str, tuple[Any, np.ndarray | None]] = OrderedDict()

    def get(self, sig: str) -> tuple[Any, np.ndarray | None] | None:
        kept = self._kept.get(sig)
        if kept is not None:
            self._kept.move_to_end(sig)
        return kept

    def put(self, sig: str, kept: tuple[Any, np.ndarray | None]) -> None:
        self.used += kept[0].nbytes - (self._kept[sig][0].nbytes if sig in self._kept else 0)
        self._kept[sig] = kept
        while self.used > self.limit and len(self._kept) > 1:
            _, (old, _) = self._kept.popitem(last=False)
            self.used -= old.nbytes


def _rows(terms: Any, rows: slice) -> Any:
    """The terms of some rows of a batch (copies: the rest may be dropped)."""
    return type(terms)(*(a[rows].copy() if isinstance(a, np.ndarray) else a for a in terms))


def _ordered(costs: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    return costs if order is None else costs[order]


class CostOracle:
    """Feasible configs and analytic costs of fusion groups of one graph on one target."""

    def __init__(
        self,
        graph: Graph,
        target: Target,
        model: BatchModel | None = None,
        ctx: FusionContext | None = None,
        rank_model: BatchModel | None = None,
    ) -> None:
        self.graph = graph
        self.ctx = ctx
        self.target = target
        self.model: BatchModel = model or AnalyticModel(target)
        self.rank_model: BatchModel = rank_model or self.model
        self.lowering = Lowering(graph, target)
        self._feasible: dict[frozenset[str], bool] = {}
        self._feasible_sigs: dict[str, bool] = {}
        self._costs: dict[str, np.ndarray] = {}
        self._sorted: dict[str, list[KernelConfig]] = {}
        self._best: dict[str, tuple[KernelConfig, float]] = {}
        self._best_ids: dict[int, tuple[FusionGroup, tuple[KernelConfig, float]]] = {}
        # the last grid ranked (signature, its raw batch, the prior's breakdown, the order)
        self._ranked: tuple[str, KernelBatch, Breakdown, np.ndarray] | None = None
        self._terms = _TermsCache()  # kept across refits: they do not depend on the local fit
        self.evaluations = 0

    def feasible(self, ops: Iterable[str]) -> bool:
        """Whether some config of the group fits every buffer (a grid is a signature's: a
        group of a signature asked before is not lowered again)."""
        key = frozenset(ops)
        if key not in self._feasible:
            group = self.group(key)
            sig = self.lowering.signature(group)
            if sig not in self._feasible_sigs:
                try:  # not the grid itself: most merges a repair asks about never need it
                    self._feasible_sigs[sig] = self.lowering.fits(group)
                except InfeasibleConfig:
                    self._feasible_sigs[sig] = False
            self._feasible[key] = self._feasible_sigs[sig]
        return self._feasible[key]

    def group(self, ops: Iterable[str]) -> FusionGroup:
        """The group a set of ops runs as: with its inner views when a context is known."""
        return self.ctx.group(ops) if self.ctx is not None else make_group(self.graph, ops)

    def grid(self, group: FusionGroup) -> list[KernelConfig]:
        """The group's feasible configs, cheapest first under the model when first ranked (so
        an index is also a rank: numeric samplers such as CMA-ES see a meaningful order)."""
        sig = self.lowering.signature(group)
        if sig not in self._sorted:
            raw = self.lowering.grid(group)
            batch = self.lowering.batch(group, raw)
            prior = self._shared_prior()
            if prior is None:
                costs = self.rank_model.predict_batch(batch)
            else:  # AnalyticModel.predict_batch, its breakdown kept for costs()
                b = prior.breakdown_batch(batch)
                costs = prior.scored(batch, b)
            order = np.argsort(costs, kind="stable")
            self._sorted[sig] = [raw[i] for i in order]
            if self._same_model():
                self._costs[sig] = costs[order]
            elif prior is not None:
                self._ranked = (sig, batch, b, order)
            self.evaluations += len(raw)
        return self._sorted[sig]

    def _same_model(self) -> bool:
        """Does the model cost as the ranking model does (itself, or an equal analytic one)?"""
        rank, model = self.rank_model, self.model
        if rank is model:
            return True
        if type(rank) is not AnalyticModel or type(model) is not AnalyticModel:
            return False
        return rank.version == model.version

    def _shared_prior(self) -> AnalyticModel | None:
        """The ranking model, when it is also the analytic model the study's model corrects
        (a learned model's ``analytic``, same constants on the same target): a grid's first
        ranking then also gives the model its breakdown (:meth:`costs`)."""
        rank, prior = self.rank_model, getattr(self.model, "prior", None)
        if self._same_model() or type(rank) is not AnalyticModel:
            return None
        if type(prior) is not AnalyticModel or prior.version != rank.version:
            return None
        return rank

    def prefetch(self, groups: Iterable[FusionGroup]) -> None:
        """Rank and cost the grids of the groups' new signatures (what :meth:`grid` and
        :meth:`costs` then find made), their rows stacked by layout into one call of the
        models: each row costs what it costs in its own group's batch, and a call's own
        overhead, which is most of the cost of a small grid, is paid once. Only where the
        learned model corrects the ranking model (a study's oracle); groups whose grid cannot
        be made are left to :meth:`grid` (which raises as it does)."""
        prior, model = self._shared_prior(), self.model
        if prior is None or not isinstance(model, TermsModel):
            return
        todo: dict[str, tuple[list[KernelConfig], KernelBatch]] = {}
        for g in groups:
            sig = self.lowering.signature(g)
            if sig in self._sorted or sig in todo:
                continue
            try:
                raw = self.lowering.grid(g)
            except InfeasibleConfig:
                continue
            todo[sig] = (raw, self.lowering.batch(g, raw))
        by_layout: dict[Any, list[str]] = {}
        for sig, (_, batch) in todo.items():
            by_layout.setdefault(batch_layout(batch), []).append(sig)
        for sigs in by_layout.values():
            self._prefetch(prior, model, [(sig, *todo[sig]) for sig in sigs])

    def _prefetch(
        self,
        prior: AnalyticModel,
        model: TermsModel,
        grids: list[tuple[str, list[KernelConfig], KernelBatch]],
    ) -> None:
        batches = [b for _, _, b in grids]
        cat = concat(batches)
        lens = [len(b) for b in batches]
        flops, cube, compulsory = (
            np.repeat(np.array([getattr(b, k) for b in batches], dtype=np.int64), lens)
            for k in ("flops", "cube_flops", "compulsory_bytes")
        )
        b = prior.breakdown_batch(cat)
        ranks = prior.scored(cat, b)
        terms = model.batch_terms(cat, breakdown=b, sizes=(flops, cube, compulsory))
        costs = model.from_terms(terms)
        start = 0
        for (sig, raw, _), n in zip(grids, lens, strict=True):
            rows = slice(start, start + n)
            start += n
            order = np.argsort(ranks[rows], kind="stable")
            self._sorted[sig] = [raw[i] for i in order]
            self._terms.put(sig, (_rows(terms, rows), order))
            self._costs[sig] = costs[rows][order]
            self.evaluations += 2 * n

    def refresh(self) -> None:
        """Forget every cost (the model changed); grid orders stay as first ranked."""
        self._costs.clear()
        self._best.clear()
        self._best_ids.clear()
        self._ranked = None

    def default(self, group: FusionGroup) -> KernelConfig:
        return self.lowering.default(group)

    def costs(self, group: FusionGroup) -> np.ndarray:
        """Standalone latency (us) of every config of the group's grid, in grid order."""
        grid = self.grid(group)
        sig = self.lowering.signature(group)
        if sig not in self._costs:
            self._costs[sig] = self._model_costs(group, sig, grid)
            self.evaluations += len(grid)
        return self._costs[sig]

    def _model_costs(self, group: FusionGroup, sig: str, grid: list[KernelConfig]) -> np.ndarray:
        """The model's costs of the grid. A model that keeps batch terms (a learned one) is
        asked for them once per signature: after a refit only its local trees run again. A
        grid ranked just now is costed from the same rows in ranking order and the breakdown
        already made (each row's cost depends on that row alone)."""
        ranked, self._ranked = self._ranked, None
        model = self.model
        if not isinstance(model, TermsModel):
            return model.predict_batch(self.lowering.batch(group, grid))
        kept = self._terms.get(sig)
        if kept is not None:
            try:
                return _ordered(model.from_terms(kept[0]), kept[1])
            except CostModelError:  # made under a state since replaced: make them again
                pass
        if ranked is not None and ranked[0] == sig:
            _, batch, b, order = ranked
            terms = model.batch_terms(batch, breakdown=b)
        else:
            order, terms = None, model.batch_terms(self.lowering.batch(group, grid))
        self._terms.put(sig, (terms, order))
        return _ordered(model.from_terms(terms), order)

    def cost(self, group: FusionGroup, config: KernelConfig) -> float:
        grid = self.grid(group)
        try:
            return float(self.costs(group)[grid.index(config)])
        except ValueError:
            return float(self.model.predict_batch(self.lowering.batch(group, [config]))[0])

    def best(self, group: FusionGroup) -> tuple[KernelConfig, float]:
        """The cheapest config of the group's grid and its cost (remembered per signature
        until :meth:`refresh`: a search asks it of every group of every plan it scores, so
        it is also found by the group object's identity, which is faster than its hash)."""
        hit = self._best_ids.get(id(group))
        if hit is not None and hit[0] is group:
            return hit[1]
        sig = self.lowering.signature(group)
        if sig not in self._best:
            costs = self.costs(group)
            i = int(np.argmin(costs))
            self._best[sig] = (self.grid(group)[i], float(costs[i]))
        if len(self._best_ids) >= BEST_IDS:
            self._best_ids.clear()
        self._best_ids[id(group)] = (group, self._best[sig])  # holds the group: its id stays
        return self._best[sig]

    def default_cost(self, group: FusionGroup) -> float:
        return self.cost(group, self.default(group))
