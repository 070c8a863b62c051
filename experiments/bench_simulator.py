"""Benchmark: the event-driven simulator, fast paths against the full simulation.

Hand-built kernels pin the physics figures (matmul % of cube peak with and without L2,
elementwise streaming rate); zoo models lowered as their ``none`` plan measure speed (wall time,
events/second, memo hit rate). Prints a table and writes experiments/results/bench_simulator.csv.

    .venv/bin/python experiments/bench_simulator.py            # everything (about a minute)
    .venv/bin/python experiments/bench_simulator.py --quick    # no llama3-8b x32, no full runs
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.base import KernelCost
from costmodel.kernel import Kernel, KernelConfig, Stream
from costmodel.simulator import SimulatorModel
from costmodel.spec import HardwareSpec, Target, load_target

FP16 = 2


def matmul(size: int, l1: int = 256, l0: int = 128, cores: int = 24, db: bool = True) -> Kernel:
    """fp16 square matmul, L1 tiles ``l1``^3, L0 tiles ``l0``^3 (as a lowering writes it)."""
    slots = 2 if db else 1
    mmads = (l1 // l0) ** 3
    blk = l1 * l1 * FP16
    full = size * size * FP16
    return Kernel(
        name=f"mm{size}",
        ops=("mm",),
        kind="single",
        unit="cube",
        config=KernelConfig(cores, l1, l1, l1, l0, l0, l0, double_buffer=db),
        grid=(1, size // l1, size // l1),
        steps=size // l1,
        streams=(
            Stream("a", "MTE2", blk, "bik", "step", "cube", False, full, l1 * FP16),
            Stream("b", "MTE2", blk, "kj", "step", "cube", False, full, l1 * FP16),
            Stream("c", "FIX", blk, "bij", "tile", "cube", False, full, l1 * FP16),
        ),
        mte1_l0a_bytes=blk,
        mte1_l0b_bytes=blk,
        mmads=mmads,
        cube_cycles=mmads * 24 + l1**3 / 4096,
        footprint={"l1": 2 * blk * slots, "l0a": l0 * l0 * FP16 * slots, "l0c": l0 * l0 * 4},
        flops=2 * size**3,
        cube_flops=2 * size**3,
        compulsory_bytes=3 * full,
    )


def add(elements: int, tile: int = 16384, cores: int = 48) -> Kernel:
    """fp16 elementwise ``z = x + y`` on vector cores."""
    tiles = elements // tile
    nb = tile * FP16
    return Kernel(
        name=f"add{elements}",
        ops=("add",),
        kind="single",
        unit="vector",
        config=KernelConfig(cores, ub_rows=1, ub_cols=tile),
        grid=(1, tiles, 1),
        steps=1,
        streams=tuple(
            Stream(t, p, nb, "i", "tile", "vector", False, tiles * nb, nb)
            for t, p in (("x", "MTE2"), ("y", "MTE2"), ("z", "MTE3"))
        ),
        vector_cycles_tile=nb / 256 + 20,
        footprint={"ub": 6 * nb},
        flops=elements,
        compulsory_bytes=3 * elements * FP16,
    )


Metric = Callable[[list[KernelCost], list[Kernel], HardwareSpec], str]


def run(case: str, kernels: list[Kernel], spec: HardwareSpec, fast: bool) -> dict[str, Any]:
    model = SimulatorModel(Target(spec), fast=fast)
    t0 = time.perf_counter()
    costs = model.evaluate(kernels)
    wall = time.perf_counter() - t0
    s = model.stats
    return {
        "case": case,
        "fast": fast,
        "kernels": len(kernels),
        "simulated": int(s["simulated"]),
        "wall_s": round(wall, 3),
        "events": int(s["events"]),
        "events_per_s": round(s["events_per_s"]),
        "memo_hit_rate": round(s["memo_hit_rate"], 3),
        "waves_skipped": int(s["waves_skipped"]),
        "plan_ms": round(sum(c.latency_us for c in costs) / 1e3, 4),
        "metric": "",
        "_costs": costs,
    }


def zoo_plan(name: str, layers: int | None) -> list[Kernel] | None:
    """The ``none`` plan of a zoo model, lowered with default configs (None if unavailable)."""
    try:
        from costmodel.lower import Lowering
        from search_space import load_graph
        from search_space.ir import singleton_groups
        from search_space.zoo import build

        graph = load_graph(build(name, weights="inputs", layers=layers).SerializeToString())
        return Lowering(graph, load_target("ascend910b")).kernels(singleton_groups(graph))
    except Exception as err:  # the lowering is young; the hand-built cases still run
        print(f"skipping {name}: {type(err).__name__}: {err}", file=sys.stderr)
        return None


def peak(costs: list[KernelCost], kernels: list[Kernel], spec: HardwareSpec) -> str:
    k, c = kernels[0], costs[0]
    frac = k.cube_flops / (c.latency_us * 1e-6) / spec.cube_peak_flops
    return f"{frac:.1%} of cube peak ({c.bound}, L2 hit {c.l2_hit_rate:.0%})"


def stream_rate(costs: list[KernelCost], kernels: list[Kernel], spec: HardwareSpec) -> str:
    tb = kernels[0].compulsory_bytes / (costs[0].latency_us * 1e-6) / 1e12
    return f"{tb:.2f} TB/s ({costs[0].bound})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip llama3-8b x32 and full runs")
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "bench_simulator.csv")
    )
    args = parser.parse_args()
    spec = load_target("ascend910b").spec
    no_l2 = spec.replace(l2_bytes=0)
    cases: list[tuple[str, list[Kernel], HardwareSpec, Metric | None]] = [
        ("matmul 8192 fp16", [matmul(8192)], spec, peak),
        ("matmul 8192 fp16, l2=0", [matmul(8192)], no_l2, peak),
        ("matmul 4096 fp16", [matmul(4096)], spec, peak),
        ("matmul 2048 fp16", [matmul(2048)], spec, peak),
        ("matmul 2048 fp16, 128^3 tiles", [matmul(2048, l1=128)], spec, peak),
        ("add 2x64M fp16", [add(64 << 20)], spec, stream_rate),
        (
            "add 2x64M fp16, hbm/2",
            [add(64 << 20)],
            spec.replace(hbm_bytes_per_s=6.5e11),
            stream_rate,
        ),
    ]
    for name, layers in (("bert-base", None), ("llama3-8b", 32)):
        if args.quick and name == "llama3-8b":
            continue
        plan = zoo_plan(name, layers)
        if plan is not None:
            label = f"{name} none plan" + (f" x{layers}" if layers else "")
            cases.append((label, plan, spec, None))
    rows = []
    for case, kernels, sp, metric in cases:
        modes = [True] if args.quick or len(kernels) > 400 else [True, False]
        for fast in modes:
            row = run(case, kernels, sp, fast)
            costs = row.pop("_costs")
            if metric is not None:
                row["metric"] = metric(costs, kernels, sp)
            rows.append(row)
            print(f"{case:<32} fast={fast!s:<5} {row['wall_s']:>8.2f} s  {row['metric']}")
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
