"""Shared by the learned model tests: hand-made kernels and synthetic measurement tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from kernels_by_hand import add, gelu, matmul, matmul_gelu

from costmodel.analytic import AnalyticModel
from costmodel.base import KernelCost
from costmodel.kernel import Kernel
from costmodel.learned.model import MIN_LOCAL_ROWS
from costmodel.measure import (
    SIMULATOR_VERSION,
    Measurement,
    Provenance,
    measurements,
    table_frame,
)
from costmodel.spec import load_target

T910B = load_target("ascend910b")
SPEC = T910B.spec
PARAMS = {"kind": "hgb", "max_iter": 50, "max_leaf_nodes": 7, "min_samples_leaf": 2}


def hand_kernels() -> list[Kernel]:
    """Over two dozen kernels of every unit: memory-, compute- and launch-bound."""
    out = [
        matmul(size, l1, l0, bd, db)
        for size, l1, l0 in [
            (512, (128, 256, 128), (128, 128, 64)),
            (1024, (128, 256, 256), (128, 128, 128)),
            (2048, (128, 256, 256), (128, 128, 128)),
            ((4096, 4096, 128), (128, 256, 128), (128, 128, 64)),
        ]
        for bd, db in [(24, True), (8, False)]
    ]
    out += [add(e, t, bd, db) for e, t, bd, db in [
        (1 << 12, 1024, 4, True), (1 << 16, 4096, 8, False), (1 << 18, 4096, 48, True),
        (1 << 20, 16384, 24, True), (1 << 22, 16384, 48, True), (1 << 22, 8192, 48, False),
    ]]  # fmt: skip
    out += [matmul_gelu(s, block_dim=bd) for s in (512, 1024) for bd in (4, 24)]
    out += [matmul_gelu(512, (64, 64, 128), (64, 64, 64), 8, False)]
    out += [gelu(s, tile=t, block_dim=bd) for s, t, bd in [
        (256, 1024, 8), (1024, 4096, 16), (1024, 16384, 48), (2048, 16384, 48),
    ]]  # fmt: skip
    out += [
        dataclasses.replace(k, vector_cycles_tile=k.vector_cycles_tile * f)
        for k, f in [(add(1 << 18, 2048, 8), 60), (add(1 << 20, 8192, 48), 90)]
    ]
    out += [matmul(1024, (128, 128, 128), (128, 128, 64), 16, True, out_itemsize=4)]
    out += [matmul((1024, 2048, 512), (128, 128, 128), (128, 128, 64), 12, True, nd2nz=True)]
    assert len(out) > MIN_LOCAL_ROWS and all(k.feasible(SPEC)[0] for k in out)
    return out


KERNELS = hand_kernels()


def cold(kernels: Sequence[Kernel]) -> list[list[float]]:
    return [[0.0] * sum(s.is_load for s in k.streams) for k in kernels]


def alone(model: Any, kernels: Sequence[Kernel]) -> np.ndarray:
    """Each kernel scored on its own (a cold L2), as it was measured."""
    return np.array([model.predict([k])[0] for k in kernels])


ANALYTIC = alone(AnalyticModel(T910B), KERNELS)  # the calibrated analytic model


def rows(
    factor: float | Callable[[Kernel], float],
    kernels: Sequence[Kernel] = KERNELS,
    target: str = "ascend910b",
    family: str = "hand",
) -> list[Measurement]:
    """Records measuring ``factor`` x the calibrated analytic latency of each kernel."""
    f = factor if callable(factor) else (lambda k: factor)
    analytic = alone(AnalyticModel(T910B), kernels)
    costs = [KernelCost(f(k) * a) for k, a in zip(kernels, analytic, strict=True)]
    provenance = Provenance(
        target, SPEC.digest(), "auto", SIMULATOR_VERSION, seed=0, source="synthetic", family=family
    )
    return measurements(kernels, costs, cold(kernels), provenance)


def table(factor: float | Callable[[Kernel], float], **kw: Any) -> pd.DataFrame:
    return table_frame(rows(factor, **kw))
