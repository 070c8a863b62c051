"""`autotune calibrate`, `calibrate --from-msprof` and `autotune costmodel eval` end to end."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from costmodel.analytic import AnalyticModel
from costmodel.learned import LearnedModel
from costmodel.measure import kernel_from_json, read_table
from costmodel.measure.msprof import read_op_summary
from costmodel.measure.sample import WARM, calibrate_tables, run_on_simulator, sample_graph
from costmodel.measure.synthetic import synthetic_models
from costmodel.registry import make_cost_model
from costmodel.spec import load_target
from search_space import load_graph
from search_space.zoo import build

FIXTURE = Path(__file__).parent.parent / "fixtures" / "msprof" / "op_summary_bert_layer0.csv"
T = load_target("ascend910b")
runner = CliRunner()


@pytest.fixture(scope="module")
def small_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sixty simulated rows from the synthetic models (the eval tests share it)."""
    out = tmp_path_factory.mktemp("cal") / "t.parquet"
    sources = [(f"synthetic:{n}", "synthetic", load_graph(m)) for n, m in synthetic_models(0)]
    half = len(sources) // 2
    sources = [(s, "synth-a" if i < half else "synth-b", g) for i, (s, _, g) in enumerate(sources)]
    calibrate_tables(sources, T, out, samples=60, seed=0, jobs=1)
    return out


def _warm(frame: pd.DataFrame) -> pd.Series:
    return frame["resident"].map(lambda r: any(json.loads(r)))


def test_rows_are_what_the_simulator_says_for_the_kernel_they_record(small_table: Path) -> None:
    frame = read_table(small_table)
    assert len(frame) == 60
    sim = make_cost_model("simulator", T)
    for _, row in frame[~_warm(frame)].sample(5, random_state=0).iterrows():
        kernel = kernel_from_json(json.loads(row["kernel"]))
        cost = sim.evaluate([kernel])[0]  # standalone, cold L2, noise off: exactly the row
        assert cost.latency_us == pytest.approx(row["latency_us"], rel=1e-12)
        assert cost.pipes_us.get("MTE2", 0.0) == pytest.approx(row["pipe_MTE2_us"], rel=1e-12)
        assert row["spec_digest"] == T.spec.digest() and row["target"] == "ascend910b"
    manifest = json.loads((small_table.parent / "MANIFEST.json").read_text())
    (entry,) = manifest["tables"]
    assert entry["rows"] == 60 and entry["file"] == small_table.name
    assert entry["sha256"] == hashlib.sha256(small_table.read_bytes()).hexdigest()


def test_a_share_of_the_rows_run_warm_each_ranked_within_its_context(small_table: Path) -> None:
    """A fifth of the rows are warm, with a resident fraction per load stream; configs are
    ranked (tau, regret) within a group of one kernel signature in one L2 context."""
    frame = read_table(small_table)
    warm = frame[_warm(frame)]
    assert len(warm) == round(60 * WARM)  # the synthetic models offer more than enough
    for _, row in warm.iterrows():
        resident = json.loads(row["resident"])
        kernel = kernel_from_json(json.loads(row["kernel"]))
        assert len(resident) == sum(1 for s in kernel.streams if s.is_load)
        assert all(0.0 <= r <= 1.0 for r in resident)
    for _, group in frame.groupby("group_id"):
        assert group["signature"].nunique() == 1 and group["resident"].nunique() == 1


