"""One JSON vocabulary (issue 46, items 4 and 7; docs/json.md): every document the commands
write or print opens with its schema, says each latency's kind, lists its kernels, has one
footprint shape, and a plan's one number reads the same everywhere; a plan written before the
vocabulary loads as the same plan."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from quick_study import MODEL, run, tune_args

from autotune import load_plan
from autotune.plan_file import plan_to_json, read_plan
from autotune.vocabulary import KINDS, VERSION

OLD = Path(__file__).parent / "data" / "plan_schema1.json"
# keys version 1 wrote that version 2 renamed: none may be left in any document
GONE = {
    *("schema_version", "latency_us", "time_after_us", "time_before_us", "safe_fusion"),
    *("report", "per_kernel", "baseline_us", "measured_us", "us_unfused", "us_predicted"),
    *("real_us", "speedup_vs_none_measured", "speedup_vs_none_estimated"),
}
# the plan record's own layout version (search_space's FusionPlan), which its loader checks
RECORD = {"schema_version"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan of the small study (safe mode off) and its old-format sibling."""
    folder = tmp_path_factory.mktemp("vocab")
    res = run(*tune_args(folder), "--json")
    assert res.exit_code == 0, res.stderr
    (folder / "tune.json").write_text(res.stdout)
    shutil.copy(OLD, folder / "old.json")
    return folder


def _cli_json(*args: str) -> dict[str, Any]:
    res = run(*args, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def _documents(folder: Path) -> dict[str, dict[str, Any]]:
    """Every JSON document the commands print or write, by the command that made it."""
    plan = str(folder / "plan.json")
    docs = {
        "tune": json.loads((folder / "tune.json").read_text()),
        "plan file": json.loads(Path(plan).read_text()),
        "report": _cli_json("report", plan),
        "estimate": _cli_json("estimate", *MODEL, "--plan", plan),
        "estimate simulator": _cli_json(
            "estimate", *MODEL, "--plan", "greedy", "--cost", "simulator"
        ),
        "verify": _cli_json("verify", *MODEL, plan),
        "codegen": _cli_json("codegen", *MODEL, plan, "-o", str(folder / "pkg")),
        "inspect": _cli_json("inspect", *MODEL),
        "candidates": _cli_json("candidates", *MODEL),
        "zoo list": _cli_json("zoo", "list"),
    }
    docs["manifest"] = json.loads((folder / "pkg" / "manifest.json").read_text())
    return docs


def _items(doc: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every key in a document, nested ones too."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield path, k, v
            yield from _items(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for v in doc:
            yield from _items(v, f"{path}[]")


def test_every_document_speaks_the_one_vocabulary(folder: Path) -> None:
    for name, doc in _documents(folder).items():
        assert doc["schema"]["version"] == VERSION, name
        assert doc["schema"]["name"].startswith("autotune."), name
        assert next(iter(doc)) == "schema", name  # the first key
        allowed = {"plan file": RECORD}.get(name, set())
        for path, key, value in _items(doc):
            where = f"{name}: {path}.{key}"
            phase = path.endswith(".timing_s")  # seconds per phase, "report" one of them
            assert phase or key not in GONE - allowed, where
            if key == "kernels":
                assert isinstance(value, list), where
            if key == "n_kernels":
                assert isinstance(value, int), where
            if key == "footprint":  # one shape: bytes per on-chip buffer
                assert all(isinstance(b, int) for b in value.values()), where
            if key == "latency":
                assert set(value) == {"us", "kind", "model"} and value["kind"] in KINDS, where
            if key.endswith("_us") and key not in (
                "device_us",
                "pipes_us",
                "roofline_us",
                *allowed,
            ):
                # a latency's key names its kind (a document costed by one model says it
                # once, in its latency: estimate's rows are plain us and device_us)
                assert any(key.endswith(f"{k}_us") for k in KINDS), where


def test_a_plan_has_one_number_shown_the_same_everywhere(folder: Path) -> None:
    """The plan file, tune, report --json, Plan.report() and repr(plan) give one latency,
    simulated (the study simulates the plan it saves), which the tables print alike."""
    plan_file = json.loads((folder / "plan.json").read_text())
    tune = json.loads((folder / "tune.json").read_text())
    report = _cli_json("report", str(folder / "plan.json"))
    plan = load_plan(folder / "plan.json")
    one = plan_file["latency"]
    assert one["kind"] == "simulated" and one["model"] == "simulator"
    assert one["us"] == plan_file["simulated_us"] > 0
    assert tune["latency"] == report["latency"] == plan.report()["latency"] == plan.latency == one
    said = f"{one['us']:.1f} us simulated"
    assert said in repr(plan)
    assert said in run("report", str(folder / "plan.json")).stdout
    shown = run(*tune_args(folder, trials=0, out="again.json")).stdout
    assert said in shown  # tune's summary of the same plan


def test_a_plan_written_before_the_vocabulary_loads_as_the_same_plan(folder: Path) -> None:
    """Version 1's keys are read and renamed, never their values: the old file's own numbers
    come back under the new names, and the plan round-trips through a version 2 file."""
    raw = json.loads(OLD.read_text())
    assert "schema" not in raw and raw["schema_version"] == 1  # the fixture is old
    plan = load_plan(OLD).record
    meta = plan.meta
    assert plan.measured_us == raw["measured_us"] and plan.predicted_us == raw["predicted_us"]
    assert meta["baseline_simulated_us"] == raw["meta"]["baseline_us"]
    assert meta["safe_mode"] == raw["meta"]["report"]
    old_rows, rows = raw["meta"]["kernels"], meta["kernels"]
    assert [r["simulated_us"] for r in rows] == [r["us"] for r in old_rows]
    assert [r["predicted_us"] for r in rows] == [r["us_predicted"] for r in old_rows]
    assert [r["unfused_predicted_us"] for r in rows] == [r["us_unfused"] for r in old_rows]
    old_cands = raw["meta"]["candidates"]
    assert [c["n_kernels"] for c in meta["candidates"]] == [c["kernels"] for c in old_cands]
    new = folder / "migrated.json"
    load_plan(OLD).save(new)
    assert read_plan(new) == plan  # groups, configs, verdicts, numbers and meta
    assert json.loads(new.read_text())["latency"]["us"] == raw["measured_us"]
    assert plan_to_json(read_plan(new)) == json.loads(new.read_text())


def test_report_reads_an_old_plan_as_its_migrated_copy(folder: Path) -> None:
    load_plan(OLD).save(folder / "copy.json")
    old = _cli_json("report", str(folder / "old.json"))
    assert old == _cli_json("report", str(folder / "copy.json"))
    assert old["safe_mode"]["fused"] == 8 and old["n_kernels"] == len(old["kernels"]) == 9


def test_a_plan_of_a_newer_vocabulary_is_one_clear_error(folder: Path) -> None:
    data = json.loads((folder / "plan.json").read_text())
    data["schema"]["version"] = VERSION + 1
    path = folder / "newer.json"
    path.write_text(json.dumps(data))
    res = run("report", str(path))
    assert res.exit_code == 1
    assert f"plan vocabulary {VERSION + 1} is newer" in res.stderr
    assert "Traceback" not in res.stderr
