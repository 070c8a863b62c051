"""Decoder-only language models: GPT-2 small and a Llama-3-8B layer stack."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from autotune.zoo.builder import BuildArgs, Builder, ModelSpec, scaled, scaled_heads
from autotune.zoo.layers import (
    attention_core,
    causal_mask,
    gelu_tanh,
    layer_norm_decomposed,
    linear,
    merge_heads,
    rms_norm,
    split_heads,
)

INT64 = TensorProto.INT64


# -- GPT-2 small ----------------------------------------------------------------------------
def build_gpt2(args: BuildArgs) -> onnx.ModelProto:
    """GPT-2 small as HF exports it: decomposed LayerNorm, tanh GELU, Where-masked scores."""
    s = args.scale
    layers = args.pick_layers(12)
    heads, hd = scaled_heads(768, 12, s)
    h = heads * hd
    vocab = scaled(50257, s, minimum=16)
    n_pos = scaled(1024, s, multiple=8, minimum=8)
    batch, seq = args.pick_batch(8), args.pick_seq(1024, n_pos)
    eps = 1e-5

    b = Builder(args)
    ids = b.input("input_ids", [batch, seq], INT64, (0, vocab - 1))
    wte = b.weight("wte.weight", [vocab, h])
    x = b.op("Gather", [wte, ids])
    pos_ids = b.const(np.arange(seq, dtype=np.int64)[None], "position_ids")
    x = b.op("Add", [x, b.op("Gather", [b.weight("wpe.weight", [n_pos, h], std=0.01), pos_ids])])
    with b.scope("causal_mask"):
        r = b.op("Range", [b.const(0, "start"), b.const(seq, "limit"), b.const(1, "delta")])
        rows = b.op("Unsqueeze", [r, b.const([1], "axes")])
        cols = b.op("Unsqueeze", [r, b.const([0], "axes")])
        allowed = b.op("LessOrEqual", [cols, rows])
    for i in range(layers):
        with b.scope(f"h.{i}"):
            y = layer_norm_decomposed(b, x, h, eps, "ln_1")
            with b.scope("attn"):
                qkv = linear(b, y, h, 3 * h, "c_attn")
                q, k, v = b.ops("Split", [qkv, b.const([h, h, h], "split")], 3, axis=2)
                q = split_heads(b, q, batch, seq, heads, hd)
                k = split_heads(b, k, batch, seq, heads, hd, keys=True)
                v = split_heads(b, v, batch, seq, heads, hd)
                ctx = attention_core(b, q, k, v, hd, scale="div", where_mask=allowed)
                a = linear(b, merge_heads(b, ctx, batch, seq, h), h, h, "c_proj")
            x = b.op("Add", [x, a])
            y = layer_norm_decomposed(b, x, h, eps, "ln_2")
            with b.scope("mlp"):
                y = gelu_tanh(b, linear(b, y, h, 4 * h, "c_fc"))
                y = linear(b, y, 4 * h, h, "c_proj")
            x = b.op("Add", [x, y])
    x = layer_norm_decomposed(b, x, h, eps, "ln_f")
    with b.scope("lm_head"):
        # Tied to wte: a Gemm with transB reads the [vocab, h] embedding as [h, vocab].
        flat = b.op("Reshape", [x, b.const([batch * seq, h], "shape")])
        logits = b.op("Gemm", [flat, wte], transB=1)
        logits = b.op("Reshape", [logits, b.const([batch, seq, vocab], "shape")])
    b.output(logits, "logits", [batch, seq, vocab])
    extra = {"layers": layers, "batch": batch, "seq_len": seq, "hidden": h, "heads": heads}
    return b.model(family="transformer", doc="GPT-2 small language model", extra=extra)


# -- Llama-3-8B -----------------------------------------------------------------------------
def _rope_tables(seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin tables [1, 1, seq, head_dim] of rotary embeddings (HF layout, halves repeated)."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    freqs = np.outer(np.arange(seq, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)[None, None]
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


def _rotary(b: Builder, x: str, head_dim: int, cos: str, sin: str) -> str:
    """x * cos + rotate_half(x) * sin with rotate_half = Concat(-x[..., d/2:], x[..., :d/2])."""
    half = head_dim // 2
    axes = b.const([3], "axes")
    x1 = b.op("Slice", [x, b.const([0], "starts"), b.const([half], "ends"), axes])
    x2 = b.op("Slice", [x, b.const([half], "starts"), b.const([head_dim], "ends"), axes])
    rot = b.op("Concat", [b.op("Neg", [x2]), x1], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rot, sin])])


def _repeat_kv(b: Builder, x: str, batch: int, kv: int, rep: int, seq: int, hd: int) -> str:
    """Grouped-query K/V [B,kv,S,D] -> [B,kv*rep,S,D] via Unsqueeze/Expand/Reshape."""
    if rep == 1:
        return x
    u = b.op("Unsqueeze", [x, b.const([2], "axes")])
    e = b.op("Expand", [u, b.const([batch, kv, rep, seq, hd], "shape")])
    return b.op("Reshape", [e, b.const([batch, kv * rep, seq, hd], "shape")])


def build_llama(args: BuildArgs) -> onnx.ModelProto:
    """Llama-3-8B: RMSNorm, rotary, grouped-query attention, SwiGLU, untied lm_head."""
    s = args.scale
    layers = args.pick_layers(32)
    heads, hd = scaled_heads(4096, 32, s)
    h = heads * hd
    kv = max(1, round(8 * s))
    while heads % kv:
        kv -= 1
    ffn = scaled(14336, s, multiple=8, minimum=8)
    vocab = scaled(128256, s, minimum=16)
    batch, seq = args.pick_batch(1), args.pick_seq(2048, scaled(8192, s, multiple=8, minimum=8))
    eps = 1e-5

    b = Builder(args)
    ids = b.input("input_ids", [batch, seq], INT64, (0, vocab - 1))
    x = b.op("Gather", [b.weight("embed_tokens.weight", [vocab, h]), ids])
    cos_t, sin_t = _rope_tables(seq, hd, 500000.0)
    cos, sin = b.const(cos_t, "rope.cos"), b.const(sin_t, "rope.sin")
    mask = causal_mask(b, seq)
    for i in range(layers):
        with b.scope(f"layers.{i}"):
            y = rms_norm(b, x, h, eps, "input_layernorm")
            with b.scope("self_attn"):
                q = linear(b, y, h, heads * hd, "q_proj", bias=False)
                k = linear(b, y, h, kv * hd, "k_proj", bias=False)
                v = linear(b, y, h, kv * hd, "v_proj", bias=False)
                q = _rotary(b, split_heads(b, q, batch, seq, heads, hd), hd, cos, sin)
                k = _rotary(b, split_heads(b, k, batch, seq, kv, hd), hd, cos, sin)
                v = split_heads(b, v, batch, seq, kv, hd)
                k = _repeat_kv(b, k, batch, kv, heads // kv, seq, hd)
                v = _repeat_kv(b, v, batch, kv, heads // kv, seq, hd)
                kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
                ctx = attention_core(b, q, kt, v, hd, scale="mul", add_mask=mask)
                a = linear(b, merge_heads(b, ctx, batch, seq, h), h, h, "o_proj", bias=False)
            x = b.op("Add", [x, a])
            y = rms_norm(b, x, h, eps, "post_attention_layernorm")
            with b.scope("mlp"):
                g = linear(b, y, h, ffn, "gate_proj", bias=False)
                g = b.op("Mul", [g, b.op("Sigmoid", [g])])
                u = linear(b, y, h, ffn, "up_proj", bias=False)
                y = linear(b, b.op("Mul", [g, u]), ffn, h, "down_proj", bias=False)
            x = b.op("Add", [x, y])
    x = rms_norm(b, x, h, eps, "norm")
    logits = linear(b, x, h, vocab, "lm_head", bias=False)
    b.output(logits, "logits", [batch, seq, vocab])
    extra = {
        "layers": layers,
        "batch": batch,
        "seq_len": seq,
        "hidden": h,
        "heads": heads,
        "kv_heads": kv,
    }
    return b.model(family="transformer", doc="Llama-3-8B decoder stack", extra=extra)


SPECS = [
    ModelSpec(
        "gpt2",
        "transformer",
        "GPT-2 small: 12 layers, hidden 768, 12 heads, vocab 50257, batch 8 x seq 1024",
        default_batch=8,
        default_layers=12,
        min_layers=1,
        has_seq=True,
        build=build_gpt2,
    ),
    ModelSpec(
        "llama3-8b",
        "transformer",
        "Llama-3-8B decoder stack: 32 layers, hidden 4096, 32 q / 8 kv heads, FFN 14336, "
        "vocab 128256, batch 1 x seq 2048",
        default_batch=1,
        default_layers=32,
        min_layers=1,
        has_seq=True,
        build=build_llama,
    ),
]
