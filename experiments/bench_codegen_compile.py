"""Compiling generated kernels for a CUDA target with no GPU: the kernels CI leaves out.

``tests/autotune/test_codegen_compile.py`` compiles one kernel of each code shape (its body
but for numbers, its launch, its pointer types: ``compile_check.code_shape``) of a few
packages, less the cube kernels whose ``tl.dot`` operand tiles pass 256 KB (a minute on two
cores). This script compiles the rest: by default the heavy kernels of llama3-8b; with
``--sweep``, one kernel of each code shape of every zoo model under none, greedy and max at
the CI scale (the shapes no earlier model showed), so every kind of generated code is
compiled once. Per kernel: whether it compiled, registers, PTX lines (and, for the heavy
kernels, each compiled alone, its L1 operand bytes from ``kernel_text.footprint`` and its
seconds; the sweep compiles a model's plan in one compiler process and prints its seconds).

    cd experiments && ../.venv/bin/python bench_codegen_compile.py
    cd experiments && ../.venv/bin/python bench_codegen_compile.py --model bert-base --min-l1 0
    cd experiments && ../.venv/bin/python bench_codegen_compile.py --sweep

Writes experiments/results/codegen_compile.csv (``--sweep``: codegen_compile_sweep.csv).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import RESULTS, emit
from bench_codegen import build_zoo  # experiments/bench_codegen.py (run from this folder)

from autotune.codegen.compile_check import code_shape, compile_package
from autotune.codegen.generate import generate
from autotune.codegen.kernel_text import footprint
from autotune.codegen.program import Program, Step
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build, list_models


def _heavy(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each kernel of ``args.model`` with operand tiles of ``args.min_l1`` bytes or more,
    compiled alone (one compiler process each, so its seconds are its own)."""
    model = build(args.model, weights="random", scale=args.scale, layers=args.layers)
    graph = load_graph(model)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for plan in args.plans:
            gen = generate(model, graph, plan, load_target("ascend910b"), model_name=args.model)
            folder = gen.write(Path(tmp) / plan)
            for k in gen.program.kernels:
                if footprint(k, graph).cube < args.min_l1:
                    continue
                t0 = time.perf_counter()
                (res,) = compile_package(folder, graph, Program(graph, (Step(0, kernel=k),), ()))
                rows.append({"plan": plan, "kernel": k.name[:40],
                             "l1_bytes": footprint(k, graph).cube, "ok": res.ok,
                             "registers": res.registers, "ptx_lines": res.ptx_lines,
                             "seconds": round(time.perf_counter() - t0, 1),
                             "error": res.error[:80]})  # fmt: skip
    return rows


def _sweep(plans: list[str]) -> list[dict[str, Any]]:
    """One kernel of each code shape of every zoo model at the CI shapes (the shapes no
    earlier model or plan showed), one compiler process per model and plan."""
    seen: set[tuple[object, ...]] = set()
    shapes = argparse.Namespace(layers=1, blocks=None, seq_len=8, cache_len=16, scale=0.05,
                                batch=1)  # fmt: skip
    rows = []
    for name in (i.name for i in list_models()):
        model, _ = build_zoo(name, shapes)
        graph = load_graph(model)
        with tempfile.TemporaryDirectory() as tmp:
            for plan in plans:
                gen = generate(model, graph, plan, load_target("ascend910b"), model_name=name)
                kernels = [k for k in gen.program.kernels if code_shape(k, graph) not in seen]
                seen.update(code_shape(k, graph) for k in kernels)
                if not kernels:
                    continue
                steps = tuple(Step(0, kernel=k) for k in kernels)
                t0 = time.perf_counter()
                results = compile_package(gen.write(Path(tmp) / plan), graph,
                                          Program(graph, steps, ()))  # fmt: skip
                seconds = time.perf_counter() - t0
                rows += [{"model": name, "plan": plan, "kernel": k.name[:40],
                          "template": k.template, "ok": r.ok, "registers": r.registers,
                          "ptx_lines": r.ptx_lines, "error": r.error[:80]}
                         for k, r in zip(kernels, results, strict=True)]  # fmt: skip
                print(f"{name} {plan}: {len(kernels)} new code shapes, {seconds:.0f} s",
                      flush=True)  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--plans", nargs="*", default=["none", "greedy", "max"])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--min-l1", type=int, default=256 * 1024, help="operand bytes")
    parser.add_argument("--sweep", action="store_true", help="every zoo model, each code shape")
    parser.add_argument("--csv", default="")
    args = parser.parse_args()
    if args.sweep:
        rows = _sweep(args.plans)
        emit(rows, args.csv or RESULTS / "codegen_compile_sweep.csv")
        bad = [r for r in rows if not r["ok"]]
        print(f"{len(rows)} distinct kernels, {len(bad)} failed to compile")
        return
    rows = _heavy(args)
    if not rows:
        print(f"no kernel of {args.model} has operand tiles of {args.min_l1} B or more")
        return
    emit(rows, args.csv or RESULTS / "codegen_compile.csv")


if __name__ == "__main__":
    main()
