"""Held-out accuracy of the cost models: raw analytic, calibrated analytic, learned (hgb, with
random forest and ridge for comparison), one row per held-out split.

    .venv/bin/python experiments/eval_costmodel.py
    .venv/bin/python experiments/eval_costmodel.py --splits gpt2,resnet50

Splits: the CLI default (gpt2 + resnet50 held out), then each family held out alone. The test
side keeps only kernels whose signature never occurs in training. Writes
experiments/results/costmodel_eval.csv. Same numbers as `autotune costmodel eval --json`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.dataset import read_table
from costmodel.evaluation import METRICS, evaluate_models
from costmodel.spec import load_target

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument("--table", default=str(ROOT / "datasets/calibration/ascend910b.parquet"))
    parser.add_argument("--splits", nargs="*", default=None)
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "costmodel_eval.csv")
    )
    args = parser.parse_args()
    target = load_target(args.target)
    frame = read_table(args.table)
    splits = args.splits or ["gpt2,resnet50", *sorted(set(frame["family"]))]
    rows = []
    for split in splits:
        held = split.split(",")
        res = evaluate_models(frame, target, held, compare=("forest", "ridge"))
        for name in ("analytic", "calibrated", "learned", "learned_forest", "learned_ridge"):
            rows.append(
                {
                    "holdout": split,
                    "model": name,
                    "train_rows": res["rows"]["train"],
                    "test_rows": res["rows"]["test"],
                    **{m: round(res[name][m], 4) for m in METRICS},
                }
            )
        print(rows[-3], flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
