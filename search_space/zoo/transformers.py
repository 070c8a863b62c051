"""Encoder and encoder-decoder transformers: BERT-base, Transformer-base, ViT-B/16."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from search_space.zoo.builder import BuildArgs, Builder, ModelSpec, scaled, scaled_heads
from search_space.zoo.layers import (
    attention_core,
    causal_mask,
    gelu_erf,
    gemm,
    layer_norm,
    linear,
    merge_heads,
    padding_mask,
    sinusoid_table,
    split_heads,
)

INT64 = TensorProto.INT64


def _qkv_attention(
    b: Builder,
    x: str,
    batch: int,
    seq: int,
    heads: int,
    head_dim: int,
    names: tuple[str, str, str],
    mask: str | None,
) -> str:
    """Self-attention as HF encoders export it: scores divided by sqrt(d), additive mask."""
    h = heads * head_dim
    q = split_heads(b, linear(b, x, h, h, names[0]), batch, seq, heads, head_dim)
    k = split_heads(b, linear(b, x, h, h, names[1]), batch, seq, heads, head_dim, keys=True)
    v = split_heads(b, linear(b, x, h, h, names[2]), batch, seq, heads, head_dim)
    ctx = attention_core(b, q, k, v, head_dim, scale="div", add_mask=mask)
    return merge_heads(b, ctx, batch, seq, h)


# -- BERT-base ------------------------------------------------------------------------------
def build_bert(args: BuildArgs) -> onnx.ModelProto:
    """BERT-base (uncased) encoder with pooler, post-LN, Erf GELU, HF export structure."""
    s = args.scale
    layers = args.pick_layers(12)
    heads, hd = scaled_heads(768, 12, s)
    hidden = heads * hd
    ffn = scaled(3072, s, multiple=8, minimum=8)
    vocab = scaled(30522, s, minimum=16)
    max_pos = scaled(512, s, multiple=8, minimum=8)
    batch, seq = args.pick_batch(32), args.pick_seq(128, max_pos)
    eps = 1e-12

    b = Builder(args)
    ids = b.input("input_ids", [batch, seq], INT64, (0, vocab - 1))
    am = b.input("attention_mask", [batch, seq], INT64, (0, 1))
    with b.scope("embeddings"):
        x = b.op("Gather", [b.weight("word_embeddings.weight", [vocab, hidden]), ids])
        tt_ids = b.const(np.zeros((1, seq), np.int64), "token_type_ids")
        tt = b.op("Gather", [b.weight("token_type_embeddings.weight", [2, hidden]), tt_ids])
        x = b.op("Add", [x, tt])
        pos_ids = b.const(np.arange(seq, dtype=np.int64)[None], "position_ids")
        pos = b.op("Gather", [b.weight("position_embeddings.weight", [max_pos, hidden]), pos_ids])
        x = layer_norm(b, b.op("Add", [x, pos]), hidden, eps, "LayerNorm")
    mask = padding_mask(b, am)
    for i in range(layers):
        with b.scope("encoder", f"layer.{i}"):
            with b.scope("attention", "self"):
                ctx = _qkv_attention(b, x, batch, seq, heads, hd, ("query", "key", "value"), mask)
            with b.scope("attention", "output"):
                y = linear(b, ctx, hidden, hidden, "dense")
                x = layer_norm(b, b.op("Add", [y, x]), hidden, eps, "LayerNorm")
            with b.scope("intermediate"):
                y = gelu_erf(b, linear(b, x, hidden, ffn, "dense"))
            with b.scope("output"):
                y = linear(b, y, ffn, hidden, "dense")
                x = layer_norm(b, b.op("Add", [y, x]), hidden, eps, "LayerNorm")
    x = b.output(x, "last_hidden_state", [batch, seq, hidden])
    with b.scope("pooler"):
        cls = b.op("Gather", [x, b.const(0, "cls_index")], axis=1)
        pooled = b.op("Tanh", [gemm(b, cls, hidden, hidden, "dense")])
    b.output(pooled, "pooler_output", [batch, hidden])
    extra = {"layers": layers, "batch": batch, "seq_len": seq, "hidden": hidden, "heads": heads}
    return b.model(family="transformer", doc="BERT-base encoder with pooler", extra=extra)


# -- Transformer-base (Vaswani et al. 2017) -------------------------------------------------
def _mha(
    b: Builder,
    xq: str,
    xkv: str,
    batch: int,
    sq: int,
    skv: int,
    heads: int,
    hd: int,
    mask: str,
) -> str:
    """fairseq MultiheadAttention: Q scaled by 1/sqrt(d) after its projection."""
    d = heads * hd
    q = b.op("Mul", [linear(b, xq, d, d, "q_proj"), b.const(1.0 / math.sqrt(hd))])
    q = split_heads(b, q, batch, sq, heads, hd)
    k = split_heads(b, linear(b, xkv, d, d, "k_proj"), batch, skv, heads, hd, keys=True)
    v = split_heads(b, linear(b, xkv, d, d, "v_proj"), batch, skv, heads, hd)
    ctx = merge_heads(b, attention_core(b, q, k, v, hd, scale="none", add_mask=mask), batch, sq, d)
    return linear(b, ctx, d, d, "out_proj")


def _ffn(b: Builder, x: str, d: int, ffn: int) -> str:
    return linear(b, b.op("Relu", [linear(b, x, d, ffn, "fc1")]), ffn, d, "fc2")


def build_transformer_base(args: BuildArgs) -> onnx.ModelProto:
    """Transformer-base encoder-decoder: post-LN, ReLU FFN, tied embeddings and projection."""
    s = args.scale
    layers = args.pick_layers(6)
    heads, hd = scaled_heads(512, 8, s)
    d = heads * hd
    ffn = scaled(2048, s, multiple=8, minimum=8)
    vocab = scaled(32000, s, minimum=16)
    batch = args.pick_batch(32)
    seq = args.pick_seq(128, scaled(1024, s, multiple=8, minimum=8))
    eps = 1e-5

    b = Builder(args)
    src = b.input("src_ids", [batch, seq], INT64, (0, vocab - 1))
    src_mask = b.input("src_mask", [batch, seq], INT64, (0, 1))
    tgt = b.input("tgt_ids", [batch, seq], INT64, (0, vocab - 1))
    emb = b.weight("embed_tokens.weight", [vocab, d], std=d**-0.5)
    positions = b.const(sinusoid_table(seq, d), "positions")

    def embed(ids: str) -> str:
        x = b.op("Mul", [b.op("Gather", [emb, ids]), b.const(math.sqrt(d))])
        return b.op("Add", [x, positions])

    enc_mask = padding_mask(b, src_mask)
    causal = causal_mask(b, seq)
    with b.scope("encoder"):
        x = embed(src)
    for i in range(layers):
        with b.scope("encoder", f"layers.{i}"):
            with b.scope("self_attn"):
                a = _mha(b, x, x, batch, seq, seq, heads, hd, enc_mask)
            x = layer_norm(b, b.op("Add", [x, a]), d, eps, "self_attn_layer_norm")
            x = layer_norm(b, b.op("Add", [x, _ffn(b, x, d, ffn)]), d, eps, "final_layer_norm")
    memory = x
    with b.scope("decoder"):
        y = embed(tgt)
    for i in range(layers):
        with b.scope("decoder", f"layers.{i}"):
            with b.scope("self_attn"):
                a = _mha(b, y, y, batch, seq, seq, heads, hd, causal)
            y = layer_norm(b, b.op("Add", [y, a]), d, eps, "self_attn_layer_norm")
            with b.scope("encoder_attn"):
                a = _mha(b, y, memory, batch, seq, seq, heads, hd, enc_mask)
            y = layer_norm(b, b.op("Add", [y, a]), d, eps, "encoder_attn_layer_norm")
            y = layer_norm(b, b.op("Add", [y, _ffn(b, y, d, ffn)]), d, eps, "final_layer_norm")
    with b.scope("output_projection"):
        flat = b.op("Reshape", [y, b.const([batch * seq, d], "shape")])
        logits = b.op("Gemm", [flat, emb], transB=1)
        logits = b.op("Reshape", [logits, b.const([batch, seq, vocab], "shape")])
    b.output(logits, "logits", [batch, seq, vocab])
    extra = {"layers": layers, "batch": batch, "seq_len": seq, "hidden": d, "heads": heads}
    doc = "Transformer-base encoder-decoder (6+6 layers at scale 1)"
    return b.model(family="transformer", doc=doc, extra=extra)


# -- ViT-B/16 -------------------------------------------------------------------------------
def build_vit(args: BuildArgs) -> onnx.ModelProto:
    """ViT-B/16 classifier: patch Conv, CLS token, pre-LN encoder, Erf GELU, HF structure."""
    s = args.scale
    layers = args.pick_layers(12)
    heads, hd = scaled_heads(768, 12, s)
    h = heads * hd
    ffn = scaled(3072, s, multiple=8, minimum=8)
    classes = scaled(1000, s, minimum=10)
    img = scaled(224, s, multiple=16, minimum=32)
    batch = args.pick_batch(32)
    grid = img // 16
    tokens = grid * grid + 1
    eps = 1e-12

    b = Builder(args)
    px = b.input("pixel_values", [batch, 3, img, img])
    with b.scope("embeddings"):
        with b.scope("patch_embeddings", "projection"):
            w = b.weight("weight", [h, 3, 16, 16], std=(3 * 16 * 16) ** -0.5)
            p = b.op(
                "Conv", [px, w, b.weight("bias", [h])], kernel_shape=[16, 16], strides=[16, 16]
            )
        p = b.op("Reshape", [p, b.const([batch, h, grid * grid], "shape")])
        p = b.op("Transpose", [p], perm=[0, 2, 1])
        cls = b.op("Expand", [b.weight("cls_token", [1, 1, h]), b.const([batch, 1, h], "shape")])
        x = b.op("Concat", [cls, p], axis=1)
        x = b.op("Add", [x, b.weight("position_embeddings", [1, tokens, h])])
    for i in range(layers):
        with b.scope("encoder", f"layer.{i}"):
            y = layer_norm(b, x, h, eps, "layernorm_before")
            with b.scope("attention", "attention"):
                ctx = _qkv_attention(
                    b, y, batch, tokens, heads, hd, ("query", "key", "value"), None
                )
            with b.scope("attention", "output"):
                x = b.op("Add", [linear(b, ctx, h, h, "dense"), x])
            y = layer_norm(b, x, h, eps, "layernorm_after")
            with b.scope("intermediate"):
                y = gelu_erf(b, linear(b, y, h, ffn, "dense"))
            with b.scope("output"):
                x = b.op("Add", [linear(b, y, ffn, h, "dense"), x])
    x = layer_norm(b, x, h, eps, "layernorm")
    cls_out = b.op("Gather", [x, b.const(0, "cls_index")], axis=1)
    logits = gemm(b, cls_out, h, classes, "classifier")
    b.output(logits, "logits", [batch, classes])
    extra = {"layers": layers, "batch": batch, "image": img, "hidden": h, "heads": heads}
    return b.model(family="transformer", doc="ViT-B/16 image classifier", extra=extra)


SPECS = [
    ModelSpec(
        "bert-base",
        "transformer",
        "BERT-base encoder + pooler: 12 layers, hidden 768, 12 heads, FFN 3072, seq 128",
        default_batch=32,
        default_layers=12,
        min_layers=1,
        has_seq=True,
        build=build_bert,
    ),
    ModelSpec(
        "transformer-base",
        "transformer",
        "Transformer-base encoder-decoder: 6+6 layers, d_model 512, 8 heads, FFN 2048, "
        "vocab 32000, src/tgt seq 128",
        default_batch=32,
        default_layers=6,
        min_layers=1,
        has_seq=True,
        build=build_transformer_base,
    ),
    ModelSpec(
        "vit-b16",
        "transformer",
        "ViT-B/16: 224x224 images, 16x16 patches, 12 layers, hidden 768, 12 heads, 1000 classes",
        default_batch=32,
        default_layers=12,
        min_layers=1,
        has_seq=False,
        build=build_vit,
    ),
]
