"""What a core's units and DMA ports see of the event loop: event codes, the ring of
in-flight tiles, and the :class:`Engine` interface the loop (:class:`~.engine.Sim`) provides.

Units and ports hold an ``Engine``, not the loop's class, so the loop can build them without
an import circle."""

from __future__ import annotations

from typing import Any, Protocol

from costmodel.simulator.hbm import Fluid
from costmodel.simulator.l2 import L2Cache

__all__ = ["EV_OP", "EV_WAKE", "EV_XF", "RING", "RING_MASK", "Engine"]

EV_XF, EV_OP, EV_WAKE = 0, 1, 2  # a transfer's phase ends, a pipe op ends, a unit wakes
RING = 64  # tiles a unit may have in flight; per-tile state lives in rings of this size
RING_MASK = RING - 1


class Engine(Protocol):
    """The event loop as units and DMA ports use it: the plan's L2 and HBM, the kernel's
    shape and delays, byte counters they add to, and the event heap."""

    l2: L2Cache
    fluid: Fluid
    load_b: float  # bytes loaded, L2 hits, HBM bytes: counters the ports add to
    hit_b: float
    hbm_b: float

    @property
    def cores(self) -> int: ...
    @property
    def slots(self) -> int: ...
    @property
    def tile_delay(self) -> float: ...
    @property
    def step_delay(self) -> float: ...
    @property
    def gm_lat(self) -> float: ...
    @property
    def l2_lat(self) -> float: ...
    @property
    def st_lat(self) -> float: ...
    @property
    def macro(self) -> bool: ...

    def coords(self, g: int) -> tuple[int, int, int]:
        """Grid coordinates (batch, i, j) of global tile ``g``."""
        ...

    def push(self, t: float, code: int, obj: Any, arg: int) -> None:
        """Schedule event ``code`` for ``obj`` at time ``t``."""
        ...

    def on_tile(self, t: int, now: float) -> None:
        """A unit finished its local tile ``t``."""
        ...
