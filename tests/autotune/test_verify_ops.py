"""Emulation and reference gaps the fuzzing (tests/reliability/test_fuzz.py) found: each left a
fused kernel unverified (safe mode kept it, unchecked). The numpy kernels of
autotune/verify/ops.py against onnx's reference, the reference's own replacements
(autotune/verify/reference.py) against onnxruntime, and the kernels checked end to end."""

from __future__ import annotations

from typing import cast

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import search_space
from autotune.verify import Numerics, Status, verify_kernels
from autotune.verify.ops import KERNELS, OpCall
from autotune.verify.reference import REFERENCE_OPS
from costmodel.spec import load_target
from search_space.fusion import FusionContext
from search_space.rules import Policy
from search_space.space import PlanGroup

FP32 = Numerics("fp32", "fp32", "fp32", "fp32", "fp32")


@pytest.mark.parametrize("shape", [(4,), (4, 3), (2, 3, 5), (2, 1, 3, 2)])
def test_flatten_matches_the_reference_on_every_legal_axis(shape: tuple[int, ...]) -> None:
    """Flatten's axis runs over [-rank, rank]; axis == rank gives [N, 1] (it gave [1, N])."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for axis in range(-len(shape), len(shape) + 1):
        node = helper.make_node("Flatten", ["x"], ["y"], axis=axis)
        model = helper.make_model(
            helper.make_graph(
                [node],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        [want] = cast(list[np.ndarray], ReferenceEvaluator(model).run(None, {"x": x}))
        call = OpCall(node, {"axis": axis}, "fp32", FP32, 17)
        [got] = KERNELS["Flatten"](call, [x])
        assert got.shape == want.shape, f"axis {axis}"
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("op", "shapes"),
    [
        ("Mean", [(1, 1), (4, 5)]),  # onnx adds in place into the first, which broadcasts
        ("Mean", [(1, 1), (1, 1), (4, 5)]),
        ("Mean", [(4, 5), (5,)]),
        ("Softsign", [()]),  # onnx fails on a 0-d tensor
        ("Softsign", [(3, 2)]),
    ],
)
def test_the_reference_replacements_equal_onnxruntime(
    op: str, shapes: list[tuple[int, ...]]
) -> None:
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node(op, list(feeds), ["y"])],
            "g",
            [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in feeds],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, feeds)
    [got] = cast(
        list[np.ndarray], ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, feeds)
    )
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, list[int]],
    outputs: dict[str, list[int]],
    inits: dict[str, np.ndarray],
) -> onnx.ModelProto:
    def info(name: str, shape: list[int]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    model = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [info(n, s) for n, s in inputs.items()],
            [info(n, s) for n, s in outputs.items()],
            [numpy_helper.from_array(v.astype(np.float32), n) for n, v in inits.items()],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.checker.check_model(model, full_check=True)
    return model


RNG = np.random.default_rng(0)
N = helper.make_node
KERNEL_MODELS = {
    # the emulated Flatten made [1, 12] of [12, 1] and the MatMul failed
    "flatten to [N, 1]": _model(
        [
            N("Relu", ["x"], ["r"], name="relu"),
            N("Flatten", ["r"], ["f"], name="flat", axis=2),
            N("MatMul", ["f", "w"], ["y"], name="mm"),
            N("Relu", ["y"], ["z"], name="out"),
        ],
        {"x": [4, 3]},
        {"z": [12, 8]},
        {"w": RNG.standard_normal((1, 8))},
    ),
    # onnx's GlobalMaxPool gave [8, 1] for [8, 5, 1], in the oracle and the emulation
    "1-D GlobalMaxPool": _model(
        [N("GlobalMaxPool", ["x"], ["p"], name="pool"), N("Sub", ["x", "p"], ["z"], name="out")],
        {"x": [8, 5, 6]},
        {"z": [8, 5, 6]},
        {},
    ),
    # onnx's Mean added the [8, 5] input in place into the [1, 5] one
    "Mean broadcasting its first input": _model(
        [N("Relu", ["x"], ["r"], name="relu"), N("Mean", ["b", "r"], ["z"], name="out")],
        {"x": [8, 5]},
        {"z": [8, 5]},
        {"b": RNG.standard_normal((1, 5))},
    ),
    # onnx's Softsign failed on the 0-d mean
    "Softsign of a 0-d tensor": _model(
        [
            N("ReduceMean", ["x"], ["m"], name="mean", keepdims=0),
            N("Softsign", ["m"], ["z"], name="out"),
        ],
        {"x": [4, 3]},
        {"z": []},
        {},
    ),
}


@pytest.mark.parametrize("case", KERNEL_MODELS)
def test_the_fused_kernel_is_verified_and_passes(case: str) -> None:
    model = KERNEL_MODELS[case]
    graph = search_space.load_graph(model)
    group = FusionContext(graph).group(op.name for op in graph.ops if not op.is_view)
    plan = PlanGroup(tuple(group.ops), group.kind)
    [verdict] = verify_kernels(model, graph, [plan], load_target(), Policy())
    assert verdict.status is Status.PASSED, verdict.verdict
