"""Run an extracted group in numpy as the fused kernel would, or op by op as unfused kernels.

Fused: cube ops round their operands and accumulate in fp32 (L0C); FixPipe epilogues (bias,
per-channel scale, ReLU family, casts right after a cube op) work on the fp32 accumulator;
every other vector op computes in the vector format, row statistics (reduction outputs and
what is computed from them alone) in the statistics format; nothing is rounded to the memory
format until the kernel writes its outputs. Fused attention runs the online softmax.
Unfused: the same ops, each its own kernel: every output is rounded to the memory format.

An op without a numpy kernel runs in onnx's float64 reference evaluator on inputs rounded to
the working format, and its outputs are rounded back (logged at debug level).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from autotune.verify import cube, reduce  # noqa: F401  (register their kernels)
from autotune.verify.cube import flash_attention
from autotune.verify.extract import Subgraph
from autotune.verify.numerics import Numerics, f64, is_float, rnd
from autotune.verify.ops import KERNELS, OpCall
from search_space.onnx import attributes_of

__all__ = ["emulate", "kernel_roles"]

log = logging.getLogger(__name__)

LAYOUT = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Dropout",
        "Transpose",
        "Expand",
        "Slice",
        "Concat",
        "Split",
        "Gather",
    }
)
STAT_OPS = frozenset(
    {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceSumSquare", "GlobalAveragePool"}
)
CUBE_OPS = frozenset({"MatMul", "Gemm", "Conv"})
FIXPIPE = frozenset({"Add", "Sub", "Mul", "Relu", "LeakyRelu", "Clip", "PRelu", "Cast"})
FIXPIPE |= {"BatchNormalization"}
ACTIVATIONS = frozenset({"Relu", "LeakyRelu", "Clip", "PRelu"})


@dataclass(frozen=True)
class Flash:
    """Where a fused attention's online softmax replaces Softmax -> (guards) -> PV."""

    softmax: int
    guards: tuple[int, ...]
    pv: int
    skip: frozenset[int]


@dataclass(frozen=True)
class Roles:
    """Per node: ``cube``, ``fix`` (FixPipe), ``stat``, ``vec`` or ``layout``."""

    role: tuple[str, ...]
    flash: Flash | None


def _consumers(sub: Subgraph) -> dict[str, list[int]]:
    users: dict[str, list[int]] = {}
    for i, node in enumerate(sub.nodes):
        for t in dict.fromkeys(node.input):
            if t:
                users.setdefault(t, []).append(i)
    return users


def _channels(sub: Subgraph, i: int) -> int:
    node = sub.nodes[i]
    shape = sub.shapes.get(node.output[0], ())
    if node.op_type == "Conv":
        return shape[1] if len(shape) > 1 else 0
    return shape[-1] if shape else 0


def _fixpipe(sub: Subgraph, users: dict[str, list[int]], anchor: int, role: list[str]) -> None:
    """Mark the per-channel chain right after a cube op (bias, scale, ReLU family)."""
    n = _channels(sub, anchor)
    data = sub.nodes[anchor].output[0]
    activated = False
    while True:
        nxt = users.get(data, [])
        if len(nxt) != 1 or data in sub.outputs:
            return
        j = nxt[0]
        node = sub.nodes[j]
        if node.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
            data = node.output[0]
            continue
        others = [t for t in node.input[1:] if t] if node.input[0] == data else node.input[:1]
        per_channel = all(
            t in sub.consts and sub.consts[t].size in (*range(17), n) for t in others
        )
        if node.op_type not in FIXPIPE or not per_channel or role[j] != "vec":
            return
        if activated and node.op_type in ("Add", "Sub", "Mul", "BatchNormalization"):
            return
        role[j] = "fix"
        activated |= node.op_type in ACTIVATIONS
        data = node.output[0]


def _flash(sub: Subgraph, users: dict[str, list[int]], role: list[str]) -> Flash | None:
    cubes = [i for i, r in enumerate(role) if r == "cube" and sub.nodes[i].op_type == "MatMul"]
    soft = [i for i, nd in enumerate(sub.nodes) if nd.op_type == "Softmax"]
    if len(cubes) < 2 or len(soft) != 1 or not cubes[0] < soft[0] < cubes[-1]:
        return None
    s, pv = soft[0], cubes[-1]
    rank = len(sub.shapes.get(sub.nodes[s].input[0], ()))
    axis = attributes_of(sub.nodes[s]).get("axis", -1 if sub.opset >= 13 else 1)
    if rank == 0 or axis % rank != rank - 1:
        return None  # online softmax walks the key axis, which must be the last
    producer = {t: i for i, nd in enumerate(sub.nodes) for t in nd.output if t}
    guards: set[int] = set()
    reached = False
    frontier = [sub.nodes[pv].input[0]]
    while frontier:  # walk back from PV's probabilities to the softmax
        t = frontier.pop()
        i = producer.get(t, -1)
        reached |= i == s
        if i == s or i < 0:  # the softmax, or a constant/outside input of a guard
            continue
        if i < s or sub.nodes[i].op_type in LAYOUT or role[i] == "cube":
            return None
        guards.add(i)
        frontier.extend(x for x in sub.nodes[i].input if x)
    if not reached:
        return None
    chain = {s, *guards}
    skip = {
        i
        for i in chain
        if all(
            t not in sub.outputs and all(u in chain or u == pv for u in users.get(t, []))
            for t in sub.nodes[i].output
        )
    }
    return Flash(s, tuple(sorted(guards)), pv, frozenset(skip))


