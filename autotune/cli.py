"""The ``autotune`` command line (typer + rich).

Exit codes: 0 ok, 1 a user error reported in one line (no traceback), 2 a usage error.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from autotune.models import ZooOptions, load_model_spec
from search_space import AutofusionError, Graph, parse_input_shapes

__all__ = ["app", "main"]

app = typer.Typer(
    name="autotune",
    help="Search-based operator fusion and tiling for Ascend NPUs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
zoo_app = typer.Typer(help="Built-in models (built in code, no downloads).", no_args_is_help=True)
app.add_typer(zoo_app, name="zoo")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn a deliberate tool error into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AutofusionError as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


ModelArg = Annotated[
    str, typer.Argument(help="An ONNX file, or zoo:NAME (see `autotune zoo list`).")
]
InputShape = Annotated[
    list[str] | None,
    typer.Option("--input-shape", help="Static shape of a dynamic input, NAME=1x128 (repeat)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
Weights = Annotated[str, typer.Option(help="Zoo weights: 'inputs' (shape-only) or 'random'.")]
Scale = Annotated[float, typer.Option(help="Zoo: shrink the model, 0 < scale <= 1.")]
Layers = Annotated[int | None, typer.Option(help="Zoo: number of layers/blocks to build.")]
Batch = Annotated[int | None, typer.Option(help="Zoo: batch size.")]
SeqLen = Annotated[int | None, typer.Option("--seq-len", help="Zoo: sequence length.")]


def _policy(config: Path | None, **flags: Any) -> Any:
    from search_space.rules import load_policy

    return load_policy(config, flags)


ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="A TOML config file ([policy], [[rules]]).")
]
PresetOpt = Annotated[str | None, typer.Option(help="Rule preset: transformer, cnn or all.")]
NoFuseOpt = Annotated[
    str | None, typer.Option("--no-fusion-ops", help="Op types that never fuse, comma-separated.")
]
MaxOpsOpt = Annotated[int | None, typer.Option("--max-fused-ops", help="Largest group, in ops.")]
BenefitOpt = Annotated[
    float | None,
    typer.Option("--benefit-threshold", help="Skip fusions saving less than this fraction."),
]
LevelOpt = Annotated[
    int | None, typer.Option("--fusion-level", help="0 none .. 3 everything legal.")
]


def _human(n: float, unit: str = "") -> str:
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {prefix}{unit}"
    return f"{n:g} {unit}".strip()


@app.command()
@user_errors
def inspect(
    model: ModelArg,
    input_shape: InputShape = None,
    json_out: JsonOpt = False,
    ops: Annotated[bool, typer.Option("--ops", help="List every op with its shapes.")] = False,
    weights: Weights = "inputs",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """Load a model, make it static, and account for its ops, FLOPs and bytes."""
    shapes = parse_input_shapes(input_shape or [])
    graph = load_model_spec(model, shapes, ZooOptions(weights, scale, layers, batch, seq_len))
    summary = {"model": model, **graph.summary()}
    if ops:
        summary["per_op"] = [_op_row(graph, op.name) for op in graph.ops]
    if json_out:
        sys.stdout.write(json.dumps(summary) + "\n")
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
        title=f"{s['model']}  (graph '{s['graph']}', opset {s['opset']})", show_header=False
    )
    head.add_row("fingerprint", s["fingerprint"])
    head.add_row(
        "ops",
        f"{s['ops']} ({s['kernels_unfused']} kernels unfused, "
        f"{s['folded_nodes']} shape nodes folded)",
    )
    head.add_row(
        "FLOPs",
        f"{_human(s['flops'])} (cube {_human(s['cube_flops'])}, "
        f"vector {_human(s['vector_flops'])})",
    )
    head.add_row("compulsory bytes", _human(s["bytes_min"], "B"))
    head.add_row("weights", f"{s['weights']} tensors, {_human(s['weight_bytes'], 'B')}")
    head.add_row("inputs", ", ".join(f"{k} {v}" for k, v in s["inputs"].items()) or "-")
    head.add_row("outputs", ", ".join(f"{k} {v}" for k, v in s["outputs"].items()))
    dyn = s["dynamic_tensors"]
    head.add_row("dynamic tensors", "none" if not dyn else f"[red]{len(dyn)}[/]: {dyn[:5]}")
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
        table.add_row(t, str(n), ",".join(sorted(cls)), _human(fl), _human(by, "B"))
    out.print(table)
    if per_op:
        ops = Table(title="ops")
        for col in ("name", "type", "class", "output", "FLOPs", "bytes"):
            ops.add_column(col)
        for op in graph.ops:
            shape = graph.tensors[op.outputs[0]].shape if op.outputs and op.outputs[0] else None
            ops.add_row(
                op.name,
                op.op_type,
                "view" if op.is_view else op.op_class.value,
                str(list(shape or ())),
                _human(op.flops),
                _human(op.bytes, "B"),
            )
        out.print(ops)


@app.command()
@user_errors
def estimate(
    model: ModelArg,
    target: Annotated[str, typer.Option(help="Target name or a spec .toml path.")] = "ascend910b",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec field for a what-if, FIELD=VALUE (repeat)."),
    ] = None,
    precision: Annotated[str, typer.Option(help="auto, fp32, fp16, bf16 or mixed.")] = "auto",
    plan: Annotated[
        str, typer.Option(help="none, greedy, max, optimal, or a plan file.")
    ] = "none",
    cost: Annotated[
        str, typer.Option(help="Cost model: analytic, learned or simulator.")
    ] = "analytic",
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    input_shape: InputShape = None,
    json_out: JsonOpt = False,
    top: Annotated[int, typer.Option(help="Kernels to list, slowest first.")] = 15,
    weights: Weights = "inputs",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """Estimate a model's latency on an Ascend target under a plan."""
    from autotune.estimate import estimate_graph

    shapes = parse_input_shapes(input_shape or [])
    graph = load_model_spec(model, shapes, ZooOptions(weights, scale, layers, batch, seq_len))
    result = estimate_graph(
        graph,
        model_name=model,
        target=target,
        sets=set_ or [],
        precision=precision,
        plan=plan,
        cost=cost,
        policy=_policy(config, preset=preset),
    )
    if json_out:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    head = Table(
        title=f"{model} on {result['target']} ({result['precision']}), plan "
        f"{result['plan']}, {result['cost_model']} model",
        show_header=False,
    )
    head.add_row("latency", f"{result['latency_us']:.1f} us over {result['kernels']} kernels")
    head.add_row(
        "roofline",
        f"{result['roofline_us']:.1f} us "
        f"({result['roofline_us'] / result['latency_us']:.1%} of the estimate)",
    )
    bounds: dict[str, float] = {}
    for k in result["per_kernel"]:
        bounds[k["bound"]] = bounds.get(k["bound"], 0.0) + k["latency_us"]
    head.add_row(
        "time by bound",
        ", ".join(
            f"{b} {v / result['latency_us']:.0%}"
            for b, v in sorted(bounds.items(), key=lambda x: -x[1])
        ),
    )
    out.print(head)
    table = Table(title=f"slowest {top} kernels")
    for col in ("kernel", "kind", "config", "us", "bound"):
        table.add_column(col, justify="right" if col == "us" else "left")
    from search_space.ir import KernelConfig

    for k in sorted(result["per_kernel"], key=lambda k: -k["latency_us"])[:top]:
        name = k["ops"][0] + (f" +{len(k['ops']) - 1}" if len(k["ops"]) > 1 else "")
        table.add_row(
            escape(name),
            k["kind"],
            KernelConfig.from_json(k["config"]).short(),
            f"{k['latency_us']:.1f}",
            k["bound"],
        )
    out.print(table)


