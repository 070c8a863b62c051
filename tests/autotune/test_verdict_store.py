"""Safe mode's verdicts kept across studies of one model (issue 46, item 3): a second study
of the same model, target and thresholds checks no kernel again and reaches the same plan and
the same safe-mode counts; another threshold shares nothing; the file round-trips every
verdict (NaN included); a file that is not ours is ignored and written anew."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from quick_study import small_graph

from autotune.tuner import TuneConfig, make_safety, tune_graph
from autotune.tuner import verdict_store as store
from autotune.verify import check
from costmodel.spec import load_target
from search_space.rules import Policy
from search_space.zoo import ZooOptions

ZOO = ZooOptions(weights="inputs", layers=1, scale=0.25)


def _study(folder: Path, policy: Policy, study: str) -> Any:
    """A small safe-mode study in ``folder``, its journal shared by every call."""
    graph = small_graph()
    config = TuneConfig(
        trials=6, cost="analytic", polish=0, storage=str(folder / "s.journal"),
        policy=policy, study=study,
    )  # fmt: skip
    safety = make_safety(graph, "zoo:bert-base", ZOO, policy, load_target())
    return tune_graph(graph, config, name="bert", safety=safety)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = check.verify_group

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(check, "verify_group", counting)
    return calls


def test_a_second_study_checks_nothing_again(tmp_path: Path, counted: list[int]) -> None:
    first = _study(tmp_path, Policy(), "one")
    checked = len(counted)
    assert checked > 0 and (tmp_path / "s.verdicts.json").is_file()
    second = _study(tmp_path, Policy(), "two")
    assert len(counted) == checked  # every verdict came from the first study
    assert second.plan.groups == first.plan.groups
    assert second.plan.meta["safe_mode"] == first.plan.meta["safe_mode"]


def test_another_threshold_shares_nothing(tmp_path: Path, counted: list[int]) -> None:
    _study(tmp_path, Policy(), "one")
    checked = len(counted)
    _study(tmp_path, dataclasses.replace(Policy(), cosine_min=0.9999), "two")
    assert len(counted) == 2 * checked  # the same kernels, checked again under the new scope
    scopes = json.loads((tmp_path / "s.verdicts.json").read_text())["scopes"]
    assert len(scopes) == 2


def _verdict(cosine: float, status: check.Status) -> check.KernelVerdict:
    return check.KernelVerdict(
        ops=("a", "b"), signature="sig", cosine=cosine, max_abs_err=0.01, max_rel_err=math.nan,
        unfused_max_abs_err=0.002, verdict="ok", rows=64, full_rows=128, status=status,
    )  # fmt: skip


def test_the_file_gives_back_every_verdict(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    known = {
        ("sig", (256, 0, 0, 0)): _verdict(0.99999, check.Status.PASSED),
        ("sig", (128, 1, 0, 0)): _verdict(math.nan, check.Status.UNVERIFIED),
    }
    assert store.keep(path, "scope-a", known) == 2
    back = store.load(path, "scope-a")
    assert set(back) == set(known)
    for key, v in known.items():
        for f in dataclasses.fields(v):
            mine, theirs = getattr(back[key], f.name), getattr(v, f.name)
            assert mine == theirs or (math.isnan(mine) and math.isnan(theirs)), f.name
    assert store.load(path, "scope-b") == {}


def test_a_file_that_is_not_ours_is_ignored_and_rewritten(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "v.json"
    path.write_text("{not json")
    assert store.load(path, "scope") == {}
    assert "ignoring" in caplog.text
    store.keep(path, "scope", {("s", (1, 0, 0, 0)): _verdict(1.0, check.Status.PASSED)})
    assert list(store.load(path, "scope")) == [("s", (1, 0, 0, 0))]
