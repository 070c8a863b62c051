"""The learned cost model: calibrated analytic latency times a learned correction
(docs/cost-model.md).

``latency = analytic(kernel; fitted constants) * exp(base(x) + local(x))`` where ``x`` are the
kernel's features (:mod:`costmodel.learned.features`), ``base`` is the corrector trained on a
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
from typing import Any, NamedTuple

import numpy as np

from costmodel.analytic import AnalyticModel, Breakdown, load_size, tensor_bytes
from costmodel.base import CostModel, KernelCost, MeasuredKernel, read_model_doc
from costmodel.exceptions import CostModelError
from costmodel.kernel import Kernel, KernelBatch, handoffs
from costmodel.l2_context import L2Touches
from costmodel.learned.corrector import LatencyCorrector
from costmodel.learned.features import FEATURES, kernel_features, per_row, row_features
from costmodel.spec import Target, fitted_lineage

__all__ = ["BatchTerms", "LearnedModel", "shipped_model_path"]

log = logging.getLogger(__name__)

STATE_SCHEMA = 1
LOCAL_PARAMS: dict[str, Any] = {
    "kind": "hgb",
    "max_iter": 40,
    "learning_rate": 0.1,
    "max_leaf_nodes": 7,
    "min_samples_leaf": 5,
    "l2_regularization": 5.0,
}
MIN_LOCAL_ROWS = 24


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
        # CANN's library kernels (HardwareSpec.library) pay a longer prologue, a measured cost
        # the correction never saw (it learns generated kernels): the kernel is corrected as
        # generated and the prologue added as it is, as the simulator and the closed form do
        self.prologue_us = target.spec.library_prologue_us
        generated = target.spec.replace(library_prologue_cycles=0.0)
        self.analytic = AnalyticModel(Target(generated, target.precision))
        self.base: LatencyCorrector | None = None
        self.local: LatencyCorrector | None = None
        self.trained_on: dict[str, Any] = {}
        self._rows: list[tuple[Kernel, list[float], float]] = []
        self.refits = 0
        self._digest: tuple[Any, str] = (None, "")
        self.generation = 0  # bumped on every change of state (version is cached on it)
        if state is None:  # the shipped model of the target (or of the chip it is a SKU of)
            for name in fitted_lineage(target.spec.name):
                path = shipped_model_path(name)
                if path.is_file():
                    state = read_model_doc(path).get("state")
                    break
        if state is not None:
            self.load_state(state)

    # -- state ------------------------------------------------------------------------------
    @classmethod
    def uncorrected(cls, target: Target) -> LearnedModel:
        """A model with no correction yet: the target's calibrated analytic model alone (not
        the shipped learned model), the start of :func:`~costmodel.learned.fit_learned`."""
        state = {
            "schema_version": STATE_SCHEMA,
            "features": list(FEATURES),
            "analytic": AnalyticModel(target).state(),
            "base": None,
            "local": None,
            "trained_on": {},
        }
        return cls(target, state=state)

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
    def _correction(self, X: np.ndarray, base: np.ndarray | None = None) -> np.ndarray:
        """The log-correction of each row of features: the base trees' (``base`` when they
        were already asked) plus the local ones'."""
        corr = np.zeros(len(X))
        if self.base is not None:
            corr += self.base.predict(X) if base is None else base
        if self.local is not None:
            corr += self.local.predict(X)
        return corr

    def predict_batch(
        self,
        batch: KernelBatch,
        resident: Mapping[str, float] | None = None,
    ) -> np.ndarray:
        """Latency (us) of every config of ``batch``; ``+inf`` where a buffer overflows."""
        return self.from_terms(self.batch_terms(batch, resident))

    def batch_terms(
        self,
        batch: KernelBatch,
        resident: Mapping[str, float] | None = None,
        *,
        breakdown: Breakdown | None = None,
        sizes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> BatchTerms:
        """What :meth:`predict_batch` computes that a refit of the local correction does not
        change (:meth:`from_terms` finishes it): a caller that keeps them re-costs a batch
        after a refit with the local trees alone. ``sizes``: each row's FLOPs, cube FLOPs and
        compulsory bytes, for rows of several groups (``costmodel.analytic.concat``; with no
        ``resident``, as a concatenation's tensor sizes are its first group's)."""
        spec = self.analytic.target.spec
        b = self.analytic.breakdown_batch(batch, resident) if breakdown is None else breakdown
        X = kernel_features(spec, batch, b, *(sizes or ()))
        return BatchTerms(
            b.latency_us,
            X,
            self.base.predict(X) if self.base is not None else None,
            self._batch_floor(batch, resident, sizes),
            batch.feasible_mask(spec),
            self._made_by(),
        )

    def _batch_floor(
        self,
        batch: KernelBatch,
        resident: Mapping[str, float] | None,
        sizes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> np.ndarray:
        """Each config's roofline floor (:meth:`_floor_us`), its inputs in L2 ``resident``."""
        warm = np.zeros(len(batch))  # input bytes earlier kernels left in L2
        skip = handoffs(batch.streams)
        loads = {
            s.tensor: load_size(s, batch)
            for s in batch.streams
            if s.pipe == "MTE2" and s.tensor not in skip
        }
        for tensor, size in loads.items():
            warm = warm + np.minimum((resident or {}).get(tensor, 0.0), size)
        cube, compulsory = (
            (batch.cube_flops, batch.compulsory_bytes) if sizes is None else sizes[1:]
        )
        return np.asarray(self._floor_us(cube, compulsory - warm))

    def from_terms(self, terms: BatchTerms) -> np.ndarray:
        """:meth:`predict_batch` of the batch the terms were made of, under the model now.

        Raises:
            CostModelError: terms made before the model's state was loaded anew.
        """
        if any(a is not b for a, b in zip(terms.made_by, self._made_by(), strict=True)):
            raise CostModelError("batch terms of an earlier state of the learned model")
        corr = self._correction(terms.X, terms.base)
        out = np.maximum(terms.analytic_us * np.exp(corr), terms.floor_us) + self.prologue_us
        return np.where(terms.feasible, out, np.inf)

    def _made_by(self) -> tuple[Any, Any]:
        """What batch terms depend on beyond the batch: the analytic constants and the base
        correction, as objects (both are replaced, never changed in place, by
        :meth:`load_state` and by ``fit_learned``, which assigns them directly)."""
        return self.analytic.constants, self.base

    def _floor_us(self, cube_flops: Any, cold: Any) -> Any:
        """No correction may take a kernel below its roofline: the cube peak, and the HBM
        peak over its compulsory bytes less the inputs earlier kernels left in L2 (``cold``;
        a warm kernel can run far under its whole I/O over HBM)."""
        spec = self.target.spec
        return 1e6 * np.maximum(
            np.asarray(cube_flops, float) / spec.cube_peak_flops,
            np.maximum(np.asarray(cold, float), 0.0) / spec.hbm_peak_bytes_per_s,
        )

    def evaluate(
        self, kernels: Sequence[Kernel], resident: Mapping[str, float] | None = None
    ) -> list[KernelCost]:
        """The analytic costs of the plan with each latency corrected (``resident``: what is
        in L2 when the plan starts, as ``CostModel.evaluate``).

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        return self._costs(kernels, self.analytic.residency(kernels, warm=resident))

    @property
    def prior(self) -> AnalyticModel:
        """The analytic model this one corrects: a refit never changes it."""
        return self.analytic

    @property
    def learns(self) -> bool:
        return True

    def residency(
        self,
        kernels: Sequence[Kernel],
        touches: Sequence[L2Touches] | None = None,
        warm: Mapping[str, float] | None = None,
    ) -> list[list[float]]:
        """The L2 contexts of the analytic model this one corrects."""
        return self.analytic.residency(kernels, touches, warm)

    def latencies(
        self, kernels: Sequence[Kernel], resident: Sequence[Sequence[float]]
    ) -> np.ndarray:
        """Latency (us) of each kernel in the L2 context given for it (as
        :meth:`AnalyticModel.latencies`).

        Raises:
            InfeasibleConfig: a kernel whose footprint overflows a buffer (named).
        """
        return np.array([c.latency_us for c in self._costs(kernels, resident)], dtype=np.float64)

    def _costs(
        self, kernels: Sequence[Kernel], res: Sequence[Sequence[float]]
    ) -> list[KernelCost]:
        floor = self._floor_us(
            [k.cube_flops for k in kernels],
            [k.compulsory_bytes - _warm_bytes(k, r) for k, r in zip(kernels, res, strict=True)],
        )
        costs: list[KernelCost] = [KernelCost(0.0)] * len(kernels)
        for rows, batch, b in self.analytic.breakdowns(kernels, res):
            X = kernel_features(self.analytic.target.spec, batch, b, *per_row(kernels, rows))
            factor = np.exp(self._correction(X))
            for n, i in enumerate(rows):
                c = self.analytic._cost(b, n)
                costs[i] = KernelCost(
                    max(c.latency_us * factor[n], floor[i]) + self.prologue_us,
                    c.pipes_us,
                    c.bound,
                    c.hbm_bytes,
                    c.l2_hit_rate,
                    gap_us=c.gap_us,
                )
        return costs

    # -- learning ---------------------------------------------------------------------------
    def update(self, rows: Sequence[MeasuredKernel]) -> None:
        """Add measured kernels (:class:`costmodel.measure.Measurement` records: the kernel,
        its L2 context, its latency) and refit the local correction on every one this model
        has been given."""
        for r in rows:
            self._rows.append((r.kernel, [float(x) for x in r.resident], float(r.cost.latency_us)))
        if len(self._rows) < MIN_LOCAL_ROWS:
            return
        kernels = [k for k, _, _ in self._rows]
        resident = [r for _, r, _ in self._rows]
        # the kernels as generated: a library kernel's measured time less its prologue
        measured = np.array([m for _, _, m in self._rows]) - self.prologue_us
        X, analytic = row_features(self.analytic, kernels, resident)
        base = self.base.predict(X) if self.base is not None else 0.0
        y = np.log(measured / analytic) - base
        self.local = LatencyCorrector(**LOCAL_PARAMS).fit(X, y)
        self.refits += 1
        self.generation += 1


class BatchTerms(NamedTuple):
    """A batch's latency terms that a refit of the local correction leaves as they are
    (:meth:`LearnedModel.batch_terms`)."""

    analytic_us: np.ndarray
    X: np.ndarray  # the features
    base: np.ndarray | None  # the base correction of every row
    floor_us: np.ndarray
    feasible: np.ndarray
    made_by: tuple[Any, Any]  # the constants and base correction they were made under

    @property
    def nbytes(self) -> int:
        arrays = (self.analytic_us, self.X, self.base, self.floor_us, self.feasible)
        return sum(a.nbytes for a in arrays if a is not None)


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
