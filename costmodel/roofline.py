"""The roofline bound of a whole graph on a target (nominal peaks: nothing may beat it)."""

from __future__ import annotations

from costmodel.lower import mem_itemsize
from costmodel.spec import Target
from search_space.ir import Graph, OpClass, is_compile_time, is_inplace_update

__all__ = ["compulsory_bytes", "roofline_us"]


def compulsory_bytes(graph: Graph, target: Target) -> int:
    """Bytes any execution must move at least once, at the target's storage precision.

    Graph inputs and outputs, and every weight an op reads (cube weights at the cube dtype,
    converted offline; a table only gathered from counts the rows gathered). A weight built
    in the graph by constant-only ops (``ConstantOfShape``, as the onnx "light" test models
    make theirs) is prepared offline and read from memory like an initializer. An in-place
    update's input and output (:func:`~search_space.ir.is_inplace_update`) are one buffer:
    the rows it writes, plus the whole buffer once where an op reads the result.
    """
    total = 0
    names = set(graph.inputs) | set(graph.outputs)
    for op in graph.ops:
        if is_inplace_update(graph, op):  # one buffer: the rows written, read once if used
            out = op.outputs[0]
            names -= {op.inputs[0], out}
            read = graph.tensors[out].numel if graph.consumers(out) else 0
            rows = graph.tensors[op.inputs[2]].numel
            total += (rows + read) * mem_itemsize(graph, out, target)
    for t in names:
        if graph.tensors[t].kind == "input" or t in graph.outputs:
            total += graph.tensors[t].numel * mem_itemsize(graph, t, target)
    weights = {
        t
        for op in graph.ops
        for t in op.inputs
        if t and graph.tensors[t].kind in ("weight", "intermediate") and is_compile_time(graph, t)
    }
    for t in weights:
        users = graph.consumers(t)
        cube = any(op.op_class is OpClass.CUBE for op in users)
        full = graph.tensors[t].numel * mem_itemsize(graph, t, target, cube_operand=cube)
        if users and all(
            op.op_type in ("Gather", "GatherElements", "GatherND") and t not in op.inputs[1:]
            for op in users
        ):
            rows = sum(graph.tensors[o].numel for op in users for o in op.outputs if o)
            full = min(full, rows * mem_itemsize(graph, t, target))
        total += full
    return total


def roofline_us(graph: Graph, target: Target) -> float:
    """max(FLOPs / nominal cube peak, compulsory bytes / nominal HBM bandwidth), in us."""
    spec = target.spec
    compute = graph.flops / spec.cube_peak_flops
    memory = compulsory_bytes(graph, target) / spec.hbm_peak_bytes_per_s
    return max(compute, memory) * 1e6
