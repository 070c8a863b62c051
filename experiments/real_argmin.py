"""Does a model refitted on real rows still rank a kernel's configs as the simulator does?

A real row measures one config of its kernel, so it says nothing about how the time moves from
config to config; a correction fitted to it can still learn such a move, and a tuner then
picks the config where that move is most optimistic. For every device-timed real row, this
takes the learned model's favourite config over the kernel's grid (as ``real_targets.py``
does) and simulates it: ``model/sim`` is the model's time there over the simulator's (1 when
the model ranks as the simulator does at the config it picks), ``model pick/own`` and ``sim
pick/own`` what each says the pick takes against the row's own config. Two models: the
learned model as shipped (simulated rows only) and refitted with the other sources' device
rows, the row's source held out (as ``real_targets.py --holdout``).

    cd experiments && ../.venv/bin/python real_argmin.py    # -> results/real_argmin.csv (~6 min)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _table import RESULTS, emit
from real_targets import ROOT, refits

from costmodel import CostModel, Target, make_cost_model
from costmodel.measure.real import RealRow, read_real
from costmodel.measure.real.evaluate import (
    as_run,
    favourite,
    lowered,
    measured_config,
    model_makers,
    model_time,
)

Maker = Callable[[Target], CostModel]


def _ratios(row: RealRow, learned: Maker) -> tuple[float, float, float]:
    """model/sim at the model's pick, model pick/own, sim pick/own (device times).

    Raises:
        ValueError: the row's chain lowers to several kernels (no one grid to pick from).
    """
    chip, lowering, groups = lowered(row)
    if len(groups) != 1:
        raise ValueError(f"lowers to {len(groups)} kernels")
    group = groups[0]
    own = lowering.kernel(group, measured_config(lowering, group, row))
    target = as_run(row, chip, [own])
    model, sim = learned(target), make_cost_model("simulator", target)
    pick = favourite(model, lowering, group, lowering.grid(group))
    m_pick, m_own = (model_time(model, [k], "device") for k in (pick, own))
    s_pick, s_own = (model_time(sim, [k], "device") for k in (pick, own))
    return m_pick / s_pick, m_pick / m_own, s_pick / s_own


def _geo(x: Sequence[float]) -> float:
    """Geometric mean."""
    return math.exp(float(np.mean(np.log(x))))


def _summary(setting: str, kernels: str, sub: Sequence[tuple]) -> dict[str, object]:
    """One line of the table: a setting's rows of one kind of kernel."""
    ratio = [p[2] for p in sub]
    worst = max(sub, key=lambda p: abs(math.log(p[2])))
    row = worst[1]
    return {
        "setting": setting,
        "kernels": kernels,
        "rows": len(sub),
        "learned/sim at pick": f"{_geo(ratio):.3f}",
        "share within 5%": f"{np.mean(np.abs(np.log(ratio)) <= math.log(1.05)):.2f}",
        "model pick/own": f"{_geo([p[3] for p in sub]):.3f}",
        "sim pick/own": f"{_geo([p[4] for p in sub]):.3f}",
        "worst": f"{worst[2]:.3f} ({row.source_name} row {row.row}, {row.family})",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS / "real_argmin.csv"))
    args = parser.parse_args()
    paths = sorted(str(p) for p in (ROOT / "datasets/real").glob("*.csv"))
    rows = read_real(paths)[0]
    shipped = model_makers(("learned",), make_cost_model)["learned"]
    held = {source: models["learned"] for source, models in refits(rows)}
    per_row = []
    for r in (r for r in rows if r.timing == "device"):
        for setting, maker in (("shipped", shipped), ("holdout", held[r.source_name])):
            try:
                per_row.append((setting, r, *_ratios(r, maker)))
            except Exception as err:  # one row that cannot be costed is reported, never fatal
                print(f"{setting}: {r.path} row {r.row} skipped: {type(err).__name__}: {err}")
    table = []
    for setting in ("shipped", "holdout"):
        for kernels in ("all", "library", "custom"):
            sub = [p for p in per_row if p[0] == setting and kernels in ("all", p[1].impl)]
            if sub:
                table.append(_summary(setting, kernels, sub))
    emit(table, Path(args.out), width=14)


if __name__ == "__main__":
    main()
