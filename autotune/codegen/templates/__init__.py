"""Kernel templates, one per kind of work: elementwise and layout chains (``pointwise``),
row reductions and norms (``reduction``), matmul with prologue and epilogue (``matmul``), a
matmul whose epilogue reduces its rows (``matmul_rows``) or pools its rows per column
(``matmul_cols``) or spreads it over broadcast dims (``matmul_broadcast``) or ends in a
pooling window (``matmul_window``), products of
different widths (``matmul_segments``), attention (``attention``)."""

from __future__ import annotations

from autotune.codegen.errors import Unsupported
from autotune.codegen.templates.attention import attention_kernels
from autotune.codegen.templates.common import KernelSource, Scratch
from autotune.codegen.templates.matmul import PRODUCTS, matmul_kernel
from autotune.codegen.templates.matmul_broadcast import broadcast_shape, matmul_broadcast_kernel
from autotune.codegen.templates.matmul_cols import columns_of, matmul_cols_kernel
from autotune.codegen.templates.matmul_rows import matmul_rows_kernel
from autotune.codegen.templates.matmul_segments import segments_kernel
from autotune.codegen.templates.matmul_window import matmul_window_kernel, split_at_window
from autotune.codegen.templates.pointwise import pointwise_kernel
from autotune.codegen.templates.reduction import reduction_kernel
from autotune.codegen.templates.row_split import REDUCTIONS
from autotune.codegen.window import WINDOW_HANDLERS, is_depthwise
from search_space.ir import FusionGroup, Graph, KernelConfig, OpClass

__all__ = ["KernelSource", "Scratch", "kernels_for"]


def kernels_for(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str = "auto"
) -> list[KernelSource]:
    """The kernels of one group under one config (one, or two for a split attention), from
    the template its ops call for; ``precision`` is the plan's mode (the format of the
    cube's operands).

    Raises:
        Unsupported: no template expresses the group (the reason says what).
    """
    ops = [graph.op(o) for o in group.ops]
    cube = [
        op
        for op in ops
        if op.op_class is OpClass.CUBE
        and not is_depthwise(op, graph.tensors[op.inputs[1]].static_shape)
    ]
    if cube:
        other_cube = [op for op in cube if op.op_type not in PRODUCTS]
        if other_cube:
            raise Unsupported(f"no template for {other_cube[0].op_type} yet")
        if len(cube) > 1 and any(op.op_type in ("Softmax", "LogSoftmax") for op in ops):
            return attention_kernels(name, graph, group, config, precision)
        if any(op.op_type in REDUCTIONS for op in ops):
            cols = columns_of(name, graph, group, precision)
            if cols is not None:
                return [matmul_cols_kernel(name, graph, group, config, cols)]
            return [matmul_rows_kernel(name, graph, group, config, precision)]
        if split_at_window(graph, group) is not None:
            return [matmul_window_kernel(name, graph, group, config, precision)]
        if len({graph.tensors[op.outputs[0]].static_shape for op in cube}) > 1:
            return [segments_kernel(name, graph, group, config, precision)]
        return [_matmul_or_broadcast(name, graph, group, config, precision)]
    if any(op.op_type in REDUCTIONS for op in ops):
        return [reduction_kernel(name, graph, group, config, precision)]
    other = [
        op
        for op in ops
        if op.op_class in (OpClass.REDUCE, OpClass.OPAQUE) and op.op_type not in WINDOW_HANDLERS
    ]  # a depthwise convolution is a window, read inside any vector kernel
    if other:
        raise Unsupported(f"no template for {other[0].op_type} yet")
    return [pointwise_kernel(name, graph, group, config, precision)]


def _matmul_or_broadcast(
    name: str, graph: Graph, group: FusionGroup, config: KernelConfig, precision: str
) -> KernelSource:
    """The matmul template's kernel, or where it refuses a group whose outputs spread the
    product over broadcast dims (a squeeze-excitation gate), the broadcast template's."""
    try:
        return matmul_kernel(name, graph, group, config, precision)
    except Unsupported as refused:
        if broadcast_shape(graph, group) is None:
            raise
        try:
            return matmul_broadcast_kernel(name, graph, group, config, precision)
        except Unsupported:
            raise refused from None
