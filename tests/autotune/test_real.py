"""Real measured kernel times: parsing rows, one-kernel models (checked in onnxruntime against
numpy formulas), and the accuracy metrics."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from hypothesis import strategies as st
from real_helpers import real_row as _row

from costmodel.exceptions import MeasurementError
from costmodel.measure.real import (
    family_of,
    metrics,
    one_kernel,
    parse_dims,
    parse_tensors,
    read_real,
    target_of,
)
from costmodel.measure.real.records import real_measurements
from search_space import load_graph
from search_space.fusion import FusionContext

REAL = Path(__file__).resolve().parents[2] / "datasets" / "real" / "ascend_kernels.csv"
HEADER = "chip,op,shapes,dtype,time_us,timing,source,quote,notes\n"


@given(st.lists(st.integers(1, 10**6), min_size=1, max_size=5))
def test_dims_round_trip(dims: list[int]) -> None:
    assert parse_dims(", ".join(map(str, dims))) == tuple(dims)


def test_dims_take_products_powers_and_suffixes() -> None:
    assert parse_dims("64*1024*1024") == (1 << 26,)
    assert parse_dims("2^26, 4K") == (1 << 26, 4096)
    assert parse_dims("64M") == (64 << 20,)
    for bad in ("1.5", "-3", "abc", "0"):
        with pytest.raises(MeasurementError):
            parse_dims(bad)


def test_shapes_name_each_input_and_ignore_outputs_and_notes() -> None:
    got = parse_tensors("q=k=v=[1,32,128,128] BNSD, causal mask [1,1,128,128] bool -> o=[9]")
    assert got == {"q": (1, 32, 128, 128), "k": (1, 32, 128, 128), "v": (1, 32, 128, 128)}
    assert parse_tensors("x=[128,512] (M,K), W=[512,512] (N,K) -> y=[128,512]") == {
        "x": (128, 512),
        "W": (512, 512),
    }
    assert parse_tensors("(2,64,256)") == {"x": (2, 64, 256)}  # an unnamed shape is x
    with pytest.raises(MeasurementError, match="no input shape"):
        parse_tensors("(M, K) by (K, N)")


@pytest.mark.parametrize(
    ("op", "family"),
    [
        ("MatMul (linear, y=x@W^T)", "matmul"),
        ("AddRmsNorm (x=x1+x2; y=rmsnorm(x)*gamma; outputs y, x)", "add_rmsnorm"),
        ("RmsNorm", "rmsnorm"),
        ("Addmv (torch.addmv: y=b+A@x)", "gemv"),
        ("FusedInferAttentionScore (prefill, causal)", "attention"),
        ("ReduceSum", "reduce"),
        ("torch.sum", "reduce"),
        ("SwiGlu", "swiglu"),
        ("Softmax", "softmax"),
        ("Add", "binary"),
        ("GELU", "unary"),
    ],
)
def test_op_columns_map_to_families(op: str, family: str) -> None:
    assert family_of(op) == family


def test_chips_map_to_specs() -> None:
    assert target_of("910B4") == "ascend910b4"
    assert target_of("Ascend 910B2") == "ascend910b2"
    assert target_of('"910B" (SKU not stated)') == "ascend910b"
    with pytest.raises(MeasurementError, match="unknown chip"):
        target_of("A100")


def test_timing_comes_from_the_column_or_the_notes() -> None:
    assert _row("RmsNorm", "x=[2,8]", notes="msprof op Task Duration").timing == "device"
    assert _row("RmsNorm", "x=[2,8]", notes="triton do_bench median").timing == "host"
    assert _row("RmsNorm", "x=[2,8]", timing="host", notes="msprof").timing == "host"


def test_bad_rows_are_reported_by_number_and_skipped(tmp_path: Path) -> None:
    csv = tmp_path / "real.csv"
    csv.write_text(
        HEADER
        + "910B4,RmsNorm,x=[2;64],fp32,5,device,s,q,n\n"  # unparseable shape
        + '910B4,FFT,"x=[2,64]",fp32,5,device,s,q,n\n'  # unknown op
        + '910B4,RmsNorm,"x=[2,64], gamma=[64]",fp32,5,device,s,q,n\n'  # fine
        + '910B4,RmsNorm,"x=[2,64]",fp32,-1,device,s,q,n\n'  # bad time
    )
    rows, problems = read_real([csv])
    assert [r.row for r in rows] == [3]
    assert [p.row for p in problems] == [1, 2, 4]
    assert "unknown op 'FFT'" in str(problems[1]) and str(problems[0]).startswith(str(csv))


@given(
    st.floats(0.01, 50.0),
    st.dictionaries(st.sampled_from(["vec_us", "mte2_us", "mte3_us", "mac_us"]),
                    st.floats(0.001, 1.0), max_size=4),
)  # fmt: skip
def test_pipe_columns_are_the_pipes_busy_times_in_a_fit_row(
    time_us: float, shares: dict[str, float]
) -> None:
    """A row's measured busy times (us, at most the kernel's time) are read per pipe; in the
    fit's table the cube's (M) are that pipe's busy time, while the DMA pipes' (msprof counts
    each transfer's latency, the models do not) and the vector pipe's (the models hold each
    iteration's scalar bookkeeping in it) stay unmeasured (0, which the fit leaves out), as
    do the pipes the row does not name."""
    busy = {c: round(time_us * f, 6) for c, f in shares.items()}
    row = _row("RmsNorm", "x=[2,64,256], gamma=[256]", time_us=repr(time_us), impl="custom",
               **{c: repr(v) for c, v in busy.items()})  # fmt: skip
    pipes = {"vec_us": "V", "mte2_us": "MTE2", "mte3_us": "MTE3", "mac_us": "M"}
    assert dict(row.pipes) == {pipes[c]: v for c, v in busy.items()}
    [fit], problems = real_measurements([row], "ascend910b")
    assert problems == []
    for column, pipe in pipes.items():
        fitted = busy.get(column, 0.0) if pipe == "M" else 0.0
        assert fit.cost.pipes_us[pipe] == fitted


def test_a_bad_pipe_column_skips_its_row_with_one_line(tmp_path: Path) -> None:
    csv = tmp_path / "real.csv"
    csv.write_text(
        HEADER.strip()
        + ",vec_us,mte2_us\n"
        + '910B4,RmsNorm,"x=[2,64]",fp32,5,device,s,q,n,fast,\n'  # not a number
        + '910B4,RmsNorm,"x=[2,64]",fp32,5,device,s,q,n,1.5,7\n'  # busier than the kernel
        + '910B4,RmsNorm,"x=[2,64]",fp32,5,device,s,q,n,1.5,2.5\n'  # fine
    )
    rows, problems = read_real([csv])
    assert [r.row for r in rows] == [3] and dict(rows[0].pipes) == {"V": 1.5, "MTE2": 2.5}
    assert [p.row for p in problems] == [1, 2]
    assert "vec_us 'fast' is not a number (give the pipe's busy time" in str(problems[0])
    assert "mte2_us must be a busy time between 0 and the kernel's time_us (5.0)" in str(
        problems[1]
    )
    assert all("\n" not in str(p) for p in problems)


def test_a_file_without_the_needed_columns_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(MeasurementError, match="no op, shapes, time_us column"):
        read_real([bad])


def test_the_shipped_real_rows_all_parse_and_form_one_legal_kernel_each() -> None:
    rows, problems = read_real([REAL])
    assert problems == [] and len(rows) >= 100
    assert {r.timing for r in rows} == {"device", "host"}
    for r in rows:
        assert r.source and r.quote and r.time_us > 0, r.row
        ctx = FusionContext(load_graph(one_kernel(r)))
        assert ctx.check(ctx.nodes).ok, (r.row, r.family)


def _run(row, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    model = one_kernel(row)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_rmsnorm_and_add_rmsnorm_compute_what_the_real_op_does() -> None:
    rng = np.random.default_rng(0)
    x1, x2 = (
        rng.standard_normal((2, 4, 64)).astype(np.float32),
        rng.standard_normal((2, 4, 64)).astype(np.float32),
    )
    g = rng.standard_normal(64).astype(np.float32)

    def rms(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g

    (y,) = _run(_row("RmsNorm", "x=[2,4,64], gamma=[64]"), {"x": x1, "gamma": g})
    np.testing.assert_allclose(y, rms(x1), rtol=1e-5, atol=1e-5)
    y, s = _run(_row("AddRmsNorm", "x1=x2=[2,4,64], gamma=[64]"), {"x1": x1, "x2": x2, "gamma": g})
    np.testing.assert_allclose(s, x1 + x2, rtol=1e-6)
    np.testing.assert_allclose(y, rms(x1 + x2), rtol=1e-5, atol=1e-5)


def test_swiglu_and_rope_compute_what_the_real_ops_do() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 16)).astype(np.float32)
    (y,) = _run(_row("SwiGlu", "gate=up=[2,3,8]"), {"x": x})
    a, b = x[..., :8].astype(np.float64), x[..., 8:].astype(np.float64)
    np.testing.assert_allclose(y, a / (1 + np.exp(-a)) * b, rtol=1e-5, atol=1e-6)
    x4 = rng.standard_normal((1, 5, 2, 8)).astype(np.float32)
    cos, sin = (rng.standard_normal((1, 5, 1, 8)).astype(np.float32) for _ in range(2))
    (r,) = _run(
        _row("RotaryMul", "x=[1,5,2,8], cos=sin=[1,5,1,8]"), {"x": x4, "cos": cos, "sin": sin}
    )
    rot = np.concatenate([-x4[..., 4:], x4[..., :4]], axis=-1)
    np.testing.assert_allclose(r, x4 * cos + rot * sin, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("x_dims", "table_dims"), [((6, 8), (6, 4)), ((2, 6, 3, 8), (1, 6, 1, 4))]
)
def test_rope_with_half_tables_rotates_each_pair_by_its_angle(x_dims, table_dims) -> None:
    """(S, D/2) tables, one angle per pair: the model computes the full-table RoPE of the
    tables repeated over both halves (onnxruntime against float64 numpy), and takes the tables
    at their half size."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_dims).astype(np.float32)
    angle = rng.uniform(-3.0, 3.0, table_dims)
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    dims = lambda d: ",".join(map(str, d))  # noqa: E731
    row = _row("RotaryMul", f"x=[{dims(x_dims)}], cos=sin=[{dims(table_dims)}]")
    (r,) = _run(row, {"x": x, "cos": cos, "sin": sin})
    x64, c, s = x.astype(np.float64), np.cos(angle), np.sin(angle)
    full_c, full_s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
    rot = np.concatenate([-x64[..., 4:], x64[..., :4]], axis=-1)
    np.testing.assert_allclose(r, x64 * full_c + rot * full_s, rtol=1e-5, atol=1e-5)
    tables = {i.name: i for i in one_kernel(row).graph.input}
    assert [d.dim_value for d in tables["cos"].type.tensor_type.shape.dim] == list(table_dims)


def test_causal_attention_and_linear_compute_what_the_real_ops_do() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 6, 8)).astype(np.float32) for _ in range(3))
    (o,) = _run(_row("FusedInferAttentionScore (prefill, causal)", "q=k=v=[1,2,6,8]"),
                {"q": q, "k": k, "v": v})  # fmt: skip
    s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / math.sqrt(8)
    s = np.where(np.triu(np.ones((6, 6)), 1) > 0, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)
    x, w = (
        rng.standard_normal((4, 16)).astype(np.float32),
        rng.standard_normal((8, 16)).astype(np.float32),
    )
    (y,) = _run(_row("MatMul (linear, y=x@W^T)", "x=[4,16], W=[8,16]"), {"x": x, "W": w})
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


