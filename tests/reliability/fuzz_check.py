"""One fuzzed model through ``tune -> apply -> verify`` (the CLI, in-process), judged against an
oracle of our own: the fused model run in onnxruntime against the original on the same inputs.

Outcomes: ``accepted`` (every command exits 0, the fused model is valid and equals the
original, ``verify`` is ok and fails no kernel), ``clear error`` (a command exits 1 with one
error line), and the defects: ``traceback``, ``wrong exit`` (another exit status, or no
error line), ``invalid fused`` (onnx.checker refuses the fused model), ``mismatch`` (it
differs from the original), ``kernel failed`` (``verify`` fails a kernel the tuned plan kept
fused) and ``verify not ok`` (``verify`` refuses the plan otherwise: its graph check).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from typer.testing import CliRunner

from autotune.cli import app

CATEGORIES = ("accepted", "clear error", "traceback", "wrong exit", "invalid fused", "mismatch",
              "kernel failed", "verify not ok")  # fmt: skip
DEFECTS = CATEGORIES[2:]
TUNE = ("--trials", "3", "--cost", "analytic", "--polish", "0")
# Both models run the same nodes (onnxruntime inlines the fused functions), so they differ
# only where its graph optimisations apply differently: a few ulps, scaled by the output.
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 4e-3}


@dataclass(frozen=True)
class Outcome:
    """What one model came to: its category, the text that shows why, the plan's fused
    groups (groups of more than one op) and the kernels ``verify`` could not check."""

    category: str
    detail: str = ""
    fused: int = 0
    unverified: int = 0


def _feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """N(0, 1) inputs of our own (not the tool's) for every graph input not stored."""
    rng = np.random.default_rng(seed)
    feeds = {}
    stored = {t.name for t in model.graph.initializer}  # weights listed as inputs keep theirs
    for vi in model.graph.input:
        if vi.name in stored:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        feeds[vi.name] = rng.standard_normal(shape).astype(
            helper.tensor_dtype_to_np_dtype(tt.elem_type)
        )
    return feeds


def run_model(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None
) -> list[np.ndarray]:
    """The model's outputs in onnxruntime, on ``feeds`` or our own N(0, 1) inputs."""
    feeds = _feeds(model, 0) if feeds is None else feeds
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, ["CPUExecutionProvider"])
    return [np.asarray(x) for x in sess.run(None, feeds)]


def compare(original: onnx.ModelProto, fused: onnx.ModelProto, seed: int = 0) -> str:
    """Where the fused model's outputs differ from the original's ('' when they agree)."""
    feeds = _feeds(original, seed)
    want, got = run_model(original, feeds), run_model(fused, feeds)
    names = [o.name for o in original.graph.output]
    for name, a, b in zip(names, want, got, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {name}: {a.dtype}{list(a.shape)} became {b.dtype}{list(b.shape)}"
        scale = float(np.abs(a.astype(np.float64)).max(initial=1.0))
        tol = TOLERANCE.get(a.dtype, 0.0)
        try:
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol * scale, err_msg=name)
        except AssertionError as err:
            return str(err).strip()
    return ""


def _cli(argv: list[str]) -> tuple[str, str, str]:
    """Run one command: its outcome ('' when it exits 0, ``clear error``, ``traceback`` or
    ``wrong exit``), the command with all it printed, and its stdout."""
    res = CliRunner().invoke(app, argv)
    where = f"autotune {' '.join(argv)}\n{res.output}"
    crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
    if crashed or "Traceback" in res.output:
        return "traceback", f"{where}\nraised {res.exception!r}", res.stdout
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    if res.exit_code == 1 and len(errors) == 1:
        return "clear error", where, res.stdout
    return ("" if res.exit_code == 0 else "wrong exit"), where, res.stdout


def check_model(model: onnx.ModelProto, folder: Path) -> Outcome:
    """Tune (analytic model, 3 trials), apply and verify ``model`` in ``folder``; judge it."""
    path, plan, fused = folder / "model.onnx", folder / "plan.json", folder / "fused.onnx"
    onnx.save(model, path)
    m, p = str(path), str(plan)
    tune = ["tune", m, *TUNE, "-o", p, "--storage", str(folder / "s.journal")]
    for argv in (tune, ["apply", m, p, "-o", str(fused)]):
        bad, text, _ = _cli(argv)
        if bad:
            return Outcome(bad, text)
    groups = json.loads(plan.read_text())["groups"]
    n_fused = sum(len(g["ops"]) > 1 for g in groups)
    made = onnx.load(fused)
    try:
        onnx.checker.check_model(made, full_check=True)
    except onnx.checker.ValidationError as err:
        return Outcome("invalid fused", str(err), n_fused)
    diff = compare(model, made)
    if diff:
        return Outcome("mismatch", diff, n_fused)
    bad, text, stdout = _cli(["verify", m, p, "--json"])
    if bad in ("traceback", "clear error"):
        return Outcome(bad, text, n_fused)
    try:  # exit 1 when the plan is not ok, the JSON saying why
        report = json.loads(stdout)
    except ValueError:
        return Outcome("wrong exit", text, n_fused)
    failed = [k for k in report["kernels"] if k["status"] == "failed"]
    unverified = int(report["unverified"])
    if failed:
        return Outcome("kernel failed", f"{text}\n{json.dumps(failed)}", n_fused, unverified)
    if bad or not report["ok"]:
        return Outcome("verify not ok", text, n_fused, unverified)
    return Outcome("accepted", "", n_fused, unverified)
