"""The groups of scored plans, each at its config, remembered by identity for the evaluator.

A local search scores thousands of plans built from the same few hundred groups and configs
(the space's repair and the oracle hand out the same objects again), so the evaluator finds a
group's kernel, its L2 touches and its keys by the two objects' ``id`` instead of hashing
them: a frozen dataclass hashes every field on every lookup. An entry holds both objects,
so neither id can be reused while it is kept, and a hit is checked to be the same objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.analytic import L2Touches, l2_touches
from costmodel.kernel import Kernel
from search_space.ir import FusionGroup, KernelConfig

__all__ = ["Part", "PartCache"]

KEPT = 500_000  # entries kept before the identity index starts again (ids stay valid)


@dataclass(frozen=True, eq=False)
class Part:
    """One group of a plan at its config, with what scoring it needs.

    Attributes:
        group, config: the objects this part was made for.
        kernel: the lowered kernel.
        touches: its L2 reads and writes (:func:`costmodel.analytic.l2_touches`).
        kernel_id: a number per (signature, config): kernels that cost the same in one L2
            context share it, whatever layer they are.
        plan_id: a number per (group, config): what a plan is made of.
    """

    group: FusionGroup
    config: KernelConfig
    kernel: Kernel
    touches: L2Touches
    kernel_id: int
    plan_id: int


class PartCache:
    """Parts by the identity of their group and config; the numbers they carry are given
    out by equality, once, and never change (a plan's digest is made of them)."""

    def __init__(self) -> None:
        self._by_id: dict[tuple[int, int], Part] = {}
        self._kernel_ids: dict[tuple[str, KernelConfig], int] = {}
        self._plan_ids: dict[tuple[FusionGroup, KernelConfig], int] = {}

    def get(self, group: FusionGroup, config: KernelConfig) -> Part | None:
        part = self._by_id.get((id(group), id(config)))
        if part is not None and part.group is group and part.config is config:
            return part
        return None

    def add(
        self, group: FusionGroup, config: KernelConfig, kernel: Kernel, signature: str
    ) -> Part:
        """The part of ``group`` at ``config`` (lowered as ``kernel``), kept from now on."""
        kid = self._kernel_ids.setdefault((signature, config), len(self._kernel_ids))
        pid = self._plan_ids.setdefault((group, config), len(self._plan_ids))
        part = Part(group, config, kernel, l2_touches(kernel), kid, pid)
        if len(self._by_id) >= KEPT:
            self._by_id.clear()
        self._by_id[(id(group), id(config))] = part
        return part

    @staticmethod
    def plan_digest(parts: Sequence[Part]) -> bytes:
        """A digest of the plan the parts make, in order: equal for equal plans only."""
        ids = np.fromiter((p.plan_id for p in parts), dtype=np.int64, count=len(parts))
        return hashlib.sha256(ids.tobytes()).digest()
