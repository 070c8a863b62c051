"""The learned correction's regressor (``costmodel.learned.corrector``).

Its exported trees are checked against scikit-learn's own estimators (an independent oracle),
its ridge against a float64 numpy solve, and its JSON against a round trip and hand-broken
documents.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.base import BaseEstimator
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from costmodel.exceptions import CostModelError
from costmodel.learned import KINDS, LatencyCorrector

PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """HGB's OpenMP threads spin against any other load on a small CI box (100x slower)."""
    with threadpool_limits(limits=1):
        yield


# -- scikit-learn conformance ------------------------------------------------------------------
def not_applicable(estimator: BaseEstimator) -> dict[str, str]:
    """Checks that do not apply, per kind (anything else must pass)."""
    out = {
        "check_non_transformer_estimators_n_iter": (
            "max_iter is only HGB's fixed boosting length (early stopping is off); no kind "
            "iterates to convergence, so there is no n_iter_"
        ),
    }
    if estimator.kind == "hgb":
        out["check_sample_weight_equivalence_on_dense_data"] = (
            "HGB bins features and counts min_samples_leaf by rows: weights are not repetitions"
        )
    if estimator.kind == "forest":
        out["check_sample_weight_equivalence_on_dense_data"] = (
            "bootstrap resampling draws rows, so weights are not repetitions"
        )
    # ridge is a weighted least-squares problem: weights must equal repeated rows
    return out


@parametrize_with_checks(
    [
        LatencyCorrector(max_iter=20),
        LatencyCorrector(kind="forest", n_estimators=5),
        LatencyCorrector(kind="ridge"),
    ],
    expected_failed_checks=not_applicable,
    xfail_strict=True,
)
def test_sklearn_conformance(estimator: BaseEstimator, check: Callable[..., Any]) -> None:
    check(estimator)


def test_ridge_weights_are_repetitions() -> None:
    """Weight 3 on a row must fit exactly like the row written three times."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3)) * [1.0, 5.0, 0.2] + [0.0, 3.0, 1.0]
    y = rng.normal(size=20)
    w = np.ones(20)
    w[:5] = 3.0
    X_rep = np.vstack([X, X[:5], X[:5]])
    y_rep = np.concatenate([y, y[:5], y[:5]])
    weighted = LatencyCorrector(kind="ridge").fit(X, y, sample_weight=w).predict(X)
    repeated = LatencyCorrector(kind="ridge").fit(X_rep, y_rep).predict(X)
    np.testing.assert_allclose(weighted, repeated, rtol=0, atol=1e-10)


# -- the exported trees against scikit-learn's own predict --------------------------------------
def oracle(kind: str, params: dict[str, Any]) -> BaseEstimator:
    """What the docstring says each kind is, built directly from scikit-learn."""
    if kind == "hgb":
        return HistGradientBoostingRegressor(
            max_iter=params["max_iter"],
            learning_rate=params["learning_rate"],
            max_leaf_nodes=params["max_leaf_nodes"],
            min_samples_leaf=params["min_samples_leaf"],
            l2_regularization=params["l2_regularization"],
            early_stopping=False,
            random_state=params["random_state"],
        )
    return RandomForestRegressor(
        n_estimators=params["n_estimators"],
        max_leaf_nodes=max(2, params["max_leaf_nodes"] * 8),
        min_samples_leaf=params["min_samples_leaf"],
        random_state=params["random_state"],
        n_jobs=1,
    )


def data(seed: int, n: int, f: int, discrete: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training rows, targets and fresh query rows. ``discrete`` features repeat values, so
    queries land exactly on training values (the ``x <= threshold`` boundary)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f)) * rng.uniform(0.1, 100.0, size=f)
    Q = rng.normal(size=(3 * n, f)) * rng.uniform(0.1, 100.0, size=f) * 1.5
    if discrete:
        X, Q = np.round(X / 10.0), np.round(Q / 10.0)
    y = np.sin(X[:, 0]) + 0.01 * X[:, -1] ** 2 + 0.1 * rng.normal(size=n)
    return X, y, np.vstack([Q, X])


@pytest.mark.parametrize("kind", ["hgb", "forest"])
def test_exported_trees_predict_like_sklearn(kind: str) -> None:
    X, y, Q = data(1, 300, 6, discrete=False)
    params = dict(max_iter=40, max_leaf_nodes=15, min_samples_leaf=5, n_estimators=10)
    est = LatencyCorrector(kind=kind, **params).fit(X, y)
    ref = oracle(kind, est.get_params()).fit(X, y)
    np.testing.assert_allclose(est.predict(Q), ref.predict(Q), rtol=0, atol=1e-10)
    assert np.ptp(ref.predict(Q)) > 0.1  # the trees really split


@PROPS
@given(
    kind=st.sampled_from(["hgb", "forest"]),
    seed=st.integers(0, 2**16),
    n=st.integers(8, 120),
    f=st.integers(1, 5),
    leaves=st.integers(2, 9),
    min_leaf=st.integers(1, 6),
    discrete=st.booleans(),
)
def test_exported_trees_equal_sklearn_on_any_data(
    kind: str, seed: int, n: int, f: int, leaves: int, min_leaf: int, discrete: bool
) -> None:
    X, y, Q = data(seed, n, f, discrete)
    est = LatencyCorrector(
        kind=kind,
        max_iter=12,
        n_estimators=4,
        max_leaf_nodes=leaves,
        min_samples_leaf=min_leaf,
        random_state=seed,
    ).fit(X, y)
    ref = oracle(kind, est.get_params()).fit(X, y)
    np.testing.assert_allclose(est.predict(Q), ref.predict(Q), rtol=0, atol=1e-10)


def test_ridge_is_standardised_ridge_regression() -> None:
    """Against the closed form in float64 numpy: minimise |y - b - Z w|^2 + alpha |w|^2 over
    the standardised features Z (constant columns left unscaled), then map back."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 4)) * [1.0, 30.0, 0.01, 1.0] + [5.0, -2.0, 0.0, 0.0]
    X[:, 3] = 7.0  # a constant feature
    y = X @ [0.5, -0.02, 40.0, 0.0] + 1.0 + 0.1 * rng.normal(size=50)
    Q = rng.normal(size=(20, 4)) * [1.0, 30.0, 0.01, 1.0]
    for alpha in (0.1, 3.0, 100.0):
        mean, std = X.mean(axis=0), X.std(axis=0)
        std[std == 0] = 1.0
        Z = (X - mean) / std
        Zc, yc = Z - Z.mean(axis=0), y - y.mean()
        w = np.linalg.solve(Zc.T @ Zc + alpha * np.eye(4), Zc.T @ yc)
        b = y.mean() - Z.mean(axis=0) @ w
        expect = ((Q - mean) / std) @ w + b
        got = LatencyCorrector(kind="ridge", alpha=alpha).fit(X, y).predict(Q)
        np.testing.assert_allclose(got, expect, rtol=1e-9, atol=1e-9)


