"""Commands that read a plan: ``report``, ``apply``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli.codegen import CodegenOpt, PlanArg, PlanPrecisionOpt, PlanTargetOpt
from autotune.cli.common import (
    JsonOpt,
    ModelArg,
    ModelOptions,
    PlotlyOpt,
    PolicyFlags,
    emit_json,
    err,
    model_and_plan,
    model_and_plan_or_baseline,
    model_options,
    out,
    policy_options,
    user_errors,
)
from autotune.cli.flags import SEED_MAX, ForceOpt

__all__ = ["apply", "report", "verify"]


@user_errors
def report(
    plan: Annotated[Path, typer.Argument(help="A plan file written by `autotune tune`.")],
    json_out: JsonOpt = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write one self-contained HTML page of plots.")
    ] = None,
    storage: Annotated[
        str | None, typer.Option(help="The study's storage, to plot its history (--html).")
    ] = None,
    study: Annotated[
        str | None, typer.Option(help="The study (default: the one the plan names).")
    ] = None,
    plotly: PlotlyOpt = "inline",
    force: ForceOpt = False,
) -> None:
    """Report on a saved plan: its latency, safe mode's counts, per-kernel table, speedups."""
    from autotune.plan_file import read_plan
    from autotune.plotly_js import check_mode
    from autotune.report import folded_kernels, plan_report
    from autotune.vocabulary import describe

    check_mode(plotly)
    if html is not None:
        _check_html(html, plan, storage, force)
    record = read_plan(plan)
    if html is not None:
        _write_html(record, plan, html, storage, study, plotly)
    rep = plan_report(record)
    if json_out:
        emit_json(rep)
        return
    head = Table(title=f"plan {plan} ({rep['model']} on {rep['target']})", show_header=False)
    head.add_row("latency", describe(rep["latency"]))
    if rep["latency"]["kind"] != "predicted" and rep["predicted_us"]:
        head.add_row("predicted", f"{rep['predicted_us']:.1f} us ({rep['cost_model']})")
    head.add_row("kernels", str(rep["n_kernels"]))
    head.add_row("safe mode", ", ".join(f"{k} {v}" for k, v in rep["safe_mode"].items()))
    for kind in ("predicted", "simulated"):
        for base in ("none", "greedy"):
            if (key := f"speedup_vs_{base}_{kind}") in rep:
                head.add_row(f"speedup vs {base} ({kind})", f"{rep[key]:.2f}x")
    out.print(head)
    if "buckets" in rep:
        _print_buckets(rep)
    rows = folded_kernels(record, rep["kernels"])
    table = Table(title=f"kernels ({len(record.groups)}; repeated ones folded: x N)")
    table.add_column("kernel", overflow="ellipsis", no_wrap=True, max_width=24)
    table.add_column("x")
    table.add_column("kind", overflow="fold", min_width=6)
    table.add_column("tiles", overflow="fold", min_width=14)
    table.add_column("unfused us\npredicted", min_width=9)
    table.add_column("us\nsimulated", min_width=9)
    table.add_column("bound", overflow="fold", min_width=5)
    table.add_column("verdict", overflow="fold", min_width=6)
    for k in rows:
        table.add_row(
            escape(k["name"]),
            str(k["count"]),
            k["kind"],
            escape(k["tiles"]),
            _us(k["unfused_predicted_us"]),
            _us(k["simulated_us"]),
            k["bound"],
            k["verdict"],
        )
    out.print(table)


