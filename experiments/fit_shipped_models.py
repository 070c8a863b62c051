"""Regenerate the cost-model artifacts shipped with the package from the calibration tables:
``costmodel/data/calibration-<target>.json`` (fitted analytic constants) and
``costmodel/data/learned-<target>.json.gz`` (constants + the learned correction).

    .venv/bin/autotune calibrate --target ascend910b --samples 9000 --seed 0   # the table
    .venv/bin/python experiments/fit_shipped_models.py --target ascend910b

Trains on the simulated rows of ``datasets/calibration/<target>.parquet`` and
``<target>-*.parquet``: the shipped models predict the simulator, whose agreement the tuner's
measurements rely on. ``--with-hardware`` also fits the rows measured on hardware (such as
``<target>-real.parquet``, made by ``autotune calibrate --from-msprof``), weighed up as
``calibrate --fit`` does; docs/calibration.md says why the shipped models leave them out.

The other targets' tables:

    .venv/bin/autotune calibrate --target ascend910 --samples 9000 --seed 0 \
        -o datasets/calibration/ascend910.parquet
    .venv/bin/python experiments/fit_shipped_models.py --target ascend910
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from costmodel.analytic import Calibration, shipped_calibration_path
from costmodel.learned import fit_learned, on_hardware, shipped_model_path
from costmodel.measure import read_table, target_tables
from costmodel.spec import load_target

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument(
        "--with-hardware", action="store_true", help="also fit the rows measured on hardware"
    )
    args = parser.parse_args()
    target = load_target(args.target)
    tables = target_tables(args.target, ROOT / "datasets/calibration")
    if not tables:
        parser.error(f"no table for {args.target} under datasets/calibration/")
    if not args.with_hardware:  # each table read once; a table of hardware rows only drops
        frames = {t: read_table([t]) for t in tables}
        frames = {t: f[~on_hardware(f)] for t, f in frames.items()}
        tables = [t for t, f in frames.items() if len(f)]
        frame = pd.concat([frames[t] for t in tables], ignore_index=True)
    else:
        frame = read_table(tables)
    model = fit_learned(frame, target)
    cal = Calibration.from_json(model.trained_on["calibration"])
    cal = Calibration(
        cal.target, cal.spec_digest, cal.constants, cal.rows, cal.rmse_log_before,
        cal.rmse_log_after, source=", ".join(f"datasets/calibration/{t.name}" for t in tables),
    )  # fmt: skip
    shipped_calibration_path(args.target).parent.mkdir(exist_ok=True)
    cal.save(shipped_calibration_path(args.target))
    model.save(shipped_model_path(args.target))
    size = shipped_model_path(args.target).stat().st_size
    print(json.dumps({"rows": len(frame), "constants": cal.constants.to_json(), "bytes": size}))


if __name__ == "__main__":
    main()
