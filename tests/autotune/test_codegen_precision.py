"""Where the plan's precision stores tensors (``kernel_io.storage_dtype``): under fp16, mixed
and bf16 the buffers between kernels, the kernels' loads and stores and the compile-time
tensors are 16-bit, as the cost model sizes their bytes, while a caller still gives and gets
the model's float32. Checked against onnxruntime on the float32 model (within half's 1e-2),
a mask of float32's minimum included; bfloat16 packages compile for sm_80 and are refused by
the CPU interpreter's check."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from codegen_helpers import check_plan, describe
from conftest import f32, make, vi
from onnx import TensorProto as T
from onnx import helper

from autotune.codegen.check import check_package
from autotune.codegen.compile_check import compile_package
from autotune.codegen.errors import CodegenError
from autotune.codegen.execute import load_package
from autotune.codegen.generate import generate
from autotune.codegen.kernel_io import storage_dtype
from costmodel.spec import PRECISIONS, load_target
from search_space import load_graph

RNG = np.random.default_rng(7)
LOWEST = float(np.finfo(np.float32).min)


def _block() -> onnx.ModelProto:
    """A projection, its activation, a residual and a softmax: four kernels under none."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"], name="proj"),
        helper.make_node("Tanh", ["p"], ["a"], name="act"),
        helper.make_node("Add", ["a", "x"], ["r"], name="residual"),
        helper.make_node("Softmax", ["r"], ["y"], name="probs", axis=-1),
    ]
    return make(nodes, [vi("x", [4, 24])], [vi("y", [4, 24])],
                [f32("w", RNG.normal(size=[24, 24]) / 5)])  # fmt: skip


@pytest.mark.parametrize("precision", ["fp16", "mixed"])
def test_half_precision_stores_the_buffers_in_float16_and_keeps_the_models_interface(
    precision: str, tmp_path
) -> None:
    model = _block()
    gen, result = check_plan(model, "none", tmp_path / "pkg", precision=precision)
    assert result.ok, describe(result)
    stores = [k.text.split("tl.store(")[-1] for k in gen.program.kernels]
    assert all("tl.float16" in s for s in stores)  # every kernel stores 16 bits
    assert {gen.program.storage(t) for t in ("p", "a", "r", "y")} == {"float16"}
    pkg = load_package(tmp_path / "pkg")
    out = pkg.run({"x": RNG.normal(size=[4, 24]).astype(np.float32)})
    assert out["y"].dtype == np.float32 and pkg.INPUTS["x"] == ((4, 24), "float32")


@pytest.mark.parametrize("computed", [False, True])
def test_a_mask_of_float32s_minimum_stays_finite_in_float16(computed: bool, tmp_path) -> None:
    nodes = [  # BERT's extended mask: (1 - mask) * lowest, added to the scores
        helper.make_node("Cast", ["keep"], ["k"], name="cast", to=T.FLOAT),
        helper.make_node("Sub", ["one", "k"], ["drop"], name="invert"),
        helper.make_node("Mul", ["drop", "lowest"], ["bias"], name="extend"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="mask"),
        helper.make_node("Softmax", ["masked"], ["y"], name="probs", axis=-1),
    ]
    keep = np.array([[1, 1, 0, 0, 1], [0, 0, 0, 0, 0], [1, 0, 1, 0, 1]], dtype=bool)
    inits = [f32("one", np.array(1.0)), f32("lowest", np.array(LOWEST))]
    inputs = [vi("scores", [3, 5])]
    if computed:  # the mask made by a kernel (stored), else folded into a parameter (loaded)
        inputs.append(vi("keep", [3, 5], T.BOOL))
    else:
        inits.append(helper.make_tensor("keep", T.BOOL, keep.shape, keep.ravel().tolist()))
    model = make(nodes, inputs, [vi("y", [3, 5])], inits)
    gen, result = check_plan(model, "none", tmp_path / "pkg", precision="fp16")
    assert result.ok, describe(result)
    assert any("extend" in k.ops[0] for k in gen.program.kernels) == computed
    feeds = {"scores": RNG.normal(size=[3, 5]).astype(np.float32), "keep": keep}
    out = load_package(tmp_path / "pkg").run(
        {n: feeds[n] for n in ("scores", "keep")[: 1 + computed]}
    )
    assert np.isfinite(out["y"]).all()  # the fully masked row too, as in float32


def test_bfloat16_packages_compile_and_the_interpreter_refuses_to_check_them(tmp_path) -> None:
    model = _block()
    graph = load_graph(model)
    gen = generate(model, graph, "none", load_target("ascend910b", (), "bf16"))
    assert {gen.program.storage(t) for t in ("p", "a", "r")} == {"bfloat16"}
    folder = gen.write(tmp_path / "pkg")
    assert all(r.ok for r in compile_package(folder, graph, gen.program))
    with pytest.raises(CodegenError, match="bfloat16"):
        check_package(folder, model, gen.program)


SIZES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dtype", list(SIZES))
def test_a_float_is_stored_in_the_bytes_the_cost_model_prices(precision: str, dtype: str) -> None:
    target = load_target("ascend910b", (), precision)
    stored = storage_dtype(dtype, precision)
    assert SIZES[stored] == target.vector_itemsize(SIZES[dtype])
    assert stored == dtype or (stored == "bfloat16") == (precision == "bf16")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_integers_and_booleans_keep_their_type(precision: str) -> None:
    assert [storage_dtype(d, precision) for d in ("int64", "int32", "bool")] == [
        "int64", "int32", "bool"]  # fmt: skip


@pytest.mark.parametrize(("name", "plan"), [("llama3-8b", "max"), ("bert-base", "none")])
def test_zoo_models_at_fp16_reproduce_onnxruntimes_float32(name: str, plan: str, tmp_path) -> None:
    from search_space.zoo.catalog import build

    model = build(name, weights="random", scale=0.05, batch=1, layers=1)
    gen, result = check_plan(model, plan, tmp_path / "pkg", precision="fp16")
    assert result.ok, describe(result)
    assert not gen.program.unfused


@pytest.mark.parametrize("plan", ["none", "max"])
def test_infinities_and_nan_survive_float16_storage(plan: str, tmp_path) -> None:
    nodes = [  # found in review: a saturating store turned -inf and NaN into -65504
        helper.make_node("Less", ["x", "zero"], ["neg"], name="less"),
        helper.make_node("Where", ["neg", "minus_inf", "x"], ["masked"], name="mask"),
        helper.make_node("IsInf", ["masked"], ["inf"], name="isinf"),
        helper.make_node("Sqrt", ["x"], ["root"], name="sqrt"),
        helper.make_node("IsNaN", ["root"], ["nan"], name="isnan"),
    ]
    inits = [f32("zero", np.array(0.0)), f32("minus_inf", np.array(-np.inf))]
    outputs = [vi("masked", [6, 8]), vi("inf", [6, 8], T.BOOL), vi("root", [6, 8]),
               vi("nan", [6, 8], T.BOOL)]  # fmt: skip
    model = make(nodes, [vi("x", [6, 8])], outputs, inits)
    _, result = check_plan(model, plan, tmp_path / "pkg", precision="fp16")
    assert result.ok, describe(result)  # -inf, the IsInf count and the NaNs as in float32
