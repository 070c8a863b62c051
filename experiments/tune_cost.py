"""`--cost learned` vs `--cost analytic`: the same study budget on every zoo model, the plan
each picks measured on the simulator (no noise).

    .venv/bin/python experiments/tune_cost.py --trials 60
    .venv/bin/python experiments/tune_cost.py --models bert-base --trials 40
    .venv/bin/python experiments/tune_cost.py --seeds 1 \
        --csv experiments/results/tune_cost_seed1.csv          # another sampler seed

Writes experiments/results/tune_cost.csv. Each run gets a fresh journal in a temp folder, the
same seed and sampler; only the cost model scoring the trials differs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _table import emit  # experiments/_table.py (scripts run from this folder)

from autotune.tuner import TuneConfig, tune_graph
from search_space import load_graph
from search_space.rules import Policy
from search_space.zoo import build, list_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[m.name for m in list_models()])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--llama-layers", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0], help="sampler seeds")
    parser.add_argument("--csv", default=str(Path(__file__).parent / "results" / "tune_cost.csv"))
    args = parser.parse_args()
    rows = []
    for name in args.models:
        layers = args.llama_layers if name == "llama3-8b" else None
        graph = load_graph(build(name, weights="inputs", layers=layers))
        for seed in args.seeds:
            row: dict[str, object] = {
                "model": name,
                "layers": layers or "",
                "trials": args.trials,
                "seed": seed,
            }
            for cost in ("analytic", "learned"):
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = time.perf_counter()
                    result = tune_graph(
                        graph,
                        TuneConfig(
                            trials=args.trials,
                            storage=str(Path(tmp) / "s.journal"),
                            cost=cost,
                            seed=seed,
                            policy=Policy(safe_mode=False),
                        ),
                        name=name,
                    )
                    row[f"{cost}_wall_s"] = round(time.perf_counter() - t0, 1)
                row["greedy_us"] = round(result.baseline_us["greedy"], 1)
                row[f"{cost}_us"] = round(result.best_latency_us, 1)
                row[f"{cost}_source"] = result.plan.meta["source"]
                if cost == "learned":
                    row["refits"] = result.plan.meta["cost_model"]["refits"]
            ratio = float(row["analytic_us"]) / float(row["learned_us"])  # type: ignore[arg-type]
            row["learned_vs_analytic"] = round(ratio, 4)
            rows.append(row)
            print(row, flush=True)
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
