"""The learned cost model: calibrated analytic latency times a learned correction (DESIGN §6).

``latency = analytic(kernel; fitted constants) * exp(base(x) + local(x))`` where ``x`` are the
kernel's features (:mod:`costmodel.features`), ``base`` is the corrector trained on a
calibration table (the one shipped with the package for the target, or one the user fits with
``autotune calibrate --fit``), and ``local`` is refitted by :meth:`LearnedModel.update` on the
rows a tuning run measures (TVM's measure-retrain loop). State round-trips as JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from costmodel._batching import load_size, tensor_bytes
from costmodel.analytic import AnalyticConstants, AnalyticModel
from costmodel.base import CostModel, KernelCost, read_model_doc
from costmodel.calibration import Calibration, RowBatches, fit_constants
from costmodel.corrector import LatencyCorrector
from costmodel.dataset import kernel_from_json, read_table
from costmodel.exceptions import CostModelError
from costmodel.features import FEATURES, kernel_features
from costmodel.kernel import PIPES, Kernel, KernelBatch, handoffs
from costmodel.spec import Target

__all__ = ["LearnedModel", "fit_learned", "select_params", "shipped_model_path", "table_arrays"]

log = logging.getLogger(__name__)

STATE_SCHEMA = 1
CANDIDATE_PARAMS: tuple[dict[str, Any], ...] = (
    {
        "kind": "hgb",
        "max_iter": 150,
        "learning_rate": 0.1,
        "max_leaf_nodes": 15,
        "min_samples_leaf": 8,
        "l2_regularization": 1.0,
    },
    {
        "kind": "hgb",
        "max_iter": 100,
        "learning_rate": 0.1,
        "max_leaf_nodes": 63,
        "min_samples_leaf": 4,
        "l2_regularization": 1.0,
    },
)  # smallest first: a bigger one must beat the choice by SELECT_MARGIN
SELECT_MARGIN = 0.02
DEFAULT_PARAMS: dict[str, Any] = CANDIDATE_PARAMS[0]  # also the comparison kinds' settings
LOCAL_PARAMS: dict[str, Any] = {
    "kind": "hgb",
    "max_iter": 40,
    "learning_rate": 0.1,
    "max_leaf_nodes": 7,
    "min_samples_leaf": 5,
    "l2_regularization": 5.0,
}
MIN_LOCAL_ROWS = 24
CALIBRATION_ROWS = 2000


def shipped_model_path(target: str) -> Path:
    """Where the package keeps the default learned model of ``target`` (may not exist)."""
    return Path(str(resources.files("costmodel") / "data" / f"learned-{target}.json.gz"))


class LearnedModel(CostModel):
    """Analytic latency with fitted constants, corrected by a learned log ratio.

    Args:
        target: hardware spec and precision mode.
        state: a saved state (:meth:`state`); default: the package's model for the target's
            spec name, else the calibrated analytic model uncorrected.
    """

    kind = "learned"

    def __init__(self, target: Target, state: Mapping[str, Any] | None = None) -> None:
        super().__init__(target)
        self.analytic = AnalyticModel(target)
        self.base: LatencyCorrector | None = None
        self.local: LatencyCorrector | None = None
        self.trained_on: dict[str, Any] = {}
        self._rows: list[tuple[Kernel, list[float], float]] = []
        self.refits = 0
        self._digest: tuple[Any, str] = (None, "")
        self.generation = 0  # bumped on every change of state (version is cached on it)
        if state is None:
            path = shipped_model_path(target.spec.name)
            if path.is_file():
                state = read_model_doc(path).get("state")
        if state is not None:
            self.load_state(state)

    # -- state ------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "schema_version": STATE_SCHEMA,
            "features": list(FEATURES),
            "analytic": self.analytic.state(),
            "base": self.base.to_json() if self.base is not None else None,
            "local": self.local.to_json() if self.local is not None else None,
            "trained_on": self.trained_on,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Raises: CostModelError for another schema, other features or a malformed state."""
        if state.get("schema_version") != STATE_SCHEMA:
            raise CostModelError(
                f"learned model state has schema_version {state.get('schema_version')}; this "
                f"tool reads {STATE_SCHEMA}"
            )
        if list(state.get("features", [])) != list(FEATURES):
            raise CostModelError(
                "learned model was trained on other features; refit it with "
                "`autotune calibrate --fit`"
            )
        self.analytic.load_state(state.get("analytic", {}))
        base, local = state.get("base"), state.get("local")
        self.base = LatencyCorrector.from_json(base) if base else None
        self.local = LatencyCorrector.from_json(local) if local else None
        self.trained_on = dict(state.get("trained_on", {}))
        self.generation += 1

    @property
    def version(self) -> str:
        """Changes with the constants and either correction (a digest of the state, kept
        until the state changes: it is read on every trial)."""
        key = (self.generation, id(self.base), id(self.local), self.analytic.version)
        if self._digest[0] != key:
            text = json.dumps(self.state(), sort_keys=True).encode()
            self._digest = (key, hashlib.sha256(text).hexdigest()[:10])
        return f"{super().version}-{self._digest[1]}"

    @classmethod
    def from_state(cls, target: Target, state: Mapping[str, Any]) -> LearnedModel:
        return cls(target, state)  # not via the shipped model: the state replaces it

    # -- scoring ----------------------------------------------------------------------------
    def _correction(self, X: np.ndarray) -> np.ndarray:
        corr = np.zeros(len(X))
        if self.base is not None:
            corr += self.base.predict(X)
        if self.local is not None:
            corr += self.local.predict(X)
        return corr

    def predict_batch(
        self, batch: KernelBatch, resident: Mapping[str, float] | None = None
    ) -> np.ndarray:
        """Latency (us) of every config of ``batch``; ``+inf`` where a buffer overflows."""
        spec = self.target.spec
        b = self.analytic.breakdown_batch(batch, resident)
        out = b.latency_us * np.exp(self._correction(kernel_features(spec, batch, b)))
        warm = np.zeros(len(batch))  # input bytes earlier kernels left in L2
        skip = handoffs(batch.streams)
        sizes = {
            s.tensor: load_size(s, batch)
            for s in batch.streams
            if s.pipe == "MTE2" and s.tensor not in skip
        }
        for tensor, size in sizes.items():
            warm = warm + np.minimum((resident or {}).get(tensor, 0.0), size)
        out = np.maximum(out, self._floor_us(batch.cube_flops, batch.compulsory_bytes - warm))
        return np.where(batch.feasible_mask(spec), out, np.inf)

    def _floor_us(self, cube_flops: Any, cold: Any) -> Any:
        """No correction may take a kernel below its roofline: the cube peak, and the HBM
        peak over its compulsory bytes less the inputs earlier kernels left in L2 (``cold``;
        a warm kernel can run far under its whole I/O over HBM)."""
        spec = self.target.spec
        return 1e6 * np.maximum(
            np.asarray(cube_flops, float) / spec.cube_peak_flops,
            np.maximum(np.asarray(cold, float), 0.0) / spec.hbm_peak_bytes_per_s,
        )

    def evaluate(self, kernels: Sequence[Kernel]) -> list[KernelCost]:
        """The analytic costs of the plan with each latency corrected.

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        res = self.analytic.residency(kernels)
        floor = self._floor_us(
            [k.cube_flops for k in kernels],
            [k.compulsory_bytes - _warm_bytes(k, r) for k, r in zip(kernels, res, strict=True)],
        )
        costs: list[KernelCost] = [KernelCost(0.0)] * len(kernels)
        for rows, batch, b in self.analytic.breakdowns(kernels, res):
            X = kernel_features(self.target.spec, batch, b, *_per_row(kernels, rows))
            factor = np.exp(self._correction(X))
            for n, i in enumerate(rows):
                c = self.analytic._cost(b, n)
                costs[i] = KernelCost(
                    max(c.latency_us * factor[n], floor[i]),
                    c.pipes_us,
                    c.bound,
                    c.hbm_bytes,
                    c.l2_hit_rate,
                )
        return costs

    # -- learning ---------------------------------------------------------------------------
    def update(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Add measured rows (``kernel`` as a Kernel or its JSON, ``resident``, ``latency_us``)
        and refit the local correction on every row this model has been given."""
        for r in rows:
            k = r["kernel"]
            kernel = k if isinstance(k, Kernel) else kernel_from_json(_json(k))
            res = r["resident"]
            res = _json(res) if isinstance(res, str) else res
            self._rows.append((kernel, [float(x) for x in res], float(r["latency_us"])))
        if len(self._rows) < MIN_LOCAL_ROWS:
            return
        kernels = [k for k, _, _ in self._rows]
        resident = [r for _, r, _ in self._rows]
        measured = np.array([m for _, _, m in self._rows])
        X, analytic = _features(self.analytic, kernels, resident)
        base = self.base.predict(X) if self.base is not None else 0.0
        y = np.log(measured / analytic) - base
        self.local = LatencyCorrector(**LOCAL_PARAMS).fit(X, y)
        self.refits += 1
        self.generation += 1


