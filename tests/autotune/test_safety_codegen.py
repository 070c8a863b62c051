"""Safe mode's code-generation check (docs/verification.md): the plan a study outputs has its
generated kernels run against onnxruntime, and a fused group whose kernel disagrees with the
unfused graph is left unfused; ``codegen_check`` (auto, on, off) says when it runs.

One study of a bert-base layer is run with the check off; the same storage is then resumed
with ``trials=0`` (the study's answer is a function of its storage, so the same plan comes
out) with the check on and a wrong kernel planted, then under ``auto`` as generated.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import autotune.tuner.safety_codegen as safety_codegen
from autotune.cli import app
from autotune.exceptions import AutotuneError
from autotune.tuner import TuneConfig, TuneResult, make_safety, tune_graph
from costmodel.lower import Lowering
from costmodel.spec import load_target
from search_space import Graph, load_graph
from search_space.ir import make_group, singleton_groups
from search_space.rules import Policy, PolicyError, load_policy
from search_space.space import FusionPlan, SpacePlan
from search_space.zoo import ZooOptions, build

ZOO = ZooOptions(weights="inputs", scale=0.1, layers=1)
CODEGEN = "unfused: codegen check: generated kernel "
# not importorskip: importing triton before the generated runner turns its interpreter on
# would leave triton's own @jit helpers compiled-mode, which interpreted kernels cannot call
needs_codegen = pytest.mark.skipif(
    not safety_codegen.has_codegen_extra(), reason="needs the [codegen] extra (triton, torch)"
)


@dataclass(frozen=True)
class Study:
    graph: Graph
    folder: Path
    result: TuneResult  # the first run, with the check off


def _tune(study_graph: Graph, folder: Path, check: str, trials: int) -> TuneResult:
    config = TuneConfig(
        trials=trials, measure_every=2, cost="analytic", precision="fp32",
        storage=str(folder / "s.journal"), dataset=str(folder / "rows.parquet"),
        policy=Policy(codegen_check=check),
    )  # fmt: skip
    target = load_target(config.target, config.sets, config.precision)
    safety = make_safety(study_graph, "zoo:bert-base", ZOO, config.policy, target)
    return tune_graph(study_graph, config, name="bert-base", safety=safety)


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    folder = tmp_path_factory.mktemp("codegen-safety")
    graph = load_graph(build("bert-base", weights="inputs", scale=0.1, layers=1))
    return Study(graph, folder, _tune(graph, folder, "off", trials=4))


def _fused(plan: FusionPlan) -> set[tuple[str, ...]]:
    return {g.ops for g in plan.groups if len(g.ops) > 1}


def test_off_skips_the_check_and_says_so(study: Study) -> None:
    meta = study.result.plan.meta
    assert meta["codegen_check"] == {"ran": False, "skipped": "codegen_check = off"}
    assert "skipped_codegen" not in study.result.report
    assert not any(g.verdict.startswith(CODEGEN) for g in study.result.plan.groups)
    assert _fused(study.result.plan)  # a plan with fused groups, for the checks below


def _planted(text: str) -> str:
    """A kernel's text with ``+ 1.0`` added to the first value it stores."""
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if "tl.store(" in line)
    head, cast, tail = lines[i].rpartition(").to(tl.")
    assert cast, lines[i]
    lines[i] = f"{head} + 1.0{cast}{tail}"
    return "\n".join(lines)


