"""Decoder-only language models: GPT-2 small and a Llama-3-8B layer stack.

The dimensions, embeddings, layers and heads are shared with the decode-step models of
:mod:`search_space.zoo.decode`: a layer takes an optional KV-cache hook, so both build the same
weights in the same order (the same seed gives the same weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from search_space.zoo.builder import BuildArgs, Builder, ModelSpec, scaled, scaled_heads
from search_space.zoo.layers import (
    attention_core,
    causal_mask,
    gelu_tanh,
    layer_norm_decomposed,
    linear,
    merge_heads,
    repeat_kv,
    rms_norm,
    rope_tables,
    rotary,
    split_heads,
)

INT64 = TensorProto.INT64
EPS = 1e-5
ROPE_THETA = 500000.0

# A layer's KV cache: takes the new K and V rows [B, kv_heads, S, D] and returns the K and V
# attention reads ([B, kv_heads, T, D]) and their length T.
KvCache = Callable[[str, str], tuple[str, str, int]]


@dataclass(frozen=True)
class DecoderDims:
    """Sizes of a decoder-only model at a scale (`kv_heads == heads` without GQA)."""

    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    n_pos: int  # positions the model handles (GPT-2's learned table; Llama's context)
    default_seq: int

    @property
    def hidden(self) -> int:
        return self.heads * self.head_dim

    def extra(self, batch: int, **sizes: int | str) -> dict[str, int | str]:
        """The zoo metadata of a decoder model: layers, batch, `sizes`, hidden, heads."""
        return {
            "layers": self.layers,
            "batch": batch,
            **sizes,
            "hidden": self.hidden,
            "heads": self.heads,
        }


# -- GPT-2 small ----------------------------------------------------------------------------
def gpt2_dims(args: BuildArgs) -> DecoderDims:
    s = args.scale
    heads, hd = scaled_heads(768, 12, s)
    n_pos = scaled(1024, s, multiple=8, minimum=8)
    vocab = scaled(50257, s, minimum=16)
    return DecoderDims(args.pick_layers(12), heads, heads, hd, 4 * heads * hd, vocab, n_pos, 1024)


def gpt2_embed(b: Builder, ids: str, d: DecoderDims, positions: np.ndarray) -> tuple[str, str]:
    """Token plus learned position embeddings; returns (hidden states, the tied wte weight)."""
    wte = b.weight("wte.weight", [d.vocab, d.hidden])
    x = b.op("Gather", [wte, ids])
    pos_ids = b.const(positions.astype(np.int64)[None], "position_ids")
    wpe = b.weight("wpe.weight", [d.n_pos, d.hidden], std=0.01)
    return b.op("Add", [x, b.op("Gather", [wpe, pos_ids])]), wte


def gpt2_layer(
    b: Builder,
    x: str,
    d: DecoderDims,
    batch: int,
    seq: int,
    *,
    where_mask: str | None = None,
    cache: KvCache | None = None,
) -> str:
    """One GPT-2 block on [B, seq, h]; with `cache`, attention reads the cached K/V."""
    h, heads, hd = d.hidden, d.heads, d.head_dim
    y = layer_norm_decomposed(b, x, h, EPS, "ln_1")
    with b.scope("attn"):
        qkv = linear(b, y, h, 3 * h, "c_attn")
        q, k, v = b.ops("Split", [qkv, b.const([h, h, h], "split")], 3, axis=2)
        q = split_heads(b, q, batch, seq, heads, hd)
        if cache is None:
            kt = split_heads(b, k, batch, seq, heads, hd, keys=True)
            v = split_heads(b, v, batch, seq, heads, hd)
        else:  # the cache holds K as [B,H,T,D] (HF's layout), transposed for Q @ K^T
            k, v, _ = cache(
                split_heads(b, k, batch, seq, heads, hd), split_heads(b, v, batch, seq, heads, hd)
            )
            kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        ctx = attention_core(b, q, kt, v, hd, scale="div", where_mask=where_mask)
        a = linear(b, merge_heads(b, ctx, batch, seq, h), h, h, "c_proj")
    x = b.op("Add", [x, a])
    y = layer_norm_decomposed(b, x, h, EPS, "ln_2")
    with b.scope("mlp"):
        y = gelu_tanh(b, linear(b, y, h, d.ffn, "c_fc"))
        y = linear(b, y, d.ffn, h, "c_proj")
    return b.op("Add", [x, y])


def gpt2_head(b: Builder, x: str, wte: str, d: DecoderDims, batch: int, seq: int) -> str:
    """Final LayerNorm and the lm_head tied to wte; logits [B, seq, vocab]."""
    x = layer_norm_decomposed(b, x, d.hidden, EPS, "ln_f")
    with b.scope("lm_head"):
        # Tied to wte: a Gemm with transB reads the [vocab, h] embedding as [h, vocab].
        flat = b.op("Reshape", [x, b.const([batch * seq, d.hidden], "shape")])
        logits = b.op("Gemm", [flat, wte], transB=1)
        return b.op("Reshape", [logits, b.const([batch, seq, d.vocab], "shape")])


def build_gpt2(args: BuildArgs) -> onnx.ModelProto:
    """GPT-2 small as HF exports it: decomposed LayerNorm, tanh GELU, Where-masked scores."""
    d = gpt2_dims(args)
    batch, seq = args.pick_batch(8), args.pick_seq(d.default_seq, d.n_pos)

    b = Builder(args)
    ids = b.input("input_ids", [batch, seq], INT64, (0, d.vocab - 1))
    x, wte = gpt2_embed(b, ids, d, np.arange(seq))
    with b.scope("causal_mask"):
        r = b.op("Range", [b.const(0, "start"), b.const(seq, "limit"), b.const(1, "delta")])
        rows = b.op("Unsqueeze", [r, b.const([1], "axes")])
        cols = b.op("Unsqueeze", [r, b.const([0], "axes")])
        allowed = b.op("LessOrEqual", [cols, rows])
    for i in range(d.layers):
        with b.scope(f"h.{i}"):
            x = gpt2_layer(b, x, d, batch, seq, where_mask=allowed)
    logits = gpt2_head(b, x, wte, d, batch, seq)
    b.output(logits, "logits", [batch, seq, d.vocab])
    return b.model(
        family="transformer", doc="GPT-2 small language model", extra=d.extra(batch, seq_len=seq)
    )


# -- Llama-3-8B -----------------------------------------------------------------------------
def llama_dims(args: BuildArgs) -> DecoderDims:
    s = args.scale
    heads, hd = scaled_heads(4096, 32, s)
    kv = max(1, round(8 * s))
    while heads % kv:
        kv -= 1
    ffn = scaled(14336, s, multiple=8, minimum=8)
    vocab = scaled(128256, s, minimum=16)
    n_pos = scaled(8192, s, multiple=8, minimum=8)
    return DecoderDims(args.pick_layers(32), heads, kv, hd, ffn, vocab, n_pos, 2048)


def llama_layer(
    b: Builder,
    x: str,
    d: DecoderDims,
    batch: int,
    seq: int,
    rope: tuple[str, str],
    *,
    add_mask: str | None = None,
    cache: KvCache | None = None,
) -> str:
    """One Llama block on [B, seq, h] (rotary `rope` = (cos, sin) of the seq positions); with
    `cache`, attention reads the cached K/V (rotated K, kv_heads wide, as HF caches them)."""
    h, heads, kv, hd = d.hidden, d.heads, d.kv_heads, d.head_dim
    cos, sin = rope
    y = rms_norm(b, x, h, EPS, "input_layernorm")
    with b.scope("self_attn"):
        q = linear(b, y, h, heads * hd, "q_proj", bias=False)
        k = linear(b, y, h, kv * hd, "k_proj", bias=False)
        v = linear(b, y, h, kv * hd, "v_proj", bias=False)
        q = rotary(b, split_heads(b, q, batch, seq, heads, hd), hd, cos, sin)
        k = rotary(b, split_heads(b, k, batch, seq, kv, hd), hd, cos, sin)
        v = split_heads(b, v, batch, seq, kv, hd)
        length = seq
        if cache is not None:
            k, v, length = cache(k, v)
        k = repeat_kv(b, k, batch, kv, heads // kv, length, hd)
        v = repeat_kv(b, v, batch, kv, heads // kv, length, hd)
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        ctx = attention_core(b, q, kt, v, hd, scale="mul", add_mask=add_mask)
        a = linear(b, merge_heads(b, ctx, batch, seq, h), h, h, "o_proj", bias=False)
    x = b.op("Add", [x, a])
    y = rms_norm(b, x, h, EPS, "post_attention_layernorm")
    with b.scope("mlp"):
        g = linear(b, y, h, d.ffn, "gate_proj", bias=False)
        g = b.op("Mul", [g, b.op("Sigmoid", [g])])
        u = linear(b, y, h, d.ffn, "up_proj", bias=False)
        y = linear(b, b.op("Mul", [g, u]), d.ffn, h, "down_proj", bias=False)
    return b.op("Add", [x, y])


def llama_head(b: Builder, x: str, d: DecoderDims) -> str:
    """Final RMSNorm and the untied lm_head."""
    x = rms_norm(b, x, d.hidden, EPS, "norm")
    return linear(b, x, d.hidden, d.vocab, "lm_head", bias=False)


def llama_rope(b: Builder, d: DecoderDims, first: int, count: int) -> tuple[str, str]:
    """Rotary cos/sin constants [1, 1, count, head_dim] of positions first .. first+count-1."""
    cos_t, sin_t = rope_tables(first + count, d.head_dim, ROPE_THETA)
    return b.const(cos_t[:, :, first:], "rope.cos"), b.const(sin_t[:, :, first:], "rope.sin")


def build_llama(args: BuildArgs) -> onnx.ModelProto:
    """Llama-3-8B: RMSNorm, rotary, grouped-query attention, SwiGLU, untied lm_head."""
    d = llama_dims(args)
    batch, seq = args.pick_batch(1), args.pick_seq(d.default_seq, d.n_pos)

    b = Builder(args)
    ids = b.input("input_ids", [batch, seq], INT64, (0, d.vocab - 1))
    x = b.op("Gather", [b.weight("embed_tokens.weight", [d.vocab, d.hidden]), ids])
    rope = llama_rope(b, d, 0, seq)
    mask = causal_mask(b, seq)
    for i in range(d.layers):
        with b.scope(f"layers.{i}"):
            x = llama_layer(b, x, d, batch, seq, rope, add_mask=mask)
    logits = llama_head(b, x, d)
    b.output(logits, "logits", [batch, seq, d.vocab])
    extra = {**d.extra(batch, seq_len=seq), "kv_heads": d.kv_heads}
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