def _warm_bytes(kernel: Kernel, resident: Sequence[float]) -> float:
    """Bytes of the kernel's inputs that earlier kernels left in L2 (each tensor once)."""
    skip = handoffs(kernel.streams)
    loads = [s for s in kernel.streams if s.pipe == "MTE2"]
    warm = {
        s.tensor: r * tensor_bytes(s, kernel)
        for s, r in zip(loads, resident, strict=True)
        if s.tensor not in skip
    }
    return float(sum(warm.values()))


def _json(x: Any) -> Any:
    return json.loads(x) if isinstance(x, str | bytes) else x


def _per_row(kernels: Sequence[Kernel], rows: Sequence[int]) -> tuple[np.ndarray, ...]:
    return (
        np.array([kernels[i].flops for i in rows], dtype=np.float64),
        np.array([kernels[i].cube_flops for i in rows], dtype=np.float64),
        np.array([kernels[i].compulsory_bytes for i in rows], dtype=np.float64),
    )


def _features(
    analytic: AnalyticModel, kernels: Sequence[Kernel], resident: Sequence[Sequence[float]]
) -> tuple[np.ndarray, np.ndarray]:
    """Features and analytic latency of measured rows, each scored in its own context."""
    from costmodel._pipeline import score

    spec = analytic.target.spec
    batches = RowBatches(kernels, resident)
    X = np.empty((len(kernels), len(FEATURES)))
    lat = np.empty(len(kernels))
    for rows, batch, res in batches.parts:
        b = score(spec, analytic.constants, batch, res)
        X[rows] = kernel_features(spec, batch, b, *_per_row(kernels, list(rows)))
        lat[rows] = b.latency_us
    return X, lat


