"""The bad-input corpus: hostile but plausible files, built by code (no hand-edited binaries).

``build(folder)`` writes every artifact the cases (:mod:`cases`) name into ``folder`` and
returns ``name -> path``. Run it as a script to look at them:

    .venv/bin/python tests/reliability/corpus.py /tmp/corpus

Models are variants of one small valid model (MatMul, Add, Relu over a [4, 64] input); plans
are variants of a valid plan for it, which the caller makes with the tool itself (``plan``
argument: ``autotune tune`` writes it) so the corpus never copies a plan format by hand.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from corpus_input import build_input
from corpus_output import build_output
from onnx import TensorProto, helper, numpy_helper

__all__ = ["build", "valid_model"]

HIDDEN = 64


def _graph(nodes: list[onnx.NodeProto], **kw: Any) -> onnx.GraphProto:
    x = kw.pop("x", helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN]))
    y = kw.pop("y", helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, HIDDEN]))
    rng = np.random.default_rng(0)
    inits = kw.pop(
        "inits",
        [
            numpy_helper.from_array(rng.standard_normal((HIDDEN, HIDDEN)).astype("f4"), "w"),
            numpy_helper.from_array(rng.standard_normal(HIDDEN).astype("f4"), "b"),
        ],
    )
    return helper.make_graph(nodes, kw.pop("name", "g"), [x], [y], inits, **kw)


def _model(graph: onnx.GraphProto, opset: int = 17, **kw: Any) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
    m.ir_version = 8
    return m


def _mlp(**names: str) -> list[onnx.NodeProto]:
    mm, add, relu = names.get("mm", "mm"), names.get("add", "add"), names.get("relu", "relu")
    return [
        helper.make_node("MatMul", ["x", "w"], ["h"], name=mm),
        helper.make_node("Add", ["h", "b"], ["z"], name=add),
        helper.make_node("Relu", ["z"], ["y"], name=relu),
    ]


def valid_model() -> onnx.ModelProto:
    """The corpus's base: x[4, 64] -> MatMul -> Add -> Relu -> y."""
    return _model(_graph(_mlp()))


def _save(model: onnx.ModelProto, path: Path) -> None:
    path.write_bytes(model.SerializeToString())  # no checker: some are invalid on purpose


def _models(d: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}

    def put(name: str, model: onnx.ModelProto) -> None:
        out[name] = d / f"{name}.onnx"
        _save(model, out[name])

    put("valid", valid_model())
    good = valid_model().SerializeToString()
    raw = {
        "truncated": good[: len(good) // 2],
        "random": np.random.default_rng(1).bytes(4096),
        "empty": b"",
        "text": b"this is not a model\n",
    }
    for name, data in raw.items():
        out[name] = d / f"{name}.onnx"
        out[name].write_bytes(data)
    out["folder"] = d / "folder.onnx"
    out["folder"].mkdir(exist_ok=True)
    out["missing"] = d / "missing.onnx"
    loop_a, loop_b = d / "loop_a.onnx", d / "loop_b.onnx"
    for link, target in ((loop_a, loop_b), (loop_b, loop_a)):
        if not link.is_symlink():
            os.symlink(target.name, link)
    out["symlink_loop"] = loop_a
    put("opset_99", _model(_graph(_mlp()), opset=99))
    custom = _mlp()
    custom[2] = helper.make_node("Swish", ["z"], ["y"], name="relu", domain="com.example")
    m = _model(_graph(custom))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    put("unknown_domain", m)
    put("missing_attribute", _model(_graph([*_mlp()[:2], helper.make_node("Cast", ["z"], ["y"])])))
    zero = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, HIDDEN])
    put(
        "zero_dim",
        _model(
            _graph(
                _mlp(),
                x=zero,
                y=helper.make_tensor_value_info("y", TensorProto.FLOAT, [0, HIDDEN]),
            )
        ),
    )
    huge = [2**31, 2**31]
    put(
        "huge_dims",
        _model(
            _graph(
                [helper.make_node("Add", ["x", "x"], ["y"], name="add")],
                x=helper.make_tensor_value_info("x", TensorProto.FLOAT, huge),
                y=helper.make_tensor_value_info("y", TensorProto.FLOAT, huge),
                inits=[],
            )
        ),
    )
    dyn = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN])
    put(
        "dynamic_dims",
        _model(
            _graph(
                _mlp(),
                x=dyn,
                y=helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", HIDDEN]),
            )
        ),
    )
    cyc = [
        helper.make_node("Add", ["x", "r"], ["a"], name="a"),
        helper.make_node("Relu", ["a"], ["r"], name="r"),
        helper.make_node("Identity", ["r"], ["y"], name="out"),
    ]
    put("cycle", _model(_graph(cyc, inits=[])))
    dup = _mlp()
    dup.append(helper.make_node("Relu", ["z"], ["y"], name="relu2"))  # y produced twice
    put("duplicate_output", _model(_graph(dup)))
    put("duplicate_node_names", _model(_graph(_mlp(mm="n", add="n", relu="n"))))
    put("empty_names", _model(_graph(_mlp(mm="", add="", relu=""))))
    put("no_nodes", _model(_graph([], inits=[])))
    passthrough = _graph(_mlp())
    passthrough.output.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, HIDDEN]))
    put("output_is_input", _model(passthrough))
    then = helper.make_graph(
        [helper.make_node("Relu", ["z"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, HIDDEN])],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["z"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4, HIDDEN])],
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    branch = [
        *_mlp()[:2],
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
    ]
    g = _graph(branch)
    g.initializer.append(cond)
    put("if_subgraph", _model(g))
    ext = valid_model()
    w = ext.graph.initializer[0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights_gone.bin")
    put("external_missing", ext)
    outside = valid_model()
    w = outside.graph.initializer[0]
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="../../../etc/passwd")
    put("external_outside", outside)
    return out


