"""Scoring and measuring plans inside a study, and the measure-retrain loop (docs/tuning.md).

Trials are scored with the study's cost model (``learned`` by default, or ``analytic``),
cached by plan hash and model version. Measured plans run on the simulator; every kernel run
becomes a dataset row (the kernel, the L2 residency it started with, the simulated latency),
and a learned model refits on those rows every ``retrain_every`` new rows, as TVM's
auto-scheduler does with its measured records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autotune.exceptions import AutotuneError
from autotune.tuner.parts import Part, PartCache
from autotune.tuner.records import MeasureResult
from costmodel.base import CostModel
from costmodel.exceptions import CostModelError
from costmodel.kernel import Kernel
from costmodel.lower import Lowering
from costmodel.measure import (
    SIMULATOR_VERSION,
    Measurement,
    Provenance,
    measurements,
    measurements_of,
    merge_table,
    read_table,
    row_key,
)
from costmodel.registry import KINDS, load_cost_model, make_cost_model
from costmodel.spec import Target
from search_space import AutofusionError
from search_space.ir import FusionGroup, Graph, KernelConfig
from search_space.space import SpacePlan

__all__ = ["COSTS", "Evaluator", "make_study_model"]

log = logging.getLogger(__name__)
COSTS = KINDS  # every registered model (costmodel.registry); learned by default
_KernelKey = tuple[int, tuple[float, ...]]  # (signature, config) as a number, L2 context


def make_study_model(kind: str, target: Target, path: str | None = None) -> CostModel:
    """The cost model a study scores trials with: any registered kind (the contract of
    :class:`costmodel.base.CostModel` is all a study calls).

    Args:
        kind: ``learned`` (the default of ``tune``), ``analytic``, ``simulator``...
        target: the target.
        path: a model file of that kind (``autotune calibrate --fit`` writes learned ones; a
            trusted file: it is JSON, nothing is unpickled); default: the one shipped for the
            target.

    Raises:
        AutotuneError: an unknown kind, a file of another kind or target, or an unreadable
            file.
    """
    if kind not in COSTS:
        raise AutotuneError(f"unknown cost model '{kind}'; available: {', '.join(COSTS)}")
    model = make_cost_model(kind, target)
    if path is None:
        return model
    try:
        saved = load_cost_model(path)
    except CostModelError as err:
        raise AutotuneError(str(err)) from None
    if saved.kind != kind:
        raise AutotuneError(f"'{path}' holds a {saved.kind} model; give --cost {saved.kind}")
    if saved.target.spec.name != target.spec.name:
        raise AutotuneError(
            f"'{path}' was fitted for '{saved.target.spec.name}', not '{target.spec.name}'"
        )
    model.load_state(saved.state())
    return model


class Evaluator:
    """Scores plans with the study's model, measures them on the simulator, records rows.

    Args:
        graph: the model being tuned.
        target: the target.
        model: the study's cost model.
        retrain_every: refit a learned model after this many new measured kernel rows.
        family, study: provenance written on every row.
    """

    def __init__(
        self,
        graph: Graph,
        target: Target,
        model: CostModel,
        *,
        retrain_every: int = 32,
        family: str = "model",
        study: str = "",
    ) -> None:
        self.graph = graph
        self.target = target
        self.lowering = Lowering(graph, target)
        self.model = model
        # the L2 context a row records is the one the study's model scores kernels in
        self.residency_model = model.prior
        self.simulator = make_cost_model("simulator", target)
        self.retrain_every = retrain_every
        self.family, self.study = family, study
        self.rows: list[Measurement] = []
        self._row_keys: set[str] = set()
        self._pending: list[Measurement] = []
        self._kernels: dict[tuple[str, KernelConfig], Kernel] = {}
        self._parts = PartCache()
        self._scores: dict[tuple[bytes, str], float] = {}
        # latency of a kernel (signature, config, L2 context) under each model version
        self._kernel_costs: dict[str, dict[_KernelKey, float]] = {}
        self._measured: dict[str, MeasureResult] = {}
        self.refits = 0

    def kernels(self, plan: SpacePlan) -> list[Kernel]:
        return [self._part(g, c).kernel for g, c in zip(plan.groups, plan.configs, strict=True)]

    def _part(self, group: FusionGroup, config: KernelConfig) -> Part:
        """A group at a config as the evaluator uses it, found by the objects' identity (a
        search builds thousands of plans from the same few groups and configs)."""
        part = self._parts.get(group, config)
        if part is None:
            key = (self.lowering.signature(group) + "|" + ",".join(group.ops), config)
            if key not in self._kernels:
                self._kernels[key] = self.lowering.kernel(group, config)
            kernel = self._kernels[key]
            part = self._parts.add(group, config, kernel, self.lowering.signature(group))
        return part

    def score(self, plan: SpacePlan) -> float:
        """Predicted latency (us) of the plan under the current model."""
        return self._plan_score(plan, self.model, self.model.version)

    def prior_score(self, plan: SpacePlan) -> float:
        """Predicted latency (us) of the plan under the calibrated analytic model: the learned
        model's prior (its correction left out), or the study's model when that is analytic.
        Never refits, so it is cached by plan alone."""
        return self._plan_score(plan, self.residency_model, "prior")

    def kernel_latencies(self, plan: SpacePlan) -> list[float]:
        """Each kernel's predicted latency (us) under the current model, in plan order (what
        :meth:`score` sums)."""
        return self._latencies(plan, self.model, self.model.version)

    def _plan_score(self, plan: SpacePlan, model: CostModel, version: str) -> float:
        """The plan's predicted latency, cached by plan and ``version``."""
        parts = [self._part(g, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
        key = (self._parts.plan_digest(parts), version)
        if key not in self._scores:
            lat = self._part_latencies(parts, model, version)
            self._scores[key] = float(np.array(lat, dtype=np.float64).sum())
        return self._scores[key]

    def prefetch(self, plans: Sequence[SpacePlan], prior: bool = False) -> None:
        """Score many plans at once (what :meth:`score`, or :meth:`prior_score` with
        ``prior``, then finds cached): the kernels none of them has in its L2 context yet go
        to the model in one call, stacked by layout, and each kernel's latency depends on its
        own row alone, so every plan's score is what scoring it alone gives. A call the model
        refuses (an infeasible kernel) leaves the plans to be scored one by one."""
        model, version = (
            (self.residency_model, "prior") if prior else (self.model, self.model.version)
        )
        memo = self._memo(version)
        todo: list[tuple[tuple[bytes, str], list[_KernelKey]]] = []
        missing: dict[_KernelKey, tuple[Kernel, list[float]]] = {}
        for plan in plans:
            parts = [self._part(g, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
            key = (self._parts.plan_digest(parts), version)
            if key in self._scores:
                continue
            kernels = [p.kernel for p in parts]
            resident = self.residency_model.residency(kernels, [p.touches for p in parts])
            keys = [(p.kernel_id, tuple(r)) for p, r in zip(parts, resident, strict=True)]
            for k, p, r in zip(keys, parts, resident, strict=True):
                if k not in memo and k not in missing:
                    missing[k] = (p.kernel, r)
            todo.append((key, keys))
        if missing:
            try:
                got = model.latencies(
                    [k for k, _ in missing.values()], [r for _, r in missing.values()]
                )
            except CostModelError:
                return
            memo.update((k, float(v)) for k, v in zip(missing, got, strict=True))
        for key, keys in todo:
            self._scores[key] = float(np.array([memo[k] for k in keys], dtype=np.float64).sum())

    def _memo(self, version: str) -> dict[_KernelKey, float]:
        """Kernel latencies under ``version`` (a refit drops the older versions' but the
        prior's: they are stale)."""
        if version not in self._kernel_costs:
            self._kernel_costs = {v: m for v, m in self._kernel_costs.items() if v == "prior"}
            self._kernel_costs[version] = {}
        return self._kernel_costs[version]

    def _latencies(self, plan: SpacePlan, model: CostModel, version: str) -> list[float]:
        parts = [self._part(g, c) for g, c in zip(plan.groups, plan.configs, strict=True)]
        return self._part_latencies(parts, model, version)

    def _part_latencies(self, parts: list[Part], model: CostModel, version: str) -> list[float]:
        """Each kernel's latency, remembered by its signature, config and L2 context under
        ``version``: a local search's move changes a few groups (and the L2 context of a few
        after them), so only those kernels are scored again; the values are what
        ``model.predict`` gives for the whole plan."""
        memo = self._memo(version)
        kernels = [p.kernel for p in parts]
        resident = self.residency_model.residency(kernels, [p.touches for p in parts])
        # (signature, config) as one number per part: the same key, hashed far faster
        keys = [(p.kernel_id, tuple(r)) for p, r in zip(parts, resident, strict=True)]
        new = [i for i, k in enumerate(keys) if k not in memo]
        if new:
            got = model.latencies([kernels[i] for i in new], [resident[i] for i in new])
            memo.update((keys[i], float(v)) for i, v in zip(new, got, strict=True))
        return [memo[k] for k in keys]

    def measure(self, plan: SpacePlan) -> MeasureResult:
        """The plan run on the simulator; its kernels become dataset rows. A simulation that
        fails (a deadlock, a budget, a config it refuses) is a failed result, never an
        exception: it fails this plan, not the study."""
        key = plan.key()
        if key not in self._measured:
            try:
                self._measured[key] = MeasureResult(self._simulate(plan))
            except AutofusionError as err:  # a deadlock, a budget, a config refused: data
                log.warning("simulating a plan failed: %s: %s", type(err).__name__, err)
                self._measured[key] = MeasureResult(None, f"{type(err).__name__}: {err}")
            except Exception as err:  # a bug: this plan fails, and the traceback is logged
                log.error("simulating a plan raised %s", type(err).__name__, exc_info=True)
                self._measured[key] = MeasureResult(None, f"{type(err).__name__}: {err}")
        return self._measured[key]

    def _simulate(self, plan: SpacePlan) -> float:
        kernels = self.kernels(plan)
        costs = self.simulator.evaluate(kernels)
        resident = self.residency_model.residency(kernels)
        records = measurements(
            kernels,
            costs,
            resident,
            Provenance.of(self.target, source=f"tune:{self.study}", family=self.family),
            group_ids=[
                f"{k.signature}|{json.dumps(r)}" for k, r in zip(kernels, resident, strict=True)
            ],
        )
        self.add_rows(records)
        return float(sum(c.latency_us for c in costs))

    def add_rows(self, rows: list[Measurement]) -> None:
        """Record measured kernels once each (a kernel in the same context is one row)."""
        for r in rows:
            k = row_key(r)
            if k not in self._row_keys:
                self._row_keys.add(k)
                self.rows.append(r)
                self._pending.append(r)

    @property
    def pending(self) -> int:
        """Rows measured since the model last took them."""
        return len(self._pending)

    def take_pending(self) -> list[Measurement]:
        """The rows measured since the last call, for a refit (one refit takes them once)."""
        out, self._pending = self._pending, []
        return out

    def retrain(self, force: bool = False) -> bool:
        """Refit a model that learns on the measured rows when enough new ones have come in."""
        if not self.model.learns or not self._pending:
            return False
        if len(self._pending) < self.retrain_every and not force:
            return False
        before = self.model.version
        self.model.update(self.take_pending())
        if self.model.version == before:  # too few rows yet for a refit
            return False
        self.refits += 1
        return True

    # -- the run's dataset ------------------------------------------------------------------
    def load_rows(self, path: Path) -> int:
        """Rows an earlier run of this study measured (resuming keeps what it learned)."""
        if not path.is_file():
            return 0
        try:
            frame = read_table(path)
        except CostModelError as err:
            log.warning("ignoring measurements file: %s", err)
            return 0
        mine = frame[
            (frame["source"] == f"tune:{self.study}")
            & (frame["spec_digest"] == self.target.spec.digest())
            & (frame["precision"] == self.target.precision)
            & (frame["simulator_version"] == SIMULATOR_VERSION)  # another simulator's rows mislead
        ]
        try:
            self.add_rows(measurements_of(mine))
        except CostModelError as err:
            log.warning("ignoring measurements file: %s", err)
            return 0
        return len(mine)

    def save_rows(self, path: Path) -> None:
        """Write this run's rows atomically, keeping every row already there (other studies',
        and other workers' of this study): rows are merged on (kernel, L2 context)."""
        if self.rows:
            merge_table(self.rows, path)