def table_arrays(frame: Any) -> tuple[list[Kernel], list[list[float]], np.ndarray]:
    """Kernels, residencies and measured latencies of a calibration table's rows."""
    kernels = [kernel_from_json(json.loads(k)) for k in frame["kernel"]]
    resident = [json.loads(r) for r in frame["resident"]]
    return kernels, resident, frame["latency_us"].to_numpy(dtype=np.float64)


def fit_learned(
    tables: Any,
    target: Target,
    *,
    params: Mapping[str, Any] | None = None,
    calibrate: bool = True,
) -> LearnedModel:
    """Fit the analytic constants, then the correction, on calibration rows.

    Args:
        tables: parquet paths, or a DataFrame of rows (:func:`costmodel.dataset.read_table`).
        target: the target the rows were measured on.
        params: corrector hyperparameters (default: the best of :data:`CANDIDATE_PARAMS` by
            :func:`select_params`).
        calibrate: fit the analytic constants first (else keep the target's current ones).

    Raises:
        CostModelError: unreadable tables, or rows of another target.
    """
    frame = tables if hasattr(tables, "columns") else read_table(list(tables))
    names = set(frame["target"])
    if names != {target.spec.name}:
        raise CostModelError(
            f"rows were measured on {sorted(names)}, not on '{target.spec.name}'; "
            "pass tables of one target"
        )
    digests = set(frame["spec_digest"]) - {target.spec.digest()}
    if digests:
        raise CostModelError(
            f"rows were measured on another spec of '{target.spec.name}' (spec digest "
            f"{sorted(digests)}, this one is {target.spec.digest()}; a --set changes it): "
            "calibrate on this spec first"
        )
    kernels, resident, measured = table_arrays(frame)
    model = LearnedModel(target, state=_empty_state(target))
    cal: Calibration | None = None
    if calibrate:  # the constants are few: a fixed subsample of rows pins them down
        pick = np.random.default_rng(0).permutation(len(kernels))[:CALIBRATION_ROWS]
        cal = fit_constants(
            target.spec,
            RowBatches([kernels[i] for i in pick], [resident[i] for i in pick]),
            measured[pick],
            start=AnalyticConstants(),  # from the spec as written: no earlier fit leaks in
            source="fit_learned",
            pipes={
                p: frame[f"pipe_{p}_us"].to_numpy(dtype=np.float64)[pick]
                for p in PIPES
                if f"pipe_{p}_us" in frame.columns
            },
        )
        model.analytic.constants = cal.constants
    X, analytic = _features(model.analytic, kernels, resident)
    y = np.log(measured / analytic)
    cv: dict[str, Any] = {}
    if params is None:
        params, cv = select_params(X, y, frame["family"].to_numpy())
    model.base = LatencyCorrector(**params).fit(X, y)
    model.generation += 1
    model.trained_on = {
        "rows": len(kernels),
        "signatures": len(set(frame["signature"])),
        "families": sorted(set(frame["family"])),
        "calibration": cal.to_json() if cal is not None else None,
        **({"selection": cv} if cv else {}),  # the choice itself is the corrector's params
    }
    return model


