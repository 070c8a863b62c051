"""Cut one fused group out of its model, on a reduced number of rows, with fresh inputs.

The subgraph holds the group's ops only (views inside it included); its external inputs become
feeds (activations, drawn afresh by :class:`ModelSource`) or constants (weights and
compile-time tensors). The row axis is reduced as :mod:`.shrink` plans it; a group that cannot
shrink runs whole when small, else it is skipped (:class:`SkipVerification`). Large embedding
tables keep only the rows the drawn ids use (a gather copies rows exactly).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from autotune.verify.shrink import NotShrinkable, Shape, Shrink, group_rows, plan_shrinks
from autotune.verify.sources import ModelSource, np_dtype
from costmodel.lower import template_of
from search_space.exceptions import AutofusionError
from search_space.ir import FusionGroup, Graph, is_compile_time

__all__ = ["SkipVerification", "Subgraph", "extract_group"]

log = logging.getLogger(__name__)

MAX_FULL_ELEMENTS = 1 << 22  # a group that cannot shrink still runs when this small
MAX_FULL_FLOPS = 4e9
INLINE_MAX = 1 << 16  # larger constants enter the subgraph model as inputs
TABLE_MIN = 1 << 20  # embedding tables this large are cut to the rows the drawn ids use
_VIEW_TYPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})


class SkipVerification(AutofusionError):
    """The group cannot be shrunk and is too large to run whole."""


@dataclass(frozen=True)
class Subgraph:
    """A group ready to run: its nodes, fresh inputs, constants and (reduced) shapes."""

    signature: str
    group: FusionGroup
    template: str
    nodes: tuple[onnx.NodeProto, ...]
    units: tuple[str, ...]
    feeds: Mapping[str, np.ndarray]
    consts: Mapping[str, np.ndarray]
    outputs: tuple[str, ...]
    opset: int
    opset_imports: tuple[onnx.OperatorSetIdProto, ...]
    shapes: Mapping[str, tuple[int, ...]]
    rows: int
    full_rows: int
    note: str = ""

    def model(self, *, float64: bool = False) -> onnx.ModelProto:
        """The subgraph as an ONNX model (``float64``: every float promoted, Casts included).

        Small constants are initializers; large ones (weights) are graph inputs, fed with
        :meth:`run_feeds`, so no model nears protobuf's 2 GiB limit.
        """

        def arr(v: np.ndarray) -> np.ndarray:
            return v.astype(np.float64) if float64 and v.dtype.kind == "f" else v

        nodes = [_promote(n) if float64 else n for n in self.nodes]
        fed = {**self.feeds, **{t: v for t, v in self.consts.items() if v.size > INLINE_MAX}}
        inputs = [
            helper.make_tensor_value_info(
                t, helper.np_dtype_to_tensor_dtype(arr(v).dtype), v.shape
            )
            for t, v in fed.items()
        ]
        inits = [
            numpy_helper.from_array(arr(np.asarray(v)), t)
            for t, v in self.consts.items()
            if t not in fed
        ]
        outputs = [
            helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None)
            for t in self.outputs
        ]
        graph = helper.make_graph(nodes, f"group_{self.signature}", inputs, outputs, inits)
        return helper.make_model(graph, opset_imports=list(self.opset_imports))

    def run_feeds(self, *, float64: bool = False) -> dict[str, np.ndarray]:
        """What :meth:`model` takes as inputs: activations and the large constants."""
        fed = {**self.feeds, **{t: v for t, v in self.consts.items() if v.size > INLINE_MAX}}
        return {
            t: v.astype(np.float64) if float64 and v.dtype.kind == "f" else v
            for t, v in fed.items()
        }


_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def _promote(node: onnx.NodeProto) -> onnx.NodeProto:
    out = copy.deepcopy(node)
    for attr in out.attribute:
        if attr.name == "to" and node.op_type == "Cast" and attr.i in _FLOAT_TYPES:
            attr.i = onnx.TensorProto.DOUBLE
        elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _FLOAT_TYPES:
            value = numpy_helper.to_array(attr.t).astype(np.float64)
            attr.t.CopyFrom(numpy_helper.from_array(value, attr.t.name))
    return out


def _cut(value: np.ndarray, axis: int, n: int) -> np.ndarray:
    return np.take(value, np.arange(n), axis=axis)


def _apply(
    nodes: list[onnx.NodeProto], cand: Shrink
) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """Copies of ``nodes`` reading rewritten Reshape/Expand targets and cut constants."""
    out = [copy.deepcopy(n) for n in nodes]
    targets: dict[str, np.ndarray] = {}
    for i, value in cand.targets.items():
        name = f"{out[i].input[1]}__rows{i}"
        out[i].input[1] = name
        targets[name] = value
    for (i, p), (_, name, _, _) in cand.cuts.items():
        out[i].input[p] = name
    return out, targets


def _shape_model(
    src: ModelSource,
    nodes: list[onnx.NodeProto],
    outputs: tuple[str, ...],
    cand: Shrink,
    extra: dict[str, np.ndarray],
) -> onnx.ModelProto:
    """The reduced subgraph with types only (values just for small constants) to infer."""
    g, shapes = src.graph, cand.shapes
    cut_of = {name: (t, k, n) for t, name, k, n in cand.cuts.values()}
    inits = [numpy_helper.from_array(v, t) for t, v in extra.items()]
    inputs = []
    for t in dict.fromkeys(x for node in nodes for x in node.input if x):
        if t in extra or any(t in node.output for node in nodes):
            continue
        orig, k, n = cut_of.get(t, (t, 0, 0))
        if orig in g.constants:
            value = np.asarray(g.constants[orig])
            inits.append(numpy_helper.from_array(_cut(value, k, n) if t != orig else value, t))
        else:
            elem = helper.np_dtype_to_tensor_dtype(np_dtype(g.tensors[orig].dtype))
            inputs.append(helper.make_tensor_value_info(t, elem, list(shapes[t])))
    outs = [helper.make_tensor_value_info(t, onnx.TensorProto.UNDEFINED, None) for t in outputs]
    graph = helper.make_graph(nodes, "shapes", inputs, outs, inits)
    return helper.make_model(graph, opset_imports=list(src.imports))


def _size(graph: Graph, group: FusionGroup) -> tuple[int, float]:
    """Elements of the activations (weights excluded) and FLOPs of the whole group."""
    names = set(group.inputs) | {t for n in group.ops for t in graph.op(n).outputs if t}
    elements = sum(graph.tensors[t].numel for t in names if not is_compile_time(graph, t))
    return elements, float(sum(graph.op(n).flops for n in group.ops))


def _gathered_tables(
    graph: Graph, nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Large embedding tables read only by Gathers of drawn ids: the rows those ids use."""
    out: dict[str, np.ndarray] = {}
    for t in dict.fromkeys(x for n in nodes for x in n.input if x):
        if t in feeds or t not in graph.tensors or graph.tensors[t].numel < TABLE_MIN:
            continue
        users = [(n, p) for n in nodes for p, x in enumerate(n.input) if x == t]
        ids = [n.input[1] for n, p in users if n.op_type == "Gather" and p == 0]
        axis0 = all(a.name != "axis" or a.i == 0 for n, _ in users for a in n.attribute)
        only_here = all(  # the ids index this table and nothing else (they get remapped)
            n.op_type == "Gather" and n.input[0] == t and p == 1
            for i in ids
            for n in nodes
            for p, x in enumerate(n.input)
            if x == i
        )
        if ids and len(ids) == len(users) and axis0 and only_here and all(i in feeds for i in ids):
            out[t] = np.unique(np.concatenate([feeds[i].reshape(-1) for i in ids]))
    return out


