"""Shape math that reads a fused kernel's insides, made the constant the loader found.

Exporters compute positions and reshape targets at run time from the shapes of tensors
(``Shape(present) -> Gather -> Add -> Unsqueeze -> Gather(position table)``). The loader
folds that math into constants once the inputs are static, and the tuner fuses by the
folded graph, where such a chain is no edge at all. In the model the chain is still there:
when it starts at a tensor a fused group computes and ends at an op of another group that
feeds the first back, the fused nodes would depend on each other in a cycle. Such chains are
cut: the folded nodes downstream of a fused group's tensors are dropped and what they fed is
given the value the loader folded it to, as an initializer. The fused model is then static
in those dimensions, as the plan was tuned for; folded chains that read no fused tensor stay
as they were, dynamic.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import numpy_helper

from search_space.ir import Graph
from search_space.onnx import node_names, topological_order
from search_space.space import PlanGroup

__all__ = ["cut_folded_chains"]


def cut_folded_chains(
    model: onnx.ModelProto, graph: Graph, groups: Sequence[PlanGroup]
) -> onnx.ModelProto:
    """``model`` with every folded node that (through folded nodes) reads a tensor of a fused
    group removed, and the tensors they gave to kept nodes as initializers of their folded
    value; ``model`` itself when there is none (or a value the loader did not keep)."""
    nodes = list(model.graph.node)
    names = node_names(nodes)
    fused = {op for g in groups if len(g.ops) > 1 for op in g.ops}
    inside = {t for n, node in zip(names, nodes, strict=True) if n in fused for t in node.output}
    cut: set[int] = set()
    reached = set(inside)
    for i in topological_order(model.graph, names):
        node = nodes[i]
        if not graph.has_op(names[i]) and any(t in reached for t in node.input):
            cut.add(i)
            reached.update(t for t in node.output if t)
    if not cut:
        return model
    produced = {t for i in cut for t in nodes[i].output if t}
    needed = {
        t for i, node in enumerate(nodes) if i not in cut for t in node.input if t in produced
    } | {o.name for o in model.graph.output if o.name in produced}
    if any(t not in graph.constants for t in needed):
        return model  # a value the loader did not keep: the model stays as it was
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for i, node in enumerate(nodes):
        if i not in cut:
            kept = out.graph.node.add()
            kept.CopyFrom(node)
            kept.name = names[i]  # the name the graph knows it by, whatever the others do
    for t in sorted(needed):
        out.graph.initializer.append(numpy_helper.from_array(graph.constants[t], t))
    return out
