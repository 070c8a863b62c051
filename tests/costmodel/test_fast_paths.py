"""The cost oracle's and the models' fast paths return exactly what the plain paths return,
on fusion plans, L2 sizes, L2 contexts and made-up measurements drawn by hypothesis. The plain
path is the product's own where it still exists (``LearnedModel.predict_batch``,
``AnalyticModel.predict_batch``, ``load_hit_fractions(share=False)``, ``Lowering.grid``), and
a copy of the code as it was before (here) only where the fast path replaced it.

* the oracle's grid order is the ranking model's stable order of the raw grid, and its costs
  are the study model's ``predict_batch`` of that grid, whether the grid's first ranking lends
  the learned model its breakdown, kept batch terms re-cost it after a refit (or after its
  base or constants are replaced, as ``fit_learned`` does), an analytic study model shares
  the ranking's costs, or ``prefetch`` costed many groups' grids in one call;
* ``best`` found by the group object's identity equals ``best`` by its signature;
* the analytic model's plan residency from kept L2 touches equals the one from kernels, and
  its L2 hit fractions (work shared between streams of one key) the ones worked out afresh;
* the corrector's prediction without scikit-learn's validation equals it with;
* feasibility by signature is the lowering's own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.utils.validation import validate_data

from costmodel.analytic import AnalyticModel, l2_touches, load_size, tensor_bytes
from costmodel.analytic.l2 import (
    GridView,
    L2Residency,
    _first_wave_requests,
    _window_bytes,
    load_hit_fractions,
    wave_working_set,
)
from costmodel.base import KernelCost
from costmodel.kernel import handoffs
from costmodel.learned import LearnedModel
from costmodel.measure import Provenance, measurements
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.ir import FusionGroup

EXPORTS = Path(__file__).parents[1] / "fixtures" / "exports"
TARGET = load_target()


def slow(examples: int) -> settings:
    """Hypothesis settings for examples that build grids (each takes a while)."""
    return settings(
        max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


@pytest.fixture(scope="module")
def ctx() -> FusionContext:
    path = EXPORTS / "resnet18_legacy_op14.onnx"
    return FusionContext(load_graph(path, input_shapes={"image": (8, 3, 32, 32)}))


def _groups(ctx: FusionContext, oracle: CostOracle, seed: int, density: float = 0.7):
    """The groups of a plan: each fusible edge chosen with probability ``density``."""
    draws = np.random.default_rng(seed).random(len(ctx.edges))
    chosen = [e for e, u in zip(ctx.edges, draws, strict=True) if u < density]
    return [ctx.group(part) for part in ctx.repair(chosen, oracle.feasible)]


def _refit(model: LearnedModel, oracle: CostOracle, groups: list[FusionGroup], seed: int) -> None:
    """Refit the local correction on made-up measurements of the groups' kernels."""
    rng = np.random.default_rng(seed)
    kernels = [oracle.lowering.kernel(g, c) for g in groups for c in oracle.grid(g)[:4]][:80]
    cold = [[0.0] * sum(s.pipe == "MTE2" for s in k.streams) for k in kernels]
    lat = model.analytic.latencies(kernels, cold) * rng.uniform(0.5, 2.0, len(kernels))
    costs = [KernelCost(float(v)) for v in lat]
    model.update(measurements(kernels, costs, cold, Provenance.of(model.target)))


def plain_grid(oracle: CostOracle, g: FusionGroup) -> list:
    """The grid as the oracle ranked it before its fast paths: the ranking model's stable
    order of the lowering's raw grid."""
    raw = oracle.lowering.grid(g)
    ranks = oracle.rank_model.predict_batch(oracle.lowering.batch(g, raw))
    return [raw[i] for i in np.argsort(ranks, kind="stable")]


def plain_costs(oracle: CostOracle, g: FusionGroup) -> np.ndarray:
    """The grid's costs as the oracle made them before: the model's ``predict_batch``."""
    return oracle.model.predict_batch(oracle.lowering.batch(g, plain_grid(oracle, g)))


