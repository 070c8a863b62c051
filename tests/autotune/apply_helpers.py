"""Shared by the apply_plan tests: plans, seeded feeds, and the checks every fused model passes."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from autotune.apply import FUSED_DOMAIN, apply_plan
from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import Graph
from search_space.fusion import FusionContext
from search_space.onnx import node_names
from search_space.space import PlanGroup
from search_space.zoo import INPUT_RANGES_KEY, build

IDENT = re.compile(r"^[A-Za-z_]\w*$", re.ASCII)


# -- helpers ---------------------------------------------------------------------------------
def _oracle(graph: Graph) -> tuple[FusionContext, CostOracle]:
    ctx = FusionContext(graph)
    return ctx, CostOracle(graph, load_target(), ctx=ctx)


def _max_plan(graph: Graph) -> list[PlanGroup]:
    ctx, oracle = _oracle(graph)
    groups = ctx.to_groups(ctx.repair(ctx.edges, oracle.feasible))
    return [PlanGroup(g.ops, g.kind, oracle.default(g)) for g in groups]


def _feeds(
    model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]] | None = None, seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded inputs: ids in the declared range (else < 100), 0/1 masks, N(0, 1) floats."""
    rng = np.random.default_rng(seed)
    meta = {p.key: p.value for p in model.metadata_props}
    ranges = json.loads(meta.get(INPUT_RANGES_KEY, "{}"))
    inits = {t.name for t in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = (shapes or {}).get(vi.name) or tuple(d.dim_value for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.integer):
            lo, hi = (0, 1) if "mask" in vi.name else ranges.get(vi.name, (0, 99))
            arr = rng.integers(lo, hi + 1, size=shape).astype(dtype)
            if "mask" in vi.name:
                arr[:, 0] = 1  # every row keeps a token, like a real CLS/BOS
            feeds[vi.name] = arr
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return list(sess.run(None, feeds))


def _assert_same(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    for want, got in zip(_run(a, feeds), _run(b, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _structure(model: onnx.ModelProto, fused: onnx.ModelProto, groups: list[PlanGroup]) -> None:
    """Every invariant of a fused model that does not need running it."""
    multi = [g for g in groups if len(g.ops) > 1]
    calls = [n for n in fused.graph.node if n.domain == FUSED_DOMAIN]
    assert len(calls) == len(multi) == len(fused.functions)
    assert [(o.domain, o.version) for o in fused.opset_import].count((FUSED_DOMAIN, 1)) == 1
    own = Counter((o.domain, o.version) for o in model.opset_import)
    names = [f.name for f in fused.functions]
    assert len(set(names)) == len(names)
    fns = {f.name: f for f in fused.functions}
    for f in fused.functions:
        assert IDENT.match(f.name) and f.domain == FUSED_DOMAIN
        assert Counter((o.domain, o.version) for o in f.opset_import) == own
    # every original node is kept byte-for-byte exactly once: outside, or in one body
    outer = [n for n in fused.graph.node if n.domain != FUSED_DOMAIN]
    inner = [n for f in fused.functions for n in f.node]
    assert Counter(n.SerializeToString() for n in [*outer, *inner]) == Counter(
        n.SerializeToString() for n in model.graph.node
    )
    # each body holds its group's nodes in their original order, with the config attached
    by_name = dict(zip(node_names(model.graph.node), model.graph.node, strict=True))
    call_of = {n.SerializeToString(): c for c in calls for n in fns[c.op_type].node}
    for group in multi:
        want = [by_name[op] for op in group.ops]
        call = call_of[want[0].SerializeToString()]
        body = list(fns[call.op_type].node)
        assert [n for n in body if n in want] == want
        attrs = {a.name: helper.get_attribute_value(a) for a in call.attribute}
        assert attrs["kind"] == group.kind.encode()
        if group.config is not None:
            assert attrs["block_dim"] == group.config.block_dim
            assert attrs["double_buffer"] == int(group.config.double_buffer)
    # tensor names the rest of the graph sees are the user's own
    assert [o.name for o in fused.graph.output] == [o.name for o in model.graph.output]


def _check_apply(
    model: onnx.ModelProto, graph: Graph, groups: list[PlanGroup], feeds: dict[str, np.ndarray]
) -> onnx.ModelProto:
    before = model.SerializeToString()
    fused = apply_plan(model, graph, groups)
    assert model.SerializeToString() == before, "apply_plan changed its input model"
    onnx.checker.check_model(fused, full_check=True)
    _structure(model, fused, groups)
    _assert_same(model, fused, feeds)
    return fused


def _zoo(name: str) -> onnx.ModelProto:
    if name.startswith("llama"):
        return build(name, weights="random", scale=0.05, layers=2)
    return build(name, weights="random", scale=0.1)
