"""How well the closed form ranks a fused prologue kernel's configs against the simulator.

Add -> MatMul(1024 x 1024 x 1024, fp16) [-> Tanh]: the vector side computes the cube's operand
each step. For every chip and both forms, about 40 configs of the group's grid are simulated
and predicted by the raw analytic model; the table gives Kendall's tau of the two orders and
the spread of their ratio (max / min of predicted / simulated). CI checks one case, at half
the rows (``tests/costmodel/test_simulator_prologue.py``); this script runs them all (about 3
minutes).

    cd experiments && ../.venv/bin/python prologue_ranking.py

Writes experiments/results/prologue_ranking.csv.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _table import RESULTS, emit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "costmodel"))
from prologue_helpers import prologue_ranking

# the floors CI holds the 910B to, and the 910's as found when the terms were added
FLOORS = {"ascend910b": (0.93, 1.7), "ascend910": (0.85, 2.2)}


def main() -> None:
    rows = []
    for target_name, (tau_floor, spread_ceiling) in FLOORS.items():
        for epilogue in (False, True):
            t0 = time.perf_counter()
            tau, spread, configs = prologue_ranking(target_name, epilogue)
            rows.append({"chip": target_name, "epilogue": epilogue, "configs": configs,
                         "tau": round(tau, 3), "tau_floor": tau_floor,
                         "spread": round(spread, 2), "spread_ceiling": spread_ceiling,
                         "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
    emit(rows, RESULTS / "prologue_ranking.csv")


if __name__ == "__main__":
    main()
