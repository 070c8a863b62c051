"""FusionPlan: the persisted record of one fusion + tiling decision for one model and target.

Plans are JSON (never pickle). Loading checks the schema version and, when given the model's
graph, its fingerprint and that every group names real ops: a plan is never applied silently
to a model it was not made for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from search_space.atomic import atomic_write_text
from search_space.exceptions import AutofusionError, check
from search_space.fusion import FusionContext
from search_space.ir import GROUP_KINDS, Graph, KernelConfig
from search_space.shapes import (
    DimAxis,
    ShapeRangeError,
    ShapeRanges,
    axes_from_json,
    axes_json,
    dims_label,
    dims_of,
    parse_range,
    structure_digest,
)
from search_space.space.names import kernel_names

__all__ = ["SCHEMA_VERSION", "FusionPlan", "PlanBucket", "PlanError", "PlanGroup"]

SCHEMA_VERSION = 1


class PlanError(AutofusionError):
    """A plan file is unreadable, too new, or does not belong to the model."""


@dataclass(frozen=True)
class PlanGroup:
    """One kernel of a plan: its ops (user names), template kind, config and verdict, and
    its readable name (:func:`search_space.space.kernel_names`; "" in a plan made without)."""

    ops: tuple[str, ...]
    kind: str
    config: KernelConfig | None = None
    verdict: str = ""
    name: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name} if self.name else {}
        out.update(ops=list(self.ops), kind=self.kind)
        if self.config is not None:
            out["config"] = self.config.to_json()
        if self.verdict:
            out["verdict"] = self.verdict
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanGroup:
        """A group as :meth:`to_json` writes it.

        Raises:
            KeyError, TypeError, ValueError: a missing or bad field (no ops, an unknown kind,
                a config field out of range), named with the group's first op.
        """
        ops = tuple(str(o) for o in data["ops"])
        if not ops:
            raise ValueError("a plan group has no ops")
        kind = str(data.get("kind", "single"))
        if kind not in GROUP_KINDS:
            raise ValueError(
                f"group starting at '{ops[0]}' has unknown kind '{kind}'; available: "
                f"{', '.join(GROUP_KINDS)}"
            )
        config = data.get("config")
        try:
            parsed = KernelConfig.from_json(config) if config else None
        except ValueError as err:
            raise ValueError(f"group starting at '{ops[0]}': {err}") from None
        verdict, name = str(data.get("verdict", "")), str(data.get("name", ""))
        return cls(ops=ops, kind=kind, config=parsed, verdict=verdict, name=name)


@dataclass(frozen=True)
class PlanBucket:
    """One bucket of a plan over shape ranges: its dims (each ranged dim's edge), its share
    of the traffic, a config per group (in the plan's group order: the dispatch table's row)
    and what its kernels cost there (None: not simulated, a bucket of weight 0)."""

    dims: tuple[tuple[str, int], ...]
    weight: float
    configs: tuple[KernelConfig | None, ...]
    predicted_us: float | None = None
    simulated_us: float | None = None

    @property
    def label(self) -> str:
        return dims_label(self.dims)

    def to_json(self) -> dict[str, Any]:
        return {
            "dims": dict(self.dims),
            "weight": self.weight,
            "predicted_us": self.predicted_us,
            "simulated_us": self.simulated_us,
            "configs": [None if c is None else c.to_json() for c in self.configs],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanBucket:
        """A bucket as :meth:`to_json` writes it.

        Raises:
            KeyError, TypeError, ValueError: a missing or bad field.
        """
        dims = tuple((str(k), int(v)) for k, v in dict(data["dims"]).items())
        configs = tuple(None if c is None else KernelConfig.from_json(c) for c in data["configs"])
        weight = float(data["weight"])
        if not weight >= 0:
            raise ValueError(f"bucket {dims} has weight {weight}")
        return cls(dims, weight, configs, data.get("predicted_us"), data.get("simulated_us"))


@dataclass(frozen=True)
class FusionPlan:
    """Groups + configs for one model on one target, with what was predicted and measured."""

    fingerprint: str
    target: str
    groups: tuple[PlanGroup, ...]
    precision: str = "auto"
    name: str = ""
    predicted_us: float | None = None
    measured_us: float | None = None
    cost_model: str = ""
    tool_version: str = "0.1.0"
    schema_version: int = SCHEMA_VERSION
    meta: Mapping[str, Any] = field(default_factory=dict)
    # shape ranges (``batch=1..64``) and their buckets, the last the top (the groups' own
    # configs and the fingerprint are its); none for a plan of one shape
    shape_ranges: tuple[str, ...] = ()
    buckets: tuple[PlanBucket, ...] = ()
    # what ties a range plan to its model at any shape of the range (search_space.shapes.locate)
    structure: str = ""
    dim_axes: tuple[DimAxis, ...] = ()

    def to_json(self) -> dict[str, Any]:
        ranged = (
            {
                "shape_ranges": list(self.shape_ranges),
                "structure": self.structure,
                "dim_axes": axes_json(self.dim_axes),
                "buckets": [b.to_json() for b in self.buckets],
            }
            if self.buckets
            else {}
        )
        return {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "name": self.name,
            "fingerprint": self.fingerprint,
            "target": self.target,
            "precision": self.precision,
            "cost_model": self.cost_model,
            "predicted_us": self.predicted_us,
            "measured_us": self.measured_us,
            "groups": [g.to_json() for g in self.groups],
            **ranged,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], graph: Graph | None = None) -> FusionPlan:
        """Rebuild a plan; with ``graph``, check it belongs to that model.

        Raises:
            PlanError: a newer schema, missing fields, a fingerprint mismatch, unknown ops.
        """
        try:
            version = int(data.get("schema_version", 0))
        except (TypeError, ValueError):
            raise PlanError("plan has no valid schema_version; is it a plan file?") from None
        check(
            1 <= version <= SCHEMA_VERSION,
            f"plan schema {version} is not supported by this tool (reads 1..{SCHEMA_VERSION}); "
            "upgrade the tool or re-create the plan",
            PlanError,
        )
        try:
            plan = cls(
                fingerprint=str(data["fingerprint"]),
                target=str(data["target"]),
                groups=tuple(PlanGroup.from_json(g) for g in data["groups"]),
                precision=str(data.get("precision", "auto")),
                name=str(data.get("name", "")),
                predicted_us=data.get("predicted_us"),
                measured_us=data.get("measured_us"),
                cost_model=str(data.get("cost_model", "")),
                tool_version=str(data.get("tool_version", "")),
                schema_version=version,
                meta=dict(data.get("meta", {})),
                shape_ranges=tuple(str(r) for r in data.get("shape_ranges", ())),
                buckets=tuple(PlanBucket.from_json(b) for b in data.get("buckets", ())),
                structure=str(data.get("structure", "")),
                dim_axes=axes_from_json(data.get("dim_axes", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PlanError(f"plan is missing or has a bad field: {err}") from None
        check(
            all(len(b.configs) == len(plan.groups) for b in plan.buckets),
            "plan has a bucket whose configs do not match its groups one for one",
            PlanError,
        )
        seen: set[str] = set()
        for g in plan.groups:  # checked without the model too (``report`` reads no model)
            for op in g.ops:
                check(op not in seen, f"plan puts op '{op}' in two groups", PlanError)
                seen.add(op)
        if graph is not None:
            plan.check_model(graph)
        return plan

    def named(self, graph: Graph) -> FusionPlan:
        """This plan with each kernel named (:func:`search_space.space.kernel_names`)."""
        names = kernel_names(graph, (g.ops for g in self.groups))
        groups = tuple(replace(g, name=n) for g, n in zip(self.groups, names, strict=True))
        return replace(self, groups=groups)

    def check_model(self, graph: Graph) -> None:
        """Raise :class:`PlanError` unless the plan was made for this graph (a range plan:
        for this graph at any shape of its range)."""
        fp = graph.fingerprint()
        if self.buckets and self.fingerprint != fp:
            self.bucket_of(graph)
        else:
            check(
                self.fingerprint == fp,
                f"plan was made for a different model (fingerprint {self.fingerprint}, this "
                f"model is {fp}); re-tune for this model or pass the model the plan was made "
                "for",
                PlanError,
            )
        seen: set[str] = set()
        for g in self.groups:
            for op in g.ops:
                check(
                    graph.has_op(op),
                    f"plan names op '{op}', which the model does not have",
                    PlanError,
                )
                check(op not in seen, f"plan puts op '{op}' in two groups", PlanError)
                seen.add(op)
        ctx = FusionContext(graph, max_fused_ops=10**6)
        for g in self.groups:
            work = [n for n in g.ops if n in ctx.index]
            if len(work) > 1:
                verdict = ctx.check(work)
                check(
                    verdict.ok,
                    f"plan group starting at '{work[0]}' is not a legal fusion: "
                    f"{verdict.reason}; re-create the plan",
                    PlanError,
                )

    def bucket_of(self, graph: Graph) -> PlanBucket:
        """A range plan's bucket for ``graph``: the model at one shape of the range, which
        runs with the next bucket's configs.

        Raises:
            PlanError: another model (its ops differ), or a shape outside the range.
        """
        check(
            self.structure == structure_digest(graph),
            "plan was made for a different model (its ops differ from this model's); re-tune "
            "for this model or pass the model the plan was made for",
            PlanError,
        )
        edges: dict[str, set[int]] = {}
        for b in self.buckets:
            for k, v in b.dims:
                edges.setdefault(k, set()).add(v)
        try:
            parsed = tuple(parse_range(r) for r in self.shape_ranges)
            ranges = ShapeRanges(parsed, {k: tuple(sorted(v)) for k, v in edges.items()})
            key = ranges.bucket_of(dims_of(graph, self.dim_axes))
        except ShapeRangeError as err:
            raise PlanError(f"this shape is not the plan's: {err}") from None
        return next(b for b in self.buckets if b.dims == key)

    def at_shape(self, graph: Graph) -> FusionPlan:
        """The plan for ``graph`` alone (one shape of a range plan's range): its groups at the
        configs of the shape's bucket, its figures where the shape is the bucket's own; a plan
        of one shape as it is.

        Raises:
            PlanError: what :meth:`bucket_of` raises.
        """
        if not self.buckets:
            return self
        b = self.bucket_of(graph)
        exact = dims_of(graph, self.dim_axes) == dict(b.dims)
        groups = tuple(replace(g, config=c) for g, c in zip(self.groups, b.configs, strict=True))
        meta = {k: v for k, v in self.meta.items() if k != "kernels"} | {"bucket": b.label}
        return replace(
            self,
            fingerprint=graph.fingerprint(),
            groups=groups,
            predicted_us=b.predicted_us if exact else None,
            measured_us=b.simulated_us if exact else None,
            meta=meta,
            shape_ranges=(),
            buckets=(),
            structure="",
            dim_axes=(),
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        return atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str], graph: Graph | None = None) -> FusionPlan:
        """Read a plan file (JSON).

        Raises:
            PlanError: missing or unreadable file, or any check of :meth:`from_json`.
        """
        p = Path(path)
        check(p.is_file(), f"plan file '{p}' not found", PlanError)
        try:
            data = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise PlanError(f"plan file '{p}' is not valid JSON: {err}") from None
        except RecursionError:  # the parser recurses once per level
            raise PlanError(f"plan file '{p}' is nested too deeply to be a plan") from None
        check(isinstance(data, dict), f"plan file '{p}' does not hold a JSON object", PlanError)
        return cls.from_json(data, graph)
