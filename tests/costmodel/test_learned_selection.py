"""Choosing the corrector's size by its latency error on held-out families."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
from learned_helpers import T910B, table
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from costmodel.learned import LatencyCorrector
from costmodel.learned.fit import CANDIDATE_PARAMS, SELECT_MARGIN, fit_learned, select_params


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """HGB's OpenMP threads spin against any other load on a small CI box (100x slower)."""
    with threadpool_limits(limits=1):
        yield


# -- choosing the corrector's size --------------------------------------------------------------
SMALL = {"kind": "hgb", "max_iter": 20, "max_leaf_nodes": 3, "min_samples_leaf": 5}
BIG = {"kind": "hgb", "max_iter": 20, "max_leaf_nodes": 31, "min_samples_leaf": 5}


def ratios(seed: int, n: int, families: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, log ratios with interactions three-leaf trees cannot fit in 20 rounds, and
    a family per row."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 4))
    y = 0.3 * np.sin(4 * X[:, 0]) * np.cos(3 * X[:, 1]) + 0.2 * (X[:, 2] * X[:, 3] > 0)
    return X, y, np.array([f"f{i % families}" for i in range(n)])


def test_selection_scores_are_latency_errors_on_held_out_families() -> None:
    """Against a loop written out by hand: every family is the test side of some fold, never
    on both sides, and the score is the mean relative error of analytic x exp(ratio)."""
    X, y, fam = ratios(0, 600, 4)
    chosen, info = select_params(X, y, fam, (SMALL, BIG))
    expect = []
    for params in (SMALL, BIG):
        errs, held = [], []
        for tr, te in GroupKFold(n_splits=4).split(X, y, fam):
            assert not set(fam[tr]) & set(fam[te])
            held += sorted(set(fam[te]))
            pred = LatencyCorrector(**params).fit(X[tr], y[tr]).predict(X[te])
            errs.append(np.mean(np.abs(np.exp(pred) / np.exp(y[te]) - 1.0)))
        assert sorted(held) == ["f0", "f1", "f2", "f3"]
        expect.append(np.mean(errs))
    np.testing.assert_allclose(info["mape"], expect, rtol=1e-4)
    assert info["folds"] == 4
    assert chosen == (BIG if expect[1] < expect[0] * (1 - SELECT_MARGIN) else SMALL)


def test_bigger_trees_are_chosen_only_when_they_predict_held_out_families_better() -> None:
    X, y, fam = ratios(1, 2000, 5)
    assert select_params(X, y, fam, (SMALL, BIG))[0] == BIG
    # a ratio three-leaf trees fit: the bigger model gains nothing worth its size
    step = 0.2 * (X[:, 0] > 0)
    assert select_params(X, step, fam, (SMALL, BIG))[0] == SMALL


def test_equal_candidates_keep_the_first_and_a_broken_one_is_never_chosen() -> None:
    X, y, fam = ratios(3, 400, 4)
    same = {**SMALL, "alpha": 5.0}  # alpha is ridge's: the same trees, the same scores
    chosen, info = select_params(X, y, fam, (SMALL, same))
    assert chosen == SMALL and info["mape"][0] == info["mape"][1]
    assert select_params(X, y, fam, (same, SMALL))[0] == same
    with pytest.raises(ValueError):
        select_params(X, y, fam, (SMALL, {**BIG, "learning_rate": -1.0}))


def test_fewer_than_three_families_keep_the_first_candidate() -> None:
    X, y, _ = ratios(2, 300, 1)
    fam = np.array(["a", "b"] * 150)
    assert select_params(X, y, fam, (BIG, SMALL)) == (BIG, {})


def test_a_default_fit_uses_a_candidate_its_recorded_scores_support() -> None:
    frame = pd.concat(
        [table(1.3 + 0.1 * i, family=f) for i, f in enumerate(("a", "b", "c"))], ignore_index=True
    )
    model = fit_learned(frame, T910B, calibrate=False)
    used = model.base.get_params()
    picks = [i for i, c in enumerate(CANDIDATE_PARAMS) if all(used[k] == v for k, v in c.items())]
    assert len(picks) == 1
    scores = model.trained_on["selection"]["mape"]
    assert len(scores) == len(CANDIDATE_PARAMS)
    assert scores[picks[0]] <= min(scores) / (1 - SELECT_MARGIN) + 1e-5  # scores are rounded
