"""What every command shares: the consoles, the one-line error handling, and the flags that
mean the same everywhere (declared once here).

MODEL flags (``--input-shape`` and the zoo build flags) reach a command as one
:class:`ModelOptions` through :func:`model_options`, policy flags as one :class:`PolicyFlags`
through :func:`policy_options` (both declared in :mod:`autotune.cli.flags`); target and output
flags are ``Annotated`` aliases.
"""

from __future__ import annotations

import errno
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.markup import escape

from autotune.cli.console import err, out, printable, say_log_lines
from autotune.cli.flags import FLAGS, FUSION_FLAGS, POLICY_FLAGS
from autotune.exceptions import AutotuneError, StorageWriteError
from autotune.startup import command_started
from autotune.vocabulary import VERSION
from search_space import AutofusionError, Graph
from search_space.rules import Policy, load_policy

if TYPE_CHECKING:  # annotations only: loading a model and a plan imports what it runs
    # (onnx, the zoo), so that --help, --version and completion do not
    import onnx

    from costmodel.spec import Target
    from search_space.shapes import BucketGraphs, ShapeSource
    from search_space.space import FusionPlan
    from search_space.zoo import ZooOptions

__all__ = [
    "FUSION_FLAGS",
    "JSON_SCHEMA",
    "POLICY_FLAGS",
    "PYTHON",
    "JsonOpt",
    "ModelArg",
    "ModelOptions",
    "PlotlyOpt",
    "PolicyFlags",
    "PrecisionOpt",
    "SetOpt",
    "TargetOpt",
    "emit_json",
    "err",
    "human",
    "model_and_plan",
    "model_and_plan_or_baseline",
    "model_options",
    "out",
    "policy_options",
    "python_source",
    "say_log_lines",
    "user_errors",
]

# the version of every command's --json object (docs/json.md): one vocabulary across commands
# and the plan file; a key's name or meaning changes only with this number
JSON_SCHEMA = VERSION


def emit_json(doc: Mapping[str, Any]) -> None:
    """Print one command's ``--json`` object on stdout, ``schema`` first: the document's name
    (``autotune.<command>``, ``autotune.costmodel.eval`` for a subcommand) and version, unless
    the document names itself (``report`` prints ``autotune.report``, as ``Plan.report()``)."""
    import json
    import sys

    import click

    ctx = click.get_current_context(silent=True)
    words = ctx.command_path.split()[1:] if ctx is not None else []
    name = f"autotune.{'.'.join(words) or 'cli'}"
    head = {"schema": {"name": name, "version": JSON_SCHEMA}}
    sys.stdout.write(json.dumps({**head, **doc}) + "\n")


F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Turn a deliberate tool error into one line on stderr and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        command_started()  # Ctrl-C from here on is the command's (below)
        try:
            return fn(*args, **kwargs)
        except (AutofusionError, StorageWriteError) as exc:
            _error_line(str(exc))
        except OSError as exc:  # a disk full or failing under a write the tool did not expect
            if exc.errno not in _IO_ERRORS:
                raise
            name = exc.filename2 or exc.filename  # a link's own path, not its target
            where = f" on '{name}'" if name else ""
            _error_line(f"{exc.strerror}{where}; free some space or check the disk")
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


_IO_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS)


def _error_line(message: str) -> None:
    """The one error line, its names' control characters escaped; exit status 1."""
    err.print(f"[bold red]error:[/] {escape(printable(message, one_line=True))}", highlight=False)
    raise typer.Exit(1) from None


