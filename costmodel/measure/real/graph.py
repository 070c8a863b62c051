"""A tiny ONNX graph writer for one-kernel models of real rows, and the row's input dims."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from costmodel.exceptions import MeasurementError
from costmodel.measure.real.rows import RealRow
from search_space import WEIGHT_INPUTS_KEY

__all__ = ["OnnxWriter", "dims_of"]

_ELEM = {
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
}
_NP = {
    "float16": np.float16,
    "bfloat16": np.float32,
    "float32": np.float32,
    "int32": np.int32,
    "int64": np.int64,
}


class OnnxWriter:
    """A tiny graph writer: inputs, weights (as shape-only inputs), constants, nodes."""

    def __init__(self, dtype: str) -> None:
        self.elem = _ELEM.get(dtype, TensorProto.FLOAT)
        self.dtype = dtype
        self.inputs: list[onnx.ValueInfoProto] = []
        self.weights: list[str] = []
        self.consts: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.outputs: list[str] = []

    def input(self, name: str, dims: Sequence[int], elem: int | None = None) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem or self.elem, list(dims)))
        return name

    def weight(self, name: str, dims: Sequence[int]) -> str:
        self.weights.append(name)
        return self.input(name, dims)

    def const(self, name: str, value: float | np.ndarray, elem: int | None = None) -> str:
        arr = np.asarray(value)
        if elem is None and arr.dtype.kind == "f" and self.dtype.startswith("int"):
            arr = arr.astype(_NP[self.dtype])  # an integer op's scalar: its own type
        elif elem is None and arr.dtype.kind == "f":
            if self.elem == TensorProto.BFLOAT16:
                tensor = helper.make_tensor(name, TensorProto.BFLOAT16, arr.shape, arr.ravel())
                self.consts.append(tensor)
                return name
            arr = arr.astype(_NP[self.dtype])
        self.consts.append(numpy_helper.from_array(arr, name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def model(self, outputs: Sequence[str]) -> onnx.ModelProto:
        """The model, its outputs typed by ONNX shape inference."""
        untyped = [onnx.ValueInfoProto(name=o) for o in outputs]
        graph = helper.make_graph(self.nodes, "real_kernel", self.inputs, untyped, self.consts)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        known = {v.name: v for v in inferred.graph.value_info}
        del model.graph.output[:]
        model.graph.output.extend(known.get(o, onnx.ValueInfoProto(name=o)) for o in outputs)
        helper.set_model_props(model, {WEIGHT_INPUTS_KEY: json.dumps(self.weights)})
        return model


def dims_of(row: RealRow, *names: str, count: int | None = None) -> list[tuple[int, ...]]:
    """The dims of the inputs ``names`` (by name, case-insensitive), else of the first
    ``count`` inputs in order."""
    lower = {k.lower(): v for k, v in row.tensors.items()}
    if names and all(n.lower() in lower for n in names):
        return [lower[n.lower()] for n in names]
    values = list(row.tensors.values())
    want = count if count is not None else len(names)
    if len(values) < want:
        raise MeasurementError(
            f"{row.family} needs {want} input shape(s), the row names {len(values)}"
        )
    return values[:want]
