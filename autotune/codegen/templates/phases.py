"""A matmul group cut in two phases of one program, the frame of the templates that need more
of the product than one tile's epilogue sees (``matmul_rows``, ``matmul_cols``,
``matmul_broadcast``): the matmul phase (the products and the epilogue ops up to the cut) and
the phase after it (a row reduction, a pooling, a broadcast).

Where the second phase reads values back from memory, the matmul phase stores them (into
scratch unless the group outputs them) and a barrier separates the two; each program reads
back only what it stored itself, at the index the matmul phase stored it (carried through the
ops that made it: a transpose stores elsewhere), as no barrier spans programs.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import Index, same_index, substitute
from autotune.codegen.kernel_io import KernelIO
from autotune.codegen.pull import Anchor, Pull
from autotune.codegen.source import Body
from autotune.codegen.templates.common import KernelSource, Scratch, finish, kernel_io
from autotune.codegen.templates.matmul import dot_dtype, one_tile_shape, placement, products_of
from autotune.codegen.templates.placement import Placed
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = ["Phases"]


class Phases:
    """The group's two phases: ``io`` (the whole group's pointers), ``head_io`` and its
    products ``prods`` (the matmul phase), ``tail_io`` (the second phase, reading what the
    first stored through the output pointers), ``scratch`` (the values stored for the second
    phase only), ``pos`` (each stored or written tensor's output position) and ``outputs``
    (the kernel's output tensors, scratch last).

    Raises:
        Unsupported: products of different tile shapes in the matmul phase, or what
            ``products_of`` refuses.
    """

    def __init__(
        self,
        name: str,
        graph: Graph,
        group: FusionGroup,
        head: FusionGroup,
        tail: FusionGroup,
        precision: str,
        before: str,
    ):
        self.head, self.tail = head, tail
        self.io = io = kernel_io(graph, group, precision)
        self.head_io = KernelIO(graph, frozenset(head.ops), io.params, io.literals, precision)
        self.prods = products_of(graph, head, self.head_io)
        if not one_tile_shape(self.prods):
            raise Unsupported(f"products of different tile shapes before {before}")
        handoff = [t for t in head.outputs if t not in group.outputs]
        self.scratch = tuple(Scratch(f"{name}::{t}", io.shape(t), io.storage(t)) for t in handoff)
        self.outputs = [*group.outputs, *(s.name for s in self.scratch)]
        self.pos = {t: i for i, t in enumerate([*group.outputs, *handoff])}
        stored = {**io.params, **{t: f"out{self.pos[t]}" for t in head.outputs}}
        self.tail_io = KernelIO(graph, frozenset(tail.ops), stored, io.literals, precision)

    @property
    def stored(self) -> list[tuple[int, str]]:
        """What the matmul phase stores: (output position, tensor)."""
        return [(self.pos[t], t) for t in self.head.outputs]

    @property
    def written(self) -> list[tuple[int, str]]:
        """What the second phase writes: (output position, tensor)."""
        return [(self.pos[t], t) for t in self.tail.outputs]

    def read_back(
        self, tensor: str, env: dict, why: str, rename: tuple[str, str] | None = None
    ) -> Anchor:
        """How the second phase reads ``tensor`` back: only at the index the matmul phase
        stored its tile's element at (with ``rename``'s variable renamed: the product's ``m``
        is a scalar ``row`` there), equal at every point of ``env``; any other read is
        another program's, refused with ``why``."""
        first = self.prods[0]
        where = placement(self.prods, self.head_io, tensor) or Placed(
            first.out_index(self.io.shape(tensor))
        )
        own = None if where.guards else where.index
        if own is not None and rename:
            own = substitute(own, *rename)

        def resolve(pull: Pull, idx: Index, mask: str) -> str:
            if own is None or not same_index(idx, own, env):
                raise Unsupported(why)
            return pull.load(tensor, idx, mask)

        return resolve

    def finish(
        self,
        name: str,
        graph: Graph,
        group: FusionGroup,
        config: KernelConfig,
        body: Body,
        tiles: int,
        consts: Sequence[tuple[str, int]],
        template: str,
    ) -> KernelSource:
        """The kernel record of a two-phase template (:func:`~.common.finish` with the whole
        group's pointers, its outputs and scratch, and the matmul phase's ``tl.dot`` format)."""
        return finish(
            name,
            graph,
            group,
            config,
            self.io,
            body,
            tiles,
            consts,
            template,
            outputs=self.outputs,
            scratch=self.scratch,
            dot_dtype=dot_dtype(self.head_io, self.prods),
        )