def extract_group(
    source: ModelSource, group: FusionGroup, *, rows: int = 64, input_scale: float = 1.0
) -> Subgraph:
    """The group's subgraph on about ``rows`` rows with fresh inputs.

    Args:
        source: the model and graph the group belongs to.
        group: the fused group.
        rows: rows to keep, counted on the group's main activation (all axes but the
            feature axis); the reduction closest to this (in ratio) is chosen.
        input_scale: standard deviation of the float activations drawn.

    Raises:
        SkipVerification: the group cannot be shrunk and is too large to run whole.
    """
    # Long by design: one pass from the group's nodes to a runnable subgraph (shrink candidates
    # tried, the closest kept, inputs drawn), each step feeding the next.
    g = source.graph
    nodes = [copy.deepcopy(source.nodes[n]) for n in group.ops]
    full_rows = group_rows(g, group)
    needed, candidates, reasons = plan_shrinks(g, group, rows)
    valid: list[tuple[Shrink, list[onnx.NodeProto], dict[str, np.ndarray]]] = []
    for cand in candidates:
        trial, targets = _apply(nodes, cand)
        try:
            validate_shapes(_shape_model(source, trial, group.outputs, cand, targets), cand.shapes)
        except NotShrinkable as err:
            reasons.append(f"{cand.note}: {err}")
            continue
        valid.append((cand, trial, targets))
    # the reduction closest to the rows asked for (in ratio); earlier choices win ties
    best = min(valid, key=lambda v: abs(math.log(v[0].kept / rows)), default=None)
    chosen, extra = (best[0], best[2]) if best else (None, {})
    if best:
        nodes = best[1]
    note = chosen.note if chosen else ""
    if needed and chosen is None:
        elements, flops = _size(g, group)
        why = "; ".join(reasons) or "no row axis"
        if elements > MAX_FULL_ELEMENTS or flops > MAX_FULL_FLOPS:
            raise SkipVerification(f"not shrinkable ({why}) and too large to run whole")
        note = f"not shrinkable ({why}); ran at full size"
        log.info("group %s..: %s", group.ops[0], note)
    shapes = dict(chosen.shapes) if chosen else {}
    acts = [t for t in group.inputs if not is_compile_time(g, t)]
    feeds: dict[str, np.ndarray] = {}
    for t in acts:
        shape = shapes.get(t, g.tensors[t].static_shape)
        made = source.derived(t, shape) if g.tensors[t].dtype.startswith("float") else None
        feeds[t] = made if made is not None else source.draw(t, shape, input_scale)
    cut_of = {name: (t, k, n) for t, name, k, n in (chosen.cuts.values() if chosen else [])}
    consts: dict[str, np.ndarray] = dict(extra)
    produced = {t for node in nodes for t in node.output if t}
    tables = _gathered_tables(g, nodes, feeds)
    for t in dict.fromkeys(x for node in nodes for x in node.input if x):
        if t in feeds or t in consts or t in produced:
            continue
        orig, k, n = cut_of.get(t, (t, 0, 0))
        if t in tables:  # a gather copies rows exactly: keep the rows the ids use, remapped
            consts[t] = source.rows(t, tables[t])
            for node in nodes:
                if node.op_type == "Gather" and node.input[0] == t:
                    ids = feeds[node.input[1]]
                    feeds[node.input[1]] = np.searchsorted(tables[t], ids).astype(ids.dtype)
            continue
        value = np.asarray(source.value(orig))
        consts[t] = _cut(value, k, n) if t != orig else value
    all_shapes = {t: g.tensors[t].static_shape for t in (*group.inputs, *group.outputs)}
    for n in group.ops:
        all_shapes.update((t, g.tensors[t].static_shape) for t in g.op(n).outputs if t)
    all_shapes.update(shapes)
    all_shapes.update((t, v.shape) for t, v in consts.items())
    kept = chosen.kept if chosen else full_rows
    return Subgraph(
        signature=group.signature(g),
        group=group,
        template=template_of(g, group),
        nodes=tuple(nodes),
        units=tuple(g.op(n).unit for n in group.ops),
        feeds=feeds,
        consts=consts,
        outputs=group.outputs,
        opset=g.opset,
        opset_imports=source.imports,
        shapes=all_shapes,
        rows=kept,
        full_rows=full_rows,
        note=note,
    )


def validate_shapes(model: onnx.ModelProto, expected: dict[str, Shape]) -> None:
    """Run strict shape inference on the reduced subgraph and compare every shape.

    Raises:
        NotShrinkable: inference fails (a broadcast conflict) or a shape differs.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as err:  # onnx raises several error types here
        raise NotShrinkable(
            f"shape inference: {str(err).strip().splitlines()[-1][:160]}"
        ) from None
    for vi in [*inferred.graph.value_info, *inferred.graph.output]:
        want = expected.get(vi.name)
        tt: Any = vi.type.tensor_type
        if want is None or not tt.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if -1 not in dims and tuple(dims) != tuple(want):
            raise NotShrinkable(f"{vi.name} would be {dims}, expected {list(want)}")
