"""Does a model refitted on real rows still rank a kernel's configs as the simulator does?

A real row measures one config of its kernel, so it says nothing about how the time moves from
config to config; a correction fitted to it can still learn such a move, and a tuner then
picks the config where that move is most optimistic. For every device-timed real row, this
takes the learned model's favourite config over the kernel's grid (as ``real_targets.py``
does) and simulates it: ``model/sim`` is the model's time there over the simulator's (1 when
the model ranks as the simulator does at the config it picks), ``model best/default`` and
``sim best/default`` what each says the pick gains over the row's own config. Two models: the
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
import pandas as pd
from _table import RESULTS, emit
from real_targets import CHIP, ROOT, _fitted_models

from autotune.real import RealRow, read_real
from autotune.real.evaluate import _model_times, as_run, lowered, measured_config, model_makers
from autotune.real.table import table_rows
from costmodel import CostModel, Target, make_cost_model
from costmodel.calibration import read_table
from costmodel.learned import fit_learned
from costmodel.spec import load_target

Maker = Callable[[Target], CostModel]


def _ratios(row: RealRow, learned: Maker) -> tuple[float, float, float]:
    """model/sim at the model's pick, model best/default, sim best/default (device times)."""
    chip, lowering, [group] = lowered(row)
    own = lowering.kernel(group, measured_config(lowering, group, row))
    target = as_run(row, chip, [own])
    model, sim = learned(target), make_cost_model("simulator", target)
    grid = list(lowering.grid(group))
    scores = model.predict_batch(lowering.batch(group, grid))  # type: ignore[attr-defined]
    pick = lowering.kernel(group, grid[int(np.argmin(scores))])
    m_pick, m_own = (_model_times(model, [k], "device") for k in (pick, own))
    s_pick, s_own = (_model_times(sim, [k], "device") for k in (pick, own))
    return m_pick / s_pick, m_pick / m_own, s_pick / s_own


def _holdout_makers(rows: Sequence[RealRow]) -> dict[str, Maker]:
    """Per source of device rows, the learned model refitted without that source's rows (on
    the others' fit rows: ``table_rows`` says which rows are)."""
    sim = read_table([ROOT / f"datasets/calibration/{CHIP}.parquet"])
    out = {}
    for source in sorted({r.source_name for r in rows if r.timing == "device"}):
        train, _ = table_rows([r for r in rows if r.source_name != source], CHIP)
        fitted = fit_learned(pd.concat([sim, pd.DataFrame(train)], ignore_index=True),
                             load_target(CHIP))  # fmt: skip
        out[source] = _fitted_models(fitted.state(), fitted.analytic.constants)["learned"]
        print(f"refitted without {source} on {len(train)} real rows")
    return out


def _geo(x: Sequence[float]) -> float:
    return math.exp(float(np.mean(np.log(x))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS / "real_argmin.csv"))
    args = parser.parse_args()
    paths = sorted(str(p) for p in (ROOT / "datasets/real").glob("*.csv"))
    rows = read_real(paths)[0]
    shipped = model_makers(("learned",))["learned"]
    held = _holdout_makers(rows)
    per_row = []
    for r in (r for r in rows if r.timing == "device"):
        for setting, maker in (("shipped", shipped), ("holdout", held[r.source_name])):
            try:
                ratio, model_gain, sim_gain = _ratios(r, maker)
            except ValueError:  # a chain that lowers to several kernels has no one grid
                continue
            per_row.append((setting, r, ratio, model_gain, sim_gain))
    table = []
    for setting in ("shipped", "holdout"):
        for kernels in ("all", "library", "custom"):
            sub = [p for p in per_row if p[0] == setting and kernels in ("all", p[1].impl)]
            ratio = [p[2] for p in sub]
            worst = max(sub, key=lambda p: abs(math.log(p[2])))
            table.append(
                {
                    "setting": setting,
                    "kernels": kernels,
                    "rows": len(sub),
                    "model/sim": f"{_geo(ratio):.3f}",
                    "within_5%": f"{np.mean(np.abs(np.log(ratio)) <= math.log(1.05)):.2f}",
                    "model best/default": f"{_geo([p[3] for p in sub]):.3f}",
                    "sim best/default": f"{_geo([p[4] for p in sub]):.3f}",
                    "worst": f"{worst[2]:.3f} (row {worst[1].row}, {worst[1].family})",
                }
            )
    emit(table, Path(args.out), width=14)


if __name__ == "__main__":
    main()
