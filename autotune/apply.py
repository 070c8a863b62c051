"""Apply a fusion plan: each multi-op group becomes one ``ai.autofusion`` node
(docs/verification.md).

The fused node calls a model-local ONNX function (a standard ``FunctionProto``, so Netron shows
it and onnxruntime inlines it) whose body is the group's original nodes, unchanged and in their
original order. Function bodies cannot see the graph's initializers, ``Constant`` nodes or any
other outer tensor, so every tensor a body reads and does not produce becomes a function input;
every tensor it produces that the rest of the graph (or the graph's outputs) needs becomes a
function output. Outside the groups, nodes and tensor names stay as the user wrote them.

Groups name ops the way the loader does (:func:`search_space.onnx.node_names`), and are
mapped back to the original ``NodeProto`` by index. The loader folds shape computations away,
so a group that is convex in the :class:`Graph` may not be in the file: ``Shape(q) -> Gather ->
Concat -> Reshape`` leaves the group at ``q`` and re-enters it at the Reshape, and a view whose
output is read both inside and outside the group sits on such a path too. Those nodes compute
from shapes only (or are free views), so the function body takes them along; any other op on a
path out of the group and back in makes the group non-convex, which is an error. A model that
already has local functions (a fused model, say) is inlined first, as the loader does, so that
the names match. Functions and their nodes are named ``fused_<n>_<kind>``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import onnx
from onnx import helper, inliner

from autotune.apply_static import cut_folded_chains
from autotune.exceptions import AutotuneError
from search_space.exceptions import GraphError, check
from search_space.ir import Graph
from search_space.onnx import node_names, read_model_with_data, topological_order
from search_space.space import FusionPlan, PlanGroup

__all__ = ["FUSED_DOMAIN", "apply_plan", "apply_plan_file"]

FUSED_DOMAIN = "ai.autofusion"
FUSED_DOMAIN_VERSION = 1
# Model-local functions exist from IR version 8 on.
_MIN_IR_VERSION = 8


def apply_plan(
    model: onnx.ModelProto,
    graph: Graph,
    groups: Sequence[PlanGroup],
    *,
    domain: str = FUSED_DOMAIN,
) -> onnx.ModelProto:
    """Return a new model in which every group of two or more ops is one fused node.

    Args:
        model: the original model (left untouched); the one ``graph`` was loaded from.
        graph: the loaded graph; group op names refer to its ops.
        groups: the plan's groups; singletons are left as they are.
        domain: the operator domain of the fused nodes and their functions.

    Returns:
        A model that passes ``onnx.checker.check_model(full_check=True)`` when the original
        does, and computes the same outputs.

    Raises:
        AutotuneError: ``graph`` was not loaded from ``model``; a group names an unknown op,
            lists an op twice or shares one with another group; a group is not convex in the
            model; the fused groups depend on each other in a cycle.
    """
    check(
        domain not in ("", "ai.onnx"),
        f"fused nodes need a custom operator domain, but got {domain!r}",
        AutotuneError,
    )
    src = inliner.inline_local_functions(model) if model.functions else model
    try:
        names, dag, bodies = _layout(src, graph, groups)
    except AutotuneError as err:  # perhaps only through shape math the loader folded: cut it
        static = cut_folded_chains(src, graph, groups)
        if static is src:
            raise
        try:
            names, dag, bodies = _layout(static, graph, groups)
        except AutotuneError:
            raise err from None  # the cut did not help: the first reason is the one to give
        src = static
    return _with_shapes(_rewrite(src, names, dag, bodies, domain), src)


def _layout(
    src: onnx.ModelProto, graph: Graph, groups: Sequence[PlanGroup]
) -> tuple[list[str], _Dag, list[tuple[PlanGroup, list[int]]]]:
    """The model's node names, its DAG and each fused group's body.

    Raises:
        AutotuneError: as :func:`apply_plan` says.
    """
    nodes = src.graph.node
    names = node_names(nodes)
    _check_graph(graph, nodes, names)
    try:
        order = topological_order(src.graph, names)
    except GraphError as err:
        raise AutotuneError(str(err)) from None
    dag = _Dag(nodes, order)
    return names, dag, _bodies(graph, groups, names, dag)


def _with_shapes(model: onnx.ModelProto, src: onnx.ModelProto) -> onnx.ModelProto:
    """Give every tensor between the fused model's nodes the ``value_info`` ONNX's shape
    inference finds for it in the original model (symbolic dims kept symbolic), so viewers
    see shapes at the fused nodes too. A model inference cannot take (past 2 GiB, an op it
    cannot type) keeps what it had."""
    try:
        inferred = onnx.shape_inference.infer_shapes(src).graph.value_info
    except (onnx.shape_inference.InferenceError, ValueError):
        return model
    g = model.graph
    known = (
        {vi.name for vi in g.value_info}
        | {vi.name for vi in g.input}
        | {vi.name for vi in g.output}
        | {t.name for t in g.initializer}
    )
    visible = {t for n in g.node for t in n.output if t and t not in known}
    g.value_info.extend(vi for vi in inferred if vi.name in visible)
    return model


def _named(node: onnx.NodeProto, name: str) -> onnx.NodeProto:
    """``node`` under the tool's name for it: an empty or repeated name becomes unique (a copy;
    onnxruntime refuses repeated node names, also inside a function once it inlines it)."""
    if node.name == name:
        return node
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = name
    return out


def apply_plan_file(
    model: str | os.PathLike[str] | onnx.ModelProto, plan: FusionPlan, graph: Graph
) -> onnx.ModelProto:
    """Apply a saved plan to a model file (weights read in) or proto.

    Raises:
        PlanError: the plan was made for another model.
        AutotuneError: as :func:`apply_plan`.
    """
    plan.check_model(graph)
    proto = read_model_with_data(model)
    return apply_plan(proto, graph, plan.groups)


# -- the node DAG of the file ------------------------------------------------------------------
def _subgraph_reads(g: onnx.GraphProto) -> list[str]:
    """Outer-scope tensors a subgraph reads (nested subgraphs included), first use first."""
    defined = {i.name for i in g.input} | {t.name for t in g.initializer}
    for node in g.node:
        defined.update(node.output)
    return list(dict.fromkeys(t for node in g.node for t in _reads(node) if t not in defined))


def _reads(node: onnx.NodeProto) -> list[str]:
    """Tensors ``node`` reads from its scope: its inputs, then what its subgraphs read."""
    out = [t for t in node.input if t]
    for attr in node.attribute:
        for g in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            out += _subgraph_reads(g)
    return list(dict.fromkeys(out))


class _Dag:
    """Producers, readers and a topological position for every node of the model."""

    def __init__(self, nodes: Sequence[onnx.NodeProto], order: list[int]) -> None:
        self.nodes = nodes
        self.pos = {idx: p for p, idx in enumerate(order)}
        self.reads = [_reads(n) for n in nodes]
        self.producer = {t: i for i, n in enumerate(nodes) for t in n.output if t}
        self.readers: dict[str, list[int]] = {}
        for i, ts in enumerate(self.reads):
            for t in ts:
                self.readers.setdefault(t, []).append(i)

    def succ(self, i: int) -> Iterable[int]:
        for t in self.nodes[i].output:
            yield from self.readers.get(t, ()) if t else ()

    def pred(self, i: int) -> Iterable[int]:
        return (self.producer[t] for t in self.reads[i] if t in self.producer)

    def bridges(self, members: set[int]) -> set[int]:
        """Nodes outside ``members`` on a path that leaves the set and comes back."""
        lo = min(self.pos[i] for i in members)
        hi = max(self.pos[i] for i in members)
        down = self._walk(members, self.succ, lambda i: self.pos[i] < hi)
        up = self._walk(members, self.pred, lambda i: self.pos[i] > lo)
        return (down & up) - members

    @staticmethod
    def _walk(
        start: set[int], step: Callable[[int], Iterable[int]], keep: Callable[[int], bool]
    ) -> set[int]:
        seen: set[int] = set()
        todo = list(start)
        while todo:
            for j in step(todo.pop()):
                if j not in seen and j not in start and keep(j):
                    seen.add(j)
                    todo.append(j)
        return seen


def _check_graph(graph: Graph, nodes: Sequence[onnx.NodeProto], names: list[str]) -> None:
    index = dict(zip(names, nodes, strict=True))
    for op in graph.ops:
        node = index.get(op.name)
        check(
            node is not None and node.op_type == op.op_type,
            f"the graph was not loaded from this model: its op '{op.name}' ({op.op_type}) is "
            + ("missing from the model" if node is None else f"a {node.op_type} in the model")
            + "; pass the model the graph was loaded from",
            AutotuneError,
        )


def _is_pure(graph: Graph, name: str) -> bool:
    """Folded by the loader, a view, or computed from compile-time values only."""
    if not graph.has_op(name):
        return True
    op = graph.op(name)
    return op.is_view or op.constant


def _bodies(
    graph: Graph, groups: Sequence[PlanGroup], names: list[str], dag: _Dag
) -> list[tuple[PlanGroup, list[int]]]:
    """Node indices of each fused group's function body, in topological order."""
    index = {n: i for i, n in enumerate(names)}
    owner: dict[int, int] = {}
    for k, group in enumerate(groups):
        for op in group.ops:
            check(
                graph.has_op(op),
                f"group {k} names op '{op}', which "
                + (
                    "the loader folded into a constant; it cannot be fused"
                    if op in index
                    else f"graph '{graph.name}' does not have"
                ),
                AutotuneError,
            )
            other = owner.get(index[op])
            check(
                other is None,
                f"op '{op}' is in group {other} and group {k}; groups must not overlap"
                if other != k
                else f"group {k} lists op '{op}' twice",
                AutotuneError,
            )
            owner[index[op]] = k
    bodies: list[tuple[PlanGroup, list[int]]] = []
    claimed: dict[int, int] = {}
    for k, group in enumerate(groups):
        if len(group.ops) < 2:
            continue
        members = {index[op] for op in group.ops}
        where = f"group {k} ({', '.join(group.ops[:3])}{', ...' if len(group.ops) > 3 else ''})"
        for i in sorted(dag.bridges(members), key=dag.pos.__getitem__):
            check(
                _is_pure(graph, names[i]) and i not in owner and i not in claimed,
                f"{where} is not convex in the model: op '{names[i]}' ({dag.nodes[i].op_type})"
                + (f" of group {owner[i]}" if i in owner else "")
                + " reads a tensor the group computes and feeds the group; put it in the "
                "group or split the group",
                AutotuneError,
            )
            claimed[i] = k
            members.add(i)
        bodies.append((group, sorted(members, key=dag.pos.__getitem__)))
    return bodies


