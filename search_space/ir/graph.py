"""The graph IR: frozen records for tensors, ops and the whole graph (docs/architecture.md).

A :class:`Graph` is what every later stage sees: ops in topological order with their original
ONNX node names, every tensor with a static shape and dtype, compile-time constants folded
away. Build one with :func:`search_space.load_graph`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx
import numpy as np

from search_space.ir.ops import GATHER_OPS, OpClass

__all__ = [
    "Graph",
    "Op",
    "Tensor",
    "TensorKind",
    "empty_tensors",
    "inplace_bytes",
    "is_compile_time",
    "is_inplace_update",
]

Dim = int | str
TensorKind = str  # "input" | "weight" | "constant" | "intermediate"

_ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint64": 8,
    "uint32": 4,
    "uint16": 2,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "string": 8,
}


@dataclass(frozen=True)
class Tensor:
    """A value in the graph: static shape when known, element type, and where it comes from.

    ``shape`` is None when even the rank is unknown; a dim is a string when it is symbolic.
    ``kind`` is ``input`` (a graph input the caller feeds), ``weight`` (an initializer or a
    weight given as a graph input), ``constant`` (a small compile-time value, e.g. a folded
    shape) or ``intermediate`` (produced by an op).
    """

    name: str
    shape: tuple[Dim, ...] | None
    dtype: str
    kind: TensorKind

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) and d >= 0 for d in self.shape)

    @property
    def static_shape(self) -> tuple[int, ...]:
        """The shape as ints (0-element tensors included); raises if not static."""
        if not self.is_static:
            raise ValueError(f"tensor '{self.name}' has no static shape: {self.shape}")
        return tuple(int(d) for d in self.shape or ())

    @property
    def numel(self) -> int:
        return math.prod(self.static_shape) if self.is_static else 0

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 4)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor in memory (0 while its shape is not static)."""
        return self.numel * self.itemsize


@dataclass(frozen=True)
class Op:
    """One operator, named as in the user's model.

    ``inputs`` keeps ONNX positions ("" for an omitted optional input). ``flops`` is cube plus
    vector work (see :mod:`search_space.ir.ops`); ``bytes`` is what the op reads and writes when it
    runs alone (distinct inputs plus outputs; 0 for views). ``constant`` marks an op whose
    inputs are all compile-time values but whose output was too large to fold.
    """

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: tuple[tuple[str, Any], ...]
    op_class: OpClass
    unit: str
    is_view: bool
    cube_flops: int
    vector_flops: int
    bytes: int
    constant: bool = False

    @property
    def flops(self) -> int:
        return self.cube_flops + self.vector_flops

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attributes:
            if key == name:
                return value
        return default