def kernel_roles(sub: Subgraph, fused: bool) -> Roles:
    """How each node of ``sub`` computes under fused or unfused execution."""
    role: list[str] = []
    stat_tensors: set[str] = set()
    for i, node in enumerate(sub.nodes):
        op = node.op_type
        if op in CUBE_OPS and sub.units[i] == "cube":
            r = "cube"
        elif op in LAYOUT:
            r = "layout"
            if node.input and node.input[0] in stat_tensors:
                stat_tensors.update(node.output)
        elif op in STAT_OPS:
            r = "stat"
        else:
            live = [t for t in node.input if t and t not in sub.consts]
            r = "stat" if fused and live and all(t in stat_tensors for t in live) else "vec"
        if r == "stat":
            stat_tensors.update(node.output)
        role.append(r)
    flash = None
    if fused:
        users = _consumers(sub)
        for i, r in enumerate(list(role)):
            if r == "cube":
                _fixpipe(sub, users, i, role)
        if sub.template == "attention":
            flash = _flash(sub, users, role)
    return Roles(tuple(role), flash)


def _reference_op(call: OpCall, ins: list[Any], imports: Any) -> list[np.ndarray]:
    """An op without a numpy kernel: float64 reference on inputs rounded to the format."""
    from onnx.reference import ReferenceEvaluator

    from autotune.verify.reference import REFERENCE_OPS

    log.debug(
        "no numpy kernel for %s; float64 reference on %s inputs", call.node.op_type, call.fmt
    )
    feeds = {
        f"i{k}": (call.f(x, k) if is_float(np.asarray(x)) else np.asarray(x))
        for k, x in enumerate(ins)
        if x is not None
    }
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(ins)]
    node = helper.make_node(
        call.node.op_type,
        names,
        [f"o{k}" for k in range(len(call.node.output))],
        domain=call.node.domain,
    )
    node.attribute.extend(call.node.attribute)
    graph = helper.make_graph(
        [node],
        "op",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output],
    )
    model = helper.make_model(graph, opset_imports=list(imports))
    outs = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, feeds)
    return [call.out(o) if is_float(np.asarray(o)) else np.asarray(o) for o in outs]


def _guard(
    sub: Subgraph, flash: Flash, env: Mapping[str, Any], calls: dict[int, OpCall]
) -> Callable[[np.ndarray, int, int], np.ndarray]:
    """Apply the ops between Softmax and PV (an IsNaN/Where guard) to one key block."""
    soft_out = sub.nodes[flash.softmax].output[0]
    t = np.asarray(env[sub.nodes[flash.softmax].input[0]]).shape[-1]

    def apply(p: np.ndarray, lo: int, hi: int) -> np.ndarray:
        local: dict[str, Any] = {soft_out: p}
        for i in flash.guards:
            ins = []
            for name in sub.nodes[i].input:
                v = local.get(name, env.get(name)) if name else None
                if name not in local and v is not None and np.ndim(v) and np.shape(v)[-1] == t:
                    v = np.asarray(v)[..., lo:hi]
                ins.append(v)
            local.update(zip(sub.nodes[i].output, _run(calls[i], ins, sub), strict=False))
        return f64(local[sub.nodes[flash.pv].input[0]])

    return apply


def _run(call: OpCall, ins: list[Any], sub: Subgraph) -> list[np.ndarray]:
    fn = KERNELS.get(call.node.op_type) if call.node.domain in ("", "ai.onnx") else None
    if fn is not None:
        try:
            return fn(call, ins)
        except NotImplementedError:
            pass
    return _reference_op(call, ins, sub.opset_imports)


def emulate(
    sub: Subgraph,
    num: Numerics,
    *,
    fused: bool,
    split_k: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Outputs of ``sub`` as the fused kernel (or the unfused kernels) would compute them.

    Args:
        sub: the extracted group with its inputs.
        num: formats and tiles (the kernel's config; unfused: the default configs).
        fused: one kernel (on-chip intermediates) or one kernel per op (memory in between).
        split_k: per cube op (graph name), its own K chunk (unfused kernels have their own
            configs); others use ``num.base_k``.

    Returns:
        Every group output, in the memory format.
    """
    roles = kernel_roles(sub, fused)
    fmt_of = {"cube": num.acc, "fix": num.acc, "stat": num.stat, "vec": num.vec}
    env: dict[str, Any] = {**sub.consts, **sub.feeds}
    calls: dict[int, OpCall] = {}
    for i, node in enumerate(sub.nodes):
        calls[i] = OpCall(
            node=node,
            attrs=attributes_of(node),
            fmt=fmt_of.get(roles.role[i], num.vec),
            num=num,
            opset=sub.opset,
            unit=sub.units[i],
            const_inputs=tuple(t in sub.consts for t in node.input),
            base_k=(split_k or {}).get(sub.group.ops[i], num.base_k),
        )
    flash = roles.flash
    for i, node in enumerate(sub.nodes):
        if flash is not None and i in flash.skip:
            continue
        if flash is not None and i == flash.pv:
            scores = env[sub.nodes[flash.softmax].input[0]]
            guard = _guard(sub, flash, env, calls) if flash.guards else None
            v = np.asarray(env[node.input[1]])
            outs = [flash_attention(scores, v, num, num.kv_tile, guard)]
        else:
            outs = _run(calls[i], [env[t] if t else None for t in node.input], sub)
        if not fused and roles.role[i] != "layout":
            outs = [rnd(o, num.mem) if is_float(np.asarray(o)) else o for o in outs]
        env.update((t, o) for t, o in zip(node.output, outs, strict=False) if t)
    return {
        t: rnd(env[t], num.mem) if is_float(np.asarray(env[t])) else np.asarray(env[t])
        for t in sub.outputs
    }
