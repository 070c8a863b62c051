"""Fusion legality (docs/fusion.md): the kernel graph, its fusible edges, which groups are legal,
and the deterministic repair of any edge choice into a legal partition."""

from __future__ import annotations

from search_space.fusion.context import FusionContext
from search_space.fusion.kernel_graph import Edge, KernelGraph, Verdict
from search_space.fusion.legality import REDUCE_ROW, check, is_connected, is_convex
from search_space.fusion.repair import repair, to_groups

__all__ = [
    "REDUCE_ROW",
    "Edge",
    "FusionContext",
    "KernelGraph",
    "Verdict",
    "check",
    "is_connected",
    "is_convex",
    "repair",
    "to_groups",
]