def _print_buckets(rep: dict[str, Any]) -> None:
    """A range plan's buckets: each one's weight and latency (the kernels below: the top's)."""
    from search_space.shapes import dims_label

    table = Table(title=f"buckets over {', '.join(rep['shape_ranges'])} (kernels below: the last)")
    for col in ("bucket", "weight", "us predicted", "us simulated"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for b in rep["buckets"]:
        label = dims_label(b["dims"].items())
        table.add_row(label, f"{b['weight']:.3f}", _us(b["predicted_us"]), _us(b["simulated_us"]))
    out.print(table)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _check_html(html: Path, plan: Path, storage: str | None, force: bool) -> None:
    """``--html`` names no file the command reads, nor (without --force) one of another kind."""
    from autotune.tuner.study import journal_path
    from search_space.atomic import output_path

    journal = journal_path(storage) if storage else None
    output_path(html, {"plan": plan, "--storage": journal}, "html", force)


def _write_html(
    record: Any, plan: Path, path: Path, storage: str | None, study: str | None, plotly: str
) -> None:
    """The plan's HTML page (``report --html``), its sections counted as they are drawn."""
    from autotune.cli.progress import shown
    from autotune.report_html import SECTIONS, write_page

    with shown("report", "sections drawn", total=len(SECTIONS), phase_lines=False) as job:

        def step(what: str) -> None:  # told as a section starts, then "written" at the end
            if what != SECTIONS[0]:
                job.advance()  # the section before it is drawn
            job.phase(what)

        write_page(record, plan, path, storage, study, step, plotly)
    err.print(f"wrote {path}", highlight=False)


@user_errors
@model_options(weights="random")
def apply(
    model: ModelArg,
    opts: ModelOptions,
    plan: Annotated[Path, typer.Argument(help="A plan file for this model.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Fused .onnx to write.")],
    storage: Annotated[
        str | None,
        typer.Option(help="Also upload the fused model to this study storage's artifacts."),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Write the fused model: each fused group one ai.autofusion node (a local function)."""
    from autotune.apply import apply_plan
    from autotune.tuner.annotate import upload_artifact_file
    from autotune.tuner.study import journal_path
    from search_space.atomic import output_path
    from search_space.onnx import save_model

    journal = journal_path(storage) if storage else None
    output_path(
        output,
        {
            "model": opts.file(model),
            "plan": plan,
            "--storage": journal,
        },
        "onnx",
        force,
    )
    proto, graph, record = model_and_plan(model, opts, plan)
    fused = apply_plan(proto, graph, record.groups)
    path = save_model(fused, output)
    n = sum(1 for g in record.groups if len(g.ops) > 1)
    err.print(f"wrote {path}: {n} fused kernels as ai.autofusion functions")
    if storage is not None:  # the study the plan names, in the storage the user gives
        upload_artifact_file(storage, str(record.meta.get("study")), path, "application/onnx")
        err.print(f"uploaded {path.name} to the study's artifacts", highlight=False)


@user_errors
@model_options(weights=None)
@policy_options("preset", "strict_safety")
def verify(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    plan: PlanArg,
    json_out: JsonOpt = False,
    seed: Annotated[
        int, typer.Option(help="Seed of the random inputs, 0 .. 2^32-1.", min=0, max=SEED_MAX)
    ] = 0,
    codegen: CodegenOpt = False,
    target: PlanTargetOpt = None,
    precision: PlanPrecisionOpt = None,
) -> None:
    """Check a plan: fused vs original in onnxruntime, and each fused kernel's numerics.

    PLAN may be a baseline; --codegen also checks the Triton kernels `autotune codegen` writes.
    """
    from autotune.apply import apply_plan
    from autotune.cli.codegen import codegen_check, print_codegen_check
    from autotune.cli.progress import shown
    from autotune.verify import Status, graph_equivalence, verify_kernels

    pol = policy.load()
    proto, graph, record, tgt = model_and_plan_or_baseline(
        model, opts, plan, target, precision, pol
    )
    with shown("verifying", "kernels checked") as job:
        job.phase("fused model against the original")
        equiv = graph_equivalence(proto, apply_plan(proto, graph, record.groups), graph, seed)
        job.phase("each fused kernel")

        def checked(done: int, total: int) -> None:
            job.total(total)
            job.advance()

        groups = record.groups
        verdicts = verify_kernels(proto, graph, groups, tgt, pol, seed=seed, progress=checked)
        if codegen:
            job.phase("generated Triton kernels")
        generated = codegen_check(proto, graph, record, tgt, model, seed) if codegen else None
    unverified = sum(v.status is Status.UNVERIFIED for v in verdicts)
    ok = bool(equiv["ok"]) and all(v.kept(pol.strict_safety) for v in verdicts)
    ok = ok and (generated is None or generated.ok)
    result = {
        "ok": ok,
        **equiv,
        "unverified": unverified,
        "kernels": [v.to_json() for v in verdicts],
        **({"codegen": generated.to_json()} if generated is not None else {}),
    }
    if json_out:
        emit_json(result)
    else:
        out.print(
            f"graph equivalence: max abs err {equiv['graph_max_abs_err']:.3g} "
            f"(rel {equiv['graph_max_rel_err']:.3g})"
        )
        table = Table(title=f"fused kernels ({len(verdicts)} signatures)")
        for col in ("kernel", "ops", "cosine", "max abs err", "unfused", "verdict"):
            table.add_column(col)
        for v in verdicts:
            table.add_row(
                escape(v.ops[0]),
                str(len(v.ops)),
                f"{v.cosine:.6f}",
                f"{v.max_abs_err:.3g}",
                f"{v.unfused_max_abs_err:.3g}",
                escape(v.verdict),
            )
        out.print(table)
        if unverified:
            out.print(
                f"{unverified} kernel signature(s) could not be verified"
                + (" (--strict-safety: not ok)" if pol.strict_safety else "")
            )
        if generated is not None:
            print_codegen_check(generated)
    if not ok:
        raise typer.Exit(1)
