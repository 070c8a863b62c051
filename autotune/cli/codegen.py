"""Commands of code generation: ``codegen`` (write a plan's Triton kernels as a package) and
``run`` (run a model through them), and the codegen part of ``verify --codegen``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli.common import (
    JsonOpt,
    ModelArg,
    ModelOptions,
    PolicyFlags,
    emit_json,
    err,
    model_and_plan_or_baseline,
    model_options,
    out,
    policy_options,
    user_errors,
)
from autotune.cli.flags import ForceOpt

if TYPE_CHECKING:  # annotations only: the commands import what they run
    import onnx

    from autotune.codegen.check import CodegenCheck
    from autotune.codegen.generate import Generated
    from costmodel.spec import Target
    from search_space.ir import Graph
    from search_space.space import FusionPlan

__all__ = [
    "CodegenOpt",
    "PlanArg",
    "PlanPrecisionOpt",
    "PlanTargetOpt",
    "codegen",
    "codegen_check",
    "print_codegen_check",
    "run",
]

# PLAN of the commands that take a plan file or a baseline; the target matters for a baseline
# only (a plan file was tuned for one: given, --target and --precision must name it)
PlanArg = Annotated[
    str,
    typer.Argument(
        help="A plan file for this model (from `autotune tune`), or a baseline: none, greedy, "
        "max or optimal.",
        show_default=False,
    ),
]
PlanTargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Target of a baseline PLAN: a name or a spec .toml (default: ascend910b). A plan "
        "file brings its own; given, it must match.",
        show_default=False,
    ),
]
PlanPrecisionOpt = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="Precision of a baseline PLAN: auto, fp32, fp16, bf16 or mixed (default: auto). "
        "A plan file brings its own; given, it must match.",
        show_default=False,
    ),
]

CodegenOpt = Annotated[
    bool,
    typer.Option(
        "--codegen",
        help="Also generate the plan's Triton kernels and check them, whole and one by one, "
        "against onnxruntime (no NPU or GPU: Triton's CPU interpreter, slow).",
    ),
]


def generate_plan(
    proto: onnx.ModelProto, graph: Graph, record: FusionPlan, target: Target, model: str
) -> Generated:
    """The plan's program, labelled with its baseline name when it is one."""
    from autotune.codegen.generate import generate

    gen = generate(proto, graph, record, target, model_name=model)
    baseline = record.meta.get("baseline")
    if baseline:  # generate() calls every record "plan file"
        gen = dataclasses.replace(gen, meta={**gen.meta, "plan": baseline})
    return gen


@user_errors
@model_options(weights="random")
@policy_options("preset")
def codegen(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    plan: PlanArg,
    output: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="Folder to write the package to: a new one, or a package written before "
            "(replaced whole).",
            show_default=False,
        ),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace the folder even if it is not a package."),
    ] = False,
    target: PlanTargetOpt = None,
    precision: PlanPrecisionOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Generate Triton kernels for a plan, as a Python package you can import and run.

    Each fused group of PLAN becomes one @triton.jit kernel tuned to the group's config; a
    group no template expresses runs as its ops (listed, with the reason). The folder gets
    kernels.py, runner.py (a torch.nn.Module and run(inputs)), params.npz (the weights) and
    manifest.json (group -> kernels, grid, predicted time). It appears whole or not at all.

    Zoo models get random weights here (--weights random): a package carries its weights.
    Run it with `autotune run`, check it with `autotune verify --codegen`.
    """
    from search_space.atomic import refuse_inputs
    from search_space.space import BASELINES

    # a package replaces a folder whole: never one the command reads (even with --force)
    refuse_inputs(output, {"model": opts.file(model), "plan": None if plan in BASELINES else plan})
    proto, graph, record, tgt = model_and_plan_or_baseline(
        model, opts, plan, target, precision, policy.load()
    )
    gen = generate_plan(proto, graph, record, tgt, model)
    path = gen.write(output, force=force)
    summary = package_summary(gen, record, path)
    if json_out:
        emit_json(summary)
        return
    _print_package(summary, model)


def package_summary(gen: Generated, record: FusionPlan, path: Path) -> dict[str, Any]:
    """What ``codegen`` reports: meta, one row per kernel, the groups run as their ops, the
    package's path."""
    split = dict(gen.program.unfused)
    kernels = [
        {
            "kernel": s.kernel.name,
            "group": s.group,
            "template": s.kernel.template,
            "ops": list(s.kernel.ops),
            "grid": s.kernel.launch.grid,
            # a group run as its ops is not the kernel the plan priced
            "device_predicted_us": None if s.group in split else gen.predicted.get(s.group),
        }
        for s in gen.program.steps
        if s.kernel is not None
    ]
    unfused = [
        {"group": i, "ops": list(record.groups[i].ops), "reason": reason}
        for i, reason in gen.program.unfused
    ]
    return {"meta": dict(gen.meta), "kernels": kernels, "unfused": unfused, "path": str(path)}


