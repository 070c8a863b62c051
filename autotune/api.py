"""The Python surface: ``tune`` a model, ``load_plan`` a saved plan, ``apply`` and ``report``."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from autotune.plan_file import read_plan, save_plan
from autotune.tuner import TuneConfig, TuneResult, tune_graph
from autotune.vocabulary import describe, plan_latency
from search_space.onnx import ModelSource, load_graph, read_model, read_model_with_data
from search_space.space import FusionPlan
from search_space.zoo import ZooOptions, resolve_model

__all__ = ["Plan", "load_plan", "tune"]


@dataclass(frozen=True)
class Plan:
    """A fusion plan loaded for use: apply it to its model, or report on it. Immutable.

    Attributes:
        record: the persisted :class:`search_space.space.FusionPlan`.
        path: the file it was loaded from (None for a plan fresh from :func:`tune`).
        result: the study's result, for a plan fresh from :func:`tune`.
    """

    record: FusionPlan
    path: Path | None = None
    result: TuneResult | None = None

    def __repr__(self) -> str:
        fused = sum(1 for g in self.record.groups if len(g.ops) > 1)
        return (
            f"Plan({self.record.name or 'model'} on {self.record.target}: "
            f"{len(self.record.groups)} kernels, {fused} fused, {describe(self.latency)})"
        )

    @property
    def latency(self) -> dict[str, Any]:
        """The plan's one number with its kind: ``{"us", "kind", "model"}``, simulated where
        the plan was simulated, else predicted (``docs/json.md``)."""
        r = self.record
        return plan_latency(r.predicted_us, r.measured_us, r.cost_model)

    def apply(
        self,
        model: str | ModelSource,
        input_shapes: Mapping[str, Sequence[int]] | None = None,
        zoo: ZooOptions | None = None,
    ) -> onnx.ModelProto:
        """The fused model: each group one ``ai.autofusion`` node defined by a local function.
        ``model`` is what :func:`tune` takes: a path, a ModelProto or ``zoo:NAME`` (built
        with ``zoo``'s options, as it was tuned).

        Raises:
            PlanError: the plan was made for another model.
            AutofusionError: a model that cannot be read (every error here derives from it).
        """
        from autotune.apply import apply_plan

        # a file is read once, with its weights (the fused model must run); the graph is
        # built from that same proto
        source = resolve_model(model, zoo) if isinstance(model, str) else model
        proto = read_model_with_data(source)
        graph = load_graph(proto, input_shapes=input_shapes)
        self.record.check_model(graph)
        return apply_plan(proto, graph, self.record.groups)

    def report(self) -> dict[str, Any]:
        """The plan's report: its latency, safe mode's counts and per-kernel table (the
        document ``autotune report --json`` prints, ``schema`` first)."""
        from autotune.report import plan_report

        return plan_report(self.record)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the plan file (atomically, in the JSON vocabulary); where it went."""
        return save_plan(self.record, path)


def load_plan(
    path: str | os.PathLike[str],
    model: ModelSource | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Plan:
    """Load a plan file (written by any version of the tool: an older vocabulary is migrated
    as it is read); with ``model``, check it belongs to that model.

    Raises:
        PlanError: unreadable file, newer schema, or a plan for another model.
    """
    graph = load_graph(model, input_shapes=input_shapes) if model is not None else None
    return Plan(read_plan(path, graph), Path(path))


def tune(
    model: str | ModelSource,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    zoo: ZooOptions | None = None,
    shape_ranges: Sequence[str] = (),
    buckets: Sequence[str] = (),
    traffic: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Plan:
    """Tune a model (a path, a ModelProto, or ``zoo:NAME``); ``options`` are
    :class:`autotune.tuner.TuneConfig` fields (``trials``, ``sampler``, ``storage``...).
    ``shape_ranges`` (``["batch=1..64", "seq=16..512"]``), ``buckets`` and ``traffic`` are
    the CLI's ``--shape-range``, ``--buckets`` and ``--traffic`` (docs/tuning.md): one plan
    for every bucket, a config table per bucket."""
    from autotune.tuner import make_safety
    from costmodel.spec import load_target
    from search_space.shapes import load_buckets, shape_source, zoo_at

    ranged = None
    if shape_ranges:
        where = None if traffic is None else Path(traffic)
        symbolic = shape_source(model, zoo, input_shapes)
        ranged = load_buckets(symbolic, shape_ranges, buckets, where)
        zoo = zoo_at(model, zoo, ranged.buckets[-1].values)  # safe mode's: the top's
    source = resolve_model(model, zoo) if isinstance(model, str) else model
    graph = load_graph(source, input_shapes=input_shapes) if ranged is None else ranged.reference
    name = model.removeprefix("zoo:") if isinstance(model, str) else "model"
    config = TuneConfig(**options)
    target = load_target(config.target, config.sets, config.precision)
    if isinstance(model, str | onnx.ModelProto):
        ref: str | onnx.ModelProto = model
    else:
        ref = str(model) if isinstance(model, os.PathLike) else read_model(model)[0]
    safety = make_safety(graph, ref, zoo, config.policy, target)
    result = tune_graph(graph, config, name=Path(name).stem, safety=safety, buckets=ranged)
    return Plan(result.plan, None, result)
