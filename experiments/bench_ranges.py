"""One plan for a range of shapes against a plan tuned for each shape alone, and greedy
(issue 49's benchmark).

For a zoo model over its ``--shape-range``s: one study over the ranges (the dynamic plan: one
set of fusion decisions, a config table per bucket), then at every bucket a study of the
model built at that shape alone (its plan, and its greedy baseline measured as the study
measures it), all with ``--trials`` trials, safe mode on (as `autotune tune` runs), each in a
fresh folder. Per bucket, on the simulator:

* ``dynamic_us``: the dynamic plan's groups at the bucket's own configs;
* ``per_shape_us``: the plan tuned for that shape alone;
* ``greedy_us``: the rule-based fusion at that shape (safe mode's greedy).

Targets: dynamic within 5% of per-shape (geomean over buckets, none worse than 10%),
>= 1.15x greedy (geomean), tuning the range in at most 3x the time of one shape (the median
per-shape study).

    cd experiments && ../.venv/bin/python bench_ranges.py --preset bert      # bert-base
    cd experiments && ../.venv/bin/python bench_ranges.py --preset decode    # llama3-8b decode
    cd experiments && ../.venv/bin/python bench_ranges.py --preset bert --layers 2 \\
        --range batch=1..4 --range seq=16..64 --trials 12                   # minutes
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import RESULTS, emit

import autotune
from search_space.rules import Policy
from search_space.shapes import ZooShapes
from search_space.zoo import ZooOptions

PRESETS: dict[str, tuple[str, tuple[str, ...], int | None]] = {
    "bert": ("bert-base", ("batch=1..64", "seq=16..512"), None),
    "decode": ("llama3-8b-decode", ("batch=1..32", "cache=128..4096"), 4),
}


def _study(
    model: str, zoo: ZooOptions, trials: int, safe: bool, **ranged: Any
) -> tuple[Any, float]:
    """A fresh study (its plan and wall time) in a folder of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        plan = autotune.tune(
            f"zoo:{model}",
            zoo=zoo,
            trials=trials,
            storage=str(Path(tmp) / "s.journal"),
            dataset=str(Path(tmp) / "r.parquet"),
            policy=Policy(safe_mode=safe),
            **ranged,
        )
        return plan, time.perf_counter() - t0


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="bert")
    p.add_argument("--range", action="append", default=None, help="NAME=LO..HI (repeat)")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--trials", type=int, default=60)
    p.add_argument("--unsafe", action="store_true", help="safe mode off (faster)")
    a = p.parse_args()
    model, preset_ranges, preset_layers = PRESETS[a.preset]
    ranges = tuple(a.range or preset_ranges)
    zoo = ZooOptions(layers=a.layers if a.layers is not None else preset_layers)
    safe = not a.unsafe
    dynamic, range_s = _study(model, zoo, a.trials, safe, shape_ranges=ranges)
    rows, shape_s = [], []
    for b in dynamic.record.buckets:
        at = ZooShapes(model, zoo).options_at(dict(b.dims))
        alone, wall = _study(model, at, a.trials, safe)
        shape_s.append(wall)
        tuned, greedy = alone.record.measured_us, alone.result.baseline_us["greedy"]
        rows.append(
            {
                "bucket": b.label,
                "dynamic_us": round(b.simulated_us, 1),
                "per_shape_us": round(tuned, 1),
                "greedy_us": round(greedy, 1),
                "dyn/shape": round(b.simulated_us / tuned, 3),
                "greedy/dyn": round(greedy / b.simulated_us, 3),
                "study_s": round(wall, 1),
            }
        )
    ratio = [r["dynamic_us"] / r["per_shape_us"] for r in rows]
    gain = [r["greedy_us"] / r["dynamic_us"] for r in rows]
    rows.append(
        {
            "bucket": f"geomean ({len(rows)})",
            "dynamic_us": "",
            "per_shape_us": "",
            "greedy_us": "",
            "dyn/shape": round(_geomean(ratio), 3),
            "greedy/dyn": round(_geomean(gain), 3),
            "study_s": round(range_s, 1),
        }
    )
    emit(rows, RESULTS / f"bench_ranges_{a.preset}.csv", width=14)
    median = statistics.median(shape_s)
    print(
        f"{model} over {', '.join(ranges)}, {len(ratio)} buckets, {a.trials} trials: dynamic vs "
        f"per-shape geomean {_geomean(ratio):.3f}, worst {max(ratio):.3f}; over greedy "
        f"{_geomean(gain):.2f}x; range study {range_s:.0f} s = {range_s / median:.1f}x the "
        f"median per-shape study ({median:.0f} s)"
    )


if __name__ == "__main__":
    main()
