"""The one JSON vocabulary of every document the tool writes or prints (``docs/json.md``).

Every document opens with ``schema``: its name and the vocabulary's version. A latency is in
microseconds, and its kind is always said: ``predicted`` (a cost model), ``simulated`` (the
cycle-approximate simulator) or ``measured`` (hardware). A document about one plan heads with
its ``latency``, one :func:`latency` object, which every view of the plan (the plan file,
``tune``, ``report``, ``Plan.report()``, ``repr(plan)``) shows the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "KINDS",
    "VERSION",
    "describe",
    "kind_of",
    "latency",
    "plan_latency",
    "schema",
]

# the vocabulary's version: a key's name or meaning changes only with it (1: before issue 46)
VERSION = 2
KINDS = ("predicted", "simulated", "measured")


def schema(name: str) -> dict[str, Any]:
    """The ``schema`` field of a document: ``{"name": "autotune.<name>", "version": 2}``."""
    return {"name": f"autotune.{name}", "version": VERSION}


def kind_of(model: str) -> str:
    """The kind of latency a cost model gives: ``simulated`` from the simulator, else
    ``predicted``."""
    return "simulated" if model == "simulator" else "predicted"


def latency(us: float | None, kind: str, model: str) -> dict[str, Any]:
    """One latency with its kind and what gave it (``analytic``, ``learned``, ``simulator``,
    or the device it was measured on).

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
    """
    if kind not in KINDS:
        raise ValueError(f"latency kind {kind!r} is not one of: {', '.join(KINDS)}")
    return {"us": us, "kind": kind, "model": model}


def plan_latency(
    predicted_us: float | None, simulated_us: float | None, model: str
) -> dict[str, Any]:
    """A plan's one number: its simulated latency where it was simulated, else its prediction
    by the cost model that chose it (``model``)."""
    if simulated_us is not None:
        return latency(simulated_us, "simulated", "simulator")
    return latency(predicted_us, "predicted", model or "unknown")


def describe(value: Mapping[str, Any]) -> str:
    """A latency object as the tables say it: ``71.9 us simulated`` (``- us predicted
    (analytic)`` where the number is missing)."""
    us = value.get("us")
    shown = "-" if us is None else f"{us:.1f}"
    model = value.get("model", "")
    by = f" ({model})" if value.get("kind") == "predicted" and model else ""
    return f"{shown} us {value.get('kind', '')}{by}"
