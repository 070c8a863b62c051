"""A study's wall time per phase (meta.timing_s): exclusive, so the phases add up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import autotune.tuner.clock as clock_module
from autotune.tuner.clock import Clock

# a run: nested phases as (name, seconds before the inner ones, inner phases, seconds after)
phases = st.recursive(
    st.tuples(st.sampled_from("abc"), st.integers(0, 50), st.just(()), st.integers(0, 50)),
    lambda inner: st.tuples(
        st.sampled_from("abc"), st.integers(0, 50), st.lists(inner, max_size=3), st.integers(0, 50)
    ),
    max_leaves=10,
)


@given(st.lists(phases, max_size=4))
def test_phases_are_exclusive_and_add_up_to_the_run(run) -> None:
    now = [0.0]
    expected: dict[str, float] = {}

    def spend(name: str, seconds: int) -> None:
        now[0] += seconds
        expected[name] = expected.get(name, 0.0) + seconds

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock_module.time, "perf_counter", lambda: now[0])
        clock = Clock()

        def enter(p) -> None:
            name, before, inner, after = p
            with clock.phase(name):
                spend(name, before)
                for q in inner:
                    enter(q)
                spend(name, after)

        for p in run:
            enter(p)
            now[0] += 7  # time outside every phase is nobody's
    assert clock.seconds() == expected


def test_a_study_tells_its_phases_as_it_enters_them(tmp_path) -> None:
    """What the progress bar shows: every phase the study times, told as it starts."""
    from autotune.tuner import TuneConfig, tune_graph
    from search_space import load_graph
    from search_space.rules import Policy
    from search_space.zoo import build

    graph = load_graph(build("bert-base", weights="inputs", layers=1, scale=0.25))
    told: list[str] = []
    config = TuneConfig(
        trials=6, measure_every=3, cost="analytic", storage=str(tmp_path / "s.journal"),
        policy=Policy(safe_mode=False),
    )  # fmt: skip
    result = tune_graph(graph, config, name="bert", on_phase=told.append)
    first_seen = list(dict.fromkeys(told))
    assert first_seen[0] == "setup" and told[-1] == "report"
    assert set(first_seen) == set(result.plan.meta["timing_s"])
    assert first_seen.index("trials") < first_seen.index("polish") < first_seen.index("pick")
