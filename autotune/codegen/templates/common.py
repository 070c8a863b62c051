"""What every template shares: the generated kernel record, its parameters and header."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.codegen.errors import Unsupported
from autotune.codegen.indexing import numel
from autotune.codegen.kernel_io import is_literal, storage_dtype
from autotune.codegen.pull import KernelIO, literals_of
from autotune.codegen.scalar_ops import TRITON_DTYPES
from autotune.codegen.source import Body
from search_space.ir import FusionGroup, Graph, KernelConfig

__all__ = [
    "KernelSource",
    "Launch",
    "Scratch",
    "block_of",
    "finish",
    "kernel_io",
    "next_pow2",
    "store",
]


def next_pow2(n: int) -> int:
    return 1 << max(0, (max(1, n) - 1).bit_length())


def block_of(tile: int) -> int:
    """Lanes for a tile a ``tl.dot`` reads: a power of two, and at least 16 (its smallest
    shape)."""
    return max(16, next_pow2(tile))


@dataclass(frozen=True)
class Launch:
    """How the runner launches a kernel: the grid (programs = the plan's block_dim, capped
    by the tiles there are) and the compile-time parameters."""

    grid: int
    constexprs: tuple[tuple[str, int], ...]
    num_stages: int


@dataclass(frozen=True)
class Scratch:
    """A buffer a kernel passes to the next kernel of its group (never a graph tensor)."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class KernelSource:
    """One generated ``@triton.jit`` function and how to call it.

    Attributes:
        name: the function's name (after the group).
        text: its source.
        ops: the ops it computes (the group's).
        inputs: tensors passed as pointers, in parameter order (before the outputs).
        outputs: tensors it writes, in parameter order.
        launch: grid and compile-time parameters.
        template: which template wrote it.
        scratch: buffers between the kernels of one group (a split attention's partial
            results), among its inputs or outputs.
        dot_dtype: the format of the ``tl.dot`` operands its results go through ('' where
            none do; a split attention's combine kernel merges the split kernel's): the
            narrowest format its arithmetic rounds to, which its check's tolerance follows.
        precision: the plan's precision mode, which sets the type each tensor is stored in
            (``kernel_io.storage_dtype``).
    """

    name: str
    text: str
    ops: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    launch: Launch
    template: str
    scratch: tuple[Scratch, ...] = ()
    dot_dtype: str = ""
    precision: str = "auto"

    def tensor_type(self, graph: Graph, tensor: str) -> tuple[tuple[int, ...], str]:
        """Shape and storage type of a tensor the kernel reads or writes (scratch included)."""
        for s in self.scratch:
            if s.name == tensor:
                return s.shape, s.dtype
        ten = graph.tensors[tensor]
        return ten.static_shape, storage_dtype(ten.dtype, self.precision)


def kernel_io(graph: Graph, group: FusionGroup, precision: str = "auto") -> KernelIO:
    """Pointers for the group's inputs (one-element constants become literals); ``precision``
    is the plan's mode, which decides the format of ``tl.dot`` operands."""
    lits = literals_of(graph, group.inputs)
    params: dict[str, str] = {}
    for t in group.inputs:
        if t in lits:
            continue
        if not graph.tensors[t].is_static:
            raise Unsupported(f"'{t}' has no static shape")
        if graph.tensors[t].dtype not in TRITON_DTYPES:
            raise Unsupported(f"'{t}' is of type {graph.tensors[t].dtype}")
        params[t] = f"in{len(params)}"
    return KernelIO(graph, frozenset(group.ops), params, lits, precision)


def signature(io: KernelIO, outputs: Sequence[str], meta: Sequence[str]) -> str:
    ptrs = [*io.params.values(), *(f"out{i}" for i in range(len(outputs)))]
    consts = [f"{m}: tl.constexpr" for m in meta]
    return ", ".join([*ptrs, *consts])


