"""Calibration tables (``costmodel.measure.table``): kernel records, rows, parquet files,
manifest."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import bert_ffn_block, conv_bn_relu, exporter_attention
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernels_by_hand import add, gelu, matmul, matmul_gelu

from costmodel.base import KernelCost
from costmodel.exceptions import CostModelError
from costmodel.kernel import PIPES, Kernel
from costmodel.lower import Lowering
from costmodel.measure import (
    PIPE_COLUMNS,
    REQUIRED_COLUMNS,
    kernel_from_json,
    kernel_to_json,
    measurement_rows,
    read_table,
    update_manifest,
    write_table,
)
from costmodel.spec import load_target
from search_space import load_graph
from search_space.ir import make_group, singleton_groups

T910B = load_target("ascend910b")
PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def round_trip(kernel: Kernel) -> Kernel:
    return kernel_from_json(json.loads(json.dumps(kernel_to_json(kernel))))


# -- kernel records -----------------------------------------------------------------------------
pow2 = st.sampled_from


@st.composite
def hand_kernels(draw: st.DrawFn) -> Kernel:
    """Every hand-made kernel shape, with the knobs the lowering varies."""
    which = draw(st.sampled_from(["matmul", "add", "matmul_gelu", "gelu"]))
    db = draw(st.booleans())
    if which == "matmul":
        size = draw(st.sampled_from([512, 1024, (1024, 2048, 512), (4096, 256, 1024)]))
        l1 = (draw(pow2([64, 128, 256])), draw(pow2([64, 128, 256])), draw(pow2([64, 128])))
        l0 = (min(l1[0], 128), min(l1[1], 128), 64)
        return matmul(
            size, l1, l0, draw(st.integers(1, 24)), db, draw(pow2([2, 4])),
            nd2nz=draw(st.booleans()),
        )  # fmt: skip
    if which == "add":
        return add(draw(pow2([1 << 12, 1 << 20])), draw(pow2([1024, 4096])), 48, db)
    if which == "matmul_gelu":
        return matmul_gelu(draw(pow2([512, 1024])), block_dim=draw(st.integers(1, 24)))
    return gelu(draw(pow2([256, 1024])), block_dim=draw(st.integers(1, 48)))


@PROPS
@given(hand_kernels())
def test_a_hand_made_kernel_survives_json(kernel: Kernel) -> None:
    back = round_trip(kernel)
    assert back == kernel
    assert kernel_to_json(back) == kernel_to_json(kernel)


@functools.cache
def lowered_kernels() -> list[Kernel]:
    """Kernels of every template, lowered from tiny graphs under a spread of their configs."""
    ffn = load_graph(bert_ffn_block(64, 32, 64))
    att = load_graph(exporter_attention(), input_shapes={"x": (2, 16, 16)})
    cnn = load_graph(conv_bn_relu(), input_shapes={"img": (2, 3, 16, 16)})
    fused = [
        (ffn, ["up", "up_bias", "relu"]),
        (ffn, ["down", "residual", "ln"]),  # mixed: an L2 hand-off
        (att, ["qk", "scale", "add_mask", "softmax", "isnan", "nan_guard", "pv"]),  # knobs
        (cnn, ["conv", "bn", "relu"]),
    ]
    groups = [(g, grp) for g in (ffn, att, cnn) for grp in singleton_groups(g)]
    groups += [(g, make_group(g, ops)) for g, ops in fused]
    out = []
    for graph, group in groups:
        low = Lowering(graph, T910B)
        grid = low.grid(group)
        out += [low.kernel(group, cfg) for cfg in grid[:: max(1, len(grid) // 3)]]
    return out


def test_lowered_kernels_survive_json() -> None:
    kernels = lowered_kernels()
    assert {k.unit for k in kernels} == {"cube", "vector", "mixed"}
    assert any(k.config.knobs for k in kernels) and any(k.signature for k in kernels)
    for k in kernels:
        assert round_trip(k) == k, k.name


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.pop("streams"),
        lambda d: d.update(grid=[1, 2]),
        lambda d: d.update(steps="many"),
        lambda d: d["streams"][0].__delitem__(slice(8, None)),  # row_bytes and reread gone
        lambda d: d.update(config={"base_m": 128}),
    ],
    ids=["no_streams", "short_grid", "text_steps", "short_stream", "config_without_block_dim"],
)
def test_a_malformed_kernel_record_is_a_cost_model_error(edit: Any) -> None:
    doc = json.loads(json.dumps(kernel_to_json(matmul(512))))
    edit(doc)
    with pytest.raises(CostModelError, match="malformed kernel record"):
        kernel_from_json(doc)


# -- rows ---------------------------------------------------------------------------------------
def some_rows(n: int = 3, **overrides: Any) -> list[dict[str, Any]]:
    kernels = [matmul(512, block_dim=4), add(1 << 14, tile=4096), matmul_gelu(512)][:n]
    costs = [KernelCost(10.0 + i, {"MTE2": 1.5 + i, "V": 0.25}) for i in range(len(kernels))]
    resident = [[0.0] * sum(s.is_load for s in k.streams) for k in kernels]
    kw: dict[str, Any] = dict(
        target="ascend910b",
        spec_digest=T910B.spec.digest(),
        precision="auto",
        seed=7,
        source="test",
        family="hand",
    )
    return measurement_rows(kernels, costs, resident, **(kw | overrides))


def test_measurement_rows_carry_the_kernel_and_what_was_measured() -> None:
    kernels = [matmul(512, block_dim=4), matmul_gelu(512)]
    costs = [KernelCost(12.5, {"MTE2": 3.0, "M": 2.0}), KernelCost(40.0, {"V": 9.0})]
    resident = [[0.25, 1 / 3], [0.0, 0.0, 0.5]]
    rows = measurement_rows(
        kernels,
        costs,
        resident,
        target="ascend910b",
        spec_digest="abc",
        precision="fp16",
        seed=3,
        source="sim",
        family="bert",
        group_ids=["g0", "g1"],
    )
    assert len(rows) == 2
    for row, k, c, res, gid in zip(rows, kernels, costs, resident, ["g0", "g1"], strict=True):
        assert set(REQUIRED_COLUMNS) <= set(row)
        assert kernel_from_json(json.loads(row["kernel"])) == k
        assert json.loads(row["config"]) == k.config.to_json()
        assert json.loads(row["resident"]) == pytest.approx(res, abs=1e-6)
        assert row["latency_us"] == c.latency_us and row["group_id"] == gid
        assert (row["kind"], row["unit"], row["signature"]) == (k.kind, k.unit, k.signature)
        assert (row["target"], row["precision"], row["seed"]) == ("ascend910b", "fp16", 3)
        for pipe, col in zip(PIPES, PIPE_COLUMNS, strict=True):
            assert row[col] == c.pipes_us.get(pipe, 0.0)
    assert json.loads(rows[0]["resident"])[1] == 0.333333  # six decimals
    # without group ids a row is ranked within its kernel signature
    assert [r["group_id"] for r in some_rows()] == [r["signature"] for r in some_rows()]


# -- parquet tables -----------------------------------------------------------------------------
def test_a_table_round_trips_every_column(tmp_path: Path) -> None:
    rows = [r | {"note": f"row {i}", "weight": 0.5 * i} for i, r in enumerate(some_rows())]
    path = tmp_path / "t.parquet"
    assert write_table(rows, path) == 3
    back = read_table(path)
    pd.testing.assert_frame_equal(back, pd.DataFrame(rows))
    assert [kernel_from_json(json.loads(k)) for k in back["kernel"]] == [
        kernel_from_json(json.loads(r["kernel"])) for r in rows
    ]
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_several_tables_read_as_one(tmp_path: Path) -> None:
    write_table(some_rows(2, family="a"), tmp_path / "a.parquet")
    write_table(some_rows(3, family="b"), tmp_path / "b.parquet")
    both = read_table([tmp_path / "a.parquet", str(tmp_path / "b.parquet")])
    assert list(both["family"]) == ["a", "a", "b", "b", "b"]
    assert list(both.index) == list(range(5))


def write_frame(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_parquet(path, index=False)
    return path


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.parquet"
    path.write_text("latency_us,target\n1.0,ascend910b\n")
    with pytest.raises(CostModelError, match=r"notes\.parquet") as err:
        read_table(path)
    assert "parquet" in str(err.value).lower().replace("notes.parquet", "")


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match=r"cannot read calibration table .*absent\.parquet"):
        read_table(tmp_path / "absent.parquet")
    with pytest.raises(CostModelError, match="no calibration tables given"):
        read_table([])


def test_a_parquet_without_the_columns_is_refused_naming_them(tmp_path: Path) -> None:
    path = write_frame(tmp_path / "other.parquet", pd.DataFrame({"latency_us": [1.0]}))
    with pytest.raises(CostModelError, match="is not a calibration table") as err:
        read_table(path)
    assert "kernel" in str(err.value) and "resident" in str(err.value)
    assert "latency_us" not in str(err.value).split("lacks")[1]
    frame = pd.DataFrame(some_rows()).drop(columns=["pipe_MTE3_us"])
    with pytest.raises(CostModelError, match=r"lacks column.*pipe_MTE3_us"):
        read_table(write_frame(tmp_path / "short.parquet", frame))


def test_a_table_from_a_newer_tool_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame(some_rows())
    frame.loc[1, "schema_version"] = 2
    with pytest.raises(CostModelError, match="newer tool"):
        read_table(write_frame(tmp_path / "new.parquet", frame))


@pytest.mark.parametrize("latency", [0.0, -1.0, float("nan"), float("inf")])
def test_a_table_with_a_bad_latency_is_refused(tmp_path: Path, latency: float) -> None:
    rows = some_rows()
    rows[2]["latency_us"] = latency
    write_table(rows, tmp_path / "bad.parquet")
    with pytest.raises(CostModelError, match="non-positive or non-finite"):
        read_table(tmp_path / "bad.parquet")


def test_write_table_refuses_nothing_and_incomplete_rows(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="no rows"):
        write_table([], tmp_path / "t.parquet")
    rows = [{k: v for k, v in r.items() if k != "seed"} for r in some_rows()]
    with pytest.raises(CostModelError, match="seed"):
        write_table(rows, tmp_path / "t.parquet")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", [False, True])
def test_write_table_is_atomic(tmp_path: Path, existing: bool) -> None:
    path = tmp_path / "t.parquet"
    if existing:
        write_table(some_rows(1), path)
    before = path.read_bytes() if existing else None
    rows = some_rows()
    rows[0]["extra"], rows[1]["extra"] = {"a": 1}, 3  # no parquet type holds both
    with pytest.raises(Exception) as err:
        write_table(rows, path)
    assert not isinstance(err.value, CostModelError)  # pyarrow's own, re-raised
    assert list(tmp_path.iterdir()) == ([path] if existing else [])
    if existing:
        assert path.read_bytes() == before
        assert len(read_table(path)) == 1


# -- manifest -----------------------------------------------------------------------------------
def test_manifest_records_size_hash_and_rows_and_replaces_by_file_name(tmp_path: Path) -> None:
    manifest = tmp_path / "MANIFEST.json"
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_table(some_rows(3), b)
    write_table(some_rows(2), a)
    update_manifest(manifest, b, {"rows": 3, "command": "autotune calibrate b"})
    update_manifest(manifest, a, {"rows": 2, "command": "autotune calibrate a"})

    def entries() -> dict[str, dict[str, Any]]:
        doc = json.loads(manifest.read_text())
        files = [t["file"] for t in doc["tables"]]
        assert files == sorted(files) and len(set(files)) == len(files)
        return {t["file"]: t for t in doc["tables"]}

    def check(entry: dict[str, Any], table: Path, rows: int) -> None:
        data = table.read_bytes()
        assert entry["bytes"] == len(data) == table.stat().st_size
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["rows"] == rows == len(read_table(table))

    first = entries()
    assert set(first) == {"a.parquet", "b.parquet"}
    check(first["a.parquet"], a, 2)
    check(first["b.parquet"], b, 3)
    assert first["a.parquet"]["command"] == "autotune calibrate a"

    write_table(some_rows(1), a)  # regenerate a: its entry is replaced, b's is kept
    update_manifest(manifest, a, {"rows": 1, "command": "again"})
    second = entries()
    assert set(second) == {"a.parquet", "b.parquet"}
    check(second["a.parquet"], a, 1)
    assert second["a.parquet"]["sha256"] != first["a.parquet"]["sha256"]
    assert second["a.parquet"]["command"] == "again"
    assert second["b.parquet"] == first["b.parquet"]


def test_a_corrupt_manifest_is_rebuilt(tmp_path: Path) -> None:
    manifest = tmp_path / "MANIFEST.json"
    manifest.write_text("{not json")
    table = tmp_path / "t.parquet"
    write_table(some_rows(1), table)
    update_manifest(manifest, table, {"rows": 1})
    doc = json.loads(manifest.read_text())
    assert [t["file"] for t in doc["tables"]] == ["t.parquet"]
    assert doc["tables"][0]["bytes"] == table.stat().st_size


@PROPS
@given(st.sampled_from([0.0, 0.25, 0.5]), hand_kernels())
def test_a_streams_reread_share_survives_json_and_old_rows_read_as_none(
    share: float, kernel: Kernel
) -> None:
    """A split row's re-read share is part of the record (the simulator serves it from L2); a
    row written before the field existed (9 stream fields) reads back with no re-read."""
    streams = tuple(
        dataclasses.replace(s, reread=share) if s.is_load else s for s in kernel.streams
    )
    k = dataclasses.replace(kernel, streams=streams)
    assert round_trip(k) == k
    old = kernel_to_json(k)
    old["streams"] = [row[:9] for row in old["streams"]]
    assert all(s.reread == 0.0 for s in kernel_from_json(old).streams)