def _check(oracle: CostOracle, groups: list[FusionGroup]) -> None:
    for g in groups:
        assert oracle.grid(g) == plain_grid(oracle, g)
        want = plain_costs(oracle, g)
        assert np.array_equal(oracle.costs(g), want)
        i = int(np.argmin(want))
        assert oracle.best(g) == (oracle.grid(g)[i], float(want[i]))
        assert oracle.best(dataclasses.replace(g)) == oracle.best(g)  # by hash, then identity


def _study_oracle(ctx: FusionContext, limit: int) -> CostOracle:
    """A study's oracle: the learned model, ranked by an equal calibrated analytic model;
    ``limit`` the kept terms' bytes (a small one drops most, so both paths run)."""
    oracle = CostOracle(
        ctx.graph, TARGET, model=LearnedModel(TARGET), ctx=ctx, rank_model=AnalyticModel(TARGET)
    )
    oracle._terms.limit = limit
    return oracle


@slow(8)
@given(
    seeds=st.lists(st.integers(0, 2**16), min_size=1, max_size=3),
    density=st.sampled_from([0.3, 0.7, 1.0]),
    limit=st.sampled_from([128 << 20, 200_000, 0]),
    ahead=st.sampled_from([0, 1, 2]),  # prefetch: none, the first plan's groups, all
    refits=st.lists(st.integers(0, 2**16), max_size=2),
)
def test_oracle_grids_costs_and_best_are_the_plain_ones(
    ctx: FusionContext,
    seeds: list[int],
    density: float,
    limit: int,
    ahead: int,
    refits: list[int],
) -> None:
    """Plans drawn, some of their groups' grids costed ahead in one call, then every group
    asked in turn; then after each refit, and once the base and constants are replaced (as
    ``fit_learned`` assigns them), again."""
    oracle = _study_oracle(ctx, limit)
    model = oracle.model
    assert isinstance(model, LearnedModel)
    plans = [_groups(ctx, oracle, seed, density) for seed in seeds]
    groups = [g for plan in plans for g in plan]
    if ahead:
        oracle.prefetch(plans[0] if ahead == 1 else groups)
    _check(oracle, groups)
    for seed in refits:
        _refit(model, oracle, groups, seed)
        oracle.refresh()
        _check(oracle, groups)
    # fit_learned's way: the base and the constants replaced by assignment, no load_state
    model.base = None
    model.analytic.constants = dataclasses.replace(model.analytic.constants, vector=1.5)
    model.generation += 1
    oracle.refresh()
    _check(oracle, groups)


def test_an_analytic_study_model_shares_the_rankings_costs(ctx: FusionContext) -> None:
    model, rank = AnalyticModel(TARGET), AnalyticModel(TARGET)
    oracle = CostOracle(ctx.graph, TARGET, model=model, ctx=ctx, rank_model=rank)
    _check(oracle, _groups(ctx, oracle, 3))


@slow(10)
@given(seed=st.integers(0, 2**16), frac=st.floats(0.0, 2.0), refit=st.booleans())
def test_batch_terms_finish_as_predict_batch_with_l2_context(
    ctx: FusionContext, seed: int, frac: float, refit: bool
) -> None:
    model = LearnedModel(TARGET)
    oracle = CostOracle(ctx.graph, TARGET, ctx=ctx)
    groups = _groups(ctx, oracle, seed)
    if refit:
        _refit(model, oracle, groups, seed)
    for g in groups:
        batch = oracle.lowering.batch(g, oracle.grid(g))
        resident = {s.tensor: frac * float(np.max(load_size(s, batch))) for s in batch.streams}
        for res in (None, resident):
            want = model.predict_batch(batch, res)
            assert np.array_equal(model.from_terms(model.batch_terms(batch, res)), want)


