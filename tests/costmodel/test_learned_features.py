"""The learned model's features (costmodel.learned.features) of batches and kernels."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernels_by_hand import add, matmul, matmul_gelu
from learned_helpers import KERNELS, SPEC, T910B, cold
from threadpoolctl import threadpool_limits

from costmodel.analytic import AnalyticModel, batch_of, score
from costmodel.kernel import Kernel
from costmodel.learned import FEATURES, kernel_features
from costmodel.measure import RowBatches

PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """HGB's OpenMP threads spin against any other load on a small CI box (100x slower)."""
    with threadpool_limits(limits=1):
        yield


# -- features -----------------------------------------------------------------------------------
pow2 = st.sampled_from


@st.composite
def config_groups(draw: st.DrawFn) -> list[Kernel]:
    """Several configs of one kernel (what the search scores as one batch)."""
    which = draw(st.sampled_from(["matmul", "add", "mixed"]))
    n = draw(st.integers(1, 8))
    out = []
    size = draw(st.sampled_from([512, (1024, 2048, 512)]))
    for _ in range(n):
        db = draw(st.booleans())
        if which == "matmul":
            l1 = (draw(pow2([64, 128, 256])), draw(pow2([64, 128])), draw(pow2([64, 128])))
            out.append(
                matmul(size, l1, (min(l1[0], 128), l1[1], 64), draw(st.integers(1, 24)), db)
            )
        elif which == "add":
            out.append(add(1 << 18, draw(pow2([1024, 4096, 16384])), draw(st.integers(1, 48)), db))
        else:
            l1 = (draw(pow2([64, 128])), draw(pow2([64, 128])), 128)
            out.append(matmul_gelu(512, l1, (l1[0], l1[1], 64), draw(st.integers(1, 24)), db))
    return out


def features_of(kernels: Sequence[Kernel], resident: dict[str, float] | None = None):
    model = AnalyticModel(T910B)
    batch = batch_of(kernels)
    return kernel_features(SPEC, batch, model.breakdown_batch(batch, resident))


@PROPS
@given(config_groups(), st.floats(0.0, 1.0))
def test_features_of_a_batch_are_the_features_of_each_config(
    kernels: list[Kernel], warm: float
) -> None:
    resident = {s.tensor: warm * s.tensor_bytes for s in kernels[0].streams}
    X = features_of(kernels, resident)
    assert X.shape == (len(kernels), len(FEATURES))
    assert np.all(np.isfinite(X))
    for i, k in enumerate(kernels):
        np.testing.assert_allclose(X[i], features_of([k], resident)[0], rtol=1e-12, atol=0)


def test_features_of_different_kernels_stacked_by_layout_are_their_own() -> None:
    """Rows of one layout but different sizes (a calibration table) take their per-row flops,
    so stacking them changes nothing."""
    rb = RowBatches(KERNELS, cold(KERNELS))
    assert any(len(part[0]) > 1 for part in rb.parts)
    model = AnalyticModel(T910B)
    for idx, batch, res in rb.parts:
        per_row = [
            np.array([getattr(KERNELS[i], f) for i in idx], dtype=np.float64)
            for f in ("flops", "cube_flops", "compulsory_bytes")
        ]
        X = kernel_features(SPEC, batch, score(SPEC, model.constants, batch, res), *per_row)
        for row, i in enumerate(idx):
            np.testing.assert_allclose(X[row], features_of([KERNELS[i]])[0], rtol=1e-12)


def test_features_see_the_unit_and_the_buffering() -> None:
    X = features_of([matmul(1024, double_buffer=True)])[0]
    Y = features_of([matmul(1024, double_buffer=False)])[0]
    col = {name: i for i, name in enumerate(FEATURES)}
    assert (X[col["double_buffer"]], Y[col["double_buffer"]]) == (1.0, 0.0)
    assert X[col["unit_cube"]] == 1.0 and X[col["unit_vector"]] == 0.0
    assert features_of([add()])[0][col["unit_vector"]] == 1.0
    assert features_of([matmul_gelu()])[0][col["kind_cube_epilogue"]] == 1.0
    assert len(set(FEATURES)) == len(FEATURES)