def test_metrics_agree_with_their_definitions() -> None:
    real = [1.0, 2.0, 4.0, 8.0]
    m = metrics([1.0, 2.0, 4.0, 8.0], real)
    assert m["geomean"] == pytest.approx(1.0) and m["median_abs_log"] == pytest.approx(0.0)
    assert m["within_25"] == 1.0 and m["spearman"] == pytest.approx(1.0)
    m = metrics([2.0, 4.0, 8.0, 16.0], real)  # all twice too slow, ranked perfectly
    assert m["geomean"] == pytest.approx(2.0) and m["within_25"] == 0.0
    assert m["median_abs_log"] == pytest.approx(math.log(2.0)) and m["spearman"] == pytest.approx(
        1.0
    )
    m = metrics([1.24, 1.26], [1.0, 1.0])
    assert m["within_25"] == 0.5 and m["spearman"] is None


def test_costmodel_eval_real_reports_every_model_and_skips_bad_rows(tmp_path: Path) -> None:

    from typer.testing import CliRunner

    from autotune.cli import app

    csv = tmp_path / "real.csv"
    csv.write_text(
        HEADER
        + '910B4,RmsNorm,"x=[2,64,256], gamma=[256]",fp32,6.74,device,s,q,n\n'
        + '910B2,MatMul (torch.mm),"A=[256,256] x B=[256,256]",fp16,9.0,host,s2,q,n\n'
        + '910B4,FFT,"x=[8]",fp32,5,device,s,q,n\n'
    )
    res = CliRunner().invoke(app, ["costmodel", "eval", "--real", str(csv), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["rows"] == 2 and len(data["skipped"]) == 1 and "row 3" in data["skipped"][0]
    for model in ("simulator", "analytic", "learned"):
        for how in ("default", "best"):
            assert data["overall"][f"{model}/{how}"]["n"] == 2
    assert data["overall"]["naive"]["n"] == 2
    assert set(data["by_family"]) == {"rmsnorm", "matmul"}
    assert {r["timing"] for r in data["per_row"]} == {"device", "host"}
    bad = CliRunner().invoke(app, ["costmodel", "eval", "--real", str(tmp_path / "no.csv")])
    assert bad.exit_code == 1 and "cannot read real-data file" in bad.output


def test_estimate_reports_each_kernels_device_time_without_the_gap() -> None:

    from typer.testing import CliRunner

    from autotune.cli import app
    from costmodel.spec import load_spec

    gap = load_spec().kernel_gap_s * 1e6
    res = CliRunner().invoke(
        app, ["estimate", "zoo:bert-base", "--scale", "0.1", "--cost", "simulator", "--json"]
    )
    kernels = json.loads(res.stdout.strip().splitlines()[-1])["kernels"]
    for k in kernels:
        assert 0 < k["device_us"] < k["us"]
        assert k["us"] - k["device_us"] == pytest.approx(gap)
