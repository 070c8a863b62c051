"""Fuzzing the code generator, the long profile (issue 43): many random valid graphs of the ops
the tool fuses (``tests/reliability/fuzz_graphs.py``, as the CI test draws 12), each generated
under the none, greedy and max plans and checked with ``check_package`` (every kernel alone
and the whole runner against onnxruntime, under Triton's CPU interpreter).

    cd experiments && ../.venv/bin/python fuzz_codegen.py --examples 150 --seed 0

Outcomes per graph and plan: ``ok``, ``mismatch`` (a kernel or an output disagrees with
onnxruntime), ``error`` (generation or the run raised). Per plan the table also counts the
groups generated as one kernel and the unfused ones (run as several kernels, or as a
framework call: an op no template computes). Each defect's model is saved
under ``results/fuzz_codegen_defects/`` with what went wrong. Writes
``results/fuzz_codegen.csv``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

import onnx
from _table import RESULTS, emit
from fuzz import each_graph, save_defect  # experiments/fuzz.py (scripts run from this folder)

from autotune.codegen.check import check_package
from autotune.codegen.generate import generate
from costmodel.spec import load_target
from search_space import load_graph

PLANS = ("none", "greedy", "max")


def check_one(model: onnx.ModelProto, plan: str) -> tuple[str, str, int, int]:
    """(outcome, detail, groups as one kernel, unfused groups) of one plan."""
    try:
        graph = load_graph(model)
        gen = generate(model, graph, plan, load_target("ascend910b", (), "auto"))
        with tempfile.TemporaryDirectory() as tmp:
            result = check_package(gen.write(Path(tmp) / "pkg"), model, gen.program)
    except Exception:  # every outcome is data here: a raise is a defect to keep
        return "error", traceback.format_exc(limit=4), 0, 0
    unfused = len(gen.program.unfused)
    groups = len({s.group for s in gen.program.steps if s.group >= 0})
    if result.ok:
        return "ok", "", groups - unfused, unfused
    bad = [k.kernel for k in result.kernels if not k.ok] + [
        t.name for t in result.outputs if not t.ok
    ]
    return "mismatch", ", ".join(bad), groups - unfused, unfused


def run(examples: int, seed_: int, defects: Path) -> list[tuple[str, str, int, int]]:
    """Draw ``examples`` models from ``seed_``; per model and plan its outcome."""
    got: list[tuple[str, str, int, int]] = []
    drawn = [0]

    def visit(model: onnx.ModelProto) -> None:
        drawn[0] += 1
        for plan in PLANS:
            outcome, detail, one_kernel, unfused = check_one(model, plan)
            got.append((plan, outcome, one_kernel, unfused))
            if outcome != "ok":
                save_defect(defects / f"seed{seed_}_{drawn[0]}_{plan}", model, outcome, detail)

    each_graph(examples, seed_, visit)
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=150, help="models to draw")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    got = run(args.examples, args.seed, RESULTS / "fuzz_codegen_defects")
    rows = []
    for plan in PLANS:
        mine = [g for g in got if g[0] == plan]
        counts = Counter(o for _, o, _, _ in mine)
        rows.append({
            "plan": plan,
            "graphs": len(mine),
            "ok": counts["ok"],
            "mismatch": counts["mismatch"],
            "error": counts["error"],
            "one_kernel_groups": sum(g[2] for g in mine),
            "unfused_groups": sum(g[3] for g in mine),
            "seed": args.seed,
        })  # fmt: skip
    emit(rows, RESULTS / "fuzz_codegen.csv")
    print(f"{args.examples} examples (seed {args.seed}) in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
