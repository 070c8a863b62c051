"""Compiling generated kernels for a CUDA target with no GPU: the kernels CI leaves out.

``tests/autotune/test_codegen_compile.py`` compiles every distinct kernel of its packages but
the cube kernels whose ``tl.dot`` operand tiles pass 256 KB (a minute on two cores). This
script compiles those (or, with ``--min-l1 0``, every kernel) of one zoo model under the
chosen plans, one kernel at a time, and prints per kernel: its L1 operand bytes
(``kernel_text.footprint``), whether it compiled, registers, PTX lines and seconds.

    cd experiments && ../.venv/bin/python bench_codegen_compile.py
    cd experiments && ../.venv/bin/python bench_codegen_compile.py --model bert-base --min-l1 0

Writes experiments/results/codegen_compile.csv.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _table import RESULTS, emit

from autotune.codegen.compile_check import compile_package
from autotune.codegen.generate import generate
from autotune.codegen.kernel_text import footprint
from autotune.codegen.program import Program, Step
from autotune.zoo import build
from costmodel.spec import load_target
from search_space import load_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--plans", nargs="*", default=["none", "greedy", "max"])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--min-l1", type=int, default=256 * 1024, help="operand bytes")
    parser.add_argument("--csv", default=str(RESULTS / "codegen_compile.csv"))
    args = parser.parse_args()
    model = build(args.model, weights="random", scale=args.scale, layers=args.layers)
    graph = load_graph(model)
    target = load_target("ascend910b")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for plan in args.plans:
            gen = generate(model, graph, plan, target, model_name=args.model)
            folder = gen.write(Path(tmp) / plan)
            for k in gen.program.kernels:
                l1 = footprint(k, graph).cube
                if l1 < args.min_l1:
                    continue
                t0 = time.perf_counter()
                (res,) = compile_package(folder, graph, Program(graph, (Step(0, kernel=k),), ()))
                rows.append({"plan": plan, "kernel": k.name[:40], "l1_bytes": l1, "ok": res.ok,
                             "registers": res.registers, "ptx_lines": res.ptx_lines,
                             "seconds": round(time.perf_counter() - t0, 1),
                             "error": res.error[:80]})  # fmt: skip
    if not rows:
        print(f"no kernel of {args.model} has operand tiles of {args.min_l1} B or more")
        return
    emit(rows, args.csv)


if __name__ == "__main__":
    main()