def plain_residency(model: AnalyticModel, kernels) -> list[list[float]]:
    """AnalyticModel.residency as it was written before the L2 touches were kept."""
    l2 = L2Residency(model.target.spec.l2_bytes * model.constants.l2_capacity)
    out = []
    for kernel in kernels:
        out.append(
            [
                min(1.0, l2.get(s.tensor, 0.0) / tensor_bytes(s, kernel))
                for s in kernel.streams
                if s.pipe == "MTE2"
            ]
        )
        skip = handoffs(kernel.streams)
        streams = [s for s in kernel.streams if s.tensor not in skip]
        sizes = {s.tensor: tensor_bytes(s, kernel) for s in streams}
        if sum(sizes.values()) > l2.capacity:
            l2.flush()
            continue
        for s in streams:
            l2.touch(s.tensor, sizes[s.tensor])
    return out


@slow(10)
@given(
    seed=st.integers(0, 2**16),
    l2_bytes=st.sampled_from([None, 1 << 20, 1 << 16]),  # tight L2s evict, and flush
    pick=st.integers(0, 2**16),
)
def test_residency_from_kept_touches_is_the_plain_one(
    ctx: FusionContext, seed: int, l2_bytes: int | None, pick: int
) -> None:
    sets = () if l2_bytes is None else (f"l2_bytes={l2_bytes}",)
    model = AnalyticModel(load_target(overrides=sets))
    oracle = CostOracle(ctx.graph, model.target, ctx=ctx)
    rng = np.random.default_rng(pick)
    kernels = [
        oracle.lowering.kernel(g, grid[int(rng.integers(len(grid)))])
        for g in _groups(ctx, oracle, seed)
        for grid in [oracle.grid(g)]
    ]
    want = plain_residency(model, kernels)
    assert model.residency(kernels) == want
    assert model.residency(kernels, [l2_touches(k) for k in kernels]) == want


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), rows=st.integers(1, 40), fortran=st.booleans())
def test_the_correctors_prediction_skips_only_the_validation(
    seed: int, rows: int, fortran: bool
) -> None:
    model = LearnedModel(TARGET)
    assert model.base is not None
    X = np.random.default_rng(seed).normal(size=(rows, model.base.n_features_in_)) * 3
    X = np.asfortranarray(X) if fortran else X
    checked = validate_data(model.base, X, reset=False, dtype=np.float64)
    assert np.array_equal(model.base.predict(X), model.base.predict(checked.tolist()))
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError):
        model.base.predict(bad)


@slow(10)
@given(
    seed=st.integers(0, 2**16),
    density=st.sampled_from([0.5, 0.9, 1.0]),
    sets=st.sampled_from([(), ("ub_bytes=1024",), ("l1_bytes=2048",)]),
    bert=st.booleans(),
)
def test_feasibility_by_signature_is_the_lowerings_own(
    ctx: FusionContext, seed: int, density: float, sets: tuple[str, ...], bert: bool
) -> None:
    """Every group a repair asks about (merges refused included) is feasible exactly when
    its own grid can be made (the oracle asks by signature, and of a cube group only
    whether its grid has a first config), on the target and on ones with buffers so small
    that some cube groups (a transformer's, whose epilogues need UB) or all have none."""
    from costmodel.exceptions import InfeasibleConfig
    from costmodel.lower import Lowering

    if bert:
        ctx = _bert_ctx()

    target = load_target(overrides=sets)
    oracle = CostOracle(ctx.graph, target, ctx=ctx)
    asked: list[frozenset[str]] = []

    def feasible(ops: frozenset[str]) -> bool:
        asked.append(ops)
        return oracle.feasible(ops)

    draws = np.random.default_rng(seed).random(len(ctx.edges))
    ctx.repair([e for e, u in zip(ctx.edges, draws, strict=True) if u < density], feasible)
    assert len(asked) > 5
    plain = Lowering(ctx.graph, target)
    for ops in asked:
        try:
            plain.grid(ctx.group(ops))
            own = True
        except InfeasibleConfig:
            own = False
        assert oracle.feasible(ops) is own


def _bert_ctx() -> FusionContext:
    """Two small BERT layers (made once): matmuls with LayerNorm and GELU epilogues."""
    if not _BERT:
        from search_space.zoo import build

        graph = load_graph(build("bert-base", weights="inputs", layers=2, scale=0.25))
        _BERT.append(FusionContext(graph))
    return _BERT[0]