# -- the rewrite ---------------------------------------------------------------------------------
def _ident(text: str) -> str:
    return re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "group"


def _attributes(group: PlanGroup) -> dict[str, Any]:
    """The kernel config as node attributes: ints, ``double_buffer`` 0/1, ``knob_<name>``."""
    attrs: dict[str, Any] = {"kind": group.kind}
    if group.config is not None:
        for key, value in group.config.to_json().items():
            if key == "knobs":
                attrs.update((f"knob_{_ident(n)}", int(v)) for n, v in value.items())
            else:
                attrs[key] = int(value)
    if group.verdict:
        attrs["verdict"] = group.verdict
    return attrs


def _interface(body: list[int], dag: _Dag, graph_outputs: set[str]) -> tuple[list[str], list[str]]:
    """Function inputs (read, not produced) and outputs (needed outside or graph outputs)."""
    inside = set(body)
    made = [t for i in body for t in dag.nodes[i].output if t]
    produced = set(made)
    inputs = list(dict.fromkeys(t for i in body for t in dag.reads[i] if t not in produced))
    outputs = [
        t
        for t in made
        if t in graph_outputs or any(r not in inside for r in dag.readers.get(t, ()))
    ]
    if not outputs:  # nothing is needed outside: keep the final values so the node is valid
        outputs = [t for t in made if not dag.readers.get(t)] or made[-1:]
    return inputs, outputs


