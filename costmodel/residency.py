"""What is in L2 when a plan starts: the context a kernel runs in.

A kernel timed alone and replayed on fresh buffers reads its inputs from HBM. Inside a real
step it reads what the kernels before it just wrote, and the 910B's L2 (192 MB) holds a
mid-size activation whole: such a kernel runs faster than HBM allows. A cost model's
:meth:`~costmodel.base.CostModel.evaluate` takes that context as ``resident``, tensor name ->
bytes written, in the order they were written; each model's own L2 keeps of them what it
holds (an LRU: the most recently written first; a tensor larger than L2 leaves nothing a
reader starting at its head can use). Such a kernel also finds its prologue's data (its
tiling, a library kernel's offset tables) in L2: :func:`inside_step`.
"""

from __future__ import annotations

from collections.abc import Iterable

from costmodel.exceptions import CostModelError
from costmodel.lower import mem_itemsize
from costmodel.spec import Target
from search_space.ir import Graph

__all__ = [
    "CONTEXTS",
    "inside_step",
    "resident_context",
    "written_inputs",
    "written_tensors",
]

# none: a cold L2, as a kernel timed alone on fresh buffers; inputs: the graph's inputs as
# their producers just wrote them, as a kernel inside a step finds them
CONTEXTS = ("none", "inputs")


def written_inputs(graph: Graph, target: Target) -> dict[str, float]:
    """The graph's activation inputs (not its weights) that an op reads, as bytes at the
    target's storage precision, each followed by the views of it a kernel may load it as (a
    Reshape's output is the same bytes). The largest is written first and the smallest last,
    so an L2 too small for them all keeps the most of them (a decode step's token ids and
    hidden state before its KV cache)."""
    read = {t for op in graph.ops for t in op.inputs if t}
    inputs = [t for t in graph.inputs if graph.tensors[t].kind == "input" and t in read]
    return written_tensors(graph, inputs, target)


def written_tensors(graph: Graph, tensors: Iterable[str], target: Target) -> dict[str, float]:
    """``tensors`` as just written (bytes at the target's storage precision), each with the
    views of it a kernel may load it as, the largest first (:func:`written_inputs`)."""
    out: dict[str, float] = {}
    for t in sorted(dict.fromkeys(tensors), key=lambda t: -graph.tensors[t].numel):
        size = float(graph.tensors[t].numel * mem_itemsize(graph, t, target))
        out.update(dict.fromkeys(_views(graph, t), size))
    return out


def _views(graph: Graph, tensor: str) -> list[str]:
    """``tensor`` and every tensor a chain of views makes of it (the same bytes)."""
    names, todo = [], [tensor]
    while todo:
        t = todo.pop(0)
        if t in names:
            continue
        names.append(t)
        todo += [
            o
            for op in graph.consumers(t)
            if op.is_view and op.inputs[0] == t
            for o in op.outputs
            if o
        ]
    return names


def inside_step(target: Target) -> Target:
    """The target as a kernel inside a real step meets it: its prologue's reads hit L2
    (:meth:`~costmodel.spec.HardwareSpec.in_situ`)."""
    return Target(target.spec.in_situ(), target.precision)


def resident_context(
    context: str, graph: Graph, target: Target
) -> tuple[Target, dict[str, float] | None]:
    """The target to cost ``graph`` on and the ``resident`` argument of ``evaluate`` for a
    named context (:data:`CONTEXTS`): ``none`` is the target as given and a cold L2;
    ``inputs`` a kernel inside a step (:func:`inside_step`) with the graph's inputs in L2.

    Raises:
        CostModelError: an unknown context (the message lists the known ones).
    """
    if context == "none":
        return target, None
    if context == "inputs":
        return inside_step(target), written_inputs(graph, target)
    raise CostModelError(f"unknown L2 context {context!r}; use one of: {', '.join(CONTEXTS)}")