def test_ridge_without_penalty_is_least_squares() -> None:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 3)) * [1.0, 100.0, 0.1]
    y = rng.normal(size=40)
    A = np.column_stack([X, np.ones(len(X))])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    got = LatencyCorrector(kind="ridge", alpha=1e-12).fit(X, y).predict(X)
    np.testing.assert_allclose(got, A @ coef, rtol=1e-8, atol=1e-8)


# -- JSON ---------------------------------------------------------------------------------------
def fitted(kind: str) -> tuple[LatencyCorrector, np.ndarray]:
    X, y, Q = data(4, 150, 5, discrete=False)
    est = LatencyCorrector(
        kind=kind, max_iter=25, n_estimators=6, max_leaf_nodes=7, min_samples_leaf=3
    )
    return est.fit(X, y), Q


def through_json(doc: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip_predicts_identically(kind: str) -> None:
    est, Q = fitted(kind)
    doc = through_json(est.to_json())
    back = LatencyCorrector.from_json(doc)
    assert np.array_equal(back.predict(Q), est.predict(Q))
    assert back.get_params() == est.get_params()
    assert back.to_json() == doc  # a second round trip changes nothing
    with pytest.raises(ValueError, match="features"):
        back.predict(Q[:, :-1])  # the fitted width survives the trip


def tree_doc() -> dict[str, Any]:
    est, _ = fitted("hgb")
    return through_json(est.to_json())


def inner_node(doc: dict[str, Any]) -> int:
    return next(i for i, left in enumerate(doc["fitted"]["trees"]["left"]) if left >= 0)


def set_tree(field: str, value: Callable[[dict[str, Any]], Any]) -> Callable[[dict], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["fitted"]["trees"][field][inner_node(doc)] = value(doc)

    return edit


def n_nodes(doc: dict[str, Any]) -> int:
    return len(doc["fitted"]["trees"]["value"])


def n_features(doc: dict[str, Any]) -> int:
    return doc["fitted"]["n_features_in"]


def set_schema(doc: dict[str, Any]) -> None:
    doc["schema_version"] = 2


def drop_thresholds(doc: dict[str, Any]) -> None:
    del doc["fitted"]["trees"]["threshold"]


def short_values(doc: dict[str, Any]) -> None:
    doc["fitted"]["trees"]["value"].pop()


def short_missing(doc: dict[str, Any]) -> None:
    del doc["fitted"]["trees"]["missing_left"][5:]


def far_root(doc: dict[str, Any]) -> None:
    doc["fitted"]["trees"]["roots"][-1] = n_nodes(doc)


def negative_root(doc: dict[str, Any]) -> None:
    doc["fitted"]["trees"]["roots"][-1] = -2


def unknown_param(doc: dict[str, Any]) -> None:
    doc["params"]["depth"] = 3


BROKEN: dict[str, Callable[[dict[str, Any]], None]] = {
    "schema_version": set_schema,
    "feature_at_n_features": set_tree("feature", n_features),
    "feature_far_out": set_tree("feature", lambda d: n_features(d) + 100),
    "negative_feature": set_tree("feature", lambda d: -1),
    "left_child_past_end": set_tree("left", n_nodes),
    "right_child_past_end": set_tree("right", n_nodes),
    "negative_right_child": set_tree("right", lambda d: -3),
    "root_past_end": far_root,
    "negative_root": negative_root,
    "missing_array": drop_thresholds,
    "short_array": short_values,
    "short_missing_left": short_missing,
    "unknown_param": unknown_param,
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_from_json_rejects_a_broken_document(name: str) -> None:
    doc = tree_doc()
    LatencyCorrector.from_json(doc)  # the unbroken document loads
    BROKEN[name](doc)
    with pytest.raises(CostModelError) as err:
        LatencyCorrector.from_json(doc)
    if name == "schema_version":
        assert "schema_version 2" in str(err.value)
    else:
        assert "malformed learned corrector" in str(err.value)


def test_from_json_rejects_a_ridge_of_the_wrong_width() -> None:
    est, _ = fitted("ridge")
    doc = through_json(est.to_json())
    doc["fitted"]["coef"].append(1.0)
    with pytest.raises(CostModelError, match="coef length"):
        LatencyCorrector.from_json(doc)


def test_unknown_kind_is_a_value_error_naming_the_kinds() -> None:
    X, y, _ = data(5, 20, 2, discrete=False)
    with pytest.raises(ValueError, match=r"unknown kind 'xgb'; available: hgb, forest, ridge"):
        LatencyCorrector(kind="xgb").fit(X, y)
