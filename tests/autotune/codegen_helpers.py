"""Shared by the code-generation tests: generate a package for a model and plan, check it
against onnxruntime (the independent oracle), and say which kernel failed if one did."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from autotune.codegen.check import CodegenCheck, check_package
from autotune.codegen.generate import Generated, generate
from autotune.codegen.package import write_package
from autotune.codegen.program import Program, build_program
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import FusionGroup, Graph, KernelConfig, make_group

__all__ = [
    "check_groups",
    "check_plan",
    "check_whole",
    "check_zoo_model",
    "describe",
    "single_group",
]


def describe(result: CodegenCheck) -> str:
    """The failures of a check, for an assertion message."""
    bad = [
        f"{k.kernel}: "
        + ", ".join(f"{t.name} rel {t.max_rel_err:.3g}" for t in k.outputs if not t.ok)
        for k in result.kernels
        if not k.ok
    ]
    bad += [f"output {t.name}: rel {t.max_rel_err:.3g}" for t in result.outputs if not t.ok]
    return "; ".join(bad)


def check_plan(
    model: onnx.ModelProto,
    plan: object,
    folder: Path,
    *,
    target: str = "ascend910b",
    input_shapes: dict[str, tuple[int, ...]] | None = None,
    precision: str = "auto",
) -> tuple[Generated, CodegenCheck]:
    """Generate ``model`` under ``plan`` (a baseline name or a FusionPlan) at ``precision``,
    write it to ``folder`` and check it."""
    graph = load_graph(model, input_shapes=input_shapes)
    gen = generate(model, graph, plan, load_target(target, (), precision))  # type: ignore[arg-type]
    path = gen.write(folder)
    return gen, check_package(path, model, gen.program)


def single_group(graph: Graph, kind: str | None = None) -> list[FusionGroup]:
    """Every op that does work in one group (the whole graph as one kernel)."""
    return [make_group(graph, [op.name for op in graph.ops], kind)]


def check_groups(
    model: onnx.ModelProto,
    groups: Sequence[FusionGroup],
    configs: Sequence[KernelConfig],
    folder: Path,
    precision: str = "fp32",
) -> tuple[Program, CodegenCheck]:
    """Generate hand-chosen groups and configs (no plan) and check them; float32 products by
    default, so a template's indexing is held to float32's tolerance."""
    graph = load_graph(model)
    program = build_program(graph, groups, configs, precision=precision)
    path = write_package(folder, model, program, {"model": "test"})
    return program, check_package(path, model, program)


def check_whole(
    model: onnx.ModelProto, config: KernelConfig, folder: Path, kind: str | None = None
) -> tuple[Program, CodegenCheck]:
    """Every op that computes (constants aside) as one group under ``config``, generated with
    float32 products into ``folder``/pkg and checked (see :func:`check_groups`)."""
    graph = load_graph(model)
    group = make_group(graph, [op.name for op in graph.ops if not op.constant], kind)
    return check_groups(model, [group], [config], folder / "pkg")


def check_zoo_model(name: str, plan: str, folder: Path, **zoo: int) -> None:
    """A zoo model at small scale under ``plan``: the package reproduces onnxruntime, and its
    steps compute every op of the graph that does work, each group's ops in that group's steps
    (a group that runs as several kernels still computes all of them, none twice)."""
    from search_space.zoo.catalog import build

    model = build(name, weights="random", scale=0.05, batch=1, **zoo)
    gen, result = check_plan(model, plan, folder)
    assert result.ok, describe(result)
    assert len(result.kernels) == len(gen.program.kernels) > 0
    assert all(reason for _, reason in gen.program.unfused)  # every split group says why
    graph = gen.program.graph
    by_group: dict[int, set[str]] = {}
    for step in gen.program.steps:
        if step.kernel is not None:
            ops: tuple[str, ...] = step.kernel.ops
        else:
            ops = (step.extern.op,) if step.extern is not None else ()
        by_group.setdefault(step.group, set()).update(o for o in ops if not graph.op(o).is_view)
    work = {op.name for op in graph.ops if not op.is_view and not op.constant}
    computed = set().union(*(ops for g, ops in by_group.items() if g >= 0))
    assert computed == work
    groups = [ops for g, ops in by_group.items() if g >= 0]
    assert sum(len(ops) for ops in groups) == len(work)  # no op in two groups
