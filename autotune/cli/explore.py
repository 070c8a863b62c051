"""Commands that look at a model without tuning it: ``inspect``, ``estimate``,
``candidates``, and the zoo's ``list`` and ``export``."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from autotune.cli.common import (
    FUSION_FLAGS,
    JsonOpt,
    ModelArg,
    ModelOptions,
    PolicyFlags,
    PrecisionOpt,
    SetOpt,
    TargetOpt,
    emit_json,
    err,
    human,
    model_options,
    out,
    policy_options,
    user_errors,
)
from autotune.cli.flags import SEED_MAX, ForceOpt
from autotune.exceptions import AutotuneError
from search_space import Graph
from search_space.atomic import atomic_write_text, output_path

if TYPE_CHECKING:  # annotations only: the commands import what they run
    from search_space.shapes import BucketGraphs

__all__ = ["candidates", "estimate", "inspect", "zoo_export", "zoo_list"]


@user_errors
@model_options()
def inspect(
    model: ModelArg,
    opts: ModelOptions,
    json_out: JsonOpt = False,
    ops: Annotated[bool, typer.Option("--ops", help="List every op with its shapes.")] = False,
) -> None:
    """Load a model, make it static, and account for its ops, FLOPs and bytes."""
    graph = opts.graph(model)
    summary = {"model": model, **graph.summary()}
    if ops:
        summary["per_op"] = [_op_row(graph, op.name) for op in graph.ops]
    if json_out:
        emit_json(summary)
        return
    _print_inspect(graph, summary, ops)


def _op_row(graph: Graph, name: str) -> dict[str, Any]:
    op = graph.op(name)
    return {
        "name": op.name,
        "op_type": op.op_type,
        "class": "view" if op.is_view else op.op_class.value,
        "unit": op.unit,
        "inputs": [list(graph.tensors[t].shape or ()) if t else None for t in op.inputs],
        "outputs": [list(graph.tensors[t].shape or ()) for t in op.outputs if t],
        "flops": op.flops,
        "bytes": op.bytes,
        "constant": op.constant,
    }


def _print_inspect(graph: Graph, s: dict[str, Any], per_op: bool) -> None:
    head = Table(
        title=f"{escape(s['model'])}  (graph '{escape(s['graph'])}', opset {s['opset']})",
        show_header=False,
    )
    head.add_row("fingerprint", s["fingerprint"])
    head.add_row(
        "ops",
        f"{s['ops']} ({s['kernels_unfused']} kernels unfused, "
        f"{s['folded_nodes']} shape nodes folded)",
    )
    head.add_row(
        "FLOPs",
        f"{human(s['flops'])} (cube {human(s['cube_flops'])}, vector {human(s['vector_flops'])})",
    )
    head.add_row("compulsory bytes", human(s["bytes_min"], "B"))
    head.add_row("weights", f"{s['weights']} tensors, {human(s['weight_bytes'], 'B')}")
    head.add_row("inputs", ", ".join(f"{escape(k)} {v}" for k, v in s["inputs"].items()) or "-")
    head.add_row("outputs", ", ".join(f"{escape(k)} {v}" for k, v in s["outputs"].items()))
    dyn = s["dynamic_tensors"]
    head.add_row(
        "dynamic tensors", "none" if not dyn else f"[red]{len(dyn)}[/]: {escape(str(dyn[:5]))}"
    )
    out.print(head)

    by_type: dict[str, list[Any]] = {}
    for op in graph.ops:
        row = by_type.setdefault(op.op_type, [op.op_type, 0, set(), 0, 0])
        row[1] += 1
        row[2].add("view" if op.is_view else op.op_class.value)
        row[3] += op.flops
        row[4] += op.bytes
    table = Table(title="op types")
    for col in ("op type", "count", "class", "FLOPs", "bytes (unfused)"):
        table.add_column(col, justify="right" if col in ("count", "FLOPs") else "left")
    for t, n, cls, fl, by in sorted(by_type.values(), key=lambda r: (-r[3], -r[1])):
        table.add_row(escape(t), str(n), ",".join(sorted(cls)), human(fl), human(by, "B"))
    out.print(table)
    if per_op:
        ops = Table(title="ops")
        for col in ("name", "type", "class", "output", "FLOPs", "bytes"):
            ops.add_column(col)
        for op in graph.ops:
            shape = graph.tensors[op.outputs[0]].shape if op.outputs and op.outputs[0] else None
            ops.add_row(
                escape(op.name),
                escape(op.op_type),
                "view" if op.is_view else op.op_class.value,
                str(list(shape or ())),
                human(op.flops),
                human(op.bytes, "B"),
            )
        out.print(ops)


@user_errors
@model_options(ranges=True)
@policy_options("preset")
def estimate(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    target: TargetOpt = "ascend910b",
    set_: SetOpt = None,
    precision: PrecisionOpt = "auto",
    plan: Annotated[
        str, typer.Option(help="none, greedy, max, optimal, or a plan file.")
    ] = "none",
    cost: Annotated[
        str, typer.Option(help="Cost model: analytic, learned or simulator.")
    ] = "analytic",
    resident: Annotated[
        str,
        typer.Option(
            help="What L2 holds when the model starts: none (cold, as a kernel timed alone) "
            "or inputs (the model's inputs as their producers just wrote them, as inside a "
            "real step)."
        ),
    ] = "none",
    json_out: JsonOpt = False,
    top: Annotated[int, typer.Option(help="Kernels to list, slowest first.", min=0)] = 15,
) -> None:
    """Estimate a model's latency on an Ascend target under a plan."""
    from autotune.estimate import estimate_graph
    from costmodel.residency import CONTEXTS
    from search_space.space import kernel_names

    if resident not in CONTEXTS:
        raise AutotuneError(f"--resident {resident!r} is not one of: {', '.join(CONTEXTS)}")
    kw: dict[str, Any] = {
        "model_name": model,
        "target": target,
        "sets": set_ or [],
        "precision": precision,
        "plan": plan,
        "cost": cost,
        "policy": policy.load(),
        "resident": resident,
    }
    buckets = opts.ranged_graphs(model)
    if buckets is not None:
        _estimate_range(model, buckets, kw, json_out)
        return
    graph = opts.graph(model)
    result = estimate_graph(graph, **kw)
    if json_out:
        emit_json(result.to_json())
        return
    head = Table(
        title=f"{model} on {result.target} ({result.precision}), plan {result.plan}, "
        f"{result.cost_model} model" + (", inputs in L2" if resident == "inputs" else ""),
        show_header=False,
    )
    total = result.latency_us  # 0 for a model of views alone: no kernel, no shares
    head.add_row("latency", f"{total:.1f} us over {len(result.kernels)} kernels")
    share = f" ({result.roofline_us / total:.1%} of the estimate)" if total else ""
    head.add_row("roofline", f"{result.roofline_us:.1f} us{share}")
    bounds = sorted(result.time_by_bound().items(), key=lambda x: -x[1]) if total else []
    head.add_row("time by bound", ", ".join(f"{b} {v / total:.0%}" for b, v in bounds))
    out.print(head)
    table = Table(title=f"slowest {top} kernels")
    for col in ("kernel", "kind", "config", "us", "bound"):
        table.add_column(col, justify="right" if col == "us" else "left")
    names = kernel_names(graph, (k.ops for k in result.kernels))
    slowest = sorted(zip(names, result.kernels, strict=True), key=lambda nk: -nk[1].latency_us)
    for name, k in slowest[:top]:
        table.add_row(escape(name), k.kind, k.config.short(), f"{k.latency_us:.1f}", k.bound)
    out.print(table)