_BERT: list[FusionContext] = []


def plain_first_wave(key: str, gv: GridView, points: int = 8) -> np.ndarray:
    """l2._first_wave_requests as it was written before its points were taken at once."""
    cores = gv.cores
    g = cores.copy()
    blocks = np.ones_like(cores)
    for letter in reversed("jib"):
        if letter in key:
            g = np.where(gv.extent[letter] > 1, gv.stride[letter], g)
            blocks = blocks * gv.extent[letter]
    gi, ci = g.astype(np.int64), cores.astype(np.int64)
    starts = np.minimum(blocks, ci // np.gcd(gi, ci)).astype(np.int64)
    free = [x for x in "jib" if x not in key]
    inner, below = [], np.ones_like(cores)
    for letter in free:
        inner.append(below)
        below = below * gv.extent[letter]
    total = np.zeros_like(cores)
    for q in range(points):
        rest = cores - ((q * starts) // points * gi) % ci
        n = np.zeros_like(cores)
        for letter, below in zip(reversed(free), reversed(inner), strict=True):
            ext, stride = gv.extent[letter], gv.stride[letter]
            whole = np.minimum(ext, np.floor(rest / stride))
            n = n + whole * below
            rest = np.where(whole >= ext, 0.0, rest - whole * stride)
        total = total + n + (rest > 0)
    return total / points


def plain_hit_fractions(
    streams, gv: GridView, capacity: float, window_steps: float, resident, handed
) -> list[tuple[np.ndarray, np.ndarray]]:
    """l2.load_hit_fractions as it was written before per-key work was shared: every load
    stream's reuse worked out afresh, its first-wave requests by plain_first_wave."""
    loads = [s for s in streams if s.pipe == "MTE2"]
    streams = [s for s in streams if s.tensor not in handed]
    fits_wave = wave_working_set(streams, gv) * window_steps <= capacity
    out = []
    for s, res in zip(loads, resident, strict=True):
        free = []
        if s.per == "step" and "k" not in s.key:
            free.append((gv.steps, np.zeros_like(gv.steps)))
        free += [(gv.extent[x], gv.stride[x]) for x in "jib" if x not in s.key]
        hits, reqs, inner_span = (np.zeros_like(gv.steps), np.ones_like(gv.steps),
                                  np.zeros_like(gv.steps))  # fmt: skip
        for n, (ext, stride) in enumerate(free):
            outer = np.ones_like(gv.steps)
            for ext_o, _ in free[n + 1 :]:
                outer = outer * ext_o
            gap = np.maximum(stride - inner_span, 0.0)
            same_wave = np.clip(1.0 - gap / gv.cores, 0.0, 1.0) * (stride > 0)
            far_ok = _window_bytes(streams, gv, gap) <= capacity
            hits = hits + (ext - 1.0) * outer * (
                same_wave * fits_wave + (1.0 - same_wave) * far_ok
            )
            reqs = reqs * ext
            inner_span = inner_span + (ext - 1.0) * stride
        first = np.asarray(res, dtype=np.float64) * (capacity > 0)
        hit = np.clip((hits + first) / reqs, 0.0, 1.0)
        concurrent = (plain_first_wave(s.key, gv) - 1.0) * fits_wave
        shared = np.clip(concurrent * (1.0 - first) / reqs, 0.0, 1.0)
        again = s.reread_share() * (capacity > 0)
        hit, shared = again + (1.0 - again) * hit, (1.0 - again) * shared
        out.append((hit, np.minimum(shared, hit)))
    return out


@slow(15)
@given(
    seed=st.integers(0, 2**16),
    capacity=st.sampled_from([0.0, *(2.0**p for p in range(10, 31, 2))]),
    fracs=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=4),
    relabel=st.integers(0, 2**16),
)
def test_l2_hits_are_the_plain_ones(
    ctx: FusionContext, seed: int, capacity: float, fracs: list[float], relabel: int
) -> None:
    """Groups' streams as lowered, and with their loads' keys and ``per`` drawn again from
    the group's own (so loads of one key with another ``per``, which no lowering makes yet,
    are held equal too), in L2s of 1 KiB to 1 GiB (some windows fit, some do not)."""
    oracle = CostOracle(ctx.graph, TARGET, ctx=ctx)
    spec, c = TARGET.spec, AnalyticModel(TARGET).constants
    cap = capacity
    rng = np.random.default_rng(relabel)
    for g in _groups(ctx, oracle, seed, density=0.9):
        batch = oracle.lowering.batch(g, oracle.grid(g))
        cores = np.clip(np.minimum(batch.block_dim, batch.tiles), 1, spec.cube_cores)
        gv = GridView.of(batch.grid, batch.steps, cores.astype(np.float64))
        keys = sorted({s.key for s in batch.streams if s.pipe == "MTE2"})
        drawn = tuple(
            dataclasses.replace(
                s, key=keys[rng.integers(len(keys))], per=("step", "tile")[rng.integers(2)]
            )
            if s.pipe == "MTE2"
            else s
            for s in batch.streams
        )
        for streams in (batch.streams, drawn):
            loads = [s for s in streams if s.pipe == "MTE2"]
            res = [np.full(len(batch), fracs[i % len(fracs)]) for i in range(len(loads))]
            args = (streams, gv, cap, c.l2_window, res, handoffs(streams))
            got = load_hit_fractions(*args)
            want = plain_hit_fractions(*args)
            for (hit, shared), (hit0, shared0) in zip(got, want, strict=True):
                assert np.array_equal(hit, hit0) and np.array_equal(shared, shared0)
            for s in loads:
                want_wave = plain_first_wave(s.key, gv)
                assert np.array_equal(_first_wave_requests(s.key, gv), want_wave)


def test_batches_of_one_layout_concatenate_and_of_two_do_not(ctx: FusionContext) -> None:
    from costmodel.analytic import batch_layout, concat
    from costmodel.exceptions import CostModelError

    oracle = CostOracle(ctx.graph, TARGET, ctx=ctx)
    batches = [oracle.lowering.batch(g, oracle.grid(g)) for g in _groups(ctx, oracle, 1)]
    layouts: dict = {}
    for b in batches:
        layouts.setdefault(batch_layout(b), []).append(b)
    same = max(layouts.values(), key=len)
    assert len(same) > 1 and len(layouts) > 1
    cat = concat(same)
    assert len(cat) == sum(len(b) for b in same)
    assert np.array_equal(cat.streams[0].bytes, np.concatenate([b.streams[0].bytes for b in same]))
    with pytest.raises(CostModelError):
        concat([same[0], next(v for v in layouts.values() if v is not same)[0]])


def test_concatenated_batches_keep_each_rows_reread_share() -> None:
    """Two norms of one layout whose rows split differently: the concatenated batch scores
    every row as its own batch does, re-read shares included."""
    from conftest import rmsnorm_model

    from costmodel.analytic import AnalyticModel, concat
    from costmodel.lower import Lowering
    from search_space import load_graph

    batches = []
    for cols in (1 << 12, 1 << 17):  # a row that fits UB, and one that splits
        graph = load_graph(rmsnorm_model(64, cols))
        ctx = FusionContext(graph)
        (group,) = ctx.to_groups([frozenset(ctx.nodes)])
        low = Lowering(graph, TARGET)
        batches.append(low.batch(group, low.grid(group)))
    shares = [s.reread_share() for b in batches for s in b.streams if s.pipe == "MTE2"]
    assert any(x.any() for x in shares)  # the long rows re-read
    cat = concat(batches)
    want = np.concatenate([b.streams[0].reread_share() for b in batches])
    assert np.array_equal(cat.streams[0].reread_share(), want)
    model = AnalyticModel(TARGET)
    apart = np.concatenate([model.predict_batch(b) for b in batches])
    np.testing.assert_allclose(model.predict_batch(cat), apart, rtol=1e-12)
