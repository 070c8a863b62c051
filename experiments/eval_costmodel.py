"""Held-out accuracy of the cost models: raw analytic, calibrated analytic, learned (hgb, with
random forest and ridge for comparison), one row per held-out split.

    .venv/bin/python experiments/eval_costmodel.py
    .venv/bin/python experiments/eval_costmodel.py --splits gpt2,resnet50

Splits: the CLI default (gpt2 + resnet50 held out), then each family held out alone. The test
side keeps only kernels whose signature never occurs in training. Writes
experiments/results/costmodel_eval.csv (same numbers as `autotune costmodel eval --json`) and,
for the first split, the learned model's MAPE by kernel class (unit, and whether a prologue
hands a vector-computed operand to the cube each step) to
experiments/results/costmodel_eval_by_class.csv.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.learned import METRICS, evaluate_models
from costmodel.measure import kernel_from_json, read_table
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
    for n, split in enumerate(splits):
        held = split.split(",")
        res = evaluate_models(frame, target, held, compare=("forest", "ridge"), keep_rows=n == 0)
        if n == 0:
            emit(by_class(res["test"], split), Path(args.csv).with_name(BY_CLASS))
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


BY_CLASS = "costmodel_eval_by_class.csv"


def _prologue(kernel_json: str) -> bool:
    """A vector-side store each step: an operand the vector cores compute for the cube
    (attention's per-step hand-offs are their own kind)."""
    k = kernel_from_json(json.loads(kernel_json))
    return k.kind != "attention" and any(
        s.pipe == "MTE3" and s.per == "step" and s.side == "vector" for s in k.streams
    )


def by_class(test, split: str) -> list[dict[str, object]]:
    rel = np.abs(test["pred_learned"] - test["latency_us"]) / test["latency_us"]
    cal = np.abs(test["pred_calibrated"] - test["latency_us"]) / test["latency_us"]
    frame = test.assign(
        rel=rel,
        cal=cal,
        prologue=["prologue" if _prologue(k) else "no prologue" for k in test["kernel"]],
        all="all",
    )
    out = []
    for keys in (["all"], ["prologue"], ["unit", "prologue"]):
        for value, part in frame.groupby(keys):
            out.append(
                {
                    "holdout": split,
                    "class": "/".join(str(v) for v in value),
                    "rows": len(part),
                    "share_of_error": round(float(part["rel"].sum() / rel.sum()), 4),
                    "learned_mape": round(float(part["rel"].mean()), 4),
                    "calibrated_mape": round(float(part["cal"].mean()), 4),
                }
            )
    return out


if __name__ == "__main__":
    main()