def _plans(d: Path, plan: Path | None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    if plan is None:
        return out
    good = json.loads(plan.read_text())

    def put(name: str, data: Any, raw: str | None = None) -> None:
        out[f"plan_{name}"] = d / f"plan_{name}.json"
        out[f"plan_{name}"].write_text(raw if raw is not None else json.dumps(data))

    put("valid", good)
    put("not_json", None, "{ this is not json")
    put("empty", None, "")
    put("truncated", None, plan.read_text()[: len(plan.read_text()) // 2])
    put("list", [1, 2, 3])
    put("newer_schema", {**good, "schema_version": 99})
    put("other_model", {**good, "fingerprint": "0" * 16})
    put("other_target", {**good, "target": "ascend310p"})
    groups = good["groups"]

    def with_groups(gs: list[dict[str, Any]]) -> dict[str, Any]:
        return {**good, "groups": gs}

    all_ops = [op for g in groups for op in g["ops"]]
    put("overlapping", with_groups([*groups, {**groups[0], "ops": all_ops[:1]}]))
    put("unknown_op", with_groups([*groups, {"ops": ["no_such_op"], "kind": "single"}]))
    fused = next((g for g in groups if len(g["ops"]) > 1), groups[0])
    # MatMul and Relu without the Add between them: not convex
    put(
        "non_convex",
        with_groups(
            [
                {
                    "ops": ["mm", "relu"],
                    "kind": fused.get("kind", "single"),
                    "config": fused.get("config"),
                },
                {"ops": ["add"], "kind": "single"},
            ]
        ),
    )
    put("unknown_kind", with_groups([{**g, "kind": "mystery"} for g in groups]))

    def tiles(value: Any) -> dict[str, Any]:
        gs = []
        for g in groups:
            cfg = dict(g.get("config") or {})
            cfg.update({k: value for k in ("block_dim", "ub_rows", "base_m") if k in cfg})
            gs.append({**g, "config": cfg})
        return with_groups(gs)

    put("negative_tiles", tiles(-16))
    put("zero_tiles", tiles(0))
    put("absurd_tiles", tiles(10**12))
    put("float_tiles", tiles(1.5))
    put("string_tiles", tiles("big"))
    put("overflow_buffer", tiles(2**20))
    return out


def _specs(d: Path) -> dict[str, Path]:
    base = Path(__file__).resolve().parents[2] / "costmodel" / "specs" / "ascend910b.toml"
    text = base.read_text()
    out: dict[str, Path] = {}

    def put(name: str, content: str) -> None:
        out[f"spec_{name}"] = d / f"spec_{name}.toml"
        out[f"spec_{name}"].write_text(content)

    lines = text.splitlines()
    put("missing_field", "\n".join(ln for ln in lines if not ln.startswith("clock_hz")))
    put("negative", text.replace("clock_hz = 1.8e9", "clock_hz = -1.8e9"))
    put("nan", text.replace("clock_hz = 1.8e9", "clock_hz = nan"))
    put("unknown_field", text.replace("clock_hz = 1.8e9", "clock_hz = 1.8e9\nwarp_speed = 9"))
    put("not_toml", "this = is = not toml")
    put("zero_cores", text.replace("cube_cores = 24", "cube_cores = 0"))
    return out


def _others(d: Path) -> dict[str, Path]:
    out = {"text_file": d / "notes.txt", "csv_file": d / "rows.csv"}
    out["text_file"].write_text("not a dataset\n")
    out["csv_file"].write_text("a,b\n1,2\n")
    out["not_journal"] = d / "other.journal"
    out["not_journal"].write_text("hello\n")
    out["no_dir"] = d / "no_such_dir" / "out.json"
    return out


BUILDERS: tuple[Callable[[Path], dict[str, Path]], ...] = (
    _models,
    _specs,
    _others,
    build_output,
    build_input,
)


def build(folder: Path, plan: Path | None = None) -> dict[str, Path]:
    """Write the corpus into ``folder``; ``plan``: a valid plan of :func:`valid_model` (the
    plan variants are made from it)."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for make in BUILDERS:
        out.update(make(folder))
    out.update(_plans(folder, plan))
    return out


if __name__ == "__main__":
    made = build(Path(sys.argv[1] if len(sys.argv) > 1 else "corpus"))
    print("\n".join(f"{k}: {v}" for k, v in sorted(made.items())))