def _print_package(s: dict[str, Any], model: str) -> None:
    meta = s["meta"]
    table = Table(
        title=f"{escape(model)} under plan {escape(str(meta['plan']))} on {meta['target']}: "
        f"{len(s['kernels'])} kernels"
    )
    for col in ("kernel", "template", "ops", "grid", "device us predicted"):
        table.add_column(col, justify="left" if col in ("kernel", "template") else "right")
    for k in s["kernels"]:
        us = k["device_predicted_us"]
        table.add_row(
            escape(k["kernel"]),
            escape(k["template"]),
            str(len(k["ops"])),
            str(k["grid"]),
            "-" if us is None else f"{us:.1f}",
        )
    out.print(table)
    if s["unfused"]:
        out.print(f"{len(s['unfused'])} group(s) run as their ops:", highlight=False)
    for g in s["unfused"]:
        ops = g["ops"]
        more = f" +{len(ops) - 1} ops" if len(ops) > 1 else ""
        out.print(
            f"  group {g['group']} ('{escape(ops[0])}'{more}): {escape(g['reason'])}",
            highlight=False,
        )
    out.print(f"package: {escape(s['path'])}", highlight=False)


@user_errors
@model_options(weights="random")
@policy_options("preset")
def run(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    plan: PlanArg,
    inputs: Annotated[
        Path,
        typer.Option(
            "--inputs",
            help="An .npz with one array per model input, by name (read without pickle).",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "-o", "--output", help="The .npz to write the outputs to.", show_default=False
        ),
    ],
    package: Annotated[
        Path | None,
        typer.Option(
            "--package",
            help="Write the package to this folder (a new one, or a package written before) "
            "and keep it (default: a temporary folder).",
            show_default=False,
        ),
    ] = None,
    target: PlanTargetOpt = None,
    precision: PlanPrecisionOpt = None,
    force: ForceOpt = False,
) -> None:
    """Run a model through the Triton kernels generated for a plan.

    Generates the package (as `autotune codegen` does), feeds it the arrays of --inputs and
    writes the outputs, keyed by the model's output names, to --output (an .npz, written
    whole or not at all). Kernels run on an Ascend NPU or a GPU when one is present, else in
    Triton's CPU interpreter (slow: seconds for a small model).

    An input missing, unknown, of the wrong shape or dtype, or an unreadable .npz is one
    line naming it, exit status 1 and no output file.
    """
    import tempfile

    from autotune.cli.npz import check_feeds, read_inputs, write_outputs
    from autotune.codegen.execute import run_package
    from search_space.atomic import output_path
    from search_space.space import BASELINES

    read = {
        "--inputs file": inputs,
        "model": opts.file(model),
        "plan": None if plan in BASELINES else plan,
    }
    output_path(output, read, "zip", force)  # never write over what the run reads
    feeds = read_inputs(inputs)
    proto, graph, record, tgt = model_and_plan_or_baseline(
        model, opts, plan, target, precision, policy.load()
    )
    check_feeds(feeds, graph)  # before generating: a bad input costs no kernel
    gen = generate_plan(proto, graph, record, tgt, model)
    with tempfile.TemporaryDirectory(prefix="autotune-run-") as tmp:
        folder = gen.write(
            package if package is not None else Path(tmp) / "package", force_hint=False
        )
        result = run_package(folder, feeds)
    path = write_outputs(output, {name: result[name] for name in graph.outputs})
    err.print(
        f"wrote {escape(str(path))}: {', '.join(escape(n) for n in graph.outputs)}",
        highlight=False,
    )


def codegen_check(
    proto: onnx.ModelProto,
    graph: Graph,
    record: FusionPlan,
    target: Target,
    model: str,
    seed: int = 0,
) -> CodegenCheck:
    """``verify --codegen``: generate the plan's package in a temporary folder and check it
    (whole, and kernel by kernel) against onnxruntime on ``seed``'s inputs."""
    import tempfile

    from autotune.codegen.check import check_package

    gen = generate_plan(proto, graph, record, target, model)
    with tempfile.TemporaryDirectory(prefix="autotune-verify-") as tmp:
        folder = gen.write(Path(tmp) / "package")
        return check_package(folder, proto, gen.program, seed=seed)


def print_codegen_check(check: CodegenCheck) -> None:
    """``verify --codegen``'s tables: a line per output, then the failing kernels."""
    for t in check.outputs:
        verdict = "ok" if t.ok else "[red]out of tolerance[/]"
        out.print(
            f"codegen output '{escape(t.name)}': max abs err {t.max_abs_err:.3g} "
            f"(rel {t.max_rel_err:.3g}) {verdict}",
            highlight=False,
        )
    failing = [k for k in check.kernels if not k.ok]
    if not failing:
        out.print(f"codegen kernels: all {len(check.kernels)} within tolerance")
        return
    table = Table(
        title=f"generated kernels out of tolerance ({len(failing)}/{len(check.kernels)})"
    )
    for col in ("kernel", "group", "tensor", "max abs err", "max rel err"):
        table.add_column(col)
    for k in failing:
        for t in k.outputs:
            if not t.ok:
                table.add_row(
                    escape(k.kernel),
                    str(k.group),
                    escape(t.name),
                    f"{t.max_abs_err:.3g}",
                    f"{t.max_rel_err:.3g}",
                )
    out.print(table)
