"""The plan file in the tool's JSON vocabulary (``docs/json.md``): written from a
:class:`~search_space.space.FusionPlan` record, read back into one, and a plan written before
the vocabulary (version 1) migrated as it is read.

The record keeps the fields of ``search_space`` (``schema_version`` is its layout, 1; the
attribute ``measured_us`` holds the simulated latency); the file names that number
``simulated_us`` and heads with ``schema`` and the plan's one ``latency``. A file is read the
same by :func:`read_plan` whichever version wrote it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.vocabulary import VERSION, plan_latency, schema
from search_space.atomic import atomic_write_text, file_head
from search_space.exceptions import check
from search_space.ir import Graph
from search_space.space import FusionPlan, PlanError

__all__ = ["migrate_meta", "plan_from_json", "plan_to_json", "read_plan", "save_plan"]

# version 1 -> 2: the meta's keys, and the keys of its kernel and candidate rows
_META = {"baseline_us": "baseline_simulated_us", "report": "safe_mode"}
_KERNEL_ROW = {
    "us": "simulated_us",
    "us_predicted": "predicted_us",
    "us_unfused": "unfused_predicted_us",
}
_CANDIDATE_ROW = {"measured_us": "simulated_us", "kernels": "n_kernels"}


def _renamed(row: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """``row`` with its old keys under their new names (a row already new is unchanged)."""
    return {names.get(k, k) if names.get(k, k) not in row else k: v for k, v in row.items()}


def migrate_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A plan's ``meta`` in this vocabulary: the keys version 1 wrote renamed, the values
    as they were; a meta already in it is returned equal."""
    out = _renamed(meta, _META)
    if isinstance(out.get("kernels"), list):
        out["kernels"] = [_renamed(r, _KERNEL_ROW) for r in out["kernels"]]
    if isinstance(out.get("candidates"), list):
        out["candidates"] = [_renamed(r, _CANDIDATE_ROW) for r in out["candidates"]]
    return out


def plan_to_json(record: FusionPlan) -> dict[str, Any]:
    """The plan file's object: ``schema`` and ``latency`` first, then the record's fields
    (``simulated_us`` for the record's ``measured_us``), its meta in this vocabulary."""
    data = record.to_json()
    simulated = data.pop("measured_us")
    head = {
        "schema": schema("plan"),
        "latency": plan_latency(record.predicted_us, simulated, record.cost_model),
    }
    body = {k: v for k, v in data.items() if k not in ("groups", "meta")}
    return {
        **head,
        **body,
        "simulated_us": simulated,
        "groups": data["groups"],
        "meta": migrate_meta(data["meta"]),
    }


def plan_from_json(data: Mapping[str, Any], graph: Graph | None = None) -> FusionPlan:
    """A plan record from a plan file's object of any vocabulary version; with ``graph``,
    checked against that model.

    Raises:
        PlanError: a vocabulary newer than this tool's, or any check of
            :meth:`FusionPlan.from_json`.
    """
    version = _version(data)
    check(
        version <= VERSION,
        f"plan vocabulary {version} is newer than this tool reads (1..{VERSION}); upgrade the "
        "tool or re-create the plan",
        PlanError,
    )
    fields = dict(data)
    if version >= 2:  # the record's attribute keeps search_space's name for this number
        fields["measured_us"] = fields.pop("simulated_us", None)
    meta = fields.get("meta", {})
    if isinstance(meta, Mapping):
        fields["meta"] = migrate_meta(meta)
    return FusionPlan.from_json(fields, graph)


def _version(data: Mapping[str, Any]) -> int:
    head = data.get("schema")
    if head is None:
        return 1  # written before the vocabulary had a version of its own
    try:
        return int(head["version"])
    except (TypeError, KeyError, ValueError):
        raise PlanError("plan has a bad 'schema' field; is it a plan file?") from None


def save_plan(record: FusionPlan, path: str | os.PathLike[str]) -> Path:
    """Write a plan file (atomically); where it went."""
    return atomic_write_text(path, json.dumps(plan_to_json(record), indent=1) + "\n")


def read_plan(path: str | os.PathLike[str], graph: Graph | None = None) -> FusionPlan:
    """Read a plan file of any vocabulary version.

    Raises:
        PlanError: missing or unreadable file, or any check of :func:`plan_from_json`.
    """
    p = Path(path)
    check(p.is_file(), f"plan file '{p}' not found", PlanError)
    if file_head(p, 4) == b"PAR1":
        raise PlanError(
            f"plan file '{p}' is a measurements table (Parquet), not a plan; give the plan "
            "(JSON) that `autotune tune -o` wrote"
        )
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PlanError(f"plan file '{p}' is not valid JSON: {err}") from None
    except RecursionError:  # the parser recurses once per level
        raise PlanError(
            f"plan file '{p}' is nested too deeply to be a plan; give the plan that "
            "`autotune tune -o` wrote"
        ) from None
    check(isinstance(data, dict), f"plan file '{p}' does not hold a JSON object", PlanError)
    return plan_from_json(data, graph)
