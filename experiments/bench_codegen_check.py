"""Benchmark: the code-generation check (`check_package`) of a plan, against the graph's work.

Safe mode runs this check once per study on the plan it outputs (``codegen_check = auto``:
when a device is present, or when the graph is within ``CODEGEN_CHECK_FLOPS`` and
``CODEGEN_CHECK_OPS`` of ``autotune.tuner.safety_codegen``; without a device Triton's CPU
interpreter runs every kernel). This measures where that budget sits: each case runs in a fresh
subprocess (imports, package load and interpreter start-up included), with a time limit.
Prints a table (``work_ops``: ops that do work, as the budget counts them; ``in_budget``: within
both limits) and writes experiments/results/bench_codegen_check.csv.

    .venv/bin/python experiments/bench_codegen_check.py
    .venv/bin/python experiments/bench_codegen_check.py --cases bert-base:0.1:1 --plan max
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from _table import emit  # experiments/_table.py (scripts run from this folder)

CHILD = r"""
import json, sys, tempfile, time
t0 = time.perf_counter()
from autotune.codegen.check import check_package
from autotune.codegen.generate import generate
from autotune.tuner.safety_codegen import CODEGEN_CHECK_FLOPS, CODEGEN_CHECK_OPS
from search_space.zoo import build
from costmodel.spec import load_target
from search_space import load_graph
name, scale, layers, plan = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
kw = {"layers": int(layers)} if layers != "-" else {}
model = build(name, weights="random", scale=scale, **kw)
graph = load_graph(model)
t1 = time.perf_counter()
gen = generate(model, graph, plan, load_target(), model_name=name)
with tempfile.TemporaryDirectory() as tmp:
    folder = gen.write(tmp + "/pkg")
    t2 = time.perf_counter()
    res = check_package(folder, model, gen.program)
    t3 = time.perf_counter()
work = sum(1 for op in graph.ops if not op.is_view and not op.constant)
print(json.dumps({
    "model": name, "scale": scale, "layers": layers, "plan": plan,
    "gflops": round(graph.flops / 1e9, 3), "ops": len(graph.ops), "work_ops": work,
    "in_budget": graph.flops <= CODEGEN_CHECK_FLOPS and work <= CODEGEN_CHECK_OPS,
    "kernels": len(gen.program.kernels), "failing": len(res.failing_groups),
    "setup_s": round(t1 - t0, 1), "generate_s": round(t2 - t1, 1),
    "check_s": round(t3 - t2, 1),
}))
"""


def run(case: str, plan: str, limit: float) -> dict[str, object]:
    name, scale, layers = ([*case.split(":"), "", ""])[:3]
    argv = [sys.executable, "-c", CHILD, name, scale or "1.0", layers or "-", plan]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return {"model": name, "scale": scale, "layers": layers or "-", "plan": plan,
                "check_s": f">{limit:g}"}  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": name, "scale": scale, "layers": layers or "-", "plan": plan,
                "check_s": f"error: {tail[:60]}"}  # fmt: skip
    row: dict[str, object] = json.loads(lines[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        nargs="*",
        default=[
            "bert-base:0.1:1", "bert-base:0.1:2", "bert-base:0.25:1", "bert-base:0.5:1",
            "gpt2:0.1:1", "gpt2:0.25:1", "transformer-base:0.1:1", "vit-b16:0.1:1",
            "mobilenetv3:0.1", "resnet50:0.1", "llama3-8b:0.1:1", "llama3-8b-decode:0.1:1",
        ],
        help="MODEL:SCALE[:LAYERS]",
    )  # fmt: skip
    parser.add_argument("--plan", default="greedy")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per case")
    parser.add_argument(
        "--csv", default=str(Path(__file__).parent / "results" / "bench_codegen_check.csv")
    )
    args = parser.parse_args()
    rows = []
    for case in args.cases:
        rows.append(run(case, args.plan, args.limit))
        print(json.dumps(rows[-1]), flush=True)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    emit([{k: r.get(k, "") for k in keys} for r in rows], Path(args.csv))


if __name__ == "__main__":
    main()