def _latency_mape(log_ratio: np.ndarray, predicted: np.ndarray) -> float:
    """Mean relative latency error of predicted log ratios (analytic x exp(ratio))."""
    return float(np.mean(np.abs(np.expm1(np.asarray(predicted) - np.asarray(log_ratio)))))


def select_params(
    X: np.ndarray,
    y: np.ndarray,
    families: np.ndarray,
    candidates: Sequence[Mapping[str, Any]] = CANDIDATE_PARAMS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The corrector hyperparameters that predict held-out families best, and the scores.

    Each candidate (smallest first) is cross-validated with whole model families held out in
    turn (signatures two families share are not removed, unlike the held-out evaluation); its
    score is the mean over folds of the latency MAPE. A later, bigger candidate replaces the
    choice only if it beats it by more than ``SELECT_MARGIN`` (relative): bigger trees cost
    file size and prediction time. Fewer than three families: the first candidate.

    Returns:
        The chosen parameters and ``{"folds", "mape"}`` (one score per candidate, in order;
        empty when nothing was compared).

    Raises:
        ValueError: a candidate's parameters fail to fit (never chosen silently).
    """
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, GroupKFold

    families = np.asarray(families).astype(str)
    n = len(set(families))
    if n < 3 or len(candidates) < 2:
        return dict(candidates[0]), {}
    folds = min(4, n)
    search = GridSearchCV(
        LatencyCorrector(),
        [{k: [v] for k, v in c.items()} for c in candidates],
        scoring=make_scorer(_latency_mape, greater_is_better=False),
        cv=GroupKFold(n_splits=folds),
        refit=False,
        error_score="raise",
    ).fit(X, y, groups=families)
    scores = [-float(s) for s in search.cv_results_["mean_test_score"]]
    best = 0
    for i, score in enumerate(scores):
        if score < scores[best] * (1.0 - SELECT_MARGIN):
            best = i
    log.info("corrector candidates, fold MAPE %s: chose %s", scores, candidates[best])
    return dict(candidates[best]), {"folds": folds, "mape": [round(x, 5) for x in scores]}


def _empty_state(target: Target) -> dict[str, Any]:
    return {
        "schema_version": STATE_SCHEMA,
        "features": list(FEATURES),
        "analytic": AnalyticModel(target).state(),
        "base": None,
        "local": None,
        "trained_on": {},
    }
