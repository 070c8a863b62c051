"""A plan as a program: every group's kernel (or its ops, where no template expresses it),
the views between kernels, and the order the runner launches them in."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import networkx as nx

from autotune.codegen.errors import Unsupported
from autotune.codegen.kernel_io import storage_dtype
from autotune.codegen.templates import kernels_for
from autotune.codegen.templates.common import KernelSource
from search_space.ir import (
    VIEW_OPS,
    FusionGroup,
    Graph,
    KernelConfig,
    is_compile_time,
    make_group,
)

__all__ = ["Extern", "Program", "Step", "View", "build_program"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class View:
    """A view outside every kernel: the runner reshapes the buffer (no copy)."""

    op: str
    source: str
    target: str


@dataclass(frozen=True)
class Extern:
    """An op no template computes, run by the framework (PyTorch) as TorchInductor runs a
    fallback kernel."""

    op: str
    reason: str


@dataclass(frozen=True)
class Step:
    """One launch of the program: a generated kernel, an op run by the framework, or a view;
    ``group`` is the plan group it belongs to (its index), -1 for a view between groups."""

    group: int
    kernel: KernelSource | None = None
    extern: Extern | None = None
    view: View | None = None


@dataclass(frozen=True)
class Program:
    """A plan's steps in launch order, and which groups ran as their ops and why."""

    graph: Graph
    steps: tuple[Step, ...]
    unfused: tuple[tuple[int, str], ...]  # (group index, reason) of groups split into ops
    precision: str = "auto"  # the plan's mode: the type each tensor is stored in

    def storage(self, tensor: str) -> str:
        """The type ``tensor`` is stored in on the device (``kernel_io.storage_dtype``)."""
        return storage_dtype(self.graph.tensors[tensor].dtype, self.precision)

    @property
    def kernels(self) -> list[KernelSource]:
        return [s.kernel for s in self.steps if s.kernel is not None]

    @property
    def externs(self) -> list[Extern]:
        return [s.extern for s in self.steps if s.extern is not None]


def kernel_name(index: int, graph: Graph, group: FusionGroup) -> str:
    """A readable function name: the group's index and its first few op types."""
    types = [graph.op(o).op_type for o in group.ops if not graph.op(o).is_view]
    words: list[str] = []
    for t in types:
        w = re.sub(r"(?<!^)(?=[A-Z])", "_", t).lower()
        if not words or words[-1] != w:
            words.append(w)
    tail = "_".join(words[:4]) + ("_etc" if len(words) > 4 else "")
    return f"k{index}_{tail}"


DefaultConfig = Callable[[FusionGroup], KernelConfig]


@dataclass(frozen=True)
class _Plan:
    """What every group's lowering reads: the graph, the config of a part of another kind
    (``build_program``'s ``default``) and the plan's precision mode."""

    graph: Graph
    default: DefaultConfig | None
    precision: str

    def kernels(self, name: str, group: FusionGroup, config: KernelConfig) -> list[KernelSource]:
        return kernels_for(name, self.graph, group, config, self.precision)


def _group_steps(
    index: int, plan: _Plan, group: FusionGroup, config: KernelConfig
) -> tuple[list[Step], str]:
    """A group's steps: one kernel, or (when no template expresses it) the fewest kernels
    that do: the longest leading run of its ops a template expresses, then the rest alike."""
    graph = plan.graph
    try:
        kernels = plan.kernels(kernel_name(index, graph, group), group, config)
        return [Step(index, kernel=k) for k in kernels], ""
    except Unsupported as why:
        reason = str(why)
    if len([o for o in group.ops if not graph.op(o).is_view]) == 1 and len(group.ops) == 1:
        return [Step(index, extern=Extern(group.ops[0], reason))], reason
    steps: list[Step] = []
    start = 0
    while start < len(group.ops):
        part, start = _longest_part(index, plan, group, start, config)
        steps += part
    return steps, reason


def _longest_part(
    index: int, plan: _Plan, group: FusionGroup, start: int, config: KernelConfig
) -> tuple[list[Step], int]:
    """Steps for the longest run of ``group``'s ops from ``start`` that one template expresses
    (a leading view is a view; a lone op no template computes runs in the framework). A run of
    a convex group's ops in its topological order is convex: no path leaves and re-enters it."""
    graph, ops = plan.graph, group.ops
    first = graph.op(ops[start])
    if first.is_view:
        return [Step(index, view=View(first.name, first.inputs[0], first.outputs[0]))], start + 1
    for end in range(len(ops), start, -1):
        if end < len(ops) and graph.op(ops[end - 1]).is_view:
            continue  # a run never ends on a view: the view goes with what reads it
        part = make_group(graph, ops[start:end])
        cfg = config if part.kind == group.kind or plan.default is None else plan.default(part)
        try:
            name = f"{kernel_name(index, graph, part)}_{start}"
            return [Step(index, kernel=k) for k in plan.kernels(name, part, cfg)], end
        except Unsupported as why:
            if end == start + 1:
                return [Step(index, extern=Extern(first.name, str(why)))], end
    raise AssertionError("unreachable: a run of one op either has a kernel or an extern")