@app.command()
@user_errors
def candidates(
    model: ModelArg,
    target: Annotated[str, typer.Option(help="Target name or a spec .toml path.")] = "ascend910b",
    precision: Annotated[str, typer.Option(help="auto, fp32, fp16, bf16 or mixed.")] = "auto",
    config: ConfigOpt = None,
    preset: PresetOpt = None,
    fusion_level: LevelOpt = None,
    no_fusion_ops: NoFuseOpt = None,
    max_fused_ops: MaxOpsOpt = None,
    benefit_threshold: BenefitOpt = None,
    input_shape: InputShape = None,
    json_out: JsonOpt = False,
    weights: Weights = "inputs",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
) -> None:
    """What fusion would buy: every candidate group, its benefit and verdict."""
    from autotune.candidates import analyse_candidates
    from costmodel.spec import load_target

    shapes = parse_input_shapes(input_shape or [])
    graph = load_model_spec(model, shapes, ZooOptions(weights, scale, layers, batch, seq_len))
    policy = _policy(
        config,
        preset=preset,
        fusion_level=fusion_level,
        no_fusion_ops=no_fusion_ops,
        max_fused_ops=max_fused_ops,
        benefit_threshold=benefit_threshold,
    )
    result = {
        "model": model,
        **analyse_candidates(graph, load_target(target, (), precision), policy),
    }
    if json_out:
        sys.stdout.write(json.dumps(result) + "\n")
        return
    dv = result["decision_vars"]
    out.print(
        f"{model}: {result['kernels_unfused']} kernels, {result['edges']} fusible edges, "
        f"{dv['with_sharing']} decision variables ({dv['without_sharing']} without "
        "sharing)"
    )
    table = Table(title="candidate groups")
    for col in (
        "first op",
        "ops",
        "rule",
        "us before",
        "us after",
        "MB before",
        "MB after",
        "verdict",
        "reason",
    ):
        table.add_column(col)
    for c in result["candidates"]:
        table.add_row(
            escape(c["ops"][0]),
            str(len(c["ops"])),
            c["rule"],
            f"{c['time_before_us']:.1f}",
            f"{c['time_after_us']:.1f}" if "time_after_us" in c else "-",
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


@zoo_app.command("list")
@user_errors
def zoo_list(json_out: JsonOpt = False) -> None:
    """List the built-in models."""
    from autotune.zoo import list_models

    infos = list_models()
    if json_out:
        sys.stdout.write(json.dumps([asdict(i) for i in infos]) + "\n")
        return
    table = Table(title="model zoo (use as zoo:NAME)")
    for col in ("name", "family", "params", "layers", "batch", "description"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.name, i.family, _human(i.params), str(i.layers), str(i.default_batch), i.description
        )
    out.print(table)


@zoo_app.command("export")
@user_errors
def zoo_export(
    name: Annotated[str, typer.Argument(help="Zoo model name (see `autotune zoo list`).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx file.")],
    weights: Annotated[str, typer.Option(help="'random' (real arrays) or 'inputs'.")] = "random",
    scale: Scale = 1.0,
    layers: Layers = None,
    batch: Batch = None,
    seq_len: SeqLen = None,
    seed: Annotated[int, typer.Option(help="Seed for random weights.")] = 0,
) -> None:
    """Write a zoo model to an ONNX file."""
    from autotune.io import save_model
    from autotune.zoo import build

    name = name.removeprefix("zoo:")
    model = build(
        name, weights=weights, scale=scale, layers=layers, batch=batch, seq_len=seq_len, seed=seed
    )
    path = save_model(model, output)
    err.print(f"wrote {path} ({_human(path.stat().st_size, 'B')})")


def main() -> None:
    """Console-script entry point."""
    app()


from autotune import cmd_costmodel as _cmd_costmodel  # noqa: E402
from autotune import commands as _commands  # noqa: E402

del _commands, _cmd_costmodel

if __name__ == "__main__":
    main()