@needs_codegen
def test_a_group_whose_generated_kernel_disagrees_is_left_unfused(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first fused group a template expresses gets ``+ 1.0`` on a value its kernel stores
    (which group that is, the wrapper of the program's template lookup records)."""
    import autotune.codegen.program as program

    real = program.kernels_for
    planted: list[tuple[str, ...]] = []

    def wrong_once(name: str, graph: Graph, group: Any, config: Any, precision: str) -> Any:
        kernels = real(name, graph, group, config, precision)  # Unsupported passes through
        if len(group.ops) > 1 and (not planted or planted[0] == group.ops):
            planted.append(group.ops)
            kernels[0] = dataclasses.replace(kernels[0], text=_planted(kernels[0].text))
        return kernels

    monkeypatch.setattr(program, "kernels_for", wrong_once)
    result = _tune(study.graph, study.folder, "on", trials=0)
    before, after = study.result.plan, result.plan
    assert planted and planted[0] in _fused(before)
    bad = planted[0]
    assert _fused(after) == _fused(before) - {bad}  # every other fused group kept
    singles = {g.ops[0]: g for g in after.groups if g.ops[0] in bad}
    work = [o for o in bad if not study.graph.op(o).is_view and not study.graph.op(o).constant]
    assert sorted(singles) == sorted(work) and all(len(g.ops) == 1 for g in singles.values())
    for g in singles.values():
        assert g.verdict.startswith(CODEGEN) and "max rel err" in g.verdict
    summary = after.meta["codegen_check"]
    assert summary["ran"] and summary["unfused"] == 1
    assert [r["ops"] for r in summary["failing"]] == [list(bad)]
    assert summary["failing"][0]["max_rel_err"] > 0
    assert result.report["skipped_codegen"] == 1
    assert result.report["fused"] == len(_fused(after))
    assert after.meta["source"].endswith(", codegen-safe")
    assert after.measured_us is not None


@needs_codegen
def test_the_check_runs_and_unfuses_nothing_in_correct_code(study: Study) -> None:
    result = _tune(study.graph, study.folder, "auto", trials=0)  # a small layer: auto runs it
    assert [g.ops for g in result.plan.groups] == [g.ops for g in study.result.plan.groups]
    summary = result.plan.meta["codegen_check"]
    assert summary["ran"] and summary["unfused"] == 0 and summary["failing"] == []
    assert summary["fused_groups"] == len(_fused(result.plan)) and summary["outputs_ok"]
    assert result.report["skipped_codegen"] == 0


def test_auto_skips_a_graph_over_the_interpreter_budget(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(safety_codegen, "has_codegen_extra", lambda: True)
    monkeypatch.setattr(safety_codegen, "device", lambda: "cpu")
    assert safety_codegen.skip_reason(study.graph, Policy()) is None  # a small layer
    monkeypatch.setattr(safety_codegen, "CODEGEN_CHECK_OPS", 10)  # a layer is more ops
    why = safety_codegen.skip_reason(study.graph, Policy())
    assert why is not None and "ops" in why and "codegen_check = on runs it anyway" in why
    monkeypatch.setattr(safety_codegen, "CODEGEN_CHECK_OPS", 10_000)
    assert safety_codegen.skip_reason(study.graph, Policy()) is None
    monkeypatch.setattr(safety_codegen, "CODEGEN_CHECK_FLOPS", study.graph.flops / 2)
    why = safety_codegen.skip_reason(study.graph, Policy())
    assert why is not None and "GFLOPs" in why
    assert safety_codegen.skip_reason(study.graph, Policy(codegen_check="on")) is None
    monkeypatch.setattr(safety_codegen, "device", lambda: "npu")  # a device: any size
    assert safety_codegen.skip_reason(study.graph, Policy()) is None
    monkeypatch.setattr(safety_codegen, "has_codegen_extra", lambda: False)
    assert "[codegen] extra" in (safety_codegen.skip_reason(study.graph, Policy()) or "")
    off = safety_codegen.skip_reason(study.graph, Policy(safe_mode=False))
    assert off == "safe mode is off"


def _without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kw: Any) -> Any:
        return None if name == "triton" else real(name, *args, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_on_without_the_extra_is_one_error_before_the_study(
    study: Study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _without_triton(monkeypatch)
    message = "`codegen_check = on` needs the [codegen] extra: pip install"
    with pytest.raises(AutotuneError, match="needs the \\[codegen\\] extra") as info:
        _tune(study.graph, tmp_path, "on", trials=2)
    assert message in str(info.value) and "ascend-autofusion[codegen]" in str(info.value)
    assert not (tmp_path / "s.journal").exists()  # no study was opened
    res = CliRunner().invoke(
        app,
        ["tune", "zoo:bert-base", "--scale", "0.1", "--layers", "1", "--trials", "1",
         "--codegen-check", "on", "--storage", str(tmp_path / "cli.journal"),
         "-o", str(tmp_path / "plan.json")],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert res.stderr.strip().splitlines() == [f"error: {message} 'ascend-autofusion[codegen]'"]
    assert not (tmp_path / "plan.json").exists()


def test_the_policy_field_is_validated_like_the_others(tmp_path: Path) -> None:
    assert Policy().codegen_check == "auto"
    config = tmp_path / "autotune.toml"
    config.write_text('[policy]\ncodegen_check = "off"\n')
    assert load_policy(config).codegen_check == "off"
    assert load_policy(config, {"codegen_check": "on"}).codegen_check == "on"  # flag wins
    for bad in ("maybe", True, 1):
        with pytest.raises(PolicyError, match="codegen_check must be one of auto, on, off"):
            load_policy(None, {"codegen_check": bad})
    res = CliRunner().invoke(
        app,
        ["tune", "zoo:bert-base", "--scale", "0.1", "--layers", "1", "--codegen-check",
         "sometimes", "--storage", str(tmp_path / "s.journal"), "-o", str(tmp_path / "p.json")],
    )  # fmt: skip
    assert res.exit_code == 1 and "codegen_check must be one of auto, on, off" in res.stderr


def _space_plan(graph: Graph, record: FusionPlan) -> SpacePlan:
    groups = tuple(make_group(graph, g.ops, g.kind) for g in record.groups)
    return SpacePlan(groups, tuple(g.config for g in record.groups if g.config is not None))


def test_failures_are_data_and_a_single_op_has_nothing_to_unfuse(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune.codegen.check as codegen_check

    graph, target = study.graph, load_target("ascend910b", (), "fp32")
    plan = _space_plan(graph, study.result.plan)
    model = build("bert-base", weights="random", scale=0.1, layers=1)

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("the interpreter fell over")

    monkeypatch.setattr(safety_codegen, "device", lambda: "cpu")
    monkeypatch.setattr(codegen_check, "check_package", broken)
    kept = safety_codegen.check_generated(model, graph, plan, target, Policy())
    assert kept.plan == plan and kept.verdicts == {}
    assert kept.summary == {"ran": False, "error": "RuntimeError: the interpreter fell over"}
    singles = singleton_groups(graph)
    none = SpacePlan(tuple(singles), tuple(Lowering(graph, target).default(g) for g in singles))
    wrong = codegen_check.TensorCheck("t", 1.0, 0.5, False)
    result = codegen_check.CodegenCheck((), (codegen_check.KernelCheck("k", 3, (wrong,)),))
    same, verdicts, rows = safety_codegen.unfuse_failing(graph, target, none, result)
    assert same == none and verdicts == {}
    assert rows == [{"ops": list(none.groups[3].ops), "kernel": "k", "tensor": "t",
                     "max_rel_err": 0.5, "unfused": False, "ran_as_ops": False}]  # fmt: skip
