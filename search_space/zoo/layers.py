"""Transformer building blocks written the way torch exporters write them."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto, numpy_helper

from search_space.zoo.builder import FLOAT_MIN, Builder


def linear(b: Builder, x: str, d_in: int, d_out: int, name: str, *, bias: bool = True) -> str:
    """A 3-D `nn.Linear` as exported: MatMul by a [d_in, d_out] weight, then Add(bias, .)."""
    with b.scope(name):
        y = b.op("MatMul", [x, b.weight("weight", [d_in, d_out], std=d_in**-0.5)])
        if bias:
            y = b.op("Add", [b.weight("bias", [d_out]), y])
    return y


def gemm(b: Builder, x: str, d_in: int, d_out: int, name: str, *, out: str | None = None) -> str:
    """A 2-D `nn.Linear` as exported: Gemm with a [d_out, d_in] weight and transB=1."""
    with b.scope(name):
        w = b.weight("weight", [d_out, d_in], std=d_in**-0.5)
        return b.op("Gemm", [x, w, b.weight("bias", [d_out])], out=out, transB=1)


def layer_norm(b: Builder, x: str, dim: int, eps: float, name: str) -> str:
    """`nn.LayerNorm` as the opset-17 LayerNormalization op."""
    with b.scope(name):
        g = b.weight("weight", [dim], init="one")
        return b.op("LayerNormalization", [x, g, b.weight("bias", [dim])], axis=-1, epsilon=eps)


def layer_norm_decomposed(b: Builder, x: str, dim: int, eps: float, name: str) -> str:
    """LayerNorm as pre-opset-17 exporters write it: mean, centre, variance, rsqrt, affine."""
    with b.scope(name):
        g = b.weight("weight", [dim], init="one")
        beta = b.weight("bias", [dim])
        mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Pow", [d, b.const(2.0)])], axes=[-1], keepdims=1)
        std = b.op("Sqrt", [b.op("Add", [var, b.const(eps)])])
        return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), g]), beta])


def rms_norm(b: Builder, x: str, dim: int, eps: float, name: str) -> str:
    """Llama RMSNorm decomposed: x * 1/sqrt(mean(x^2) + eps) * weight."""
    with b.scope(name):
        g = b.weight("weight", [dim], init="one")
        ms = b.op("ReduceMean", [b.op("Pow", [x, b.const(2.0)])], axes=[-1], keepdims=1)
        r = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.const(eps)])])])
        return b.op("Mul", [g, b.op("Mul", [x, r])])


def gelu_erf(b: Builder, x: str) -> str:
    """Exact GELU as exported: x * (1 + erf(x / sqrt 2)) * 0.5."""
    e = b.op("Erf", [b.op("Div", [x, b.const(math.sqrt(2.0))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const(1.0)])]), b.const(0.5)])


def gelu_tanh(b: Builder, x: str) -> str:
    """GPT-2's tanh GELU: 0.5x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""
    half = b.op("Mul", [b.const(0.5), x])
    cube = b.op("Mul", [b.const(0.044715), b.op("Pow", [x, b.const(3.0)])])
    inner = b.op("Mul", [b.const(math.sqrt(2.0 / math.pi)), b.op("Add", [x, cube])])
    return b.op("Mul", [half, b.op("Add", [b.const(1.0), b.op("Tanh", [inner])])])


def split_heads(
    b: Builder, x: str, batch: int, seq: int, heads: int, head_dim: int, *, keys: bool = False
) -> str:
    """[B,S,H*D] -> [B,H,S,D], or [B,H,D,S] for keys already transposed for Q @ K^T."""
    shape = b.const([batch, seq, heads, head_dim], "shape")
    r = b.op("Reshape", [x, shape])
    return b.op("Transpose", [r], perm=[0, 2, 3, 1] if keys else [0, 2, 1, 3])


def merge_heads(b: Builder, x: str, batch: int, seq: int, hidden: int) -> str:
    """[B,H,S,D] -> [B,S,H*D]."""
    t = b.op("Transpose", [x], perm=[0, 2, 1, 3])
    return b.op("Reshape", [t, b.const([batch, seq, hidden], "shape")])


