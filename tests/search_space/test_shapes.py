"""Shape ranges, buckets, traffic files and bucket graphs (issue 49, item 1)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper

from search_space.ir import Graph
from search_space.onnx import load_graph
from search_space.shapes import (
    OnnxShapes,
    ShapeRangeError,
    ShapeRanges,
    ZooShapes,
    bucket_graphs,
    parse_range,
    pow2_edges,
    read_traffic,
    representatives,
)
from search_space.zoo import ZooOptions, load_model_spec

SPANS = st.integers(1, 5000).flatmap(lambda lo: st.tuples(st.just(lo), st.integers(lo, 9000)))


@given(SPANS)
def test_pow2_edges_cover_the_range_with_no_empty_bucket(span: tuple[int, int]) -> None:
    lo, hi = span
    edges = pow2_edges(lo, hi)
    assert edges[-1] == hi
    assert edges[0] >= lo
    assert list(edges) == sorted(set(edges))  # increasing: no empty or overlapping bucket
    assert all(e & (e - 1) == 0 for e in edges[:-1])  # powers of two below the top
    # the first edge is the smallest power of two that holds lo: lo's bucket
    assert edges[0] == hi or edges[0] // 2 < lo


@given(SPANS, st.data())
def test_a_value_runs_in_the_smallest_bucket_that_holds_it(
    span: tuple[int, int], data: st.DataObject
) -> None:
    lo, hi = span
    ranges = ShapeRanges.parse([f"n={lo}..{hi}"])
    v = data.draw(st.integers(lo, hi))
    ((name, edge),) = ranges.bucket_of({"n": v})
    edges = ranges.edges["n"]
    assert name == "n" and edge >= v
    assert all(e < v for e in edges if e < edge)


def test_explicit_buckets_and_the_product_of_dims() -> None:
    ranges = ShapeRanges.parse(["batch=1..8", "seq=16..512"], ["seq=64,128,512"])
    assert ranges.edges == {"batch": (1, 2, 4, 8), "seq": (64, 128, 512)}
    buckets = ranges.buckets()
    assert len(buckets) == 4 * 3
    assert buckets[0].label == "batch=1,seq=64" and buckets[-1].label == "batch=8,seq=512"
    assert sum(b.weight for b in buckets) == pytest.approx(1.0)
    assert ranges.bucket_of({"batch": 3, "seq": 16}) == (("batch", 4), ("seq", 64))


@pytest.mark.parametrize(
    ("ranges", "buckets", "says"),
    [
        (["seq=512..16"], [], "LO 512 is above HI 16"),
        (["seq=0..16"], [], "LO must be at least 1"),
        (["seq=16-512"], [], "is not NAME=LO..HI"),
        (["seq=a..b"], [], "is not NAME=LO..HI"),
        (["seq=1..4", "seq=1..8"], [], "'seq' twice"),
        (["seq=16..512"], ["seq=64,32,512"], "edges must increase"),
        (["seq=16..512"], ["seq=64,64,512"], "edges must increase"),
        (["seq=16..512"], ["seq=8,64,512"], "must lie in the range"),
        (["seq=16..512"], ["seq=64,128"], "last edge must be the range's top 512"),
        (["seq=16..512"], ["batch=1,2"], "has no --shape-range"),
        (["seq=16..512"], ["seq=64,512", "seq=512"], "lists 'seq' twice"),
        (["seq=16..512"], ["seq=x"], "is not pow2, or NAME=E1,E2"),
    ],
)
def test_bad_ranges_and_buckets_say_what_and_how(
    ranges: list[str], buckets: list[str], says: str
) -> None:
    with pytest.raises(ShapeRangeError, match=says.replace("(", r"\(")):
        ShapeRanges.parse(ranges, buckets)


def test_a_value_outside_the_range_names_it() -> None:
    ranges = ShapeRanges.parse(["seq=16..512"])
    with pytest.raises(
        ShapeRangeError, match=re.escape("seq=600 is outside the range seq=16..512")
    ):
        ranges.bucket_of({"seq": 600})
    assert str(parse_range("seq=16..512")) == "seq=16..512"


def _traffic(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "traffic.csv"
    path.write_text(text)
    return path


def test_traffic_weights_each_bucket_by_the_shapes_it_runs(tmp_path: Path) -> None:
    ranges = ShapeRanges.parse(["batch=1..8", "seq=16..128"])
    path = _traffic(tmp_path, "seq,batch,count\n100,3,30\n128,4,10\n16,1,60\n\n")
    counts = read_traffic(path, ranges)
    assert counts == {(("batch", 4), ("seq", 128)): 40.0, (("batch", 1), ("seq", 16)): 60.0}
    weights = {b.label: b.weight for b in ranges.buckets(counts)}
    assert weights["batch=4,seq=128"] == pytest.approx(0.4)
    assert weights["batch=1,seq=16"] == pytest.approx(0.6)
    assert sum(weights.values()) == pytest.approx(1.0)
    assert weights["batch=8,seq=64"] == 0.0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("seq,width,count\n16,2,1\n", "column 'width' is not a ranged dim"),
        ("seq,count\n16,1\n", "no column 'batch'"),
        ("batch,seq\n1,16\n", "no column 'count'"),
        ("batch,seq,count\n1,16,-3\n", "line 2: count -3 must be a finite number >= 0"),
        ("batch,seq,count\n1,16,nan\n", "line 2: count nan must be a finite number"),
        ("batch,seq,count\n1,16,1\n2,1000,5\n", "line 3: seq=1000 is outside the range"),
        ("batch,seq,count\n1,x,1\n", "line 2: '1,x,1' is not whole dims and a count"),
        ("batch,seq,count\n1,16\n", "line 2: 2 cells under 3 columns"),
        ("batch,seq,count\n1,16,0\n", "counts no shape"),
        ("", "is empty; it needs a header: batch,seq,count"),
    ],
)
def test_bad_traffic_files_say_the_line(tmp_path: Path, text: str, says: str) -> None:
    ranges = ShapeRanges.parse(["batch=1..8", "seq=16..128"])
    with pytest.raises(ShapeRangeError, match=says):
        read_traffic(_traffic(tmp_path, text), ranges)


def test_zoo_buckets_are_the_model_built_at_each_shape() -> None:
    opts = ZooOptions(scale=0.1)
    ranges = ShapeRanges.parse(["batch=1..2", "seq=8..16"])
    graphs = bucket_graphs(ZooShapes("bert-base", opts), ranges)
    assert [b.label for b in graphs.buckets] == [
        "batch=1,seq=8",
        "batch=1,seq=16",
        "batch=2,seq=8",
        "batch=2,seq=16",
    ]
    for bucket, graph in zip(graphs.buckets, graphs.graphs, strict=True):
        v = bucket.values
        alone = load_model_spec(
            "zoo:bert-base", zoo=dataclasses.replace(opts, batch=v["batch"], seq_len=v["seq"])
        )
        assert _shapes(graph) == _shapes(alone)
    assert graphs.reference is graphs.graphs[-1]


def _shapes(graph: Graph) -> dict[str, tuple[int, ...]]:
    return {name: t.shape for name, t in graph.tensors.items()}


def test_a_range_on_a_dim_the_model_does_not_have_names_the_ones_it_has() -> None:
    ranges = ShapeRanges.parse(["seq=8..16"])
    with pytest.raises(
        ShapeRangeError,
        match=r"'seq' is not a dynamic dim of the model \(its dynamic dims: batch\)",
    ):
        bucket_graphs(ZooShapes("resnet50", ZooOptions(scale=0.1)), ranges)


@dataclasses.dataclass(frozen=True)
class _Layers:
    """A source whose structure changes with its dim (bert with that many layers)."""

    def dynamic_dims(self) -> tuple[str, ...]:
        return ("depth",)

    def graph(self, values: Mapping[str, int]) -> Graph:
        return load_model_spec("zoo:bert-base", zoo=ZooOptions(scale=0.1, layers=values["depth"]))


def test_buckets_whose_graphs_differ_beyond_shapes_are_refused() -> None:
    with pytest.raises(
        ShapeRangeError, match="bucket depth=1 folds to a different graph than bucket depth=2"
    ):
        bucket_graphs(_Layers(), ShapeRanges.parse(["depth=1..2"]))


def _dynamic_model(past_dim: str = "past + 1") -> onnx.ModelProto:
    """x[batch, seq, 8] @ w[8, 8] + b, softmax; and a cache input [batch, past + 1, 8]."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 8])
    cache = helper.make_tensor_value_info("cache", TensorProto.FLOAT, ["batch", past_dim, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], [0.1] * 64)
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], [0.0] * 8)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Softmax", ["a"], ["y"], name="sm", axis=-1),
        helper.make_node("Relu", ["cache"], ["z"], name="relu"),
    ]
    graph = helper.make_graph(nodes, "dyn", [x, cache], [y, z], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_onnx_models_dim_params_are_bound_per_bucket(tmp_path: Path) -> None:
    path = tmp_path / "dyn.onnx"
    onnx.save(_dynamic_model(), path)
    source = OnnxShapes(str(path))
    assert source.dynamic_dims() == ("batch", "seq", "past")
    ranges = ShapeRanges.parse(["batch=1..2", "seq=3..4", "past=4..8"])
    graphs = bucket_graphs(source, ranges)
    assert len(graphs) == 2 * 1 * 2  # seq 3..4 has one edge (4), past 4..8 two
    for bucket, graph in zip(graphs.buckets, graphs.graphs, strict=True):
        v = bucket.values
        # the oracle: the loader given the shapes by hand
        alone = load_graph(
            str(path),
            input_shapes={"x": (v["batch"], v["seq"], 8), "cache": (v["batch"], v["past"] + 1, 8)},
        )
        assert _shapes(graph) == _shapes(alone)
        assert graph.tensors["z"].shape == (v["batch"], v["past"] + 1, 8)


def test_an_input_shape_fixes_an_input_no_range_covers(tmp_path: Path) -> None:
    path = tmp_path / "dyn.onnx"
    onnx.save(_dynamic_model(past_dim="cache_len"), path)
    source = OnnxShapes(str(path), {"cache": (1, 9, 8)})
    assert source.dynamic_dims() == ("batch", "seq")
    graphs = bucket_graphs(source, ShapeRanges.parse(["batch=1..1", "seq=2..2"]))
    assert graphs.reference.tensors["z"].shape == (1, 9, 8)
    assert graphs.reference.tensors["y"].shape == (1, 2, 8)


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
    st.integers(1, 20),
)
def test_representatives_carry_all_the_traffic_and_keep_the_top(
    a: list[int], b: list[int], k: int
) -> None:
    ranges = ShapeRanges.parse(["batch=1..8", "seq=16..128"])
    keys = ranges.keys()
    counts = {key: float(c) for key, c in zip(keys, a + b, strict=False) if c}
    buckets = ranges.buckets(counts or None)
    reps = representatives(buckets, ranges, k)
    assert len(reps) == min(k, len(buckets))
    assert len(buckets) - 1 in reps  # the top bucket, the study's graph
    assert sum(reps.values()) == pytest.approx(sum(x.weight for x in buckets))
    assert reps == representatives(buckets, ranges, k)  # deterministic
    if k >= len(buckets):
        assert reps == {i: x.weight for i, x in enumerate(buckets)}
    assert representatives(buckets, ranges, 1) == {len(buckets) - 1: pytest.approx(1.0)}
