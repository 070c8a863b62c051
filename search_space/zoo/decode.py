"""LLM decode steps with a KV cache: GPT-2 small and Llama-3-8B, one new token per sequence.

A decode step takes `input_ids` [B, 1] (the new token of each sequence, at position L) and,
per layer N, the K and V of the L tokens before it; it returns `logits` [B, 1, vocab] and the
updated cache `present.N.key` / `present.N.value` [B, kv_heads, L + 1, head_dim]. The layers,
weights (names, shapes, seeded values) and dimensions are those of the prefill models `gpt2`
and `llama3-8b`; K is cached after the rotary embedding and before the grouped-query repeat,
as HF caches it. The position L is static: a constant position id (GPT-2) or constant rotary
cos/sin of position L (Llama). Two cache forms (`cache_form`):

* "static": a preallocated buffer, as serving engines keep it. `past_key_values.N.key/value`
  have L + 1 slots [B, kv_heads, L + 1, head_dim]: slots 0..L-1 hold the past and slot L
  (whatever the input holds there) is overwritten in place by the new row with `ScatterND`
  (constant indices [B, kv_heads, 1, 3] pointing at slot L). Every slot is then valid, so
  attention over the L + 1 slots needs no mask.
* "concat": what HF's dynamic cache exports. `past_key_values.N.key/value` have L slots and
  `Concat` appends the new row along the sequence axis.

The default L is the prefill model's default sequence length minus one, so the updated cache
spans the same positions as the prefill model (2047 for Llama, 1023 for GPT-2 at scale 1).
"""

from __future__ import annotations

import numpy as np
import onnx

from search_space.zoo.builder import BuildArgs, Builder, ModelSpec, scaled
from search_space.zoo.decoders import (
    INT64,
    DecoderDims,
    KvCache,
    gpt2_dims,
    gpt2_embed,
    gpt2_head,
    gpt2_layer,
    llama_dims,
    llama_head,
    llama_layer,
    llama_rope,
)


class _Cache:
    """The per-layer past inputs, cache updates and present outputs of one decode graph."""

    def __init__(self, b: Builder, form: str, batch: int, d: DecoderDims, length: int) -> None:
        self.b, self.form, self.length = b, form, length
        self.shape = [batch, d.kv_heads, length + 1, d.head_dim]
        self.present: list[str] = []
        if form == "static":  # index (b, h, L) of every row: the new token's slot
            grid = np.meshgrid(np.arange(batch), np.arange(d.kv_heads), indexing="ij")
            slot = np.stack([*grid, np.full_like(grid[0], length)], axis=-1)[:, :, None]
            self.slot = b.const(slot.astype(np.int64), "cache_slot")

    def layer(self, i: int) -> KvCache:
        """The cache hook of layer `i`."""

        def update(k: str, v: str) -> tuple[str, str, int]:
            return self._update(i, "key", k), self._update(i, "value", v), self.length + 1

        return update

    def _update(self, i: int, kind: str, new: str) -> str:
        b, name = self.b, f"present.{i}.{kind}"
        batch, heads, slots, head_dim = self.shape
        if self.form == "static":
            past = b.input(f"past_key_values.{i}.{kind}", self.shape)
            b.op("ScatterND", [past, self.slot, new], out=name)
        else:
            past = b.input(f"past_key_values.{i}.{kind}", [batch, heads, slots - 1, head_dim])
            b.op("Concat", [past, new], out=name, axis=2)
        self.present.append(name)
        return name

    def outputs(self) -> None:
        """Declare the present outputs (after the logits, as HF orders them)."""
        for name in self.present:
            self.b.output(name, name, self.shape)


def _cache_len(args: BuildArgs, d: DecoderDims) -> int:
    """L: the override, else the prefill's default sequence length minus one."""
    seq = min(d.n_pos, scaled(d.default_seq, args.scale, multiple=8, minimum=8))
    return args.pick_cache(seq - 1, d.n_pos - 1)


def build_gpt2_decode(args: BuildArgs) -> onnx.ModelProto:
    """One GPT-2 decode step: the layers of `gpt2` over a KV cache of L tokens."""
    d = gpt2_dims(args)
    batch, length = args.pick_batch(8), _cache_len(args, d)

    b = Builder(args)
    ids = b.input("input_ids", [batch, 1], INT64, (0, d.vocab - 1))
    cache = _Cache(b, args.cache_form, batch, d, length)
    x, wte = gpt2_embed(b, ids, d, np.array([length]))
    for i in range(d.layers):
        with b.scope(f"h.{i}"):
            x = gpt2_layer(b, x, d, batch, 1, cache=cache.layer(i))
    b.output(gpt2_head(b, x, wte, d, batch, 1), "logits", [batch, 1, d.vocab])
    cache.outputs()
    extra = d.extra(batch, cache_len=length, cache_form=args.cache_form)
    return b.model(family="transformer", doc="GPT-2 small decode step", extra=extra)


def build_llama_decode(args: BuildArgs) -> onnx.ModelProto:
    """One Llama-3-8B decode step: the layers of `llama3-8b` over a KV cache of L tokens."""
    d = llama_dims(args)
    batch, length = args.pick_batch(1), _cache_len(args, d)

    b = Builder(args)
    ids = b.input("input_ids", [batch, 1], INT64, (0, d.vocab - 1))
    cache = _Cache(b, args.cache_form, batch, d, length)
    x = b.op("Gather", [b.weight("embed_tokens.weight", [d.vocab, d.hidden]), ids])
    rope = llama_rope(b, d, length, 1)
    for i in range(d.layers):
        with b.scope(f"layers.{i}"):
            x = llama_layer(b, x, d, batch, 1, rope, cache=cache.layer(i))
    b.output(llama_head(b, x, d), "logits", [batch, 1, d.vocab])
    cache.outputs()
    extra = {
        **d.extra(batch, cache_len=length, cache_form=args.cache_form),
        "kv_heads": d.kv_heads,
    }
    return b.model(family="transformer", doc="Llama-3-8B decode step", extra=extra)


SPECS = [
    ModelSpec(
        "gpt2-decode",
        "transformer",
        "GPT-2 small decode step: 12 layers, hidden 768, 12 heads, vocab 50257, batch 8 x 1 "
        "new token over a KV cache of 1023",
        default_batch=8,
        default_layers=12,
        min_layers=1,
        has_seq=False,
        build=build_gpt2_decode,
        has_cache=True,
    ),
    ModelSpec(
        "llama3-8b-decode",
        "transformer",
        "Llama-3-8B decode step: 32 layers, hidden 4096, 32 q / 8 kv heads, FFN 14336, "
        "vocab 128256, batch 1 x 1 new token over a KV cache of 2047",
        default_batch=1,
        default_layers=32,
        min_layers=1,
        has_seq=False,
        build=build_llama_decode,
        has_cache=True,
    ),
]