def attention_core(
    b: Builder,
    q: str,
    kt: str,
    v: str,
    head_dim: int,
    *,
    scale: str = "div",
    add_mask: str | None = None,
    where_mask: str | None = None,
) -> str:
    """softmax(Q @ K^T (scaled) (masked)) @ V on [B,H,S,D] operands (K given as [B,H,D,S]).

    Args:
        scale: "div" divides the scores by sqrt(d), "mul" multiplies them by 1/sqrt(d),
            "none" means the caller scaled Q already.
        add_mask: additive mask broadcast to the scores (0 or a very negative value).
        where_mask: boolean mask; False positions get the float32 minimum via Where.
    """
    s = b.op("MatMul", [q, kt])
    if scale == "div":
        s = b.op("Div", [s, b.const(math.sqrt(head_dim))])
    elif scale == "mul":
        s = b.op("Mul", [s, b.const(1.0 / math.sqrt(head_dim))])
    if where_mask is not None:
        s = b.op("Where", [where_mask, s, b.const(FLOAT_MIN)])
    if add_mask is not None:
        s = b.op("Add", [s, add_mask])
    p = b.op("Softmax", [s], axis=-1)
    return b.op("MatMul", [p, v])


def padding_mask(b: Builder, mask: str) -> str:
    """HF extended attention mask: int64 [B,S] 0/1 -> float [B,1,1,S] of 0 / float32 min."""
    with b.scope("extended_mask"):
        m = b.op("Unsqueeze", [mask, b.const([1, 2], "axes")])
        m = b.op("Cast", [m], to=TensorProto.FLOAT)
        m = b.op("Sub", [b.const(1.0), m])
        return b.op("Mul", [m, b.const(FLOAT_MIN)])


def causal_mask(b: Builder, seq: int) -> str:
    """Additive causal mask [S,S] built in-graph: ConstantOfShape(float min) -> Trilu(k=1)."""
    with b.scope("causal_mask"):
        fill = np.array([FLOAT_MIN], dtype=np.float32)
        full = b.op(
            "ConstantOfShape", [b.const([seq, seq], "shape")], value=numpy_helper.from_array(fill)
        )
        return b.op("Trilu", [full, b.const(1, "k")], upper=1)


def sinusoid_table(seq: int, dim: int) -> np.ndarray:
    """Fixed sinusoidal positions of Vaswani et al., [1, seq, dim] float32."""
    pos = np.arange(seq, dtype=np.float64)[:, None]
    inv = np.exp(-math.log(10000.0) * np.arange(0, dim, 2, dtype=np.float64) / dim)
    table = np.zeros((seq, dim))
    table[:, 0::2] = np.sin(pos * inv)
    table[:, 1::2] = np.cos(pos * inv)
    return table[None].astype(np.float32)


def rope_tables(seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin tables [1, 1, seq, head_dim] of rotary embeddings (HF layout, halves repeated)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.arange(seq, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)[None, None]
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def rotary(b: Builder, x: str, head_dim: int, cos: str, sin: str) -> str:
    """x * cos + rotate_half(x) * sin with rotate_half = Concat(-x[..., d/2:], x[..., :d/2])."""
    half = head_dim // 2
    axes = b.const([3], "axes")
    x1 = b.op("Slice", [x, b.const([0], "starts"), b.const([half], "ends"), axes])
    x2 = b.op("Slice", [x, b.const([half], "starts"), b.const([head_dim], "ends"), axes])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rot, sin])])


def repeat_kv(b: Builder, x: str, batch: int, kv: int, rep: int, seq: int, hd: int) -> str:
    """Grouped-query K/V [B,kv,S,D] -> [B,kv*rep,S,D] via Unsqueeze/Expand/Reshape."""
    if rep == 1:
        return x
    u = b.op("Unsqueeze", [x, b.const([2], "axes")])
    e = b.op("Expand", [u, b.const([batch, kv, rep, seq, hd], "shape")])
    return b.op("Reshape", [e, b.const([batch, kv * rep, seq, hd], "shape")])
