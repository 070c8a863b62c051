"""The cost oracle the search space consults: feasibility, config grids and group costs.

The search space (``search_space``) cannot import the cost model; it receives this object.
Everything is cached by group signature, so repeated layers are lowered and scored once.
Costs here are *standalone* kernel costs on a cold L2 (the additive model the exact
optimum is defined for); whole plans are re-scored with L2 carry-over by the tuner.

The model is the analytic one or the learned one (anything with ``predict_batch``). Grids are
ordered by ``rank_model`` (the model itself by default): a config index is an Optuna parameter
value and must mean the same config for the whole study, resumes included, so a study whose
model learns ranks with a model that does not. :meth:`CostOracle.refresh` re-scores the grids
after the model has been refitted, so ``best`` follows the current model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import numpy as np

from costmodel.analytic import AnalyticModel
from costmodel.exceptions import InfeasibleConfig
from costmodel.kernel import KernelBatch
from costmodel.lower import Lowering
from costmodel.spec import Target
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group

__all__ = ["BatchModel", "CostOracle"]


class BatchModel(Protocol):
    """A cost model that scores many configs of one group at once."""

    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray: ...


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
        self._costs: dict[str, np.ndarray] = {}
        self._sorted: dict[str, list[KernelConfig]] = {}
        self._best: dict[str, tuple[KernelConfig, float]] = {}
        self.evaluations = 0

    def feasible(self, ops: Iterable[str]) -> bool:
        """Whether some config of the group fits every buffer."""
        key = frozenset(ops)
        if key not in self._feasible:
            try:
                self.lowering.grid(self.group(key))
                self._feasible[key] = True
            except InfeasibleConfig:
                self._feasible[key] = False
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
            costs = self.rank_model.predict_batch(self.lowering.batch(group, raw))
            order = np.argsort(costs, kind="stable")
            self._sorted[sig] = [raw[i] for i in order]
            if self.rank_model is self.model:
                self._costs[sig] = costs[order]
            self.evaluations += len(raw)
        return self._sorted[sig]

    def refresh(self) -> None:
        """Forget every cost (the model changed); grid orders stay as first ranked."""
        self._costs.clear()
        self._best.clear()

    def default(self, group: FusionGroup) -> KernelConfig:
        return self.lowering.default(group)

    def costs(self, group: FusionGroup) -> np.ndarray:
        """Standalone latency (us) of every config of the group's grid, in grid order."""
        grid = self.grid(group)
        sig = self.lowering.signature(group)
        if sig not in self._costs:
            self._costs[sig] = self.model.predict_batch(self.lowering.batch(group, grid))
            self.evaluations += len(grid)
        return self._costs[sig]

    def cost(self, group: FusionGroup, config: KernelConfig) -> float:
        grid = self.grid(group)
        try:
            return float(self.costs(group)[grid.index(config)])
        except ValueError:
            return float(self.model.predict_batch(self.lowering.batch(group, [config]))[0])

    def best(self, group: FusionGroup) -> tuple[KernelConfig, float]:
        """The cheapest config of the group's grid and its cost (remembered per signature
        until :meth:`refresh`: a search asks it of every group of every plan it scores)."""
        sig = self.lowering.signature(group)
        if sig not in self._best:
            costs = self.costs(group)
            i = int(np.argmin(costs))
            self._best[sig] = (self.grid(group)[i], float(costs[i]))
        return self._best[sig]

    def default_cost(self, group: FusionGroup) -> float:
        return self.cost(group, self.default(group))
