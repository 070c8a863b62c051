"""Frozen records of a study: a measurement, a measured candidate plan, the study's result."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.plan_file import plan_to_json
from autotune.vocabulary import plan_latency, schema
from search_space.space import FusionPlan, SpacePlan

__all__ = ["Candidate", "MeasureResult", "TuneResult"]


@dataclass(frozen=True)
class MeasureResult:
    """A plan's run on the simulator: its latency, or why there is none.

    A failed simulation (a deadlock, a budget, a config the simulator refuses) is data: it
    fails this one measurement, never the study (TVM's ``MeasureResult``).
    """

    latency_us: float | None
    error: str = ""

    def __post_init__(self) -> None:
        if (self.latency_us is None) == (not self.error):
            raise ValueError("a MeasureResult holds a latency or an error, exactly one")

    @property
    def ok(self) -> bool:
        return self.latency_us is not None

    def to_json(self) -> dict[str, Any]:
        return {"simulated_us": self.latency_us, **({"error": self.error} if self.error else {})}


@dataclass(frozen=True)
class Candidate:
    """A plan the study measured, and where it came from (``trial 12``, ``greedy``,
    ``max groups, ranked tiles``, ``trial 3, descended by the prior`` ...)."""

    plan: SpacePlan
    measured: MeasureResult
    source: str

    @property
    def latency_us(self) -> float:
        """The simulated latency; ``inf`` for a failed measurement (it never wins)."""
        return self.measured.latency_us if self.measured.latency_us is not None else math.inf

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            **self.measured.to_json(),
            "n_kernels": len(self.plan.groups),
        }


@dataclass(frozen=True)
class TuneResult:
    """What a study produced: the winning plan and how it compares.

    Attributes:
        plan: the plan record written to the plan file.
        study, storage: where the trials are.
        trials: completed trials in the study (a resumed study counts all).
        best_latency_us: the plan's simulated latency.
        baseline_us: the simulated latency of the ``none`` and ``greedy`` plans (None where
            the simulation failed).
        predicted_us: the plan's latency under the study's cost model.
        pareto: the front of a two-objective study (trial, predicted_us, memory_mb).
        interrupted: Ctrl-C ended the trials; the plan is the best found so far.
        report: safe mode's counts (``safe_mode`` in JSON).
        optimal_predicted_us: the exact additive optimum under the study's cost model, where
            it was found within its work bounds (None otherwise): how far the search is from
            the best the model can say.
        trials_since_best: complete trials since the best predicted value last improved (a
            search that has converged gains nothing in its last trials; None for two
            objectives).
    """

    plan: FusionPlan
    study: str
    storage: str
    trials: int
    best_latency_us: float
    baseline_us: Mapping[str, float | None]
    predicted_us: float
    pareto: Sequence[Mapping[str, Any]] = ()
    interrupted: bool = False
    report: Mapping[str, int] = field(default_factory=dict)
    optimal_predicted_us: float | None = None
    trials_since_best: int | None = None

    def gap_to_optimal(self) -> float | None:
        """The plan's predicted latency over the exact optimum's, less 1 (0: the optimum)."""
        if not self.optimal_predicted_us:
            return None
        return self.predicted_us / self.optimal_predicted_us - 1

    def speedup(self, baseline: str) -> float | None:
        """Baseline latency over the plan's (None where the baseline failed to run, or the
        plan has no work to time: a model of views alone runs no kernel)."""
        base = self.baseline_us.get(baseline)
        return None if base is None or self.best_latency_us <= 0 else base / self.best_latency_us

    def latency(self) -> dict[str, Any]:
        """The plan's one number (:func:`autotune.vocabulary.plan_latency`): simulated."""
        return plan_latency(self.predicted_us, self.best_latency_us, self.plan.cost_model)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": schema("tune"),
            "latency": self.latency(),
            "simulated_us": self.best_latency_us,
            "predicted_us": self.predicted_us,
            "baseline_simulated_us": dict(self.baseline_us),
            "speedup_vs_none_simulated": self.speedup("none"),
            "speedup_vs_greedy_simulated": self.speedup("greedy"),
            "trials": self.trials,
            "study": self.study,
            "storage": self.storage,
            "pareto": [dict(p) for p in self.pareto],
            "interrupted": self.interrupted,
            "safe_mode": dict(self.report),
            "optimal_predicted_us": self.optimal_predicted_us,
            "gap_to_optimal": self.gap_to_optimal(),
            "trials_since_best": self.trials_since_best,
            "plan": plan_to_json(self.plan),
        }