@dataclass(frozen=True)
class Graph:
    """A static, topologically ordered operator graph.

    Attributes:
        name: the model's graph name.
        ops: operators in a topological order (views and opaque ops included).
        tensors: every tensor an op or the graph touches, by name.
        inputs: graph inputs the caller feeds (weights given as inputs included).
        outputs: graph outputs.
        constants: values of small compile-time tensors the ops read (shapes, axes, eps...).
        initializers: the initializers' values by name, each read when first asked for.
        opset: the default-domain opset.
        folded: how many nodes were folded into constants while loading.
    """

    name: str
    ops: tuple[Op, ...]
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)
    opset: int = 17
    folded: int = 0
    # the model's initializers' values, read on demand (a weight's values are never needed to
    # tune it; a compile-time mask's are, to see that it is causal)
    initializers: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)

    # -- lookups ----------------------------------------------------------------------------
    @cached_property
    def _by_name(self) -> dict[str, Op]:
        return {op.name: op for op in self.ops}

    @cached_property
    def _producer(self) -> dict[str, Op]:
        return {t: op for op in self.ops for t in op.outputs if t}

    @cached_property
    def _consumers(self) -> dict[str, tuple[Op, ...]]:
        acc: dict[str, list[Op]] = {}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                if t:
                    acc.setdefault(t, []).append(op)
        return {t: tuple(v) for t, v in acc.items()}

    def op(self, name: str) -> Op:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"no op named '{name}' in graph '{self.name}'") from None

    def has_op(self, name: str) -> bool:
        return name in self._by_name

    def producer(self, tensor: str) -> Op | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> tuple[Op, ...]:
        return self._consumers.get(tensor, ())

    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    # -- totals -----------------------------------------------------------------------------
    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def cube_flops(self) -> int:
        return sum(op.cube_flops for op in self.ops)

    @property
    def vector_flops(self) -> int:
        return sum(op.vector_flops for op in self.ops)

    @cached_property
    def bytes_min(self) -> int:
        """Compulsory bytes, once each: fed activations, weights read, graph outputs.

        A weight that is only ever gathered from (an embedding table) counts the rows gathered,
        at most the whole table; an in-place update (:func:`is_inplace_update`) counts its
        buffer as :func:`inplace_bytes` does.
        """
        names = {t for t in self.inputs if self.tensors[t].kind == "input"} | set(self.outputs)
        total = 0
        for op in self.ops:
            if is_inplace_update(self, op):  # input and output are one buffer
                names -= {op.inputs[0], op.outputs[0]}
                total += inplace_bytes(self, op)
        total += sum(self.tensors[t].nbytes for t in names)
        read = {t for op in self.ops for t in op.inputs if t and self.tensors[t].kind == "weight"}
        for t in read - names:
            users = self.consumers(t)
            if all(op.op_type in GATHER_OPS and t not in op.inputs[1:] for op in users):
                gathered = sum(self.tensors[o].nbytes for op in users for o in op.outputs if o)
                total += min(self.tensors[t].nbytes, gathered)
            else:
                total += self.tensors[t].nbytes
        return total

    @cached_property
    def dynamic_tensors(self) -> tuple[str, ...]:
        """Names of tensors whose shape is still not fully static."""
        return tuple(sorted(n for n, t in self.tensors.items() if not t.is_static))

    def op_type_histogram(self) -> dict[str, int]:
        return dict(Counter(op.op_type for op in self.ops).most_common())

    def op_class_histogram(self) -> dict[str, int]:
        counts = Counter("view" if op.is_view else op.op_class.value for op in self.ops)
        return dict(counts.most_common())

    # -- structure --------------------------------------------------------------------------
    @cached_property
    def nx(self) -> nx.DiGraph:
        """A networkx view: one node per op (by name), an edge per producer->consumer tensor."""
        g = nx.DiGraph()
        for i, op in enumerate(self.ops):
            g.add_node(op.name, index=i, op_type=op.op_type, op_class=op.op_class.value)
        for op in self.ops:
            for t in op.inputs:
                src = self._producer.get(t) if t else None
                if src is not None:
                    if g.has_edge(src.name, op.name):
                        g.edges[src.name, op.name]["tensors"].append(t)
                    else:
                        g.add_edge(src.name, op.name, tensors=[t])
        return g

    def fingerprint(self) -> str:
        """Structural hash: op types, attributes, shapes, dtypes and edges; not weights or names.

        Small constants (at most 16 elements: axes, eps, scales) are part of the structure.
        """
        index = {t: (i, k) for i, op in enumerate(self.ops) for k, t in enumerate(op.outputs)}
        # weights count by kind, not position: weights given as graph inputs (the zoo's
        # weights=inputs) and weights stored as initializers hash alike
        acts = [t for t in self.inputs if self.tensors[t].kind == "input"]
        inputs = {t: i for i, t in enumerate(acts)}
        h = hashlib.sha256()
        for op in self.ops:
            parts = [op.domain, op.op_type, repr(op.attributes)]
            for t in op.inputs:
                if not t:
                    parts.append("-")
                    continue
                ten = self.tensors[t]
                if t in index:
                    src = f"op{index[t]}"
                elif t in inputs:
                    src = f"in{inputs[t]}"
                elif t in self.constants and self.constants[t].size <= 16:
                    src = "c" + repr(self.constants[t].tolist())
                else:
                    src = ten.kind
                parts.append(f"{src}:{ten.shape}:{ten.dtype}")
            parts += [f"{self.tensors[t].shape}:{self.tensors[t].dtype}" for t in op.outputs if t]
            h.update("|".join(parts).encode())
            h.update(b"\n")
        outs = [f"{index.get(t, ('in', inputs.get(t)))}" for t in self.outputs]
        h.update(("outputs:" + ",".join(outs)).encode())
        return h.hexdigest()[:16]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready account of the graph (what ``autotune inspect --json`` prints)."""
        return {
            "graph": self.name,
            "fingerprint": self.fingerprint(),
            "opset": self.opset,
            "ops": len(self.ops),
            "kernels_unfused": sum(1 for op in self.ops if not op.is_view),
            "folded_nodes": self.folded,
            "op_types": self.op_type_histogram(),
            "op_classes": self.op_class_histogram(),
            "flops": self.flops,
            "cube_flops": self.cube_flops,
            "vector_flops": self.vector_flops,
            "bytes_min": self.bytes_min,
            "inputs": {
                t: list(self.tensors[t].shape or ())
                for t in self.inputs
                if self.tensors[t].kind == "input"
            },
            "outputs": {t: list(self.tensors[t].shape or ()) for t in self.outputs},
            "weights": sum(1 for t in self.tensors.values() if t.kind == "weight"),
            "weight_bytes": sum(t.nbytes for t in self.tensors.values() if t.kind == "weight"),
            "tensors": len(self.tensors),
            "dynamic_tensors": list(self.dynamic_tensors),
        }


def is_compile_time(graph: Graph, tensor: str) -> bool:
    """Weights, constants, and outputs of constant-only ops (prepared offline)."""
    ten = graph.tensors[tensor]
    if ten.kind in ("weight", "constant"):
        return True
    op = graph.producer(tensor)
    return op is not None and op.constant


def empty_tensors(graph: Graph) -> list[Tensor]:
    """Inputs and activations with a zero dim: a model with one does no work (a constant's
    zero dim, such as the shape [] of a Reshape to a scalar, is no work left undone)."""
    return [
        t
        for t in graph.tensors.values()
        if t.shape and 0 in t.shape and t.kind in ("input", "intermediate")
    ]


def is_inplace_update(graph: Graph, op: Op) -> bool:
    """Whether ``op`` updates a caller's buffer in place, writing only the rows it changes.

    The aliasing rule (docs/cost-model.md, "Decode kernels"): a ``ScatterND`` without a
    reduction whose ``data`` is a graph input that nothing else reads, and whose output is a
    graph output of the same shape and dtype. That is the buffer a serving engine preallocates
    (a static KV cache) and binds as both the input and the output, so the kernel reads the
    updates and indices and writes the updated rows; the rest of the buffer is not touched.
    """
    if op.op_type != "ScatterND" or len(op.inputs) < 3 or not op.outputs:
        return False
    data, out = op.inputs[0], op.outputs[0]
    if op.attr("reduction", "none") != "none" or data not in graph.inputs:
        return False
    src, dst = graph.tensors[data], graph.tensors.get(out)
    return (
        dst is not None
        and out in graph.outputs
        and src.kind == "input"
        and len(graph.consumers(data)) == 1
        and (src.shape, src.dtype) == (dst.shape, dst.dtype)
    )


def inplace_bytes(graph: Graph, op: Op) -> int:
    """Compulsory bytes of an in-place update's buffer: the rows it writes, and the whole
    buffer once more where an op of the graph reads the result (a decode step's attention)."""
    out = graph.tensors[op.outputs[0]]
    rows = graph.tensors[op.inputs[2]].numel * out.itemsize
    return rows + (out.nbytes if graph.consumers(out.name) else 0)