def _rewrite(
    src: onnx.ModelProto,
    names: list[str],
    dag: _Dag,
    bodies: list[tuple[PlanGroup, list[int]]],
    domain: str,
) -> onnx.ModelProto:
    fused = onnx.ModelProto()
    fused.CopyFrom(src)
    g = fused.graph
    del g.node[:]
    imports = [o for o in src.opset_import if o.domain != domain]
    del fused.opset_import[:]
    fused.opset_import.extend([*imports, helper.make_opsetid(domain, FUSED_DOMAIN_VERSION)])
    fused.ir_version = max(fused.ir_version, _MIN_IR_VERSION)
    fused.producer_name = "autotune.apply"  # so a later apply -o may replace it (file_kind)

    graph_outputs = {o.name for o in src.graph.output}
    taken_fns = {(f.domain, f.name) for f in src.functions}
    taken_nodes = set(names)
    first: dict[int, onnx.NodeProto] = {}  # body's first node index -> fused node
    absorbed: set[int] = set()
    for n, (group, body) in enumerate(bodies):
        fname = base = f"fused_{n}_{_ident(group.kind)}"
        k = 1
        while (domain, fname) in taken_fns or fname in taken_nodes:
            fname, k = f"{base}__{k}", k + 1
        taken_fns.add((domain, fname))
        taken_nodes.add(fname)
        inputs, outputs = _interface(body, dag, graph_outputs)
        attrs = _attributes(group)
        listed = ", ".join(names[i] for i in body)
        config = group.config.short() if group.config is not None else "no config"
        doc = f"{group.kind} kernel ({config}) fusing {len(body)} ops: {listed}"
        fn = helper.make_function(
            domain,
            fname,
            inputs,
            outputs,
            [_named(dag.nodes[i], names[i]) for i in body],  # protobuf copies on extend
            imports,
            attributes=sorted(attrs),
            doc_string=doc,
        )
        fused.functions.append(fn)
        first[body[0]] = helper.make_node(
            fname, inputs, outputs, name=fname, domain=domain, doc_string=doc, **attrs
        )
        absorbed.update(body)

    new_nodes: list[onnx.NodeProto] = []
    for idx in sorted(dag.pos, key=dag.pos.__getitem__):
        if idx in first:
            new_nodes.append(first[idx])
        elif idx not in absorbed:
            new_nodes.append(_named(dag.nodes[idx], names[idx]))
    g.node.extend(new_nodes)
    try:
        order = topological_order(g, node_names(g.node))
    except GraphError as err:
        raise AutotuneError(
            f"the fused model cannot be ordered ({err}); groups that are each convex can still "
            "depend on each other both ways: split one of them"
        ) from None
    del g.node[:]
    g.node.extend(new_nodes[i] for i in order)

    visible = {t for n in g.node for t in n.output} | {i.name for i in g.input}
    kept_info = [vi for vi in g.value_info if vi.name in visible]
    del g.value_info[:]
    g.value_info.extend(kept_info)
    return fused
