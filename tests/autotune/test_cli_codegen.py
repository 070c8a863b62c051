"""`autotune codegen`, `autotune run` and `verify --codegen` as a user meets them: packages
that list every group, outputs that match onnxruntime on the zoo model, one-line refusals that
leave nothing behind.

Kernels run in Triton's CPU interpreter here (seconds per small model): three tests run
generated code (run, verify --codegen); the rest stop before it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.estimate import plan_kernels
from autotune.verify import draw_inputs
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build

runner = CliRunner()
BERT = ("zoo:bert-base", "--scale", "0.1", "--layers", "1")
GPT2 = ("zoo:gpt2", "--scale", "0.1", "--layers", "1")


def _run(*args: str):
    return runner.invoke(app, list(args))


def _one_line(res) -> str:
    """The single line a refused command prints on stderr."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 1 and len(lines) == 1, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    return lines[0]


def _greedy_groups(name: str) -> int:
    """How many groups greedy makes of the zoo model (what the manifest must list)."""
    graph = load_graph(build(name, weights="random", scale=0.1, layers=1))
    groups, _ = plan_kernels(graph, "greedy", load_target("ascend910b", (), "auto"))
    return len(groups)


def test_codegen_writes_a_package_listing_every_group(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    res = _run("codegen", *BERT, "greedy", "-o", str(pkg))
    assert res.exit_code == 0, res.output
    assert {p.name for p in pkg.iterdir()} >= {
        "__init__.py",
        "kernels.py",
        "runner.py",
        "params.npz",
        "manifest.json",
    }
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert [g["group"] for g in manifest["groups"]] == list(range(_greedy_groups("bert-base")))
    assert manifest["plan"] == "greedy" and manifest["target"] == "ascend910b"
    # the table names the kernels, each group run as its ops with its reason, and the path
    assert "k0_" in res.stdout and "template" in res.stdout
    for g in manifest["groups"]:
        if "unfused" in g:
            assert f"group {g['group']} " in res.stdout and g["unfused"] in res.stdout
    assert f"package: {pkg}" in res.stdout


def test_codegen_json_and_a_second_codegen_replaces_the_package(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    assert _run("codegen", *BERT, "greedy", "-o", str(pkg)).exit_code == 0
    (pkg / "stale.txt").write_text("from the first package")
    res = _run("codegen", *BERT, "none", "-o", str(pkg), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"schema", "meta", "kernels", "unfused", "path"}
    assert doc["path"] == str(pkg) and doc["meta"]["plan"] == "none"
    assert doc["meta"]["n_kernels"] == len(doc["kernels"]) > 0
    for k in doc["kernels"]:
        assert set(k) == {"kernel", "group", "template", "ops", "grid", "device_predicted_us"}
        assert k["grid"] >= 1 and k["ops"]
    for u in doc["unfused"]:
        assert set(u) == {"group", "ops", "reason"} and u["reason"]
    # replaced whole: the second plan's manifest, nothing left of the first package
    assert json.loads((pkg / "manifest.json").read_text())["plan"] == "none"
    assert not (pkg / "stale.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["pkg"]  # no temporary folder left


def test_codegen_refuses_a_folder_that_is_not_a_package_unless_forced(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    line = _one_line(_run("codegen", *BERT, "greedy", "-o", str(mine)))
    assert "is not a generated package" in line and str(mine) in line
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "keep me"
    res = _run("codegen", *BERT, "greedy", "-o", str(mine), "--force")
    assert res.exit_code == 0, res.output
    assert (mine / "manifest.json").exists() and not (mine / "notes.txt").exists()


def test_codegen_of_an_unknown_plan_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_run("codegen", *BERT, "gredy", "-o", str(tmp_path / "pkg")))
    assert "'gredy' is neither a plan file nor a baseline" in line
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def gpt2_feeds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """The inputs `verify` draws for the small gpt2 as an .npz, and onnxruntime's outputs on
    the zoo model (random weights, as `run` builds it) for them."""
    model = build("gpt2", weights="random", scale=0.1, layers=1)
    feeds = draw_inputs(model, load_graph(model), seed=0)
    path = tmp_path_factory.mktemp("feeds") / "x.npz"
    np.savez(path, **feeds)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return path, dict(zip(names, sess.run(None, feeds), strict=True))


@pytest.mark.parametrize(
    ("precision", "rtol"), [([], 1e-2), (["--precision", "fp32"], 1e-4)], ids=["auto", "fp32"]
)  # auto: the products take float16 operands (as the plan was costed)
def test_run_reproduces_onnxruntime(
    precision: list[str], rtol: float, gpt2_feeds, tmp_path: Path
) -> None:
    inputs, expected = gpt2_feeds
    out = tmp_path / "y.npz"
    pkg = tmp_path / "pkg"
    res = _run("run", *GPT2, "greedy", "--inputs", str(inputs), "-o", str(out),
               "--package", str(pkg), *precision)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads((pkg / "manifest.json").read_text())["plan"] == "greedy"  # kept
    with np.load(out, allow_pickle=False) as got:
        assert sorted(got.files) == sorted(expected)
        for name, ref in expected.items():
            assert got[name].shape == ref.shape and got[name].dtype == ref.dtype
            np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=rtol * np.abs(ref).max())


def _bad_inputs(folder: Path, good: Path) -> dict[str, tuple[Path, str]]:
    """Input files `run` must refuse, each with the phrase its one line holds."""
    with np.load(good) as data:
        ids = data["input_ids"]
    cases = {
        "shape": ({"input_ids": ids[:, :3]}, "input 'input_ids' has shape [1, 3]"),
        "dtype": ({"input_ids": ids.astype(np.int32)}, "input 'input_ids' is int32"),
        "missing": ({"other": ids}, "input 'input_ids' is missing"),
        "pickled": (
            {"input_ids": np.array([{"a": 1}, None], dtype=object)},
            "is an object array",
        ),
    }
    out = {}
    for name, (arrays, phrase) in cases.items():
        np.savez(folder / f"{name}.npz", **arrays)  # type: ignore[arg-type]
        out[name] = (folder / f"{name}.npz", phrase)
    (folder / "garbage.npz").write_bytes(b"not a zip")
    out["garbage"] = (folder / "garbage.npz", "is not an .npz of arrays")
    out["absent"] = (folder / "absent.npz", "not found")
    return out


def test_run_refuses_bad_inputs_in_one_line_and_writes_nothing(gpt2_feeds, tmp_path: Path) -> None:
    inputs, _ = gpt2_feeds
    out = tmp_path / "y.npz"
    for name, (path, phrase) in _bad_inputs(tmp_path, inputs).items():
        line = _one_line(_run("run", *GPT2, "greedy", "--inputs", str(path), "-o", str(out)))
        assert phrase in line, (name, line)
        assert not out.exists(), name
    # the output may not be the inputs file: refused before anything runs, inputs intact
    before = inputs.read_bytes()
    line = _one_line(_run("run", *GPT2, "greedy", "--inputs", str(inputs), "-o", str(inputs)))
    assert "is the --inputs file" in line and inputs.read_bytes() == before
    assert not out.exists()


def test_verify_codegen_json_is_ok_and_lists_kernels() -> None:
    res = _run("verify", *BERT, "greedy", "--codegen", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ok"] is True and doc["codegen"]["ok"] is True
    kernels = doc["codegen"]["kernels"]
    assert kernels and all(k["ok"] and k["kernel"].startswith("k") for k in kernels)
    assert [o["tensor"] for o in doc["codegen"]["outputs"]] == [
        "last_hidden_state",
        "pooler_output",
    ]


def test_a_tuned_plan_file_generates_too(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    tune = [*BERT, "--trials", "2", "--storage", str(tmp_path / "s.journal"), "-o", str(plan)]
    res = _run("tune", *tune)
    assert res.exit_code == 0, res.output
    groups = len(json.loads(plan.read_text())["groups"])
    res = _run("codegen", *BERT, str(plan), "-o", str(tmp_path / "pkg"), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["meta"]["plan"] == "plan file"
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert [g["group"] for g in manifest["groups"]] == list(range(groups))
    # the plan was tuned for ascend910b: another target is one line, not a package
    line = _one_line(
        _run("codegen", *BERT, str(plan), "-o", str(tmp_path / "p2"), "--target", "ascend310p")
    )
    assert "plan was tuned for ascend910b" in line and not (tmp_path / "p2").exists()
