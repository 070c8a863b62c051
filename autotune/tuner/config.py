"""A study's settings: everything ``autotune tune`` takes besides the model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotune.exceptions import AutotuneError
from autotune.tuner.evaluator import COSTS
from search_space.rules import Policy

__all__ = [
    "AUTO_PATIENCE",
    "AUTO_TRIALS",
    "OBJECTIVES",
    "SAMPLERS",
    "SEEDS",
    "TuneConfig",
    "trials_arg",
]

AUTO_TRIALS = 400  # --trials auto: at most this many trials...
AUTO_PATIENCE = 30  # ...stopping once this many in a row gained nothing

OBJECTIVES = ("latency", "latency,memory")
SAMPLERS = ("tpe", "random", "cmaes", "gp", "nsga2")
SEEDS = 2**32  # a seed is < this: numpy's legacy seeding, which Optuna's samplers use


SEARCH_BUCKETS = 4  # a range study's search weighs this many buckets (the rest at the end)


@dataclass(frozen=True)
class TuneConfig:
    """Everything ``autotune tune`` takes besides the model (flags map one to one)."""

    target: str = "ascend910b"
    sets: tuple[str, ...] = ()
    precision: str = "auto"
    trials: int = 120
    patience: int = 0  # >0: stop once this many trials in a row gained nothing (--trials auto)
    timeout: float | None = None
    sampler: str = "tpe"
    strategy: str = "bilevel"
    objective: str = "latency"
    storage: str | None = None
    study: str | None = None
    new: bool = False  # a fresh study even where the storage has one of that name
    seed: int = 0
    measure_every: int = 20
    measure_top: int = 3
    pick: int | None = None
    cost: str = "learned"
    cost_model_file: str | None = None
    retrain_every: int = 32
    polish: int = 1
    dataset: str | None = None
    policy: Policy = field(default_factory=Policy)
    search_buckets: int = SEARCH_BUCKETS  # shape ranges: buckets the search weighs

    @property
    def multi(self) -> bool:
        """Two objectives (latency and peak memory): the answer is a Pareto pick."""
        return self.objective == "latency,memory"

    def check(self) -> None:
        """Raises: AutotuneError naming the first bad setting and what it must be."""
        if self.objective not in OBJECTIVES:
            raise AutotuneError(
                f"unknown objective '{self.objective}'; available: {', '.join(OBJECTIVES)}"
            )
        if self.trials < 0:
            raise AutotuneError(
                f"--trials must be >= 0 (0: pick from the study's storage), but got {self.trials}"
            )
        if self.patience < 0:
            raise AutotuneError(f"patience must be >= 0 (0: run every trial), not {self.patience}")
        if self.new and self.trials == 0:
            raise AutotuneError(
                "--new starts a study with no trials, and --trials 0 picks from an existing "
                "one; give --trials N >= 1 with --new"
            )
        if self.measure_every < 1 or self.measure_top < 1:
            raise AutotuneError("--measure-every must be >= 1 (and measure_top >= 1)")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise AutotuneError(f"--timeout must be seconds > 0, but got {self.timeout}")
        if self.search_buckets < 1:
            raise AutotuneError(f"--search-buckets must be >= 1, but got {self.search_buckets}")
        if self.polish < 0:
            raise AutotuneError(f"--polish must be >= 0, but got {self.polish}")
        if self.retrain_every < 1:
            raise AutotuneError(f"--retrain-every must be >= 1, but got {self.retrain_every}")
        if not 0 <= self.seed < SEEDS:
            raise AutotuneError(f"--seed must be in 0 .. 2^32-1, but got {self.seed}")
        self._check_sampler()
        if self.cost not in COSTS:
            raise AutotuneError(f"unknown cost model '{self.cost}'; available: {', '.join(COSTS)}")

    def _check_sampler(self) -> None:
        """A sampler the study can make (its optional packages are checked as it is made):
        checked before the storage opens, so a typo leaves no empty study behind."""
        if self.sampler not in SAMPLERS:
            raise AutotuneError(
                f"unknown sampler '{self.sampler}'; available: {', '.join(SAMPLERS)}"
            )
        if self.sampler == "cmaes" and self.multi:
            raise AutotuneError("cmaes is single-objective; use nsga2 or tpe for latency,memory")


def trials_arg(text: str) -> tuple[int, int]:
    """``--trials``: N trials (no patience), or ``auto``: up to :data:`AUTO_TRIALS`, stopping
    once :data:`AUTO_PATIENCE` trials in a row gained nothing; (trials, patience).

    Raises:
        AutotuneError: neither a whole number nor ``auto``.
    """
    if text.strip().lower() == "auto":
        return AUTO_TRIALS, AUTO_PATIENCE
    try:
        return int(text), 0
    except ValueError:
        raise AutotuneError(
            f"--trials must be a number of trials or 'auto' (stop at convergence), not {text!r}"
        ) from None
