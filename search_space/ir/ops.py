"""Operator classes (docs/fusion.md) and per-op work: FLOPs and bytes moved.

FLOP convention (stated so a hand count can be compared): a multiply-add is 2 FLOPs on the
cube (MatMul, Gemm, Conv); vector work counts one FLOP per output element for elementwise ops
(``VECTOR_FLOPS_PER_ELEMENT`` lists the exceptions) and per input element for reductions.
Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, no-op Cast, inference Dropout) are
metadata: 0 FLOPs and 0 bytes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence

__all__ = [
    "CUBE_OPS",
    "ELEMENTWISE_OPS",
    "GATHER_OPS",
    "LAYOUT_OPS",
    "REDUCE_OPS",
    "VIEW_OPS",
    "OpClass",
    "OpWork",
    "classify",
    "reduction_axes",
]

Shape = tuple[int, ...]


class OpClass(enum.StrEnum):
    """Fusion class of an operator (docs/fusion.md)."""

    CUBE = "cube"
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"
    LAYOUT = "layout"
    OPAQUE = "opaque"


CUBE_OPS = frozenset(
    {
        "MatMul",
        "Gemm",
        "Conv",
        "ConvTranspose",
        "MatMulInteger",
        "ConvInteger",
        "QLinearMatMul",
        "QLinearConv",
    }
)
ELEMENTWISE_OPS = frozenset(
    {
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Pow",
        "Sqrt",
        "Reciprocal",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Elu",
        "Selu",
        "Celu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Erf",
        "Gelu",
        "Clip",
        "Max",
        "Min",
        "Mean",
        "Sum",
        "Where",
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "Not",
        "And",
        "Or",
        "Xor",
        "IsNaN",
        "IsInf",
        "Cast",
        "CastLike",
        "Floor",
        "Ceil",
        "Round",
        "Sign",
        "Softplus",
        "Softsign",
        "Mish",
        "ThresholdedRelu",
        "Sin",
        "Cos",
        "Mod",
        "BitShift",
        "BatchNormalization",
        "QuantizeLinear",
        "DequantizeLinear",
        "Trilu",
        "Range",
        "ConstantOfShape",
        "Dropout",
        "Identity",
    }
)
REDUCE_OPS = frozenset(
    {
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceSumSquare",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "Softmax",
        "LogSoftmax",
        "LayerNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "RMSNormalization",
        "ArgMax",
        "ArgMin",
        "CumSum",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "MaxPool",
        "AveragePool",
        "LpNormalization",
    }
)
LAYOUT_OPS = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Concat",
        "Split",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Tile",
        "Pad",
        "DepthToSpace",
        "SpaceToDepth",
        "ScatterND",
        "ScatterElements",
        "Shape",
        "Size",
    }
)
GATHER_OPS = frozenset({"Gather", "GatherElements", "GatherND"})
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})

# Vector FLOPs per output element where one is not the truth (rough instruction counts).
VECTOR_FLOPS_PER_ELEMENT: Mapping[str, int] = {
    "BatchNormalization": 2,  # inference form: one scale and one shift per element
    "Softmax": 5,  # max, subtract, exp, sum, divide
    "LogSoftmax": 5,
    "LayerNormalization": 8,  # mean, centre, square, mean, eps, rsqrt, scale, shift
    "RMSNormalization": 5,
    "GroupNormalization": 8,
    "InstanceNormalization": 8,
    "Gelu": 8,
    "HardSwish": 4,
    "HardSigmoid": 3,
    "Mish": 4,
}

# Channels per group below which a grouped Conv cannot fill the cube's 16-wide fractal and a
# vendor kernel runs it on the vector unit instead (depthwise convolutions).
CUBE_MIN_CHANNELS = 16


class OpWork:
    """Classification and work of one op, from its type, attributes and static shapes."""

    __slots__ = ("cube_flops", "is_view", "op_class", "unit", "vector_flops")

    def __init__(
        self, op_class: OpClass, unit: str, is_view: bool, cube_flops: int, vector_flops: int
    ) -> None:
        self.op_class = op_class
        self.unit = unit  # "cube", "vector" or "none" (views)
        self.is_view = is_view
        self.cube_flops = cube_flops
        self.vector_flops = vector_flops


def _numel(shape: Sequence[int] | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _is_noop_cast(
    attrs: Mapping[str, object], in_dtypes: Sequence[str | None], out_dtypes: Sequence[str | None]
) -> bool:
    return bool(in_dtypes) and bool(out_dtypes) and in_dtypes[0] == out_dtypes[0]


def _conv_flops(
    op_type: str,
    attrs: Mapping[str, object],
    ins: Sequence[Shape | None],
    outs: Sequence[Shape | None],
) -> tuple[int, bool]:
    """Return (FLOPs, runs_on_vector) of a Conv/ConvTranspose given static shapes."""
    x, w = (ins[0] if ins else None), (ins[1] if len(ins) > 1 else None)
    y = outs[0] if outs else None
    if x is None or w is None or y is None or len(w) < 3:
        return 0, False
    group = int(attrs.get("group", 1))  # type: ignore[call-overload]
    kernel = math.prod(w[2:])
    if op_type.startswith("ConvTranspose"):
        cin_g, cout_g = w[0] // group, w[1]
        macs = _numel(x) * cout_g * kernel
    else:
        cout_g, cin_g = w[0] // group, w[1]
        macs = _numel(y) * cin_g * kernel
    bias = _numel(y) if len(ins) > 2 and ins[2] is not None else 0
    vector = group > 1 and (cin_g < CUBE_MIN_CHANNELS or cout_g < CUBE_MIN_CHANNELS)
    return 2 * macs + bias, vector


def _matmul_flops(
    op_type: str,
    attrs: Mapping[str, object],
    ins: Sequence[Shape | None],
    outs: Sequence[Shape | None],
) -> int:
    a, y = (ins[0] if ins else None), (outs[0] if outs else None)
    if a is None or y is None or not a:
        return 0
    if op_type == "Gemm":
        k = a[0] if attrs.get("transA", 0) else a[-1]
        bias = _numel(y) if len(ins) > 2 and ins[2] is not None else 0
        return 2 * _numel(y) * k + bias
    k = a[-1]  # MatMul family: A is [..., M, K] (1-D A is [K])
    return 2 * _numel(y) * k


def classify(
    op_type: str,
    domain: str,
    attrs: Mapping[str, object],
    in_shapes: Sequence[Shape | None],
    out_shapes: Sequence[Shape | None],
    in_dtypes: Sequence[str | None] = (),
    out_dtypes: Sequence[str | None] = (),
) -> OpWork:
    """Classify an op and count its work.

    Args:
        op_type, domain, attrs: the ONNX node's type, domain ("" for the default) and attributes.
        in_shapes, out_shapes: static shapes of its inputs and outputs (None when unknown or
            omitted); the counts are 0 where a needed shape is unknown.
        in_dtypes, out_dtypes: element types, used to spot a no-op Cast.

    Returns:
        The op's class, the unit it runs on, whether it is a free view, and its FLOPs.
    """
    if domain not in ("", "ai.onnx"):
        return OpWork(OpClass.OPAQUE, "vector", False, 0, 0)
    out_elems = sum(_numel(s) for s in out_shapes)
    is_view = (
        op_type in VIEW_OPS
        or (op_type == "Cast" and _is_noop_cast(attrs, in_dtypes, out_dtypes))
        or op_type == "Dropout"
    )
    if is_view:
        return OpWork(OpClass.LAYOUT, "none", True, 0, 0)
    if op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv"):
        shift = 3 if op_type == "QLinearConv" else 0  # x, x_scale, x_zp, w, ...
        ins = [in_shapes[0] if in_shapes else None, *in_shapes[shift + 1 : shift + 3]]
        flops, vector = _conv_flops(op_type, attrs, ins, out_shapes)
        if vector:
            return OpWork(OpClass.CUBE, "vector", False, 0, flops)
        return OpWork(OpClass.CUBE, "cube", False, flops, 0)
    if op_type in CUBE_OPS:
        return OpWork(
            OpClass.CUBE, "cube", False, _matmul_flops(op_type, attrs, in_shapes, out_shapes), 0
        )
    if op_type in ELEMENTWISE_OPS:
        per = VECTOR_FLOPS_PER_ELEMENT.get(op_type, 1)
        return OpWork(OpClass.ELEMENTWISE, "vector", False, 0, per * out_elems)
    if op_type in REDUCE_OPS:
        per = VECTOR_FLOPS_PER_ELEMENT.get(op_type, 1)
        in_elems = _numel(in_shapes[0]) if in_shapes else 0
        return OpWork(OpClass.REDUCE, "vector", False, 0, per * max(in_elems, out_elems))
    if op_type in LAYOUT_OPS:
        return OpWork(OpClass.LAYOUT, "vector", False, 0, 0)
    return OpWork(OpClass.OPAQUE, "vector", False, 0, 0)


def reduction_axes(
    op_type: str,
    attrs: Mapping[str, object],
    inputs: Sequence[str],
    shape: Sequence[int],
    constants: Mapping[str, object],
    opset: int,
) -> tuple[int, ...]:
    """The axes a reduction-class op reduces over an input of ``shape`` (sorted).

    Softmax before opset 13 and LayerNormalization/RMSNormalization reduce every axis from
    ``axis`` on; Softmax from opset 13, LpNormalization, ArgMax/ArgMin (default axis 0) and
    CumSum (axis given as an input) reduce one axis; global pools and instance/group norms the
    spatial axes; Reduce* their ``axes`` (attribute or input), all axes when none are given.
    """
    rank = len(shape)
    if rank == 0:
        return ()

    def attr_axis(default: int) -> int:
        return int(attrs.get("axis", default)) % rank  # type: ignore[call-overload]

    if op_type in (
        "GlobalAveragePool",
        "GlobalMaxPool",
        "InstanceNormalization",
        "GroupNormalization",
    ):
        return tuple(range(min(2, rank), rank))
    if op_type in ("Softmax", "LogSoftmax"):
        if opset >= 13:
            return (attr_axis(-1),)
        return tuple(range(attr_axis(1), rank))
    if op_type in ("LayerNormalization", "RMSNormalization"):
        return tuple(range(attr_axis(-1), rank))
    if op_type == "LpNormalization":
        return (attr_axis(-1),)
    if op_type in ("ArgMax", "ArgMin"):
        return (attr_axis(0),)
    if op_type == "CumSum":
        value = constants.get(inputs[1]) if len(inputs) > 1 else None
        return (int(value.reshape(-1)[0]) % rank,) if value is not None else (0,)  # type: ignore[attr-defined]
    axes = attrs.get("axes")
    if axes is None and len(inputs) > 1 and inputs[1] in constants:
        axes = constants[inputs[1]].reshape(-1).tolist()  # type: ignore[attr-defined]
    if not axes:
        return tuple(range(rank))
    return tuple(sorted({int(a) % rank for a in axes}))  # type: ignore[attr-defined]
