"""A study's settings: everything ``autotune tune`` takes besides the model."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from autotune.exceptions import AutotuneError
from autotune.tuner.evaluator import COSTS
from search_space.rules import Policy

__all__ = ["OBJECTIVES", "TuneConfig"]

OBJECTIVES = ("latency", "latency,memory")


@dataclass(frozen=True)
class TuneConfig:
    """Everything ``autotune tune`` takes besides the model (flags map one to one)."""

    target: str = "ascend910b"
    sets: tuple[str, ...] = ()
    precision: str = "auto"
    trials: int = 120
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
        if self.new and self.trials == 0:
            raise AutotuneError(
                "--new starts a study with no trials, and --trials 0 picks from an existing "
                "one; give --trials N >= 1 with --new"
            )
        if self.measure_every < 1 or self.measure_top < 1:
            raise AutotuneError("--measure-every must be >= 1 (and measure_top >= 1)")
        if self.timeout is not None and not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise AutotuneError(f"--timeout must be seconds > 0, but got {self.timeout}")
        if self.polish < 0:
            raise AutotuneError(f"--polish must be >= 0, but got {self.polish}")
        if self.retrain_every < 1:
            raise AutotuneError(f"--retrain-every must be >= 1, but got {self.retrain_every}")
        if self.cost not in COSTS:
            raise AutotuneError(f"unknown cost model '{self.cost}'; available: {', '.join(COSTS)}")
