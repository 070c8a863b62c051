"""Index arithmetic's proofs (``codegen.indexing``): two indices are the same element where
the conditions given hold, checked against the definition at every sampled point."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from autotune.codegen.indexing import evaluate, same_index, sample


@given(k=st.integers(2, 40), width=st.integers(2, 6), piece=st.integers(0, 5))
def test_a_piece_of_the_columns_is_the_tile_only_under_its_guard(
    k: int, width: int, piece: int
) -> None:
    piece %= width
    env = {"n": sample(k * width)}
    own = ("n",)
    read = (f"{piece * k} + n % {k}",)  # column n of the piece, its slice index dropped
    guard = f"((n // {k}) >= {piece}) & ((n // {k}) < {piece + 1})"
    assert same_index(read, own, env, (guard,))
    assert not same_index(read, own, env)  # elsewhere it is another piece's column


@given(a=st.integers(-50, 50), b=st.integers(1, 9))
def test_conditions_evaluate_as_numpy_does(a: int, b: int) -> None:
    n = np.arange(-20, 20)
    got = evaluate(f"((n // {b}) >= {a}) & (n % {b} < {b - 1}) | (n == {a})", {"n": n})
    want = ((n // b) >= a) & (n % b < b - 1) | (n == a)
    assert np.array_equal(got, want)
