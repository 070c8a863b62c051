"""Flash-decoding in the kernel emulation: the keys cut into parts, each its own online
softmax, combined by log-sum-exp. Checked against plain softmax @ V in float64 (an oracle
that shares nothing with the split), including parts whose every key is masked."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.verify import Numerics, flash_attention, numerics_for
from autotune.verify.numerics import numerics_key
from costmodel.lower.common import kv_ranges
from costmodel.spec import load_target
from search_space.ir import KernelConfig

FP64 = Numerics("fp64", "fp64", "fp64", "fp64", "fp64")
FP32 = Numerics("fp32", "fp32", "fp32", "fp32", "fp32")
FLOAT_MIN = float(np.finfo(np.float32).min)


def _plain(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = s.astype(np.float64)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


@settings(max_examples=60, deadline=None)
@given(
    keys=st.integers(1, 300),
    split=st.integers(1, 9),
    tile=st.sampled_from([0, 1, 16, 64, 128]),
    masked=st.sampled_from(["none", "some", "a whole part"]),
    seed=st.integers(0, 2**16),
)
def test_split_attention_equals_softmax_v(
    keys: int, split: int, tile: int, masked: str, seed: int
) -> None:
    """In float64 the split pass is exact up to rounding of float64 itself; in fp32 within
    the epsilons the tiles and parts add."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((2, 3, 1, keys)) * 4  # decode: one query row per head
    if masked == "some":
        s[rng.random(s.shape) < 0.3] = FLOAT_MIN
    elif masked == "a whole part" and keys > 1:
        lo, hi = kv_ranges(keys, split, tile)[-1]
        s[..., lo:hi] = FLOAT_MIN  # the last part sees masked keys only
    s[..., 0] = np.abs(s[..., 0])  # every row keeps one key
    v = rng.standard_normal((2, 3, keys, 8))
    want = _plain(s, v)
    got = flash_attention(s, v, Numerics(*["fp64"] * 5, kv_tile=tile, kv_split=split))
    assert np.allclose(got, want, rtol=1e-10, atol=1e-12)
    parts = len(kv_ranges(keys, split, tile))
    tiles = -(-keys // tile) if tile else 1
    tol = 4 * float(np.finfo(np.float32).eps) * (tiles + parts) * float(np.abs(v).max())
    got32 = flash_attention(s.astype(np.float32), v, Numerics(*["fp32"] * 5, tile, 0, split))
    assert float(np.abs(got32 - want).max()) <= tol


@given(keys=st.integers(1, 5000), split=st.integers(0, 64), tile=st.sampled_from([0, 64, 128]))
def test_parts_cover_the_keys_in_whole_tiles(keys: int, split: int, tile: int) -> None:
    parts = kv_ranges(keys, split, tile)
    assert parts[0][0] == 0 and parts[-1][1] == keys
    assert all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    assert all(lo < hi for lo, hi in parts) and len(parts) <= max(1, split)
    if tile:
        assert all((hi - lo) % tile == 0 for lo, hi in parts[:-1])


def test_the_split_is_part_of_what_a_kernel_computes() -> None:
    """A config's kv_split reaches the emulation and its verdict key: two splits round
    differently, so one verdict may not cover both."""
    target = load_target("ascend910b")
    one = KernelConfig(block_dim=24, knobs=(("kv_tile", 128),))
    four = KernelConfig(block_dim=24, knobs=(("kv_split", 4), ("kv_tile", 128)))
    assert numerics_for(target, 4, four).kv_split == 4
    assert numerics_for(target, 4, one).kv_split == 0
    assert numerics_key(one) != numerics_key(four)