ModelArg = Annotated[
    str, typer.Argument(help="An ONNX file, or zoo:NAME (see `autotune zoo list`).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]
PlotlyOpt = Annotated[
    str,
    typer.Option(
        "--plotly",
        help="Where an HTML page gets plotly.js: inline (in the page, ~4.8 MB), cdn (a script "
        "from plotly's CDN) or directory (plotly.min.js beside the page, shared).",
    ),
]
TargetOpt = Annotated[str, typer.Option(help="Target name or a spec .toml path.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a spec field for a what-if, FIELD=VALUE (repeat)."),
]
PrecisionOpt = Annotated[str, typer.Option(help="auto, fp32, fp16, bf16 or mixed.")]


@dataclass(frozen=True)
class ShapeFlags:
    """``--shape-range``, ``--buckets`` and ``--traffic`` as given (none: one shape)."""

    ranges: tuple[str, ...] = ()
    buckets: tuple[str, ...] = ()
    traffic: Path | None = None


@dataclass(frozen=True)
class ModelOptions:
    """How a command reads MODEL: static shapes for a file's dynamic inputs, how to build
    a ``zoo:NAME`` model (ignored for files), and the shape ranges it is read over."""

    input_shapes: Mapping[str, Sequence[int]]
    zoo: ZooOptions
    shaped: ShapeFlags = ShapeFlags()

    @property
    def ranged(self) -> bool:
        """Shape ranges were given (``--buckets`` and ``--traffic`` need them)."""
        return bool(self.shaped.ranges)

    def ranged_graphs(self, model: str) -> BucketGraphs | None:
        """MODEL at every bucket of its ranges, or None without ``--shape-range``.

        Raises:
            AutofusionError: ``--buckets`` or ``--traffic`` without a range, and what
                :meth:`bucket_graphs` raises.
        """
        if self.ranged:
            return self.bucket_graphs(model)
        if self.shaped.buckets or self.shaped.traffic:
            raise AutotuneError("--buckets and --traffic divide a --shape-range; give one")
        return None

    def bucket_graphs(self, model: str) -> BucketGraphs:
        """MODEL at every bucket of its ranges (weighted by ``--traffic``).

        Raises:
            AutofusionError: a bad range, bucket list or traffic file; a zoo flag that fixes
                a ranged dim; a range on a dim the model does not have as dynamic.
        """
        from search_space.shapes import load_buckets, parse_range

        s = self.shaped
        source = self._shape_source(model, [parse_range(r).name for r in s.ranges])
        return load_buckets(source, s.ranges, s.buckets, s.traffic)

    def zoo_at(self, model: str, values: Mapping[str, int]) -> ZooOptions:
        """The zoo options that build MODEL at a bucket's ``values`` (as given for a file)."""
        from search_space.shapes import zoo_at

        return zoo_at(model, self.zoo, values) or self.zoo

    def _shape_source(self, model: str, ranged: Sequence[str]) -> ShapeSource:
        from search_space.shapes import shape_source

        if model.startswith("zoo:"):
            fixed = {"batch": self.zoo.batch, "seq": self.zoo.seq_len, "cache": self.zoo.cache_len}
            flag = {"batch": "--batch", "seq": "--seq-len", "cache": "--cache-len"}
            both = [n for n in ranged if fixed.get(n) is not None]
            if both:
                raise AutotuneError(
                    f"{flag[both[0]]} and --shape-range {both[0]}=... both set {both[0]}; give one"
                )
        source = python_source(model) if model.startswith(PYTHON) else model
        return shape_source(source, self.zoo, self.input_shapes)

    def graph(self, model: str) -> Graph:
        """MODEL as a static graph."""
        if model.startswith(PYTHON):
            from search_space.onnx import load_graph

            return load_graph(python_source(model), input_shapes=self.input_shapes)
        from search_space.zoo import load_model_spec

        return load_model_spec(model, self.input_shapes, self.zoo)

    @staticmethod
    def file(model: str) -> str | None:
        """MODEL's file, which no output may overwrite (None for a zoo or python model)."""
        return None if model.startswith(("zoo:", PYTHON)) else model

    @staticmethod
    def name(model: str) -> str:
        """A short name for MODEL: the zoo name, the factory's, or the file's stem."""
        if model.startswith(PYTHON):
            return model.rsplit(":", 1)[-1]
        return Path(model.removeprefix("zoo:")).stem

    def reference(self, model: str) -> Any:
        """MODEL as safe mode re-reads it: the spec, or a python model's export (once)."""
        return self.source(model) if model.startswith(PYTHON) else model

    def source(self, model: str) -> Any:
        """MODEL as given: a path stays a path, ``zoo:NAME`` is built and
        ``python:package.module:factory`` exported (ModelProtos)."""
        if model.startswith(PYTHON):
            return python_source(model)
        from search_space.zoo import resolve_model

        return resolve_model(model, self.zoo)


PYTHON = "python:"


@functools.cache
def python_source(model: str) -> onnx.ModelProto:
    """A ``python:package.module:factory`` MODEL exported to ONNX (once per command).

    Raises:
        AutofusionError: no torch to export with, or what ``python_model`` refuses.
    """
    try:
        from autotune.frontend.python_model import python_model
    except ImportError as err:
        raise AutotuneError(
            f"model '{model}' needs the PyTorch front end: pip install "
            f"'ascend-autofusion[torch]' ({err})"
        ) from None
    return python_model(model)


def _bundle(
    name: str, flags: Mapping[str, Any], make: Callable[[dict[str, Any]], Any]
) -> Callable[[F], F]:
    """Replace a command's parameter ``name`` by the ``flags`` (parameter -> default) on the
    command line; the command receives ``make(values of those flags)`` as ``name``."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    extra = [
        inspect.Parameter(f, kind, default=default, annotation=FLAGS[f][1])
        for f, default in flags.items()
    ]

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != name]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name in kwargs:  # called from Python with the bundle already made
                return fn(*args, **kwargs)
            values = {f: kwargs.pop(f, default) for f, default in flags.items()}
            return fn(*args, **{name: make(values)}, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def model_options(
    weights: str | None = "inputs", shapes: bool = True, ranges: bool = False
) -> Callable[[F], F]:
    """Give a command the MODEL flags: ``--input-shape`` (unless not ``shapes``: a command
    that takes a zoo name, not MODEL) and the zoo's ``--weights`` (default ``weights``;
    ``None``: no flag, always random), ``--scale``, ``--layers``, ``--batch``, ``--seq-len``,
    ``--cache-len``, ``--cache-form``; with ``ranges``, ``--shape-range``, ``--buckets`` and
    ``--traffic``. The command takes them as one parameter ``opts: ModelOptions``."""
    names = [*(["input_shape"] if shapes else []), *(["weights"] if weights else [])]
    names += ["scale", "layers", "batch", "seq_len", "cache_len", "cache_form"]
    names += ["shape_range", "buckets", "traffic"] if ranges else []
    flags = {f: weights if f == "weights" else FLAGS[f][0] for f in names}

    def make(v: dict[str, Any]) -> ModelOptions:
        from search_space.onnx import parse_input_shapes
        from search_space.zoo import ZooOptions

        zoo = ZooOptions(
            v.get("weights") or "random",
            v["scale"],
            v["layers"],
            v["batch"],
            v["seq_len"],
            v["cache_len"],
            v["cache_form"],
        )
        shaped = ShapeFlags(
            tuple(v.get("shape_range") or ()), tuple(v.get("buckets") or ()), v.get("traffic")
        )
        return ModelOptions(parse_input_shapes(v.get("input_shape") or []), zoo, shaped)

    return _bundle("opts", flags, make)


def policy_options(*names: str) -> Callable[[F], F]:
    """Give a command ``--config`` and the policy flags ``names`` (of :data:`POLICY_FLAGS`);
    the command takes them as one parameter ``policy: PolicyFlags``."""
    unknown = set(names) - set(POLICY_FLAGS)
    if unknown:
        raise ValueError(f"unknown policy flags {sorted(unknown)}; known: {POLICY_FLAGS}")
    flags = {f: None for f in ("config", *names)}

    def make(v: dict[str, Any]) -> PolicyFlags:
        config = v.pop("config")
        return PolicyFlags(config, v)

    return _bundle("policy", flags, make)


@dataclass(frozen=True)
class PolicyFlags:
    """A ``--config`` file and the policy flags given on the command line (None: unset)."""

    config: Path | None
    flags: Mapping[str, Any]

    def load(self, **extra: Any) -> Policy:
        """The file's policy with the flags (and ``extra`` settings) over it.

        Raises:
            PolicyError: a bad file or value (one line, names it).
        """
        return load_policy(self.config, {**self.flags, **extra})


def human(n: float, unit: str = "") -> str:
    """A number with an SI prefix: 1.23 G, 4.5 MB."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f} {prefix}{unit}"
    return f"{n:g} {unit}".strip()


def _load_model(model: str, opts: ModelOptions) -> tuple[onnx.ModelProto, Graph]:
    """MODEL with its weights (a ModelProto) and its static graph."""
    from search_space.onnx import load_graph, read_model_with_data

    source = opts.source(model)
    return read_model_with_data(source), load_graph(source, input_shapes=opts.input_shapes)


def model_and_plan(
    model: str, opts: ModelOptions, plan: Path
) -> tuple[onnx.ModelProto, Graph, FusionPlan]:
    """MODEL with its weights (a ModelProto), its static graph, and the plan checked against
    it (a plan for another model is one clear error).

    Raises:
        PlanError: a missing or bad plan file, or a plan for another model;
        InfeasibleConfig: a config that does not run on the plan's target.
    """
    from autotune.estimate import plan_kernels, plan_target
    from autotune.plan_file import read_plan

    proto, graph = _load_model(model, opts)
    record = read_plan(plan, graph)
    plan_kernels(graph, record, plan_target(record))  # every config runs on its target
    return proto, graph, record


def model_and_plan_or_baseline(
    model: str,
    opts: ModelOptions,
    plan: str,
    target: str | None = None,
    precision: str | None = None,
    policy: Policy | None = None,
) -> tuple[onnx.ModelProto, Graph, FusionPlan, Target]:
    """As :func:`model_and_plan`, with the target, and PLAN may name a baseline: planned
    under ``policy`` for ``target`` (default ascend910b) at ``precision`` (default auto), as a
    record whose ``meta["baseline"]`` names it. A plan file brings its target, which
    ``target`` and ``precision``, when given, must agree with.

    Raises:
        PlanError: PLAN is neither a baseline nor a file, or does not fit the model or the
            target given; SpecError: an unknown target; as :func:`model_and_plan`.
    """
    from autotune.estimate import plan_kernels
    from costmodel.spec import load_target
    from search_space.space import BASELINES, FusionPlan, PlanError, PlanGroup

    if plan not in BASELINES:
        if not Path(plan).exists():
            names = ", ".join(BASELINES)
            raise PlanError(f"plan '{plan}' is neither a plan file nor a baseline ({names})")
        proto, graph, record = model_and_plan(model, opts, Path(plan))
        return proto, graph, record, _plan_file_target(record, target, precision)
    proto, graph = _load_model(model, opts)
    source = target or "ascend910b"
    tgt = load_target(source, (), precision or "auto")
    groups, kernels = plan_kernels(graph, plan, tgt, policy)
    configs = [k.config for k in kernels] if kernels else [None] * len(groups)  # no work
    record = FusionPlan(
        fingerprint=graph.fingerprint(),
        target=tgt.spec.name,
        groups=tuple(PlanGroup(g.ops, g.kind, c) for g, c in zip(groups, configs, strict=True)),
        precision=tgt.precision,
        name=plan,
        meta={"baseline": plan, "target_source": source, "sets": []},
    ).named(graph)
    return proto, graph, record, tgt


def _plan_file_target(record: FusionPlan, target: str | None, precision: str | None) -> Target:
    """The target a plan file was tuned for, which ``target`` and ``precision`` (when given)
    must name: a plan's configs are tuned for one target."""
    from autotune.estimate import plan_target
    from costmodel.spec import load_target
    from search_space.space import PlanError

    tgt = plan_target(record)
    if target is not None or precision is not None:
        given = load_target(target or tgt.spec.name, (), precision or tgt.precision)
        if (given.spec.name, given.precision) != (tgt.spec.name, tgt.precision):
            raise PlanError(
                f"plan was tuned for {tgt.spec.name} at precision {tgt.precision}, not "
                f"{given.spec.name} at {given.precision}; drop --target/--precision or re-tune"
            )
    return tgt