def _estimate_range(model: str, buckets: BucketGraphs, kw: dict[str, Any], json_out: bool) -> None:
    """``estimate --shape-range``: one grouping at every bucket, and the weighted sum."""
    from autotune.estimate_range import estimate_range

    result = estimate_range(buckets, **kw)
    if json_out:
        emit_json(result.to_json())
        return
    first = result.buckets[0][1]
    table = Table(
        title=f"{model} over {result.ranges} on {first.target} ({first.precision}), plan "
        f"{kw['plan']}, {kw['cost']} model"
        + (", inputs in L2" if kw["resident"] == "inputs" else "")
    )
    for col in ("bucket", "weight", "kernels", "us", "roofline us"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for bucket, e in result.buckets:
        table.add_row(
            bucket.label,
            f"{bucket.weight:.3f}",
            str(len(e.kernels)),
            f"{e.latency_us:.1f}",
            f"{e.roofline_us:.1f}",
        )
    out.print(table)
    out.print(f"weighted latency: {result.latency_us:.1f} us over {len(result.buckets)} buckets")


@user_errors
@model_options()
@policy_options(*FUSION_FLAGS)
def candidates(
    model: ModelArg,
    opts: ModelOptions,
    policy: PolicyFlags,
    target: TargetOpt = "ascend910b",
    precision: PrecisionOpt = "auto",
    json_out: JsonOpt = False,
    html: Annotated[
        Path | None,
        typer.Option(
            help="Also write the graph (laid out by Graphviz's dot), each edge coloured by "
            "its verdict (HTML)."
        ),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """What fusion would buy: every candidate group, its benefit and verdict."""
    from autotune.candidates import analyse_candidates
    from costmodel.spec import load_target

    if html is not None:  # before any work: the page is what was asked for
        spec = target if target.endswith(".toml") else None
        read = {"model": opts.file(model), "--config": policy.config, "--target spec": spec}
        _check_graph_page(html, read, force)
    graph = opts.graph(model)
    result = {
        "model": model,
        **analyse_candidates(graph, load_target(target, (), precision), policy.load()),
    }
    if html is not None:
        from autotune.graph_page import block, page
        from autotune.graph_view import candidates_view

        view = block(candidates_view(graph, result["candidates"]), "candidates")
        atomic_write_text(html, page(f"{model}: candidate fusions", model, view))
        err.print(f"wrote {html}", highlight=False)
    if json_out:
        emit_json(result)
        return
    dv = result["decision_vars"]
    out.print(
        f"{model}: {result['kernels_unfused']} kernels, {result['edges']} fusible edges, "
        f"{dv['with_sharing']} decision variables ({dv['without_sharing']} without "
        "sharing)"
    )
    table = Table(title="candidate groups")
    for col in (
        "name",
        "ops",
        "rule",
        "us unfused (predicted)",
        "us fused (predicted)",
        "MB before",
        "MB after",
        "verdict",
        "reason",
    ):
        table.add_column(col)
    for c in result["candidates"]:
        table.add_row(
            escape(c["name"]),
            str(len(c["ops"])),
            c["rule"],
            f"{c['unfused_predicted_us']:.1f}",
            f"{c['fused_predicted_us']:.1f}" if "fused_predicted_us" in c else "-",
            f"{c['hbm_bytes_before'] / 1e6:.1f}",
            f"{c['hbm_bytes_after'] / 1e6:.1f}" if "hbm_bytes_after" in c else "-",
            c["verdict"],
            escape(c["reason"]),
        )
    out.print(table)
    for miss in result["rules_not_fired"]:
        out.print(
            f"rule {miss['rule']} did not fire ({miss['reason']}, x{miss['count']}): "
            f"{escape(miss['detail'])}"
        )


def _check_graph_page(html: Path, read: dict[str, Any], force: bool) -> None:
    """``candidates --html`` can be drawn (Graphviz is there) and written (``read``: the files
    the command reads)."""
    from autotune.graph_dot import GraphvizMissing, have_dot

    if not have_dot():
        raise GraphvizMissing(
            "candidates --html draws the graph with Graphviz's 'dot', which is not "
            "installed: install Graphviz (Debian: apt-get install graphviz) or drop --html"
        )
    output_path(html, read, "html", force)


@user_errors
def zoo_list(json_out: JsonOpt = False) -> None:
    """List the built-in models."""
    from search_space.zoo import list_models

    infos = list_models()
    if json_out:
        emit_json({"models": [asdict(i) for i in infos]})
        return
    table = Table(title="model zoo (use as zoo:NAME)")
    for col in ("name", "family", "params", "layers", "batch", "description"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.name, i.family, human(i.params), str(i.layers), str(i.default_batch), i.description
        )
    out.print(table)


@user_errors
@model_options(weights="random", shapes=False)
def zoo_export(
    name: Annotated[str, typer.Argument(help="Zoo model name (see `autotune zoo list`).")],
    opts: ModelOptions,
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx file.")],
    seed: Annotated[
        int, typer.Option(help="Seed for random weights, 0 .. 2^32-1.", min=0, max=SEED_MAX)
    ] = 0,
    force: ForceOpt = False,
) -> None:
    """Write a zoo model to an ONNX file."""
    from search_space.onnx import save_model
    from search_space.zoo import build_zoo

    output_path(output, None, "onnx", force)  # before building: a refusal costs nothing

    name = name.removeprefix("zoo:")
    model = build_zoo(name, opts.zoo, seed=seed)
    path = save_model(model, output)
    err.print(f"wrote {path} ({human(path.stat().st_size, 'B')})")
