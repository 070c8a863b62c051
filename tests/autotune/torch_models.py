"""Small models in plain PyTorch for the front-end tests: a ResNet-style block with batch
norm, a Llama-style decoder layer (RMSNorm, rotary embeddings, SwiGLU, grouped-query
attention), one decode step over a static KV cache, and a ViT block. Each ``make_*`` returns
``(module, example_inputs)``, the form ``python:module:factory`` models take."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["make_decode_step", "make_llama_layer", "make_resnet_block", "make_vit_block"]


class ResNetBlock(nn.Module):
    def __init__(self, ch: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(nn.Module):
    """One decoder layer; with ``cache``, a decode step writing its key and value into a
    static cache at ``pos`` and attending over the whole cache (masked past ``pos``)."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, ffn: int = 48) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, ffn, bias=False)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x * cos + rotate_half(x) * sin

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
               ) -> torch.Tensor:  # fmt: skip
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.hd) + mask
        return torch.softmax(scores, dim=-1) @ v

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:  # fmt: skip
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
        a = self.attend(q, k, v, mask).transpose(1, 2).reshape(b, s, -1)
        x = x + self.o(a)
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class DecodeStep(nn.Module):
    """A Llama layer's attention for one new token over a static cache of ``cache_len``
    positions: the new key and value are written at ``pos`` (index_copy), later positions
    are masked; returns the output and the updated caches."""

    def __init__(self, layer: LlamaLayer) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        ly, b = self.layer, x.shape[0]
        h = ly.norm1(x)
        q = ly.q(h).view(b, 1, ly.heads, ly.hd).transpose(1, 2)
        k = ly.k(h).view(b, 1, ly.kv_heads, ly.hd).transpose(1, 2)
        v = ly.v(h).view(b, 1, ly.kv_heads, ly.hd).transpose(1, 2)
        q, k = ly.rope(q, cos, sin), ly.rope(k, cos, sin)
        k_cache = k_cache.index_copy(2, pos, k)
        v_cache = v_cache.index_copy(2, pos, v)
        a = ly.attend(q, k_cache, v_cache, mask).transpose(1, 2).reshape(b, 1, -1)
        return x + ly.o(a), k_cache, v_cache


class ViTBlock(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


def _tables(seq: int, hd: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(start, start + seq).float()[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos()[None, None], ang.sin()[None, None]


def make_resnet_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    m = ResNetBlock().eval()
    for bn in (m.bn1, m.bn2):  # statistics that are not the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return m, (torch.randn(1, 8, 6, 6),)


def make_llama_layer(seq: int = 6) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    m = LlamaLayer().eval()
    cos, sin = _tables(seq, m.hd)
    mask = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
    return m, (torch.randn(1, seq, 32), cos, sin, mask)


def make_decode_step(
    cache_len: int = 8, pos: int = 3
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    layer = LlamaLayer().eval()
    cos, sin = _tables(1, layer.hd, pos)
    mask = torch.zeros(1, 1, 1, cache_len)
    mask[..., pos + 1 :] = float("-inf")
    caches = [torch.randn(1, layer.kv_heads, cache_len, layer.hd) for _ in range(2)]
    return DecodeStep(layer).eval(), (torch.randn(1, 1, 32), cos, sin, mask, *caches,
                                      torch.tensor([pos]))  # fmt: skip


def make_vit_block() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return ViTBlock().eval(), (torch.randn(1, 5, 32),)
