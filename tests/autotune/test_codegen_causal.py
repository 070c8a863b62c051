"""The attention template skips the key blocks a causal mask hides whole: each query tile
stops at its last visible key. Checked against onnxruntime for every way an exporter writes
the mask, with and without a key split, and the bound left out where the mask is not causal
(a window, a random mask, one the caller feeds) or the scores leave the group."""

from __future__ import annotations

import pytest
from causal_masks import CAUSAL, NOT_CAUSAL, attention_model
from codegen_helpers import check_whole, describe

from search_space.ir import KernelConfig

BOUND = "hi = tl.minimum((tq + 1) * TILE_Q"


def _config(split: int) -> KernelConfig:
    knobs = (("kv_split", split), ("kv_tile", 16)) if split > 1 else (("kv_tile", 16),)
    return KernelConfig(
        block_dim=8, base_m=16, base_n=16, base_k=16, m=16, n=16, k=16, knobs=knobs
    )


@pytest.mark.parametrize("form", CAUSAL)
@pytest.mark.parametrize(
    ("sq", "sk", "offset", "split"),
    [(40, 40, 0, 1), (24, 56, 32, 1), (9, 70, 61, 3), (33, 48, 5, 2)],
)
def test_a_causal_attention_skips_the_hidden_key_blocks_and_matches_onnxruntime(
    form, sq, sk, offset, split, tmp_path
) -> None:
    program, result = check_whole(
        attention_model(form, sq, sk, offset), _config(split), tmp_path, kind="attention"
    )
    assert result.ok, describe(result)
    [first, *_] = [k for k in program.kernels if k.template == "attention"]
    assert BOUND in first.text and f"+ {offset}," in first.text


@pytest.mark.parametrize("form", NOT_CAUSAL)
def test_an_attention_not_causally_masked_visits_every_key(form, tmp_path) -> None:
    program, result = check_whole(
        attention_model(form, 24, 40, 16), _config(1), tmp_path, kind="attention"
    )
    assert result.ok, describe(result)
    assert all(BOUND not in k.text for k in program.kernels)