def _with_inner_views(graph: Graph, groups: Sequence[FusionGroup]) -> list[FusionGroup]:
    """Each group with the views outside every group that lead from one of its own tensors
    back into it (a Flatten between a reduction and the Add after it): an alias between two
    ops of one kernel belongs to the kernel, which would otherwise read its own output
    through a step that comes after it."""
    grouped = {o for g in groups for o in g.ops}
    out = []
    for group in groups:
        made = {t for o in group.ops for t in graph.op(o).outputs if t}
        inner: list[str] = []
        for t in group.inputs:
            chain, cur = [], t
            op = graph.producer(cur)
            while op is not None and op.is_view and op.name not in grouped:
                chain.append(op.name)
                cur = op.inputs[0]
                op = graph.producer(cur)
            if chain and cur in made:
                inner += chain
        out.append(make_group(graph, [*group.ops, *inner], group.kind) if inner else group)
    return out


_LAYOUT = frozenset({"Transpose", "Identity"}) | VIEW_OPS


def _reading_given(
    graph: Graph, groups: Sequence[FusionGroup], given: Collection[str]
) -> list[FusionGroup]:
    """Groups that read a compile-time tensor made from a ``given`` one by layout ops alone
    (the transposed weight of a linear layer, folded offline otherwise) take those ops in,
    so the kernel reads the given tensor through them: the caller's own weights, in place,
    with no transposed copy."""
    if not given:
        return list(groups)
    out = []
    for group in groups:
        extra: list[str] = []
        for t in group.inputs:
            extra += _layout_chain(graph, t, given)
        if not extra:
            out.append(group)
            continue
        ops = set(group.ops) | set(extra)
        ordered = tuple(op.name for op in graph.ops if op.name in ops)
        made = {o for name in ordered for o in graph.op(name).outputs if o}
        inputs = tuple(
            dict.fromkeys(
                t for name in ordered for t in graph.op(name).inputs if t and t not in made
            )
        )
        out.append(FusionGroup(ordered, group.kind, inputs, group.outputs))
    return out


def _layout_chain(graph: Graph, tensor: str, given: Collection[str]) -> list[str]:
    """The constant layout ops that make ``tensor`` from a given tensor (none if other ops
    do, or it is given itself)."""
    chain: list[str] = []
    op = graph.producer(tensor)
    while op is not None and op.constant and op.op_type in _LAYOUT:
        chain.append(op.name)
        if op.inputs[0] in given:
            return chain
        op = graph.producer(op.inputs[0])
    return []


def _views(graph: Graph, grouped: set[str]) -> list[Step]:
    out = []
    for op in graph.ops:
        if op.name in grouped or is_compile_time(graph, op.outputs[0]):
            continue
        if op.is_view:
            out.append(Step(-1, view=View(op.name, op.inputs[0], op.outputs[0])))
    return out


def _order(graph: Graph, steps: list[Step]) -> list[Step]:
    """Steps in an order that respects every tensor they pass (ties: first op of the graph)."""
    position = {op.name: i for i, op in enumerate(graph.ops)}
    made: dict[str, int] = {}
    reads: list[set[str]] = []
    first: list[int] = []
    for i, step in enumerate(steps):
        ops = _ops_of(step)
        if step.kernel is not None:
            writes, read = set(step.kernel.outputs), set(step.kernel.inputs)
        else:
            writes = {t for o in ops for t in graph.op(o).outputs if t}
            read = {t for o in ops for t in graph.op(o).inputs if t} - writes
        made.update((t, i) for t in writes)
        reads.append(read)
        first.append(min(position[o] for o in ops))
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(steps)))
    dag.add_edges_from((made[t], i) for i, r in enumerate(reads) for t in r if t in made)
    order = nx.lexicographical_topological_sort(dag, key=lambda i: (first[i], i))
    return [steps[i] for i in order]


def _ops_of(step: Step) -> list[str]:
    if step.kernel is not None:
        return list(step.kernel.ops)
    if step.extern is not None:
        return [step.extern.op]
    assert step.view is not None
    return [step.view.op]


def build_program(
    graph: Graph,
    groups: Sequence[FusionGroup],
    configs: Sequence[KernelConfig],
    default: DefaultConfig | None = None,
    precision: str = "auto",
    given: Collection[str] = (),
) -> Program:
    """Kernels for every group of a plan, in launch order; ``default`` gives the config of a
    part of a group that runs as several kernels when the part is of another kind (a
    reduction after a matmul: the cost model's default for it); ``precision`` is the plan's
    mode (``costmodel.spec.PRECISIONS``), which sets the format of the cube's operands;
    ``given`` are compile-time tensors the caller supplies at run time (a module's weights),
    read in place (:func:`_reading_given`)."""
    steps: list[Step] = []
    unfused = []
    plan = _Plan(graph, default, precision)
    groups = _reading_given(graph, _with_inner_views(graph, groups), given)
    for i, (group, config) in enumerate(zip(groups, configs, strict=True)):
        group_steps, reason = _group_steps(i, plan, group, config)
        steps += group_steps
        if reason:
            log.info(
                "group %d (%s) runs as %d kernels: %s", i, group.kind, len(group_steps), reason
            )
            unfused.append((i, reason))
    steps += _views(graph, {o for g in groups for o in g.ops})
    return Program(graph, tuple(_order(graph, steps)), tuple(unfused), precision)
