"""The cost models on kernels inside a real step, beside the kernels timed alone (issue 45).

Every real row (``datasets/real/*.csv``) is costed by the simulator, the analytic and the
learned model at the config it ran at (``/default``) and, with ``--best``, at each model's
favourite; an in-situ row with its inputs in L2 as their producers just wrote them (``warm``)
and, to show what that buys, as if timed alone (``cold``); and by the naive baseline, the
roofline plus a fixed 2 us floor. Scored apart, as the targets are set:

* ``in-situ``: device-timed kernels inside real training and serving steps;
* ``attention``: fused attention at serving shapes (CANN's FusedInferAttentionScore and a
  flash kernel written for the shape, NPU events around a loop), and the same rows split
  by timing (``attention device``, ``attention host``);
* ``isolated``: device-timed kernels timed alone (the rows the models were fitted near).

Per set: each model's geomean of predicted / real, median |ln|, share within 25%, and the
worst source's and worst family's (>= 5 rows) geomean. Targets on in-situ and attention rows:
median |ln| <= 0.20, >= 60% within 25%, every family of >= 5 rows in [0.75, 1.33]. Then the
config ranking: per kernel timed under several tile configs the models can express (the
catlass GEMM tilings), the Kendall tau of predicted against measured (-> the CSV
``results/real_insitu_ranking.csv``).

    cd experiments && ../.venv/bin/python real_insitu.py      # -> results/real_insitu.csv
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

from costmodel.measure.real import RealPrediction, RealRow, metrics, predict_rows, read_real
from costmodel.measure.real.scores import config_ranking
from costmodel.registry import make_cost_model

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("simulator", "analytic", "learned")
SETS: dict[str, Callable[[RealRow], bool]] = {
    "in-situ": lambda r: r.context == "in-situ" and r.timing == "device",
    "attention": lambda r: r.family == "attention" and r.context == "isolated",
    # the same rows by how they were timed: msprof on the device, or NPU events around a
    # loop of launches (whose time includes what the host spends per launch)
    "attention device": lambda r: r.family == "attention" and r.timing == "device",
    "attention host": lambda r: r.family == "attention" and r.timing != "device",
    "isolated": lambda r: r.context == "isolated" and r.timing == "device",
}
FAMILY_MIN_ROWS = 5


def _geo(preds: Sequence[RealPrediction], name: str) -> float | None:
    return metrics([p.predicted[name] for p in preds], [p.row.time_us for p in preds])["geomean"]


def _worst(preds: Sequence[RealPrediction], name: str, key: str) -> str:
    """The group (by ``key``) whose geomean is furthest from 1, as ``group ratio``."""
    groups: dict[str, list[RealPrediction]] = {}
    for p in preds:
        groups.setdefault(getattr(p.row, key), []).append(p)
    scored = [
        (g, _geo(ps, name))
        for g, ps in groups.items()
        if key == "source_name" or len(ps) >= FAMILY_MIN_ROWS
    ]
    scored = [(g, v) for g, v in scored if v]
    if not scored:
        return ""
    g, v = max(scored, key=lambda gv: abs(math.log(gv[1])))
    return f"{g} {v:.2f}"


def _line(label: str, name: str, preds: Sequence[RealPrediction]) -> dict[str, Any]:
    m = metrics([p.predicted[name] for p in preds], [p.row.time_us for p in preds])
    return {
        "set": label,
        "model": name,
        "rows": m["n"],
        "geomean": round(m["geomean"] or math.nan, 3),
        "median_ln": round(m["median_ln"] if "median_ln" in m else m["median_abs_log"], 3),
        "within_25": round(m["within_25"] or 0.0, 3),
        "worst_source": _worst(preds, name, "source_name"),
        "worst_family": _worst(preds, name, "family"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="*", help="real-data CSVs (default datasets/real/*.csv)")
    parser.add_argument("--best", action="store_true", help="also each model's favourite config")
    parser.add_argument("--out", default=str(RESULTS / "real_insitu.csv"))
    args = parser.parse_args()
    paths = args.csv or sorted(str(p) for p in (ROOT / "datasets/real").glob("*.csv"))
    rows, _ = read_real(paths)
    chosen = {k: [r for r in rows if pick(r)] for k, pick in SETS.items()}
    table: list[dict[str, Any]] = []
    for label, subset in chosen.items():
        preds = [
            p for p in predict_rows(subset, make_cost_model, MODELS, args.best) if not p.error
        ]
        names = [n for n in preds[0].predicted if n != "naive"] + ["naive"] if preds else []
        table += [_line(label, n, preds) for n in names]
        if label == "in-situ":  # the same rows as if timed alone: what residency buys
            alone = [dataclasses.replace(r, context="isolated") for r in subset]
            cold = [
                p for p in predict_rows(alone, make_cost_model, MODELS, args.best) if not p.error
            ]
            table += [_line("in-situ cold", n, cold) for n in names if n != "naive"]
    emit(table, args.out, width=11)
    tiled = [
        p
        for p in predict_rows([r for r in rows if r.tiling], make_cost_model, MODELS, False)
        if not p.error
    ]
    ranks = []
    for name in (*(f"{m}/default" for m in MODELS), "naive"):
        got = config_ranking(tiled, name)
        ranks.append(
            {
                "model": name,
                "kernels": got["n_kernels"],
                "mean_tau": round(got["mean_tau"] or 0.0, 3),
                "taus": " ".join(f"{t['tau']:+.0f}" for t in got["kernels"]),
            }
        )
    emit(ranks, Path(args.out).with_name("real_insitu_ranking.csv"), width=11)


if __name__ == "__main__":
    main()