def header(
    name: str,
    group: FusionGroup,
    graph: Graph,
    config: KernelConfig,
    io: KernelIO,
    outputs: Sequence[str],
    meta: Sequence[str],
    template: str,
    scratch: Sequence[Scratch] = (),
    dot_dtype: str = "",
) -> list[str]:
    """The decorator, the def line and a docstring naming the ops, the tuned config and every
    pointer parameter's tensor."""
    ops = [graph.op(o) for o in group.ops]
    listed = ", ".join(f"{op.op_type} '{op.name}'" for op in ops if not op.is_view)
    extra = {s.name: (s.shape, s.dtype) for s in scratch}

    def describe(t: str) -> str:
        if t in extra:
            return f"{t!r} {list(extra[t][0])} {extra[t][1]}"
        dtype, stored = graph.tensors[t].dtype, io.storage(t)
        kept = f"{dtype}, stored {stored}" if stored != dtype else dtype
        return f"{t!r} {list(graph.tensors[t].static_shape)} {kept}"

    lines = ["@triton.jit", f"def {name}({signature(io, outputs, meta)}):"]
    lines.append(f'    """{template} kernel of a {group.kind} group of {len(ops)} ops.')
    lines.append("")
    lines.append(f"    computes: {listed}")
    lines.append(f"    config: {config.short()}")
    if dot_dtype:
        lines.append(f"    dots: {dot_dtype} operands, float32 sums (precision {io.precision})")
    lines += [f"    {p} = {describe(t)}" for t, p in io.params.items()]
    lines += [f"    out{i} = {describe(t)}" for i, t in enumerate(outputs)]
    lines.append('    """')
    lines.append("    pid = tl.program_id(0)")
    return lines


def finish(
    name: str,
    graph: Graph,
    group: FusionGroup,
    config: KernelConfig,
    io: KernelIO,
    body: Body,
    tiles: int,
    tile_constexprs: Sequence[tuple[str, int]],
    template: str,
    *,
    outputs: Sequence[str] | None = None,
    scratch: tuple[Scratch, ...] = (),
    dot_dtype: str = "",
) -> KernelSource:
    """A template's kernel record from its body: the grid (the plan's block_dim, never more
    programs than tiles), the compile-time parameters in the order the function takes them,
    and the header. ``outputs`` default to the group's; ``scratch`` are buffers between the
    kernels of one group among the inputs (``io``) or outputs; ``dot_dtype`` the format of
    its ``tl.dot`` operands."""
    grid = max(1, min(config.block_dim, tiles))
    constexprs = (("NPROG", grid), *tile_constexprs)
    launch = Launch(grid, constexprs, 2 if config.double_buffer else 1)
    outs = tuple(group.outputs if outputs is None else outputs)
    meta = [n for n, _ in constexprs]
    lines = header(name, group, graph, config, io, outs, meta, template, scratch, dot_dtype)
    text = "\n".join([*lines, *body.lines])
    return KernelSource(
        name,
        text,
        group.ops,
        tuple(io.params),
        outs,
        launch,
        template,
        scratch,
        dot_dtype,
        io.precision,
    )


def store(ptr: str, dtype: str, value: str, mask: str) -> str:
    """A store of a computed value at ``ptr`` (see ``Pull.pointer``) into a tensor of
    storage type ``dtype``; a value that is a Python number (an output made of constants
    only) becomes a one-element tensor first, as a number has no ``.to``."""
    if is_literal(value):
        value = f"tl.full([1], {value}, tl.float32)"
    typed = (
        f"({value}).to({TRITON_DTYPES[dtype]})"
        if dtype != "bool"
        else (f"(({value}) != 0).to(tl.int8)")
    )
    return f"tl.store({ptr}, {typed}, mask={mask})"


def check_outputs(graph: Graph, outputs: Sequence[str]) -> None:
    for t in outputs:
        ten = graph.tensors[t]
        if not ten.is_static or numel(ten.static_shape) == 0:
            raise Unsupported(f"output '{t}' has no elements or no static shape")
        if ten.dtype not in TRITON_DTYPES:
            raise Unsupported(f"output '{t}' is of type {ten.dtype}")