@pytest.mark.parametrize("target", ["ascend910b", "ascend910", "ascend310p"])
def test_a_warm_sample_finds_the_inputs_its_plan_context_left_in_l2(target: str) -> None:
    """A warm sample's context is real: run after the kernels before it, the simulator
    reads fewer bytes from HBM than it does for the kernel alone on a cold L2."""
    import random

    t = load_target(target)
    graph = load_graph(build("mobilenetv3", weights="inputs"))
    samples = sample_graph(graph, t, family="f", source="s", rng=random.Random(0), seen=set())
    every = [s for s in samples if s.before]
    model = AnalyticModel(t)  # the row records what the context that runs leaves in L2
    for s in every:
        assert model.residency([*s.before, s.kernel])[-1] == list(s.resident)
    warm = every[:: max(1, len(every) // 24)][:24]  # spread over the model, early to late
    assert len(warm) == 24 and all(any(s.resident) for s in warm)
    hot = run_on_simulator([(*s.before, s.kernel) for s in warm], t)
    cold = run_on_simulator([s.kernel for s in warm], t)
    for s, h, c in zip(warm, hot, cold, strict=True):
        assert h.hbm_bytes < c.hbm_bytes, (s.kernel.name, s.resident)


def test_sampling_covers_default_and_searched_configs_once_per_signature() -> None:
    import random

    graph = load_graph(next(m for n, m in synthetic_models(0) if n.startswith("mm_1000x")))
    seen: set[str] = set()
    samples = sample_graph(
        graph, T, family="f", source="s", rng=random.Random(0), seen=seen, configs_per_group=4
    )
    by_sig: dict[str, list] = {}
    for s in (s for s in samples if not s.before):  # cold: warm ones are the plans' contexts
        by_sig.setdefault(s.kernel.signature, []).append(s)
    assert by_sig and set(by_sig) <= seen
    for group in by_sig.values():
        configs = [s.kernel.config for s in group]
        assert len(configs) == len(set(configs)) <= 4  # distinct configs of one group
        assert group[0].rank == 0  # the default config always comes first
    again = sample_graph(graph, T, family="f", source="s", rng=random.Random(1), seen=seen)
    cold = {s.kernel.signature for s in again if not s.before}
    assert not cold & set(by_sig)  # never sampled twice


def test_calibrate_cli_writes_table_and_a_loadable_fitted_model(tmp_path: Path) -> None:
    import onnx

    table, model = tmp_path / "t.parquet", tmp_path / "m.json.gz"
    models = []
    for name, proto in list(synthetic_models(0))[:4]:
        onnx.save(proto, tmp_path / f"{name}.onnx")
        models += ["--models", str(tmp_path / f"{name}.onnx")]
    res = runner.invoke(
        app,
        ["calibrate", *models, "--samples", "30", "--jobs", "1", "-o", str(table),
         "--fit", str(model), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["rows"] == 30 and summary["fit"]["rows"] == 30
    learned = LearnedModel.load(model)
    frame = read_table(table)
    kernels = [kernel_from_json(json.loads(k)) for k in frame["kernel"]]
    pred = np.array([learned.predict([k])[0] for k in kernels])
    assert np.all(np.isfinite(pred) & (pred > 0))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--samples", "0"], "--samples must be >= 1"),
        (["--warm", "1.5"], "--warm must be a fraction in [0, 1]"),
        (["--models", "nope.onnx"], "neither zoo:NAME, 'synthetic' nor an existing ONNX file"),
        (["--from-msprof", str(FIXTURE)], "--from-msprof needs --model"),
        (["-o", "/nonexistent/dir/t.parquet"], "does not exist"),
    ],
)
def test_calibrate_bad_input_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    out = [] if "-o" in args else ["-o", str(tmp_path / "t.parquet")]
    res = runner.invoke(app, ["calibrate", *args, *out], catch_exceptions=False)
    assert res.exit_code == 1
    assert message in res.output and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())


def test_msprof_fixture_rows_match_the_models_ops(tmp_path: Path, small_table: Path) -> None:
    rows = read_op_summary(FIXTURE)
    assert all(r.duration_us > 0 for r in rows)
    assert not any(r.name == "trans_Cast_aicpu" for r in rows)  # AI_CPU tasks are skipped
    table, model = tmp_path / "ms.parquet", tmp_path / "ms.json"
    res = runner.invoke(
        app,
        ["calibrate", "--from-msprof", str(FIXTURE), "--model", "zoo:bert-base", "-o",
         str(table), "--fit", str(model), "--table", str(small_table), "--json",
         "--context", "isolated"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["skipped"] == 1  # the MemcpyAsync row matches no op of the model
    assert summary["rows"] == len(rows) - 1
    frame = read_table(table)
    assert set(frame["simulator_version"]) == {"msprof"}
    # every row is the op the profile named: durations land on kernels of matching shape,
    # with the gap before the kernel that a task duration leaves out and every model counts
    durations = {round(r.duration_us, 6) for r in rows}
    gap = T.spec.kernel_gap_s * 1e6
    assert {round(x - gap, 6) for x in frame["latency_us"]} <= durations
    # the cube's busy times are the profile's; its DMA pipes' (each transfer's latency
    # counted) and vector pipe's (no scalar bookkeeping in it) are not fitted: they stay
    # unmeasured (0)
    mac = {round(r.pipes["M"], 6) for r in rows if r.pipes.get("M")}
    assert {round(x, 6) for x in frame["pipe_M_us"] if x > 0} <= mac
    assert (frame["pipe_M_us"] > 0).any()
    for other in ("MTE2", "FIX", "MTE3", "V"):
        assert (frame[f"pipe_{other}_us"] == 0).all()
    before = LearnedModel(T)  # whatever ships: the refit must fit the profile better
    after = LearnedModel.load(model)
    kernels = [kernel_from_json(json.loads(k)) for k in frame["kernel"]]
    truth = frame["latency_us"].to_numpy()

    def err(m: LearnedModel) -> float:
        pred = np.array([m.predict([k])[0] for k in kernels])
        return float(np.mean(np.abs(pred - truth) / truth))

    assert err(after) < err(before)


def test_a_profile_of_an_applications_run_is_fitted_in_situ(tmp_path: Path) -> None:
    """By default a profile's kernels ran inside the step: each fit row records its
    activation inputs in L2 (where they fit), and measures the generated kernel on the
    chip's own spec: the duration less CANN's library prologue inside a step (a vector
    kernel's: 450 of the 910B's cycles; a matmul pays none) plus the tiling read's GM latency
    less its L2 one (1400 - 50 cycles). ``--context isolated`` keeps the cold rows."""
    tables = {}
    for context in ("in-situ", "isolated"):
        tables[context] = tmp_path / f"{context}.parquet"
        res = runner.invoke(app, ["calibrate", "--from-msprof", str(FIXTURE), "--model",
                                  "zoo:bert-base", "-o", str(tables[context]), "--context",
                                  context])  # fmt: skip
        assert res.exit_code == 0, res.output
    warm, cold = read_table(tables["in-situ"]), read_table(tables["isolated"])
    assert len(warm) == len(cold) > 0
    assert all(set(json.loads(r)) == {0.0} for r in cold["resident"])
    assert any(max(json.loads(r)) > 0 for r in warm["resident"])
    clock = T.spec.clock_hz / 1e6
    for w, c, kernel in zip(warm["latency_us"], cold["latency_us"], cold["kernel"], strict=True):
        unit = json.loads(kernel)["unit"]
        library = 0 if unit == "cube" else 450
        assert w - c == pytest.approx((1350 - library) / clock), unit
    bad = runner.invoke(app, ["calibrate", "--from-msprof", str(FIXTURE), "--model",
                              "zoo:bert-base", "-o", str(tmp_path / "x.parquet"),
                              "--context", "warm"])  # fmt: skip
    assert bad.exit_code == 1 and "--context 'warm' is not one of" in bad.output


def test_msprof_csv_without_required_columns_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("Op Name,OP Type\nx,MatMul\n")
    res = runner.invoke(
        app,
        ["calibrate", "--from-msprof", str(bad), "--model", "zoo:bert-base", "-o",
         str(tmp_path / "t.parquet")],
    )  # fmt: skip
    assert res.exit_code == 1
    assert "lacks column(s) Task Type, Task Duration(us), Input Shapes" in res.output
    assert not (tmp_path / "t.parquet").exists()


def test_costmodel_eval_json_reports_every_metric_on_held_out_signatures(
    small_table: Path,
) -> None:
    res = runner.invoke(
        app, ["costmodel", "eval", "--table", str(small_table), "--holdout", "synth-b", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    metrics = {"mape", "median_rel_err", "p90_rel_err", "spearman", "kendall_tau", "top1_regret"}
    for name in ("analytic", "calibrated", "learned"):
        assert metrics <= set(doc[name])
        assert doc[name]["mape"] >= 0 and doc[name]["p90_rel_err"] >= doc[name]["median_rel_err"]
    rows = doc["rows"]
    frame = read_table(small_table)
    train = frame[frame["family"] == "synth-a"]
    test = frame[(frame["family"] == "synth-b") & ~frame["signature"].isin(train["signature"])]
    assert (rows["train"], rows["test"]) == (len(train), len(test))


def test_eval_rows_carry_each_models_prediction_of_the_held_out_kernels(
    small_table: Path,
) -> None:
    """The kept test rows are the held-out ones; the raw analytic prediction is the spec
    model's on each cold row's kernel alone (cold L2, as those rows ran), and the learned MAPE
    is theirs (the warm rows' alone too)."""
    from costmodel.learned import evaluate_models

    frame = read_table(small_table)
    res = evaluate_models(frame, T, ["synth-b"], keep_rows=True)
    test = res["test"]
    assert len(test) == res["rows"]["test"] and set(test["family"]) == {"synth-b"}
    raw = AnalyticModel(T, "raw")
    for _, row in test[~_warm(test)].head(8).iterrows():
        kernel = kernel_from_json(json.loads(row["kernel"]))
        assert row["pred_analytic"] == pytest.approx(raw.predict([kernel])[0], rel=1e-9)
    rel = np.abs(test["pred_learned"] - test["latency_us"]) / test["latency_us"]
    assert float(rel.mean()) == pytest.approx(res["learned"]["mape"], rel=1e-12)
    warm = _warm(test).to_numpy()
    assert res["rows"]["test_warm"] == warm.sum() > 0
    assert float(rel[warm].mean()) == pytest.approx(res["warm_mape"]["learned"], rel=1e-12)
    assert "test" not in evaluate_models(frame, T, ["synth-b"])


def test_costmodel_eval_unknown_family_is_one_line(small_table: Path) -> None:
    res = runner.invoke(
        app, ["costmodel", "eval", "--table", str(small_table), "--holdout", "bert"]
    )
    assert res.exit_code == 1
    assert "held-out family bert not in the table; it has synth-a, synth-b" in res.output


def test_a_binary_file_given_as_msprof_csv_is_one_line(small_table: Path, tmp_path) -> None:
    res = runner.invoke(
        app,
        ["calibrate", "--from-msprof", str(small_table), "--model", "zoo:bert-base", "-o",
         str(tmp_path / "t.parquet")],
    )  # fmt: skip
    assert res.exit_code == 1 and "is not an msprof op_summary CSV" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "t.parquet").exists()


def test_costmodel_eval_unknown_kind_is_refused_before_any_work(small_table: Path) -> None:
    res = runner.invoke(app, ["costmodel", "eval", "--table", str(small_table), "--kind", "xgb"])
    assert res.exit_code == 1
    assert "unknown --kind 'xgb'; available: hgb, forest, ridge" in res.output


# -- other formats of measurements on hardware ------------------------------------------------
def test_kernel_details_csv_reads_like_the_op_summary_it_renames(tmp_path: Path) -> None:
    """torch_npu's kernel_details.csv names msprof's columns differently; the same rows under
    those names read the same."""
    renames = {"Op Name": "Name", "OP Type": "Type", "Task Type": "Accelerator Core",
               "Task Duration(us)": "Duration(us)"}  # fmt: skip
    text = FIXTURE.read_text().splitlines()
    header = ",".join(renames.get(h, h) for h in text[0].split(","))
    details = tmp_path / "kernel_details.csv"
    details.write_text("\n".join([header, *text[1:]]) + "\n")
    assert read_op_summary(details) == read_op_summary(FIXTURE)


REAL_CSV = """chip,op,shapes,dtype,time_us,timing,source
910B4,RmsNorm,"x=[2,512,512] (B,S,H), gamma=[512]",fp32,10.18,device,github:a/b@1:x.md
910B2,MatMul (torch.mm),"A=[1024,1024] x B=[1024,1024]",fp16,21.9,host,github:c/d@2:y.md
910B4,RmsNorm,"x=[2,what,512]",fp32,5.0,device,github:a/b@1:x.md
910,RmsNorm,"x=[2,512,512], gamma=[512]",fp32,9.0,device,github:e/f@3:z.md
"""


def test_a_real_data_csv_becomes_hardware_rows_each_on_its_own_chip(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text(REAL_CSV)
    table = tmp_path / "real.parquet"
    res = runner.invoke(app, ["calibrate", "--from-msprof", str(real), "-o", str(table), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["rows"], summary["skipped"]) == (1, 3)
    lines = [ln for ln in res.stderr.splitlines() if "skipped" in ln]
    assert len(lines) == 3 and "row 3: dim" in lines[0]
    assert "row 2" in lines[1] and "timed on the host" in lines[1]
    assert "row 4" in lines[2] and "measured on ascend910, not ascend910b" in lines[2]
    frame = read_table(table).set_index("target")
    assert set(frame["simulator_version"]) == {"real"}
    b4 = load_target("ascend910b4").spec

    # a device row is the kernel alone: the gap every model counts is added. A CANN library
    # kernel's fit row is the generated kernel, without the library prologue
    def prologue(spec) -> float:
        return spec.library_setup_cycles / spec.clock_hz * 1e6

    assert frame.loc["ascend910b4", "latency_us"] == pytest.approx(
        10.18 - prologue(b4) + b4.kernel_gap_s * 1e6
    )
    assert frame.loc["ascend910b4", "spec_digest"] == b4.digest()
    assert set(frame["family"]) == {"rmsnorm"}  # the host-timed matmul is not a fit row


def test_fitting_on_real_rows_moves_the_model_toward_them(
    tmp_path: Path, small_table: Path
) -> None:
    real = tmp_path / "real.csv"
    real.write_text(REAL_CSV)
    table, model = tmp_path / "real.parquet", tmp_path / "m.json.gz"
    res = runner.invoke(
        app,
        ["calibrate", "--from-msprof", str(real), "-o", str(table), "--fit", str(model),
         "--table", str(small_table), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    frame = read_table(table)
    fitted = LearnedModel.load(model)

    def error(m_of) -> float:
        errs = []
        for _, row in frame.iterrows():
            kernel = kernel_from_json(json.loads(row["kernel"]))
            pred = m_of(load_target(row["target"], (), row["precision"])).predict([kernel])[0]
            errs.append(abs(math.log(pred / row["latency_us"])))
        return float(np.mean(errs))

    state = json.loads(json.dumps(fitted.state()))
    assert error(lambda t: LearnedModel(t, state)) < error(LearnedModel)


def test_a_targets_default_tables_are_its_own_not_those_of_a_name_that_starts_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.cli.costmodel import _tables

    folder = tmp_path / "datasets" / "calibration"
    folder.mkdir(parents=True)
    for name in ("ascend910", "ascend910-warm", "ascend910b", "ascend910b-real"):
        (folder / f"{name}.parquet").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    rel = Path("datasets/calibration")
    assert _tables(None, "ascend910") == [
        rel / "ascend910-warm.parquet",
        rel / "ascend910.parquet",
    ]
    assert _tables(None, "ascend910b") == [
        rel / "ascend910b-real.parquet",
        rel / "ascend910b.parquet",
    ]


def test_eval_leaves_hardware_rows_of_the_default_tables_out_and_keeps_given_ones(
    small_table: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped models are fitted on simulated rows only, so the default check is too;
    tables named with --table are used as given."""
    folder = tmp_path / "datasets" / "calibration"
    folder.mkdir(parents=True)
    frame = read_table(small_table)
    frame.to_parquet(folder / "ascend910b.parquet")
    measured = frame[frame["family"] == "synth-a"].assign(simulator_version="real")
    measured.to_parquet(folder / "ascend910b-real.parquet")
    monkeypatch.chdir(tmp_path)
    args = ["costmodel", "eval", "--holdout", "synth-b", "--json"]
    default = json.loads(runner.invoke(app, args).stdout)["rows"]
    tables = [a for t in sorted(folder.glob("*.parquet")) for a in ("--table", str(t))]
    given = json.loads(runner.invoke(app, [*args, *tables]).stdout)["rows"]
    assert default["train"] == len(frame[frame["family"] == "synth-a"])
    assert given["train"] == default["train"] + len(measured)
