"""Tuned plans against the baselines on real models, safe mode on (issue 22's benchmark).

For the nine model-zoo CNNs the onnx wheel ships (``onnx/backend/test/data/light``) and the
seven zoo models at full size: a fresh study of ``--trials`` trials with safe mode on, then on
the same study (its forbidden signatures taken up) the max plan at its best tiles and the
``optimal`` plan (the exact minimum of the additive model), each made safe and measured on the
simulator like every candidate; the roofline beside them. Columns: every plan's simulated
latency, the tuned plan's speedups, the verdict counts, and the wall time per phase of the
study (exclusive seconds, ``meta.timing_s``). Targets: every model >= 1.0x safe greedy; on the
CNNs a geomean >= 1.15x over safe greedy and >= 1.05x over max-with-best-tiles; a 12-trial
study of a CNN under 60 s.

    cd experiments && ../.venv/bin/python bench_models.py                # all 16, 12 trials
    cd experiments && ../.venv/bin/python bench_models.py --models light_resnet50 bert-base

Writes results/bench_models.csv.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import onnx
from _study import fresh_study
from _table import RESULTS, emit

from autotune.tuner import Candidate
from costmodel.roofline import roofline_us
from search_space import load_graph
from search_space.space import OptimalUnavailable, baseline_plan
from search_space.zoo import ZooOptions, list_models, resolve_model

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
CNNS = sorted(p.stem for p in LIGHT.glob("light_*.onnx"))
PHASES = (
    "setup", "trials", "measurement", "refit", "local search", "polish", "rule-based",
    "settle", "pick", "safe mode", "report",
)  # fmt: skip


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def bench(name: str, trials: int) -> dict[str, Any]:
    """One model: a fresh safe study, then max and optimal measured through the same check."""
    spec = str(LIGHT / f"{name}.onnx") if name in CNNS else f"zoo:{name}"
    zoo = ZooOptions()
    source = resolve_model(spec, zoo)
    graph = load_graph(source)
    with fresh_study(graph, spec, zoo, name, trials) as study:
        result, s, target, wall = study.result, study.session, study.target, study.wall_s
        max_best = s.measure(s.baselines["max"], "max")
        t1 = time.perf_counter()
        try:
            optimal: Candidate | None = s.measure(
                baseline_plan("optimal", s.ctx, s.oracle, s.config.policy), "optimal"
            )
        except OptimalUnavailable as err:  # its time limit: the row says so, the run goes on
            print(f"{name}: {err}", flush=True)
            optimal = None
        optimal_s = time.perf_counter() - t1
    tuned, greedy = result.best_latency_us, result.baseline_us["greedy"]
    report, timing = result.report, result.plan.meta.get("timing_s", {})
    row: dict[str, Any] = {
        "model": name,
        "kind": "cnn" if name in CNNS else "zoo",
        "ops": len(graph.ops),
        "trials": result.trials,
        "tuned_us": round(tuned, 1),
        "safe_greedy_us": round(greedy, 1),
        "max_best_us": round(max_best.latency_us, 1),
        "optimal_us": round(optimal.latency_us, 1) if optimal else math.nan,
        "roofline_us": round(roofline_us(graph, target), 1),
        "vs_greedy": round(greedy / tuned, 3),
        "vs_max_best": round(max_best.latency_us / tuned, 3),
        "vs_optimal": round(optimal.latency_us / tuned, 3) if optimal else math.nan,
        "fused": report.get("fused", 0),
        "unverified": report.get("unverified", 0),
        "skipped_precision": report.get("skipped_precision", 0),
        "forbidden": report.get("forbidden", 0),
        "max_safe": max_best.source.endswith("safe"),
        "optimal_safe": optimal.source.endswith("safe") if optimal else "",
        "wall_s": round(wall, 1),
        "optimal_s": round(optimal_s, 1),
    }
    row.update({f"{p.replace(' ', '_')}_s": round(timing.get(p, 0.0), 1) for p in PHASES})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=CNNS + [m.name for m in list_models()])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--csv", default=str(RESULTS / "bench_models.csv"))
    args = parser.parse_args()
    rows = []
    for name in args.models:
        rows.append(bench(name, args.trials))
        print(rows[-1], flush=True)
        emit(rows, args.csv)  # after every model: a long run that stops keeps what it has
    for kind in ("cnn", "zoo"):
        part = [r for r in rows if r["kind"] == kind]
        if part:
            print(
                f"{kind}: geomean {_geomean([r['vs_greedy'] for r in part]):.3f}x safe greedy, "
                f"{_geomean([r['vs_max_best'] for r in part]):.3f}x max-best-tiles, "
                f"{_geomean([r['vs_optimal'] for r in part if r['vs_optimal'] > 0]):.3f}x "
                "optimal (where it finished); "
                f"worst vs greedy {min(r['vs_greedy'] for r in part):.3f}; "
                f"slowest study {max(r['wall_s'] for r in part):.1f} s"
            )


if __name__ == "__main__":
    main()
