"""ONNX model -> :class:`Graph`: fold shape computations, infer static shapes, classify ops.

One pass in topological order does both jobs for each node: onnx's own per-node shape
inference (given the constant values of small inputs, so a computed Reshape target is seen),
then, when every input is a known value and the output is small, compile-time evaluation
(:mod:`search_space.onnx.fold`). A folded node disappears from the graph and its output becomes a
constant; every other node is kept exactly as the user wrote it (no BatchNorm folded into Conv,
no MatMul+Add rewritten as Gemm, no large float constant materialised).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, inliner, numpy_helper, shape_inference

from search_space.exceptions import GraphError
from search_space.ir import CUBE_OPS, GATHER_OPS, Graph, Op, Tensor, classify
from search_space.onnx.constant_value import InitializerValues, maskable
from search_space.onnx.fold import FOLD_LIMIT, attributes_of, evaluate
from search_space.onnx.io import (
    ModelSource,
    default_opset,
    load_tensor_data,
    node_names,
    read_model,
    static_input_dims,
    topological_order,
)

__all__ = ["WEIGHT_INPUTS_KEY", "load_graph"]

log = logging.getLogger(__name__)

# metadata_props key listing graph inputs that are weights (the zoo's weights=inputs mode).
WEIGHT_INPUTS_KEY = "ai.autofusion.weight_inputs"
_SAME_SIZE = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_GROWS = frozenset({"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Pad", "Upsample"})
# Ops onnx infers no output shape for (no inference function in its schema: onnx 1.23) whose
# output is shaped like their first input.
_LIKE_FIRST_INPUT = frozenset({"GroupNormalization"})


def _dtype_name(elem_type: int) -> str:
    if elem_type == onnx.TensorProto.UNDEFINED:
        return "undefined"
    name = onnx.TensorProto.DataType.Name(elem_type).lower()
    return {"float": "float32", "double": "float64"}.get(name, name)


def _shape_of(tp: onnx.TypeProto | None) -> tuple[int | str, ...] | None:
    if tp is None or not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
        for d in tp.tensor_type.shape.dim
    )


def _static(shape: tuple[int | str, ...] | None) -> tuple[int, ...] | None:
    if shape is None or any(not isinstance(d, int) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _type_of(value: np.ndarray) -> onnx.TypeProto:
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)


def _is_weight(elem_type: int, numel: int) -> bool:
    floating = _dtype_name(elem_type) in ("float32", "float16", "bfloat16", "float64")
    return floating and numel > 1


class _Pass:
    """State of the single fold + infer pass over one model."""

    def __init__(self, model: onnx.ModelProto, base: Path | None, opset: int) -> None:
        self.model, self.base, self.opset = model, base, opset
        self.imports = list(model.opset_import)
        self.versions = {o.domain or "": o.version for o in model.opset_import}
        self.types: dict[str, onnx.TypeProto] = {}
        self.values: dict[str, np.ndarray] = {}
        self.kinds: dict[str, str] = {}
        self.compile_time: set[str] = set()
        self.protos: dict[str, onnx.TensorProto] = {}
        g = model.graph
        self.declared = {vi.name: vi.type for vi in [*g.value_info, *g.output]}
        self.schemas: dict[tuple[str, str], Any] = {}

    def add_initializer(self, t: onnx.TensorProto) -> None:
        numel = math.prod(t.dims)
        self.types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
        self.kinds[t.name] = "weight" if _is_weight(t.data_type, numel) else "constant"
        self.compile_time.add(t.name)
        if numel <= FOLD_LIMIT:
            self.values[t.name] = numpy_helper.to_array(load_tensor_data(t, self.base))

    def add_input(self, vi: onnx.ValueInfoProto, dims: Sequence[int], weight: bool) -> None:
        self.types[vi.name] = helper.make_tensor_type_proto(vi.type.tensor_type.elem_type, dims)
        self.kinds[vi.name] = "weight" if weight else "input"
        if weight:
            self.compile_time.add(vi.name)

    def set_value(self, name: str, value: np.ndarray) -> None:
        self.values[name] = value
        self.types[name] = _type_of(value)
        self.compile_time.add(name)
        if name not in self.kinds:  # folded from constants: a weight or a small constant
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            self.kinds[name] = "weight" if _is_weight(elem, value.size) else "constant"

    def _schema(self, node: onnx.NodeProto) -> Any:
        key = (node.op_type, node.domain)
        if key not in self.schemas:
            domain = "" if node.domain == "ai.onnx" else node.domain
            try:
                self.schemas[key] = onnx.defs.get_schema(
                    node.op_type, self.versions.get(domain, self.opset), domain
                )
            except onnx.defs.SchemaError:
                self.schemas[key] = None
        return self.schemas[key]

    def _proto(self, name: str) -> onnx.TensorProto:
        if name not in self.protos:
            self.protos[name] = numpy_helper.from_array(self.values[name], name)
        return self.protos[name]

    def infer(self, node: onnx.NodeProto, name: str) -> None:
        """Set the output types of ``node`` (onnx inference, else declared value_info)."""
        schema = self._schema(node)
        inferred: dict[str, onnx.TypeProto] = {}
        if schema is not None:
            in_types = {t: self.types[t] for t in node.input if t in self.types}
            in_data = {t: self._proto(t) for t in node.input if t in self.values}
            try:
                inferred = shape_inference.infer_node_outputs(
                    schema, node, in_types, in_data, opset_imports=self.imports
                )
            except Exception as err:  # inference failure: fall back to declared types
                log.debug("shape inference failed on %s: %s", node.name, err)
                ins = [t for t in node.input if t]
                if ins and all(_static(_shape_of(self.types.get(t))) is not None for t in ins):
                    shapes = ", ".join(str(list(_shape_of(self.types[t]) or ())) for t in ins)
                    reason = str(err).strip().splitlines()[-1][:200]
                    raise GraphError(
                        f"op '{name}' ({node.op_type}) is invalid for inputs {shapes}: "
                        f"{reason}; fix the model, or pass --input-shape values it accepts"
                    ) from None
        for out in node.output:
            if not out:
                continue
            tp = inferred.get(out)
            if node.op_type in _LIKE_FIRST_INPUT and _static(_shape_of(tp)) is None:
                tp = self.types.get(node.input[0])  # their one output
            if tp is None or _static(_shape_of(tp)) is None:
                declared = self.declared.get(out)
                if declared is not None and (tp is None or _static(_shape_of(declared))):
                    tp = declared
            if tp is not None:
                self.types[out] = tp
        if node.op_type in _SAME_SIZE and node.input and node.output and node.output[0]:
            src = _static(_shape_of(self.types.get(node.input[0])))
            dst = _static(_shape_of(self.types.get(node.output[0])))
            if src is not None and dst is not None and math.prod(src) != math.prod(dst):
                raise GraphError(
                    f"op '{name}' ({node.op_type}) turns {list(src)} ({math.prod(src)} elements) "
                    f"into {list(dst)} ({math.prod(dst)}): the model fixes a size that these "
                    "input shapes contradict; re-export it with dynamic axes or pass matching "
                    "--input-shape values"
                )

    def try_fold(self, node: onnx.NodeProto) -> bool:
        """Evaluate ``node`` at compile time when its inputs are known and its output small."""
        if node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx"):
            shape = _static(_shape_of(self.types.get(node.input[0])))
            if shape is None:
                return False
            if node.op_type == "Size":
                self.set_value(node.output[0], np.array(math.prod(shape), dtype=np.int64))
                return True
            attrs = attributes_of(node)
            start, end = attrs.get("start", 0), attrs.get("end", len(shape))
            self.set_value(node.output[0], np.array(shape[start:end], dtype=np.int64))
            return True
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx"):
            return self._fold_cast_like(node)
        if any(t and t not in self.values for t in node.input) or not node.input:
            return False
        if node.op_type in CUBE_OPS:  # compute stays visible even on constant inputs
            return False
        if any(t and self.kinds.get(t) == "weight" for t in node.input):
            # computing on weights (an embedding lookup at fixed positions) is the model's
            # compute, not shape math: folding it would make a model's structure depend on
            # whether its weights are stored or fed
            return False
        sizes = [_static(_shape_of(self.types.get(o))) for o in node.output if o]
        if all(s is not None for s in sizes):
            if sum(math.prod(s) for s in sizes if s is not None) > FOLD_LIMIT:
                return False
        elif node.op_type in _GROWS:
            return False
        ins = [self.values[t] if t else None for t in node.input]
        outs = evaluate(node, ins, self.imports, self.opset)
        if outs is None or sum(o.size for o in outs) > FOLD_LIMIT:
            return False
        for name, value in zip(node.output, outs, strict=False):
            if name:
                self.set_value(name, value)
        return True

    def _fold_cast_like(self, node: onnx.NodeProto) -> bool:
        """CastLike of a known value: only the second input's type is read, so an
        activation there (the dynamo exporter's zero bias cast like the conv's input) leaves
        it a constant."""
        like = self.types.get(node.input[1]) if len(node.input) > 1 else None
        if node.input[0] not in self.values or like is None or not like.tensor_type.elem_type:
            return False
        value = np.asarray(self.values[node.input[0]])
        if value.size > FOLD_LIMIT or self.kinds.get(node.input[0]) == "weight":
            return False
        dtype = helper.tensor_dtype_to_np_dtype(like.tensor_type.elem_type)
        self.set_value(node.output[0], value.astype(dtype))
        return True


def load_graph(
    source: ModelSource, *, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> Graph:
    """Load an ONNX model as a static :class:`Graph`.

    Args:
        source: a path, serialized bytes or a ``ModelProto`` (external data is read from the
            model file's folder).
        input_shapes: static shapes for graph inputs with dynamic dims, e.g.
            ``{"input_ids": (1, 128)}`` (the CLI's ``--input-shape input_ids=1x128``).

    Raises:
        ModelLoadError: unreadable file, unsupported opset, bad ``input_shapes``.
        DynamicShapeError: a dynamic graph input without a shape.
        GraphError: a cycle, a tensor produced twice, a read of an undefined tensor.
    """
    model, base = read_model(source)
    if model.functions:
        model = inliner.inline_local_functions(model)
    opset = default_opset(model)
    g = model.graph
    names = node_names(g.node)
    order = topological_order(g, names)
    meta = {p.key: p.value for p in model.metadata_props}
    weight_inputs = set(json.loads(meta.get(WEIGHT_INPUTS_KEY, "[]")))
    dims = static_input_dims(g, input_shapes or {}, weight_inputs)

    st = _Pass(model, base, opset)
    for t in g.initializer:
        st.add_initializer(t)
    for vi in g.input:
        if vi.name in dims:
            st.add_input(vi, dims[vi.name], vi.name in weight_inputs)

    kept: list[int] = []
    folded = 0
    for idx in order:
        node = g.node[idx]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            value = _constant_value(node)
            st.set_value(node.output[0], value)
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            st.kinds[node.output[0]] = "weight" if _is_weight(elem, value.size) else "constant"
            continue
        st.infer(node, names[idx])
        if st.try_fold(node):
            folded += 1
            continue
        kept.append(idx)
        if all(not t or t in st.compile_time for t in node.input) and node.input:
            st.compile_time.update(o for o in node.output if o)
    return _build(model, names, kept, st, folded, opset)


def _constant_value(node: onnx.NodeProto) -> np.ndarray:
    attrs = attributes_of(node)
    for key, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    return np.asarray(next(iter(attrs.values()), 0))


def _attr_record(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return tuple(value.reshape(-1).tolist()) if value.size <= 64 else ("tensor", value.shape)
    if isinstance(value, list):
        return tuple(_attr_record(v) for v in value)
    if isinstance(value, onnx.GraphProto):
        return ("graph", value.name, len(value.node))
    return value


def _bytes_moved(op_type: str, ins: list[Tensor | None], outs: list[Tensor]) -> int:
    """Bytes an op reads and writes alone: distinct inputs plus outputs; a gather reads rows."""
    written = sum(t.nbytes for t in outs)
    distinct = {t.name: t for t in ins if t}
    if op_type in GATHER_OPS and ins and ins[0] is not None:
        table = distinct.pop(ins[0].name)
        return sum(t.nbytes for t in distinct.values()) + min(table.nbytes, written) + written
    return sum(t.nbytes for t in distinct.values()) + written


def _build(
    model: onnx.ModelProto, names: list[str], kept: list[int], st: _Pass, folded: int, opset: int
) -> Graph:
    g = model.graph
    used: dict[str, None] = {}
    for idx in kept:
        used.update((t, None) for t in [*g.node[idx].input, *g.node[idx].output] if t)
    inputs = tuple(vi.name for vi in g.input if st.kinds.get(vi.name) in ("input", "weight"))
    outputs = tuple(o.name for o in g.output)
    used.update((t, None) for t in [*inputs, *outputs])
    tensors: dict[str, Tensor] = {}
    for name in used:
        tp = st.types.get(name)
        elem = tp.tensor_type.elem_type if tp is not None and tp.HasField("tensor_type") else 0
        tensors[name] = Tensor(
            name, _shape_of(tp), _dtype_name(elem), st.kinds.get(name, "intermediate")
        )
    ops: list[Op] = []
    for idx in kept:
        node = g.node[idx]
        ins = [tensors[t] if t else None for t in node.input]
        outs = [tensors[t] for t in node.output if t]
        attrs = attributes_of(node)
        work = classify(
            node.op_type,
            node.domain,
            attrs,
            [_static(t.shape) if t else None for t in ins],
            [_static(t.shape) for t in outs],
            [t.dtype if t else None for t in ins],
            [t.dtype for t in outs],
        )
        moved = 0 if work.is_view else _bytes_moved(node.op_type, ins, outs)
        ops.append(
            Op(
                name=names[idx],
                op_type=node.op_type,
                domain=node.domain,
                inputs=tuple(node.input),
                outputs=tuple(node.output),
                attributes=tuple(sorted((k, _attr_record(v)) for k, v in attrs.items())),
                op_class=work.op_class,
                unit=work.unit,
                is_view=work.is_view,
                cube_flops=work.cube_flops,
                vector_flops=work.vector_flops,
                bytes=moved,
                constant=bool(node.input)
                and all(not t or t in st.compile_time for t in node.input),
            )
        )
    constants = {
        n: st.values[n] for n, t in tensors.items() if t.kind == "constant" and n in st.values
    }
    initial = {t.name for t in g.initializer}
    folded_weights = {
        n: st.values[n]
        for n, t in tensors.items()
        if t.kind == "weight" and n in st.values and n not in initial
    }
    return Graph(
        name=g.name or "graph",
        ops=tuple(ops),
        tensors=tensors,
        inputs=inputs,
        outputs=outputs,
        constants=constants,
        opset=opset,
        folded=folded,
        initializers=InitializerValues(maskable(g), st.base, folded_weights),
    )
