"""Lowering: a fusion group + a kernel config + a target -> a tiled :class:`~costmodel.kernel.
Kernel`, by one of three templates (cube, vector, attention); see :mod:`.lowering`."""

from __future__ import annotations

from costmodel.lower.common import mem_itemsize
from costmodel.lower.lowering import (
    Lowering,
    config_grid,
    default_config,
    lower,
    lower_many,
    template_of,
)

__all__ = [
    "Lowering",
    "config_grid",
    "default_config",
    "lower",
    "lower_many",
    "mem_itemsize",
    "template_of",
]
