"""Benchmark: analytic cost model throughput and its 910B sanity figures.

Throughput is kernel-config evaluations per second on one core: a hand-built batch of matmul
configs (what ``lower_many`` produces for one group), every group grid of a zoo model lowered
by ``costmodel.lower``, and whole plans through ``evaluate``. Prints a table and writes
experiments/results/bench_analytic.csv.

    .venv/bin/python experiments/bench_analytic.py
    .venv/bin/python experiments/bench_analytic.py --configs 5000 --model llama3-8b
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _table import emit  # experiments/_table.py (scripts run from this folder)

from costmodel.analytic import AnalyticModel
from costmodel.kernel import Kernel, KernelBatch, KernelConfig, StreamBatch
from costmodel.spec import Target, load_target


def matmul_batch(
    size: int, configs: list[KernelConfig], target: Target, nd2nz: bool = True
) -> KernelBatch:
    """An fp16 ``size``-cubed matmul (activation x weight) under many tilings, by hand.

    ``nd2nz``: the activation is converted to the NZ layout on the fly (as the lowering does).
    """
    spec = target.spec
    fields = ("base_m", "base_n", "base_k", "m", "n", "k")
    bm, bn, bk, m, n, k = (np.array([getattr(c, f) for c in configs]) for f in fields)
    db = np.array([c.double_buffer for c in configs])
    slots = np.where(db, 2, 1)
    mmads = (bm // m) * (bn // n) * (bk // k)
    whole = size * size * 2
    return KernelBatch(
        name="mm",
        ops=("mm",),
        kind="single",
        unit="cube",
        configs=tuple(configs),
        grid=np.stack([np.ones_like(bm), size // bm, size // bn], axis=1),
        steps=size // bk,
        streams=(
            StreamBatch("a", "MTE2", bm * bk * 2, bk * 2, "bik", nd2nz=nd2nz, tensor_bytes=whole),
            StreamBatch("b", "MTE2", bk * bn * 2, np.full(len(bm), 512), "kj", tensor_bytes=whole),
            StreamBatch("c", "FIX", bm * bn * 2, bn * 2, "bij", per="tile", tensor_bytes=whole),
        ),
        mte1_l0a_bytes=bm * bk * 2,
        mte1_l0b_bytes=bk * bn * 2,
        mmads=mmads,
        cube_cycles=mmads * spec.mmad_fixed_cycles + bm * bn * bk / 4096,
        vector_cycles_step=np.zeros(len(bm)),
        vector_cycles_tile=np.zeros(len(bm)),
        vector_instrs=np.zeros(len(bm), dtype=np.int64),
        cross_core_syncs=np.zeros(len(bm), dtype=np.int64),
        footprint={
            "l1": (bm * bk + bk * bn) * 2 * slots,
            "l0a": m * k * 2 * slots,
            "l0b": k * n * 2 * slots,
            "l0c": bm * bn * 4,
        },
        flops=2 * size**3,
        cube_flops=2 * size**3,
        compulsory_bytes=3 * whole,
    )


def matmul_configs(count: int) -> list[KernelConfig]:
    tiles = [16, 32, 64, 128, 256, 512]
    out = [
        KernelConfig(cores, bm, bn, bk, min(bm, 128), min(bn, 128), min(bk, l0k), double_buffer=db)
        for bm, bn, bk, l0k, cores, db in itertools.product(
            tiles, tiles, tiles, (32, 64, 128), (1, 2, 4, 8, 12, 16, 20, 24), (True, False)
        )
    ]
    reps = -(-count // len(out))
    return (out * reps)[:count]


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def throughput(model: AnalyticModel, configs: int, zoo: str, repeat: int) -> list[dict]:
    rows = []
    batch = matmul_batch(4096, matmul_configs(configs), model.target)
    sec = best_of(lambda: model.predict_batch(batch), repeat)
    feasible = int(batch.feasible_mask(model.target.spec).sum())
    rows.append(
        _row("predict_batch, matmul 4096 by hand", len(batch), sec, f"{feasible} feasible")
    )
    try:
        from costmodel.lower import Lowering
        from search_space import load_graph
        from search_space.ir import singleton_groups
        from search_space.zoo import build
    except ImportError as err:  # the lowering is optional for this benchmark
        print(f"skipping lowered batches: {err}")
        return rows
    graph = load_graph(build(zoo, weights="inputs"))
    low = Lowering(graph, model.target)
    groups = {low.signature(g): g for g in singleton_groups(graph)}
    batches = [low.batch(g, low.grid(g)) for g in groups.values()]
    sec = best_of(lambda: [model.predict_batch(b) for b in batches], repeat)
    total = sum(len(b) for b in batches)
    note = f"{len(batches)} group signatures"
    rows.append(_row(f"predict_batch, every grid of {zoo}", total, sec, note))
    kernels = low.kernels(list(singleton_groups(graph)))
    sec = best_of(lambda: model.evaluate(kernels), repeat)
    rows.append(_row(f"evaluate, {zoo} plan (no fusion)", len(kernels), sec, "with L2 carry"))
    return rows


def _row(case: str, evals: int, sec: float, note: str) -> dict:
    return {
        "case": case,
        "evaluations": evals,
        "seconds": round(sec, 5),
        "evals_per_s": round(evals / sec),
        "note": note,
    }


def anchors(model: AnalyticModel) -> list[dict]:
    """The 910B sanity figures the analytic tests pin, as numbers."""
    spec = model.target.spec

    def mm(size: int, db: bool = True, nd2nz: bool = False) -> Kernel:
        config = KernelConfig(24, 128, 256, 256, 128, 128, 128, double_buffer=db)
        return matmul_batch(size, [config], model.target, nd2nz).kernel(0)

    def eff(m: AnalyticModel, k: Kernel) -> str:
        c = m.evaluate([k])[0]
        return (
            f"{100 * k.cube_flops / spec.cube_peak_flops / (c.latency_us * 1e-6):.1f}% ({c.bound})"
        )

    no_l2 = AnalyticModel(load_target(spec.name, {"l2_bytes": 0}))
    out = []
    for size in (2048, 4096, 8192):
        out.append({"case": f"fp16 matmul {size}, 128x256x256 db", "value": eff(model, mm(size))})
    out.append({"case": "fp16 matmul 8192, l2_bytes=0", "value": eff(no_l2, mm(8192))})
    out.append(
        {"case": "fp16 matmul 8192, A converted nd2nz", "value": eff(model, mm(8192, nd2nz=True))}
    )
    db, sb = model.predict([mm(8192)])[0], model.predict([mm(8192, db=False)])[0]
    out.append({"case": "matmul 8192 single / double buffered", "value": f"{sb / db:.2f}x"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ascend910b")
    parser.add_argument("--configs", type=int, default=4096)
    parser.add_argument("--model", default="bert-base", help="zoo model for lowered batches")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "bench_analytic.csv")
    )
    args = parser.parse_args()
    model = AnalyticModel(load_target(args.target))
    rows = throughput(model, args.configs, args.model, args.repeat)
    emit(rows, Path(args.csv))


if __name__ == "__main__":
    main()
