"""Tuning the real torch.onnx exports (tests/fixtures/exports, tiny dims, batch 2 x seq 16):
none, greedy and tuned latency measured on the simulator, speedups, and the geometric mean.

    .venv/bin/python experiments/tune_exports.py --trials 60

Writes experiments/results/tune_exports.csv.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from _table import RESULTS, emit

from autotune.tuner import TuneConfig, tune_graph
from search_space import load_graph
from search_space.rules import Policy

EXPORTS = Path(__file__).parents[1] / "tests" / "fixtures" / "exports"


def shapes(name: str) -> dict[str, tuple[int, ...]]:
    if name.startswith(("bert", "gpt2", "llama")):
        return {"input_ids": (2, 16), "attention_mask": (2, 16)}
    if name.startswith("encoder_layer"):
        return {"x": (2, 8, 32)}
    return {"image": (2, 3, 32, 32)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    args = parser.parse_args()
    rows = []
    for path in sorted(EXPORTS.glob("*.onnx")):
        graph = load_graph(path, input_shapes=shapes(path.name))
        with tempfile.TemporaryDirectory() as tmp:
            cfg = TuneConfig(
                trials=args.trials,
                storage=str(Path(tmp) / "s.journal"),
                policy=Policy(safe_mode=False),
            )
            result = tune_graph(graph, cfg, name=path.stem)
        base = result.baseline_us
        rows.append(
            {
                "model": path.stem,
                "none_us": round(base["none"], 2),
                "greedy_us": round(base["greedy"], 2),
                "tuned_us": round(result.best_latency_us, 2),
                "vs_none": round(base["none"] / result.best_latency_us, 3),
                "vs_greedy": round(base["greedy"] / result.best_latency_us, 3),
            }
        )
        print(rows[-1], flush=True)
    geo = float(np.exp(np.mean([np.log(r["vs_greedy"]) for r in rows])))
    print(f"geometric mean speedup vs greedy: {geo:.3f}")
    emit(rows, RESULTS / "tune_exports.csv", width=16)


if __name__ == "__main__":
    main()
