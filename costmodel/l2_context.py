"""The L2 context of each kernel of a plan: what the kernels before it left in L2, as every
cost model sees it by default (:meth:`costmodel.base.CostModel.residency`).

The L2 holds whole tensors in LRU order within its capacity (:class:`L2Residency`); each kernel
touches its tensors in stream order, and one whose tensors overflow L2 leaves nothing a later
kernel can use (:func:`touch`). A kernel's context is, per load stream, the fraction of that
stream's tensor resident when it starts (:func:`contexts`): what a measured row records, and
what :meth:`~costmodel.base.CostModel.latencies` scores a kernel in.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from costmodel.kernel import Kernel, Stream, handoffs

__all__ = [
    "L2Residency",
    "L2Touches",
    "contexts",
    "l2_touches",
    "resident_bytes",
    "tensor_bytes",
    "touch",
]


def tensor_bytes(stream: Stream, kernel: Kernel) -> float:
    """Size of the stream's whole tensor (from its blocks when the lowering left it 0)."""
    if stream.tensor_bytes:
        return float(stream.tensor_bytes)
    extents = dict(zip("bij", kernel.grid, strict=True)) | {"k": kernel.steps}
    return max(
        1.0, float(stream.bytes * math.prod(extents[x] for x in stream.key if x in extents))
    )


class L2Residency(Mapping[str, float]):
    """Tensors a plan left in L2: an LRU of whole tensors within ``capacity`` bytes.

    It is a read-only mapping from tensor name to resident bytes, which is what
    ``AnalyticModel.predict_batch(..., resident=...)`` takes.
    """

    def __init__(self, capacity: float) -> None:
        self.capacity = float(capacity)
        self._lru: OrderedDict[str, float] = OrderedDict()
        self._used = 0.0  # bytes of every tensor in the LRU (kept, not summed per touch)

    @classmethod
    def written(cls, tensors: Mapping[str, float], capacity: float) -> L2Residency:
        """What an L2 of ``capacity`` bytes keeps of ``tensors`` (name -> bytes) written in
        order: the most recent ones, as far as they fit."""
        l2 = cls(capacity)
        for name, size in tensors.items():
            l2.touch(name, size)
        return l2

    def touch(self, tensor: str, nbytes: float) -> None:
        """Record that ``tensor`` was read or written in full (most recently used)."""
        self._used -= self._lru.pop(tensor, 0.0)
        if nbytes > self.capacity:
            self.flush()  # streaming a tensor larger than L2 flushes it
            return
        self._lru[tensor] = float(nbytes)
        self._used += float(nbytes)
        while self._used > self.capacity:
            _, evicted = self._lru.popitem(last=False)
            self._used -= evicted

    def flush(self) -> None:
        """Forget every tensor: what is left in L2 is of no use to a later reader."""
        self._lru.clear()
        self._used = 0.0

    def __getitem__(self, tensor: str) -> float:
        return self._lru[tensor]

    def get(self, tensor: str, default: Any = None) -> Any:  # Mapping.get, minus a try/except
        return self._lru.get(tensor, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lru)

    def __len__(self) -> int:
        return len(self._lru)


class L2Touches(NamedTuple):
    """What one kernel does to a plan's L2 (:func:`l2_touches`)."""

    loads: tuple[tuple[str, float], ...]  # per load stream: its tensor and the tensor's bytes
    touches: tuple[tuple[str, float], ...]  # per stream but hand-offs, in stream order
    total: float  # bytes of the distinct tensors touched


def l2_touches(kernel: Kernel) -> L2Touches:
    """A kernel's tensors as the plan's L2 sees them: those it loads (whose residency is its
    context) and those it leaves there, but not its hand-offs (a workspace)."""
    skip = handoffs(kernel.streams)
    streams = [s for s in kernel.streams if s.tensor not in skip]
    sizes = {s.tensor: tensor_bytes(s, kernel) for s in streams}
    return L2Touches(
        tuple((s.tensor, tensor_bytes(s, kernel)) for s in kernel.streams if s.pipe == "MTE2"),
        tuple((s.tensor, sizes[s.tensor]) for s in streams),
        sum(sizes.values()),
    )


def touch(l2: L2Residency, t: L2Touches) -> None:
    """Record a kernel's tensors in the plan's L2. A kernel whose tensors together overflow L2
    leaves nothing a later kernel can use: its streams interleave, so every tensor's head is
    evicted and only tails remain, and a reader that starts at the head evicts those tails
    (the oldest lines) before it reaches them."""
    if t.total > l2.capacity:
        l2.flush()
        return
    for name, size in t.touches:  # in stream order: a tensor read again becomes the most recent
        l2.touch(name, size)


def contexts(
    kernels: Sequence[Kernel],
    capacity: float,
    touches: Sequence[L2Touches] | None = None,
    warm: Mapping[str, float] | None = None,
) -> list[list[float]]:
    """Per kernel of a plan, the fraction of each load stream's tensor that the earlier
    kernels left in an L2 of ``capacity`` bytes. ``touches``: each kernel's
    :func:`l2_touches`, when the caller keeps them; ``warm``: what is in L2 when the plan
    starts (tensor -> bytes written, in order)."""
    l2 = L2Residency.written(warm or {}, capacity)
    out = []
    for t in touches if touches is not None else [l2_touches(k) for k in kernels]:
        out.append([min(1.0, l2.get(name, 0.0) / size) for name, size in t.loads])
        touch(l2, t)
    return out


def resident_bytes(kernel: Kernel, context: Sequence[float]) -> dict[str, float]:
    """The L2 a context row stands for: each loaded tensor's resident bytes (the inverse of
    :func:`contexts` for one kernel)."""
    loads = l2_touches(kernel).loads
    return {name: frac * size for (name, size), frac in zip(loads, context, strict=True) if frac}
