"""Kernel configs: how one fused group is tiled and spread over cores (docs/architecture.md).

A pure record (no hardware knowledge): the cost model enumerates the feasible ones for a
target, the search space indexes them, and plans store them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_FIELD", "KernelConfig"]

MAX_FIELD = 2**31 - 1  # no tile, core count or knob is larger (a plan saying so is damaged)


def _whole(name: str, value: Any, low: int) -> int:
    """``value`` if it is a whole number in ``[low, MAX_FIELD]`` (JSON ints; not bools)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_FIELD:
        raise ValueError(
            f"config field {name} must be a whole number in [{low}, {MAX_FIELD}], but got "
            f"{value!r}"
        )
    return value


@dataclass(frozen=True, order=True)
class KernelConfig:
    """Tiling of one kernel. Zero means "not used by this template".

    Cube work tiles twice: the L1 block (``base_m``, ``base_n``, ``base_k``) and the L0 tile
    (``m``, ``n``, ``k``), all multiples of 16. Vector work tiles the Unified Buffer as
    ``ub_rows`` x ``ub_cols`` elements (cols 32-byte aligned). ``block_dim`` counts cube cores
    for cube kernels, vector cores for vector kernels and AIC+2AIV groups for mixed kernels.
    ``knobs`` holds template knobs as sorted (name, value) pairs (e.g. attention's kv tile).
    """

    block_dim: int
    base_m: int = 0
    base_n: int = 0
    base_k: int = 0
    m: int = 0
    n: int = 0
    k: int = 0
    ub_rows: int = 0
    ub_cols: int = 0
    double_buffer: bool = True
    knobs: tuple[tuple[str, int], ...] = ()

    def knob(self, name: str, default: int = 0) -> int:
        return dict(self.knobs).get(name, default)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: v
            for k, v in (
                ("block_dim", self.block_dim),
                ("base_m", self.base_m),
                ("base_n", self.base_n),
                ("base_k", self.base_k),
                ("m", self.m),
                ("n", self.n),
                ("k", self.k),
                ("ub_rows", self.ub_rows),
                ("ub_cols", self.ub_cols),
            )
            if v
        }
        out["double_buffer"] = self.double_buffer
        if self.knobs:
            out["knobs"] = dict(self.knobs)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KernelConfig:
        """A config as :meth:`to_json` writes it.

        Raises:
            KeyError: no ``block_dim``.
            ValueError: a field that is not a whole number in range (``block_dim`` >= 1, the
                tiles and knobs >= 0, none above ``MAX_FIELD``), or a ``double_buffer`` that
                is not true or false.
        """
        knobs = tuple(
            sorted(
                (str(k), _whole(f"knob {k}", v, 0)) for k, v in dict(data.get("knobs", {})).items()
            )
        )
        ints = {
            k: _whole(k, data.get(k, 0), 0)
            for k in ("base_m", "base_n", "base_k", "m", "n", "k", "ub_rows", "ub_cols")
        }
        db = data.get("double_buffer", True)
        if not isinstance(db, bool):
            raise ValueError(f"config field double_buffer must be true or false, but got {db!r}")
        return cls(
            block_dim=_whole("block_dim", data["block_dim"], 1),
            double_buffer=db,
            knobs=knobs,
            **ints,
        )

    def short(self) -> str:
        """A compact human form, e.g. ``L1 256x256x256 L0 128x128x64 x24 db``."""
        parts = []
        if self.base_m:
            parts.append(f"L1 {self.base_m}x{self.base_n}x{self.base_k}")
            parts.append(f"L0 {self.m}x{self.n}x{self.k}")
        if self.ub_rows or self.ub_cols:
            parts.append(f"UB {self.ub_rows}x{self.ub_cols}")
        parts.append(f"x{self.block_dim}")
        parts.append("db" if self.double_buffer else "sb")
        parts += [f"{k}={v}" for k, v in self.knobs]
        return " ".join(parts)
