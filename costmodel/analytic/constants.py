"""The analytic model's free constants and the calibrated values shipped per target.

Every number of the closed form is a spec value times one factor of :class:`AnalyticConstants`
(all 1.0 by default, the spec as written); calibration (:mod:`costmodel.measure`) fits
them (all but the gap, unless named) to simulator runs and stores them per target in a
versioned JSON file
(:class:`Calibration`), which :func:`calibrated_constants` loads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from costmodel.exceptions import CostModelError
from costmodel.spec import Target, fitted_lineage
from search_space.atomic import atomic_write_text

__all__ = [
    "CALIBRATION_SCHEMA",
    "RATES",
    "AnalyticConstants",
    "Calibration",
    "calibrated_constants",
    "load_calibration",
    "shipped_calibration_path",
]

CALIBRATION_SCHEMA = 1
# constants that multiply a bandwidth or throughput: never zero, never above the spec's peak
RATES = frozenset(
    {"hbm", "core_gm", "l2_read", "l2_write", "fixpipe", "mte1", "cube", "vector", "nd2nz"}
)


@dataclass(frozen=True)
class AnalyticConstants:
    """The analytic model's free constants: factors on spec values (1.0 = the spec as written).

    Rate factors multiply a bandwidth or throughput (``hbm`` the effective HBM bandwidth,
    ``cube`` the cube's cycles-per-step divisor, ...); ``*_latency``, ``head`` and ``gap``
    multiply fixed costs (``setup`` the kernel's device-side prologue: tiling read and scalar
    set-up); ``l2_capacity`` scales the usable L2 bytes, ``l2_window`` is how
    many steps of a wave's working set must fit for cores of one wave to share blocks, and
    ``l2_fill_wait`` is the fraction of the fill in flight a core sharing a block concurrently
    waits for beyond its own L2 read (0: it completes at the L2 rate; 1: with the fill, the
    whole block at the miss rate) and ``share_latency`` where such a sharer's first-byte
    latency lies between an L2 hit's (0) and a GM miss's (1).
    """

    hbm: float = 1.0
    core_gm: float = 1.0
    l2_read: float = 1.0
    l2_write: float = 1.0
    fixpipe: float = 1.0
    mte1: float = 1.0
    cube: float = 1.0
    vector: float = 1.0
    nd2nz: float = 1.0
    gm_latency: float = 1.0
    l2_latency: float = 1.0
    store_latency: float = 1.0
    head: float = 1.0
    setup: float = 1.0
    gap: float = 1.0
    sync: float = 1.0
    l2_capacity: float = 1.0
    l2_window: float = 1.0
    l2_fill_wait: float = 0.0
    share_latency: float = 1.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CostModelError(f"analytic constant {f.name} must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0 or (value == 0 and f.name in RATES):
                rule = "> 0" if f.name in RATES else ">= 0"
                raise CostModelError(f"analytic constant {f.name} must be {rule}, got {value!r}")

    def to_json(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AnalyticConstants:
        """Raises: CostModelError on an unknown name (a typo would silently be ignored)."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            names = ", ".join(f.name for f in fields(cls))
            raise CostModelError(f"unknown analytic constant(s) {unknown}; known: {names}")
        try:
            return cls(**{k: float(v) for k, v in data.items()})
        except (TypeError, ValueError) as err:
            raise CostModelError(f"analytic constants must be numbers: {err}") from None


@dataclass(frozen=True)
class Calibration:
    """Fitted constants for one target, with what they were fitted on."""

    target: str
    spec_digest: str
    constants: AnalyticConstants
    rows: int
    rmse_log_before: float
    rmse_log_after: float
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": CALIBRATION_SCHEMA,
            "target": self.target,
            "spec_digest": self.spec_digest,
            "constants": self.constants.to_json(),
            "rows": self.rows,
            "rmse_log_before": self.rmse_log_before,
            "rmse_log_after": self.rmse_log_after,
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration:
        """Raises: CostModelError for another schema version or a malformed file."""
        try:
            version = data["schema_version"]
            if version != CALIBRATION_SCHEMA:
                raise CostModelError(
                    f"calibration file has schema_version {version}; this tool reads "
                    f"{CALIBRATION_SCHEMA}"
                )
            return cls(
                target=str(data["target"]),
                spec_digest=str(data["spec_digest"]),
                constants=AnalyticConstants.from_json(data["constants"]),
                rows=int(data["rows"]),
                rmse_log_before=float(data["rmse_log_before"]),
                rmse_log_after=float(data["rmse_log_after"]),
                source=str(data.get("source", "")),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CostModelError(f"malformed calibration file: {err!r}") from None

    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps(self.to_json(), indent=2) + "\n")


def shipped_calibration_path(target: str) -> Path:
    """Where the package keeps the fitted constants of ``target`` (may not exist)."""
    return Path(str(resources.files("costmodel") / "data" / f"calibration-{target}.json"))


def load_calibration(target: str) -> Calibration | None:
    """The shipped calibration of a target name (or of the chip it is a SKU of:
    :func:`~costmodel.spec.fitted_lineage`), or None when there is none."""
    for name in fitted_lineage(target):
        path = shipped_calibration_path(name)
        if path.is_file():
            return Calibration.from_json(json.loads(path.read_text()))
    return None


def calibrated_constants(target: Target) -> AnalyticConstants:
    """The constants fitted for the target's spec name (the spec as written when none are)."""
    cal = load_calibration(target.spec.name)
    return cal.constants if cal is not None else AnalyticConstants()
