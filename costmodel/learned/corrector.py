"""The learned correction: a scikit-learn regressor of log(simulated / analytic) latency.

:class:`LatencyCorrector` is a proper estimator (hyperparameters in ``__init__`` only,
validation in ``fit``, fitted attributes ending in ``_``; it passes
``sklearn.utils.estimator_checks``). After fitting, the ensemble is exported to plain arrays
(every tree as feature / threshold / children / value per node), which is both how it predicts
(one vectorised numpy walk over all trees) and how it is saved: JSON of the fitted parameters,
never pickle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from costmodel.exceptions import CostModelError

__all__ = ["KINDS", "LatencyCorrector"]

KINDS = ("hgb", "forest", "ridge")
SCHEMA = 1


class LatencyCorrector(RegressorMixin, BaseEstimator):
    """Regressor from kernel features to a log latency ratio.

    Args:
        kind: ``hgb`` (HistGradientBoostingRegressor), ``forest`` (RandomForestRegressor) or
            ``ridge`` (standardised ridge regression).
        max_iter: boosting iterations (hgb).
        learning_rate: shrinkage (hgb).
        max_leaf_nodes: leaves per tree (hgb, forest).
        min_samples_leaf: smallest leaf (hgb, forest).
        l2_regularization: hgb leaf-value penalty.
        n_estimators: trees (forest).
        alpha: ridge penalty.
        random_state: seed.
    """

    def __init__(
        self,
        kind: str = "hgb",
        max_iter: int = 300,
        learning_rate: float = 0.1,
        max_leaf_nodes: int = 31,
        min_samples_leaf: int = 10,
        l2_regularization: float = 1.0,
        n_estimators: int = 100,
        alpha: float = 1.0,
        random_state: int = 0,
    ) -> None:
        self.kind = kind
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.n_estimators = n_estimators
        self.alpha = alpha
        self.random_state = random_state

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> LatencyCorrector:
        """Fit on features ``X`` (n, f) and log ratios ``y`` (n,).

        Raises:
            ValueError: an unknown ``kind`` or invalid data (scikit-learn's own checks).
        """
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; available: {', '.join(KINDS)}")
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        with threadpool_limits(1):  # small fits: OpenMP threads only spin against other work
            return self._fit(X, y, sample_weight)

    def _fit(self, X: np.ndarray, y: np.ndarray, sample_weight: Any) -> LatencyCorrector:
        if self.kind == "ridge":
            from sklearn.linear_model import Ridge

            w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, float)
            if w.shape != y.shape or not np.all(np.isfinite(w)) or np.any(w < 0):
                raise ValueError("sample_weight must be finite, >= 0, one per sample")
            if not w.sum() > 0:
                raise ValueError("Sample weights must contain at least one non-zero number.")
            mean = np.average(X, axis=0, weights=w)
            scale = np.sqrt(np.average((X - mean) ** 2, axis=0, weights=w))
            scale[scale == 0] = 1.0
            ridge = Ridge(alpha=self.alpha).fit((X - mean) / scale, y, sample_weight)
            self.coef_ = ridge.coef_ / scale
            self.intercept_ = float(ridge.intercept_ - np.dot(ridge.coef_ / scale, mean))
            self.trees_ = None
            return self
        if self.kind == "hgb":
            from sklearn.ensemble import HistGradientBoostingRegressor

            hgb = HistGradientBoostingRegressor(
                max_iter=self.max_iter,
                learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes,
                min_samples_leaf=self.min_samples_leaf,
                l2_regularization=self.l2_regularization,
                early_stopping=False,
                random_state=self.random_state,
            ).fit(X, y, sample_weight=sample_weight)
            self.trees_ = _export_hgb(hgb)
        else:
            from sklearn.ensemble import RandomForestRegressor

            forest = RandomForestRegressor(
                n_estimators=self.n_estimators,
                max_leaf_nodes=max(2, self.max_leaf_nodes * 8),
                min_samples_leaf=self.min_samples_leaf,
                random_state=self.random_state,
                n_jobs=1,
            ).fit(X, y, sample_weight=sample_weight)
            self.trees_ = _export_forest(forest)
        self.coef_ = None
        self.intercept_ = 0.0
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted log ratio of each row."""
        check_is_fitted(self, "intercept_")
        if not _checked(X, self.n_features_in_):  # the cost model's own arrays pass as they are
            X = validate_data(self, X, reset=False, dtype=np.float64)
        if self.trees_ is None:
            return X @ self.coef_ + self.intercept_
        return _walk(self.trees_, X)

    # -- JSON -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The hyperparameters and fitted arrays as plain JSON values."""
        check_is_fitted(self, "intercept_")
        fitted: dict[str, Any] = {
            "n_features_in": int(self.n_features_in_),
            "intercept": float(self.intercept_),
        }
        if self.trees_ is None:
            fitted["coef"] = [float(c) for c in self.coef_]
        else:
            fitted["trees"] = {
                k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.trees_.items()
            }
        return {"schema_version": SCHEMA, "params": self.get_params(), "fitted": fitted}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LatencyCorrector:
        """Rebuild a fitted corrector from :meth:`to_json` (no code is run from the data).

        Raises:
            CostModelError: another schema version or a malformed document.
        """
        try:
            if data["schema_version"] != SCHEMA:
                raise CostModelError(
                    f"learned corrector has schema_version {data['schema_version']}; this tool "
                    f"reads {SCHEMA}"
                )
            est = cls(**data["params"])
            fitted = data["fitted"]
            est.n_features_in_ = int(fitted["n_features_in"])
            est.intercept_ = float(fitted["intercept"])
            if "coef" in fitted:
                est.coef_ = np.asarray(fitted["coef"], dtype=np.float64)
                est.trees_ = None
                _check(len(est.coef_) == est.n_features_in_, "coef length")
            else:
                est.coef_ = None
                est.trees_ = _trees_from_json(fitted["trees"], est.n_features_in_)
        except (KeyError, TypeError, ValueError) as err:
            raise CostModelError(f"malformed learned corrector: {err!r}") from None
        return est


def _checked(X: Any, n_features: int) -> bool:
    """Is ``X`` already what ``validate_data(..., reset=False, dtype=float64)`` would return
    (a finite float64 matrix of at least one row and the fitted width)? It returns such an
    array itself, so skipping it changes nothing but its overhead, a third of a tree walk."""
    return (
        type(X) is np.ndarray
        and X.dtype == np.float64
        and X.ndim == 2
        and X.shape[0] >= 1
        and X.shape[1] == n_features
        and bool(np.isfinite(X).all())
    )


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ValueError(f"inconsistent {what}")


_INT_ARRAYS = ("feature", "left", "right", "roots")
_FLOAT_ARRAYS = ("threshold", "value")


def _trees_from_json(t: Mapping[str, Any], n_features: int) -> dict[str, Any]:
    out: dict[str, Any] = {k: np.asarray(t[k], dtype=np.int64) for k in _INT_ARRAYS}
    out |= {k: np.asarray(t[k], dtype=np.float64) for k in _FLOAT_ARRAYS}
    out["missing_left"] = np.asarray(t["missing_left"], dtype=bool)
    out["scale"], out["base"], out["depth"] = float(t["scale"]), float(t["base"]), int(t["depth"])
    n = len(out["value"])
    keys = ("feature", "left", "right", "threshold", "missing_left")
    _check(all(len(out[k]) == n for k in keys), "tree arrays")
    roots = out["roots"]
    _check(len(roots) > 0 and roots[0] == 0 and bool(np.all(np.diff(roots) > 0)), "tree roots")
    _check(int(roots[-1]) < n, "tree roots")
    # every inner node's children lie after it and inside its own tree: walks end at leaves
    end = np.repeat(np.append(roots[1:], n), np.diff(np.append(roots, n)))
    node = np.arange(n)
    inner = out["left"] >= 0
    for side in ("left", "right"):
        child = out[side][inner]
        _check(bool(np.all((child > node[inner]) & (child < end[inner]))), f"tree {side} children")
    _check(bool(np.all(out["right"][~inner] < 0)), "tree leaves")
    feats = out["feature"][inner]
    _check(bool(np.all((feats >= 0) & (feats < n_features))), "tree features")
    out["x32"] = bool(t.get("x32", False))
    return out


def _pack(
    trees: Sequence[tuple[Any, ...]], base: float, scale: float, x32: bool = False
) -> dict[str, Any]:
    """Concatenate per-tree arrays (feature, threshold, left, right, value, missing_left;
    children local, -1 at leaves) into one flat forest with global child indices."""
    names = ("feature", "threshold", "left", "right", "value", "missing_left")
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    roots, offset, depth = [], 0, 0
    for feature, threshold, left, right, value, missing in trees:
        leaf = left < 0
        roots.append(offset)
        parts["feature"].append(np.where(leaf, 0, feature))
        parts["threshold"].append(np.where(leaf, 0.0, threshold))
        parts["left"].append(np.where(leaf, -1, left + offset))
        parts["right"].append(np.where(leaf, -1, right + offset))
        parts["value"].append(value)
        parts["missing_left"].append(missing)
        depth = max(depth, _depth(left, right))
        offset += len(left)
    out: dict[str, Any] = {k: np.concatenate(v) for k, v in parts.items()}
    out["feature"] = out["feature"].astype(np.int64)
    out["left"], out["right"] = out["left"].astype(np.int64), out["right"].astype(np.int64)
    out["missing_left"] = out["missing_left"].astype(bool)
    out["roots"] = np.asarray(roots, dtype=np.int64)
    out |= {"base": float(base), "scale": float(scale), "depth": int(depth), "x32": x32}
    return out


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    depth, frontier = 0, [0]
    while frontier:
        nxt = [c for n in frontier if left[n] >= 0 for c in (left[n], right[n])]
        if nxt:
            depth += 1
        frontier = nxt
    return depth


def _export_hgb(hgb: Any) -> dict[str, Any]:
    trees = []
    for (pred,) in hgb._predictors:  # one predictor per iteration for a regressor
        nodes = pred.nodes
        leaf = nodes["is_leaf"].astype(bool)
        left = np.where(leaf, -1, nodes["left"].astype(np.int64))
        right = np.where(leaf, -1, nodes["right"].astype(np.int64))
        trees.append(
            (
                nodes["feature_idx"].astype(np.int64),
                nodes["num_threshold"].astype(np.float64),
                left,
                right,
                nodes["value"].astype(np.float64),
                nodes["missing_go_to_left"].astype(bool),
            )
        )
    return _pack(trees, float(np.ravel(hgb._baseline_prediction)[0]), 1.0)


def _export_forest(forest: Any) -> dict[str, Any]:
    trees = []
    for est in forest.estimators_:
        t = est.tree_
        left = t.children_left.astype(np.int64)
        trees.append(
            (
                t.feature.astype(np.int64),
                t.threshold.astype(np.float64),
                left,
                t.children_right.astype(np.int64),
                t.value[:, 0, 0].astype(np.float64),
                np.asarray(t.missing_go_to_left, dtype=bool)
                if hasattr(t, "missing_go_to_left")
                else np.zeros(len(left), dtype=bool),
            )
        )
    return _pack(trees, 0.0, 1.0 / len(trees), x32=True)  # sklearn trees split float32 X


def _walk(t: Mapping[str, Any], X: np.ndarray) -> np.ndarray:
    """Sum of every tree's leaf value for every row: all (row, tree) pairs walk down one level
    per iteration; pairs that reached a leaf drop out of the active set. ``X`` is finite
    (``predict`` validates it), so ``missing_left`` is kept in the format but never consulted."""
    if t.get("x32"):
        X = X.astype(np.float32).astype(np.float64)
    n, roots = len(X), t["roots"]
    flat = np.ascontiguousarray(X).ravel()
    offset = np.repeat(np.arange(n) * X.shape[1], len(roots))  # (row, tree) pairs, row-major
    node = np.tile(roots, n)
    left, feature, threshold = t["left"], t["feature"], t["threshold"]
    child = np.column_stack([left, t["right"]]).ravel()  # node's children at 2 node + (0, 1)
    active = np.flatnonzero(left[node] >= 0)
    while active.size:  # children lie after their parent (checked on load): this ends
        at = node[active]
        x = flat[offset[active] + feature[at]]
        nxt = child[2 * at + (x > threshold[at])]
        node[active] = nxt
        active = active[left[nxt] >= 0]
    total = t["value"][node].reshape(n, len(roots)).sum(axis=1)
    return t["base"] + t["scale"] * total
