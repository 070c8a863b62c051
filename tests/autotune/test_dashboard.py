"""`autotune dashboard`: the real optuna-dashboard server on a study the tuner wrote, read
back over HTTP: metric names, what the study tunes, every trial's origin, prediction and note
of its slowest kernels, the measured candidates, the saved plan and its file as an artifact."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.cli.dashboard import is_loopback

HANG_S = 600  # a hang guard: the dashboard answers in seconds even on a busy machine
ORIGINS = re.compile(r"warm start: (none|greedy|max)|sampler|local search|retry of trial \d+")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=HANG_S) as resp:
        return resp.read()


def _serve(folder: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """`autotune dashboard` in a child process, up and answering; its base URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "dashboard", "--storage", "s.journal",
         "--port", str(port), *flags],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    hang = time.monotonic() + HANG_S
    while time.monotonic() < hang:  # until the server answers (or the process ends)
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1])
        try:
            _get(base + "/api/meta")
            return proc, base
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the dashboard never answered")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("study")
    res = CliRunner().invoke(
        app,
        ["tune", "zoo:bert-base", "--layers", "1", "--scale", "0.25", "--trials", "12",
         "-o", str(folder / "plan.json"), "--storage", str(folder / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return folder


@pytest.fixture(scope="module")
def served(tuned: Path) -> Iterator[str]:
    proc, base = _serve(tuned)
    yield base
    proc.terminate()
    proc.wait(30)


def _attrs(items: list[dict[str, str]]) -> dict[str, object]:
    """optuna-dashboard sends attributes as strings of their JSON (or str) form."""
    out: dict[str, object] = {}
    for item in items:
        try:
            out[item["key"]] = json.loads(item["value"])
        except ValueError:
            out[item["key"]] = item["value"]
    return out


def test_the_study_says_what_it_tunes_and_what_it_saved(tuned: Path, served: str) -> None:
    summaries = json.loads(_get(served + "/api/studies"))["study_summaries"]
    (summary,) = [s for s in summaries if not s["study_name"].endswith(":measured")]
    study = json.loads(_get(f"{served}/api/studies/{summary['study_id']}?after=0"))
    plan = json.loads((tuned / "plan.json").read_text())
    assert study["objective_names"] == ["latency_us"]
    about = _attrs(study["user_attrs"])
    assert about["model"] == "bert-base" and about["fingerprint"] == plan["fingerprint"]
    assert about["target"] == plan["target"] and about["cost_model"] == "learned"
    predicted = about["baselines_predicted_us"]
    assert set(predicted) == {"none", "greedy", "max", "optimal"}
    assert predicted["optimal"] > 0  # found within its time at set-up (a small model)
    assert about["saved_plan"]["source"] == plan["meta"]["source"]
    assert about["saved_plan"]["simulated_us"] == pytest.approx(plan["simulated_us"], abs=1e-3)
    rows = [
        r for r in study["note"]["body"].splitlines() if r.startswith("| ") and "us |" not in r
    ]
    simulated = [float(r.split("|")[2]) for r in rows]
    assert len(rows) == min(30, int(about["measured_candidates"])) >= 3  # none, greedy, max
    assert simulated == sorted(simulated)
    assert simulated[0] <= plan["simulated_us"] + 0.01  # (safe mode may save a slower one)
    # the measured plans, a study of their own valued by the simulator: its best is the saved
    (other,) = [s for s in summaries if s["study_name"] == summary["study_name"] + ":measured"]
    measured = json.loads(_get(f"{served}/api/studies/{other['study_id']}?after=0"))
    assert measured["objective_names"] == ["simulated_latency_us"]
    assert len(measured["trials"]) == int(about["measured_candidates"])
    for t in measured["trials"]:  # safe mode's verdict counts on every plan it checked
        attrs = _attrs(t["user_attrs"])
        if str(attrs["source"]).startswith("trial"):
            assert attrs["verdicts"]["fused"] == attrs["fused_groups"], attrs
    (best,) = measured["best_trials"]
    saved = _attrs(measured["user_attrs"])["saved_plan_key"]
    assert _attrs(best["user_attrs"])["plan_key"] == saved
    assert best["values"][0] == pytest.approx(plan["simulated_us"])
    (artifact,) = study["artifacts"]
    assert artifact["filename"] == "plan.json"
    got = _get(f"{served}/artifacts/{summary['study_id']}/{artifact['artifact_id']}")
    assert got == (tuned / "plan.json").read_bytes()


def test_the_study_page_plots_predicted_against_simulated(tuned: Path, served: str) -> None:
    """Trust at a glance (issue 46, item 4): the tuner's study carries the saved plan's parity
    plot, a point per kernel at (simulated, predicted) as the plan file records them, and a
    box per kernel kind of ln(predicted / simulated)."""
    import math

    study = json.loads(_get(f"{served}/api/studies/0?after=0"))  # the tuner's, made first
    (obj,) = [o for o in study["plotly_graph_objects"] if o["id"] == "parity"]
    fig = json.loads(obj["graph_object"])
    rows = json.loads((tuned / "plan.json").read_text())["meta"]["kernels"]
    points = [t for t in fig["data"] if t["type"] == "scatter" and t["mode"] == "markers"]
    got = sorted((x, y) for t in points for x, y in zip(t["x"], t["y"], strict=True))
    want = sorted((r["simulated_us"], r["predicted_us"]) for r in rows)
    assert [x for x, _ in got] == pytest.approx([x for x, _ in want])
    assert [y for _, y in got] == pytest.approx([y for _, y in want])
    logs = sorted(v for t in fig["data"] if t["type"] == "box" for v in t["y"])
    assert logs == pytest.approx(sorted(math.log(p / m) for m, p in want))


def test_every_trial_has_its_origin_prediction_and_slowest_kernels(served: str) -> None:
    study = json.loads(_get(f"{served}/api/studies/0?after=0"))  # the tuner's, made first
    complete = [t for t in study["trials"] if t["state"] == "Complete"]
    assert len(complete) == 12
    origins = set()
    for t in complete:
        attrs = _attrs(t["user_attrs"])
        assert ORIGINS.fullmatch(str(attrs["origin"])), attrs["origin"]
        origins.add(str(attrs["origin"]).split(":")[0])
        assert attrs["predicted_us"] == pytest.approx(t["values"][0], abs=1e-3)
        rows = [
            r for r in t["note"]["body"].splitlines() if r.startswith("| ") and "kernel" not in r
        ]
        assert 1 <= len(rows) <= min(5, int(attrs["kernels"]))
        us = [float(r.rstrip(" |").rsplit("|", 1)[1]) for r in rows]
        assert us == sorted(us, reverse=True) and sum(us) <= t["values"][0] + 1e-6
    assert {"warm start", "sampler"} <= origins
    # every fusion parameter has a readable label on the study: the ops its first edge joins
    labels = _attrs(study["user_attrs"])
    params = {p["name"] for t in complete for p in t["params"] if p["name"].startswith("fuse/")}
    assert params and all(" -> " in str(labels[f"param {p}"]) for p in params)


def test_loopback_is_told_from_other_addresses() -> None:
    for host in ("127.0.0.1", "127.3.2.1", "::1", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "192.168.1.4", "::", "example.com"):
        assert not is_loopback(host), host


def test_listening_beyond_loopback_warns(tuned: Path) -> None:
    proc, _ = _serve(tuned, "--host", "0.0.0.0")
    proc.terminate()
    _, stderr = proc.communicate(timeout=HANG_S)
    assert "warning: listening on 0.0.0.0" in stderr


def test_no_study_is_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["dashboard", "--storage", str(tmp_path / "none.journal")])
    assert res.exit_code == 1 and "does not exist" in res.stderr
    empty = tmp_path / "empty.journal"
    optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(empty)))
    empty.touch()
    res = runner.invoke(app, ["dashboard", "--storage", str(empty)])
    assert res.exit_code == 1 and "holds no study" in res.stderr
    assert "Traceback" not in res.output


