"""Held-out accuracy metrics and the family split (``costmodel.learned.evaluation``), against scipy
and numpy computed independently."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau, spearmanr

from costmodel.exceptions import CostModelError
from costmodel.learned.evaluation import METRICS, TIE, accuracy, heldout_split, pair_tau

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- pair_tau -----------------------------------------------------------------------------------
@st.composite
def spaced(draw: st.DrawFn, n: int | None = None) -> np.ndarray:
    """Positive values, every pair more than 3% apart (relative to the smaller), shuffled."""
    size = n or draw(st.integers(2, 12))
    steps = draw(st.lists(st.floats(1.035, 3.0), min_size=size - 1, max_size=size - 1))
    start = draw(st.floats(0.01, 1000.0))
    values = start * np.cumprod([1.0, *steps])
    return values[draw(st.permutations(range(size)))]


@st.composite
def pred_true(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    true = draw(spaced())
    pred = np.array(
        draw(
            st.lists(
                st.floats(-1e6, 1e6, allow_nan=False),
                min_size=len(true),
                max_size=len(true),
                unique=True,
            )
        )
    )
    return pred, true


@PROPS
@given(pred_true())
def test_pair_tau_is_kendall_tau_without_near_ties(pt: tuple[np.ndarray, np.ndarray]) -> None:
    pred, true = pt
    assert pair_tau(pred, true) == pytest.approx(kendalltau(pred, true).statistic, abs=1e-12)


def test_pairs_closer_than_the_tie_are_not_ranked() -> None:
    true = np.array([1.0, 1.02, 2.0, 2.05])  # (0, 1) and (2, 3) are within 3%
    pred = np.array([2.0, 1.0, 4.0, 3.0])  # both close pairs ranked the wrong way round
    assert pair_tau(pred, true) == 1.0  # the four far pairs are all concordant
    assert kendalltau(pred, true).statistic < 1.0  # scipy counts the close pairs
    assert TIE == 0.03
    assert pair_tau(pred, true, tie=0.0) == pytest.approx(kendalltau(pred, true).statistic)
    # a gap of 3% of the smaller value is still a tie; just over it is ranked
    assert pair_tau(np.array([1.0, 0.0]), np.array([100.0, 103.0])) is None
    assert pair_tau(np.array([1.0, 0.0]), np.array([100.0, 103.1])) == -1.0


def test_pair_tau_is_none_when_no_pair_qualifies() -> None:
    assert pair_tau(np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.01, 1.02])) is None
    assert pair_tau(np.array([1.0]), np.array([5.0])) is None


def test_a_tied_prediction_counts_as_neither_concordant_nor_discordant() -> None:
    true = np.array([1.0, 2.0, 4.0])
    assert pair_tau(np.array([1.0, 1.0, 3.0]), true) == pytest.approx(2 / 3)


# -- accuracy -----------------------------------------------------------------------------------
@PROPS
@given(
    true=st.lists(st.floats(0.01, 1e4), min_size=2, max_size=40),
    noise=st.lists(st.floats(-0.9, 3.0), min_size=40, max_size=40),
)
def test_error_metrics_equal_numpy_and_scipy(true: list[float], noise: list[float]) -> None:
    t = np.array(true)
    p = t * (1.0 + np.array(noise[: len(t)]))
    assume(np.ptp(t) > 0 and np.ptp(p) > 0)
    got = accuracy(p, t, ["g"] * len(t))
    rel = np.abs(p - t) / t
    assert got["mape"] == pytest.approx(np.mean(rel), rel=1e-12)
    assert got["median_rel_err"] == pytest.approx(np.median(rel), rel=1e-12)
    assert got["p90_rel_err"] == pytest.approx(np.quantile(rel, 0.9), rel=1e-12)
    assert got["spearman"] == pytest.approx(spearmanr(p, t).statistic, abs=1e-12)
    assert set(METRICS) <= set(got)


def test_a_perfect_predictor_scores_perfectly() -> None:
    true = np.array([10.0, 12.0, 15.0, 5.0, 6.0, 7.0, 40.0])
    groups = ["a", "a", "a", "b", "b", "b", "c"]  # c has one row: nothing to rank
    got = accuracy(true.copy(), true, groups)
    assert got["mape"] == got["median_rel_err"] == got["p90_rel_err"] == 0.0
    assert got["spearman"] == pytest.approx(1.0)
    assert got["kendall_tau"] == 1.0 and got["top1_regret"] == 0.0
    assert got["groups_ranked"] == 2


def test_a_reversed_ranking_has_tau_minus_one() -> None:
    true = np.array([10.0, 12.0, 15.0, 5.0, 6.0])
    pred = np.array([3.0, 2.0, 1.0, 9.0, 8.0])
    got = accuracy(pred, true, ["a", "a", "a", "b", "b"])
    assert got["kendall_tau"] == -1.0
    assert got["top1_regret"] == pytest.approx(np.mean([15 / 10 - 1, 6 / 5 - 1]))


def test_top1_regret_is_what_the_predicted_best_costs_over_the_best() -> None:
    true = np.array([10.0, 12.0, 15.0, 5.0, 6.0, 2.0, 2.0])
    pred = np.array([9.0, 8.0, 20.0, 1.0, 2.0, 7.0, 7.5])  # a picks 12 (best 10), b is right
    got = accuracy(pred, true, ["a", "a", "a", "b", "b", "c", "c"])
    assert got["top1_regret"] == pytest.approx((0.2 + 0.0 + 0.0) / 3)
    # group c's two configs tie (same true latency): ranked for regret, not for tau
    assert got["groups_ranked"] == 2
    assert got["kendall_tau"] == pytest.approx(np.mean([1 / 3, 1.0]))


def test_nothing_to_rank_gives_nan_ranking_metrics() -> None:
    got = accuracy(np.array([1.0, 2.0]), np.array([1.5, 2.5]), ["a", "b"])
    assert np.isnan(got["kendall_tau"]) and np.isnan(got["top1_regret"])
    assert got["groups_ranked"] == 0
    assert got["mape"] == pytest.approx(np.mean([0.5 / 1.5, 0.5 / 2.5]))


# -- the held-out split -------------------------------------------------------------------------
def frame(rows: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "family": [f for f, _ in rows],
            "signature": [s for _, s in rows],
            "latency_us": np.arange(1.0, len(rows) + 1.0),
        }
    )


def test_split_holds_out_families_and_unseen_signatures() -> None:
    table = frame(
        [
            ("bert", "mm1"),
            ("bert", "add"),
            ("gpt2", "mm2"),
            ("gpt2", "add"),  # also in bert: must not be tested
            ("gpt2", "mm2"),
            ("vit", "conv"),
            ("vit", "mm1"),  # also in bert
        ]
    )
    train, test = heldout_split(table, ["gpt2", "vit"])
    assert list(train["signature"]) == ["mm1", "add"]
    assert list(test["signature"]) == ["mm2", "mm2", "conv"]
    assert list(test["latency_us"]) == [3.0, 5.0, 6.0]
    assert list(train.index) == [0, 1] and list(test.index) == [0, 1, 2]


@PROPS
@given(
    st.lists(
        st.tuples(st.sampled_from("abcde"), st.sampled_from(["s0", "s1", "s2", "s3", "s4"])),
        min_size=2,
        max_size=30,
    ),
    st.sets(st.sampled_from("abcde"), min_size=1, max_size=3),
)
def test_split_invariants(rows: list[tuple[str, str]], held: set[str]) -> None:
    table = frame(rows)
    held_out = sorted(held & set(table["family"]))
    assume(held_out)
    try:
        train, test = heldout_split(table, held_out)
    except CostModelError as err:
        assert "training and" in str(err)
        return
    assert not set(test["signature"]) & set(train["signature"])
    assert set(test["family"]) <= set(held_out)
    assert not set(train["family"]) & set(held_out)
    # nothing is lost that could have been kept: every other-family row trains, every
    # held-out row with an unseen signature tests
    others = table[~table["family"].isin(held_out)]
    assert len(train) == len(others)
    unseen = table["family"].isin(held_out) & ~table["signature"].isin(set(others["signature"]))
    assert len(test) == int(unseen.sum())


def test_an_unknown_family_is_refused_naming_the_families() -> None:
    table = frame([("bert", "a"), ("gpt2", "b")])
    with pytest.raises(CostModelError) as err:
        heldout_split(table, ["gpt2", "llama"])
    assert "llama" in str(err.value) and "bert, gpt2" in str(err.value)
    with pytest.raises(CostModelError, match="families llama, t5 not in the table"):
        heldout_split(table, ["t5", "llama"])


def test_a_split_with_an_empty_side_is_refused() -> None:
    table = frame([("bert", "a"), ("gpt2", "a")])
    with pytest.raises(CostModelError, match="1 training and 0 test rows"):
        heldout_split(table, ["gpt2"])
    with pytest.raises(CostModelError, match="0 training and 2 test rows"):
        heldout_split(table, ["bert", "gpt2"])
