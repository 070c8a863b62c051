"""Compile-time evaluation of the small integer subgraphs exporters emit for shapes.

Real exports compute Reshape targets, Expand shapes, Slice bounds and masks at run time
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, ``ConstantOfShape``, ``Mod``/``Div``).
Once the graph inputs are static these are constants. :func:`evaluate` runs one node on known
numpy inputs: a numpy fast path for the ops shape code uses, and onnx's reference evaluator
(with the model's own opset) for the rest. It never touches compute ops with unknown inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["FOLD_LIMIT", "attributes_of", "evaluate"]

log = logging.getLogger(__name__)

# Largest output (elements) a folded node may produce. Shape math is tiny; anything above this
# (a causal mask, a rotary table) stays an op so no large float constant is materialised.
FOLD_LIMIT = 1 << 14

Array = np.ndarray
Kernel = Callable[[list[Any], dict[str, Any], int], list[Array]]


def _axes(ins: list[Any], attrs: dict[str, Any], pos: int) -> list[int] | None:
    if len(ins) > pos and ins[pos] is not None:
        return [int(a) for a in np.asarray(ins[pos]).reshape(-1)]
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return None


def _unsqueeze(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    x, axes = ins[0], _axes(ins, attrs, 1) or []
    rank = x.ndim + len(axes)
    out = x
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return [out]


def _squeeze(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    x, axes = ins[0], _axes(ins, attrs, 1)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _slice(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    x = ins[0]
    if opset < 10:
        starts, ends = attrs["starts"], attrs["ends"]
        axes = attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = list(ins[1].reshape(-1)), list(ins[2].reshape(-1))
        axes = (
            list(ins[3].reshape(-1))
            if len(ins) > 3 and ins[3] is not None
            else list(range(len(starts)))
        )
        steps = (
            list(ins[4].reshape(-1)) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        )
    out = x
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        axis = int(a) % x.ndim
        dim, st = x.shape[axis], int(st)
        idx = np.arange(_clamp(int(s), dim, st), _clamp(int(e), dim, st), st)
        out = np.take(out, idx, axis=axis)
    return [out]


def _clamp(v: int, dim: int, step: int) -> int:
    """ONNX Slice bound clamping (negative bounds count from the end)."""
    v = v + dim if v < 0 else v
    return min(max(v, 0), dim) if step > 0 else min(max(v, -1), dim - 1)


def _gather(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    return [np.take(ins[0], ins[1].astype(np.int64), axis=int(attrs.get("axis", 0)))]


def _concat(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    return [np.concatenate([np.asarray(i) for i in ins], axis=int(attrs["axis"]))]


def _cast(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    return [ins[0].astype(helper.tensor_dtype_to_np_dtype(int(attrs["to"])))]


def _reshape(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    x, shape = ins[0], [int(d) for d in ins[1].reshape(-1)]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def _constant_of_shape(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    value = attrs.get("value")
    fill = value.reshape(-1)[0] if isinstance(value, np.ndarray) else np.float32(0)
    return [np.full([int(d) for d in ins[0].reshape(-1)], fill, dtype=np.asarray(fill).dtype)]


def _expand(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    shape = [int(d) for d in ins[1].reshape(-1)]
    return [ins[0] * np.ones(shape, dtype=ins[0].dtype)]


def _range(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    start, limit, delta = (np.asarray(i).reshape(()) for i in ins)
    return [np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)]


def _where(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    return [np.where(ins[0], ins[1], ins[2])]


def _div(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    a, b = ins
    if np.issubdtype(a.dtype, np.integer):
        return [np.trunc(a / b).astype(a.dtype)]  # ONNX integer Div truncates toward zero
    return [(a / b).astype(a.dtype)]


def _mod(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
    a, b = ins
    return [np.fmod(a, b) if attrs.get("fmod", 0) else np.mod(a, b)]


def _binary(fn: Callable[[Any, Any], Any], keep: bool = True) -> Kernel:
    def run(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
        out = np.asarray(fn(ins[0], ins[1]))
        return [out.astype(ins[0].dtype) if keep else out]

    return run


def _unary(fn: Callable[[Any], Any]) -> Kernel:
    def run(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
        return [np.asarray(fn(ins[0])).astype(ins[0].dtype)]

    return run


def _reduce(fn: Callable[..., Any]) -> Kernel:
    def run(ins: list[Any], attrs: dict[str, Any], opset: int) -> list[Array]:
        axes = _axes(ins, attrs, 1)
        keep = bool(attrs.get("keepdims", 1))
        if axes is None and attrs.get("noop_with_empty_axes", 0):
            return [ins[0]]
        ax = tuple(axes) if axes else None
        return [np.asarray(fn(ins[0], axis=ax, keepdims=keep)).astype(ins[0].dtype)]

    return run


_FAST: dict[str, Kernel] = {
    "Identity": lambda ins, a, o: [ins[0]],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Slice": _slice,
    "Gather": _gather,
    "Concat": _concat,
    "Cast": _cast,
    "Reshape": _reshape,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Range": _range,
    "Where": _where,
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _div,
    "Mod": _mod,
    "Max": _binary(np.maximum),
    "Min": _binary(np.minimum),
    "Equal": _binary(np.equal, keep=False),
    "Less": _binary(np.less, keep=False),
    "Greater": _binary(np.greater, keep=False),
    "LessOrEqual": _binary(np.less_equal, keep=False),
    "GreaterOrEqual": _binary(np.greater_equal, keep=False),
    "And": _binary(np.logical_and, keep=False),
    "Or": _binary(np.logical_or, keep=False),
    "Not": lambda ins, a, o: [np.logical_not(ins[0])],
    "Neg": _unary(np.negative),
    "Abs": _unary(np.abs),
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Sqrt": _unary(np.sqrt),
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
}


def attributes_of(node: onnx.NodeProto) -> dict[str, Any]:
    """Node attributes as Python values (tensors as numpy arrays, graphs left as protos)."""
    out: dict[str, Any] = {}
    for attr in node.attribute:
        value = helper.get_attribute_value(attr)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8", "replace") for v in value]
        out[attr.name] = value
    return out


def evaluate(
    node: onnx.NodeProto,
    inputs: Sequence[Array | None],
    opset_imports: Sequence[onnx.OperatorSetIdProto],
    opset: int,
) -> list[Array] | None:
    """Evaluate ``node`` on known inputs; None when it cannot be evaluated here.

    Args:
        node: the ONNX node (default domain only).
        inputs: one array per input position (None for an omitted optional input).
        opset_imports, opset: the model's imports and its default-domain version, so old-opset
            semantics (attribute axes, Slice attributes) are honoured.
    """
    if node.domain not in ("", "ai.onnx"):
        return None
    attrs = attributes_of(node)
    kernel = _FAST.get(node.op_type)
    try:
        if kernel is not None:
            return [np.asarray(v) for v in kernel(list(inputs), attrs, opset)]
        return _reference(node, inputs, opset_imports)
    except Exception as err:  # an evaluator failure only means "not folded"
        log.debug("could not fold %s (%s): %s", node.name, node.op_type, err)
        return None


def _reference(
    node: onnx.NodeProto,
    inputs: Sequence[Array | None],
    opset_imports: Sequence[onnx.OperatorSetIdProto],
) -> list[Array] | None:
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    copy = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))])
    copy.attribute.extend(node.attribute)
    feeds = {n: v for n, v in zip(names, inputs, strict=True) if n and v is not None}
    graph = helper.make_graph(
        [copy],
        "fold",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in copy.output],
    )
    model = helper.make_model(graph, opset_imports=list(opset_imports))
    outs = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(o) for o in outs]