def test_apply_uploads_the_fused_model_to_the_study(tuned: Path, served: str) -> None:
    fused = tuned / "fused.onnx"
    res = CliRunner().invoke(
        app,
        ["apply", "zoo:bert-base", "--layers", "1", "--scale", "0.25",
         str(tuned / "plan.json"), "-o", str(fused), "--storage", str(tuned / "s.journal")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    study = json.loads(_get(f"{served}/api/studies/0?after=0"))
    (artifact,) = [a for a in study["artifacts"] if a["filename"] == "fused.onnx"]
    assert _get(f"{served}/artifacts/0/{artifact['artifact_id']}") == fused.read_bytes()


def test_every_config_parameter_of_a_joint_study_is_labelled(tmp_path: Path) -> None:
    journal = tmp_path / "s.journal"
    res = CliRunner().invoke(
        app,
        ["tune", "zoo:bert-base", "--layers", "1", "--scale", "0.25", "--strategy", "joint",
         "--trials", "4", "--cost", "analytic", "--polish", "0",
         "-o", str(tmp_path / "p.json"), "--storage", str(journal)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    storage = optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(journal))
    )
    (name,) = [n for n in optuna.get_all_study_names(storage) if not n.endswith(":measured")]
    study = optuna.load_study(study_name=name, storage=storage)
    params = {p for t in study.trials for p in t.params if p.startswith("config/")}
    assert params
    for p in params:
        label = study.user_attrs[f"param {p}"]
        assert "feasible configs" in label and "0: " in label, label
