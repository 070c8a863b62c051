"""Attention models whose scores are masked the ways exporters write it: causal masks built
in the graph (ConstantOfShape + Trilu, a comparison of Ranges, a masked_fill) or given as a
literal constant, and masks that are not causal (a sliding window, a random mask, a mask the
caller feeds). Shared by the cost-model and code-generation tests of causal skipping."""

from __future__ import annotations

import numpy as np
import onnx
from conftest import f32, i64, make, vi
from onnx import helper, numpy_helper

__all__ = ["CAUSAL", "NOT_CAUSAL", "attention_model", "grouped_attention", "visible"]

FLOAT_MIN = float(np.finfo(np.float32).min)
CAUSAL = ("trilu", "range", "fill", "literal")
NOT_CAUSAL = ("window", "random", "input", "none")


def visible(sq: int, sk: int, offset: int) -> np.ndarray:
    """The causal pattern: query ``i`` sees key ``j`` iff ``j <= i + offset``."""
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + offset


def attention_model(form: str, sq: int, sk: int, offset: int, heads: int = 2, d: int = 16):
    """softmax(Q K^T / sqrt(d) masked) V on [1, heads, S, d] operands, masked by ``form``
    (causal with ``offset`` for the forms of :data:`CAUSAL`)."""
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], name="tk", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale_mul"),
    ]
    inits = [f32("scale", np.float32(d**-0.5))]
    ins = [vi("q", [1, heads, sq, d]), vi("k", [1, heads, sk, d]), vi("v", [1, heads, sk, d])]
    masked = _mask(form, sq, sk, offset, nodes, inits, ins)
    nodes += [
        helper.make_node("Softmax", [masked], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["y"], name="pv"),
    ]
    return make(nodes, ins, [vi("y", [1, heads, sq, d])], inits)


def _mask(form, sq, sk, offset, nodes, inits, ins) -> str:
    node = helper.make_node
    if form == "none":
        return "ss"
    if form == "trilu":
        fill = numpy_helper.from_array(np.array([FLOAT_MIN], np.float32))
        inits += [i64("shape", [sq, sk]), i64("k1", 1 + offset)]
        nodes += [
            node("ConstantOfShape", ["shape"], ["full"], name="mask_full", value=fill),
            node("Trilu", ["full", "k1"], ["mask"], name="mask_trilu", upper=1),
            node("Add", ["ss", "mask"], ["sm"], name="mask_add"),
        ]
        return "sm"
    if form in ("range", "fill"):
        inits += [
            i64("zero", 0),
            i64("one", 1),
            i64("nq", sq),
            i64("nk", sk),
            i64("off", offset),
            i64("ax0", [0]),
            i64("ax1", [1]),
            f32("low", np.float32(FLOAT_MIN if form == "range" else -np.inf)),
        ]
        nodes += [
            node("Range", ["zero", "nq", "one"], ["rq"], name="range_q"),
            node("Range", ["zero", "nk", "one"], ["rk"], name="range_k"),
            node("Add", ["rq", "off"], ["rq_off"], name="rows_off"),
            node("Unsqueeze", ["rq_off", "ax1"], ["rows"], name="rows"),
            node("Unsqueeze", ["rk", "ax0"], ["cols"], name="cols"),
        ]
        if form == "range":  # allowed = cols <= rows; Where(allowed, s, min)
            nodes += [
                node("LessOrEqual", ["cols", "rows"], ["allowed"], name="allowed"),
                node("Where", ["allowed", "ss", "low"], ["sm"], name="mask_where"),
            ]
        else:  # masked_fill: Where(cols > rows, -inf, s)
            nodes += [
                node("Greater", ["cols", "rows"], ["hidden"], name="hidden"),
                node("Where", ["hidden", "low", "ss"], ["sm"], name="mask_where"),
            ]
        return "sm"
    if form in ("literal", "window", "random"):
        if form == "literal":
            value = np.where(visible(sq, sk, offset), 0.0, -1e9)
        elif form == "window":
            band = visible(sq, sk, offset) & ~visible(sq, sk, offset - 4)
            value = np.where(band, 0.0, -1e9)
        else:
            value = np.where(np.random.default_rng(1).random((sq, sk)) < 0.7, 0.0, -1e9)
            value[:, 0] = 0.0  # every row sees a key
        inits += [f32("mask", value)]
        nodes += [node("Add", ["ss", "mask"], ["sm"], name="mask_add")]
        return "sm"
    if form == "input":
        ins += [vi("mask", [sq, sk])]
        nodes += [node("Add", ["ss", "mask"], ["sm"], name="mask_add")]
        return "sm"
    raise ValueError(form)


def grouped_attention(heads: int, kv_heads: int, sq: int, sk: int) -> onnx.ModelProto:
    """Grouped-query attention as HF exports it (K and V broadcast by Unsqueeze, Expand,
    Reshape), its scores masked causally (bottom-right aligned) by a literal constant."""
    d, rep = 16, heads // kv_heads
    nodes = [
        helper.make_node("Unsqueeze", ["k", "ax2"], ["k5"], name="uk"),
        helper.make_node("Expand", ["k5", "kshape"], ["ke"], name="ek"),
        helper.make_node("Reshape", ["ke", "full"], ["kf"], name="rk"),
        helper.make_node("Unsqueeze", ["v", "ax2"], ["v5"], name="uv"),
        helper.make_node("Expand", ["v5", "kshape"], ["ve"], name="ev"),
        helper.make_node("Reshape", ["ve", "full"], ["vf"], name="rv"),
        helper.make_node("Transpose", ["kf"], ["kt"], name="tk", perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Mul", ["s", "scale"], ["ss"], name="scale_mul"),
        helper.make_node("Add", ["ss", "mask"], ["sm"], name="mask_add"),
        helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "vf"], ["o"], name="pv"),
        helper.make_node("Transpose", ["o"], ["y"], name="out_t", perm=[0, 2, 1, 3]),
    ]
    causal = np.triu(np.full((sq, sk), -1e9, np.float32), k=1 + sk - sq)
    inits = [
        i64("ax2", [2]), i64("kshape", [1, kv_heads, rep, sk, d]),
        i64("full", [1, heads, sk, d]), f32("scale", np.float32(d**-0.5)),
        f32("mask", causal),
    ]  # fmt: skip
    ins = [vi("q", [1, heads, sq, d]), vi("k", [1, kv_heads, sk, d]),
           vi("v", [1, kv_heads, sk, d])]  # fmt: skip
    return make(nodes, ins, [vi("y", [1, sq, heads, d])], inits)
