"""Shared by the analytic model tests: the raw closed form and kernel strategies."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kernels_by_hand import add, matmul, matmul_gelu

from costmodel.analytic import AnalyticModel
from costmodel.kernel import Kernel
from costmodel.spec import load_target

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def model(**overrides: float) -> AnalyticModel:
    return AnalyticModel(load_target("ascend910b", overrides), "raw")  # the closed form as specced


def cost(kernel: Kernel, **overrides: float):
    return model(**overrides).evaluate([kernel])[0]


# -- strategies: kernels as the lowering writes them ------------------------------------------
pow2 = st.sampled_from


SHAPES = [(512, 512, 512), (1024, 2048, 512), (2048, 1024, 4096)]


@st.composite
def matmuls(
    draw: st.DrawFn, shape: tuple[int, int, int] | None = None, itemsize: int | None = None
) -> Kernel:
    size = shape or draw(st.sampled_from(SHAPES))
    bm, bn = draw(pow2([64, 128, 256])), draw(pow2([64, 128, 256]))
    bk = draw(pow2([32, 64, 128, 256]))
    l0 = (min(bm, 128), min(bn, 128), min(bk, draw(pow2([32, 64]))))
    kernel = matmul(
        size, (bm, bn, bk), l0, draw(st.integers(1, 24)), draw(st.booleans()),
        out_itemsize=itemsize or draw(st.sampled_from([2, 4])),
    )  # fmt: skip
    return kernel


@st.composite
def matmul_groups(draw: st.DrawFn) -> list[Kernel]:
    """Many configs of one matmul (what the bilevel search scores in one batch)."""
    shape, itemsize = draw(st.sampled_from(SHAPES)), draw(st.sampled_from([2, 4]))
    return draw(st.lists(matmuls(shape, itemsize), min_size=1, max_size=16))


@st.composite
def adds(draw: st.DrawFn) -> Kernel:
    return add(
        elements=draw(st.sampled_from([1 << 14, 1 << 18, 1 << 22])),
        tile=draw(st.sampled_from([1024, 4096, 16384])),
        block_dim=draw(st.integers(1, 48)),
        double_buffer=draw(st.booleans()),
    )


@st.composite
def mixed(draw: st.DrawFn) -> Kernel:
    l1 = (draw(pow2([64, 128])), draw(pow2([64, 128])), draw(pow2([64, 128, 256])))
    return matmul_gelu(
        draw(st.sampled_from([512, 1024])), l1, (l1[0], l1[1], 64), draw(st.integers(1, 24)),
        draw(st.booleans()),
    )  # fmt: skip


kernels = st.one_of(matmuls(), adds(), mixed())
targets = st.sampled_from(
    [
        load_target("ascend910b"),
        load_target("ascend910b", {"l2_bytes": 0}),
        load_target("ascend910"),
    ]
)
