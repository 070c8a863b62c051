"""Readable names: a space's parameters (unique, sorted as their class keys, the same whichever
edges a policy opens, and saying role, op types and scope) and a plan's kernels (unique; made of
op types in a model whose nodes have no names). Its spaces take the real cost oracle, so it
sits with the cost model's tests (those of search_space import only search_space)."""

from __future__ import annotations

import random
import re

import onnx
from fusion_helpers import random_dags
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.oracle import CostOracle
from costmodel.spec import load_target
from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.ir import Graph
from search_space.rules import Policy
from search_space.space import SearchSpace, baseline_plan, kernel_names
from search_space.space.names import NAME_CHARS
from search_space.zoo import build

NAMINGS = ("kept", "blank", "scoped")


def _renamed(model: onnx.ModelProto, naming: str) -> onnx.ModelProto:
    """The model with its nodes' names kept, blanked, or put under '/'-separated scopes."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, node in enumerate(out.graph.node):
        if naming == "blank":
            node.name = ""
        elif naming == "scoped":
            node.name = f"/block{i % 3}/part{i % 2}/{node.name}"
    return out


def _space(graph: Graph, share: bool = True, subset: list[bool] | None = None) -> SearchSpace:
    ctx = FusionContext(graph)
    oracle = CostOracle(graph, load_target(), ctx=ctx)
    if subset is None:
        return SearchSpace(ctx, oracle, share=share)
    flags = (subset + [True] * len(ctx.edges))[: len(ctx.edges)]
    opened = [e for e, on in zip(ctx.edges, flags, strict=True) if on]
    return SearchSpace(ctx, oracle, share=share, open_edges=opened)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.sampled_from(NAMINGS), st.booleans())
def test_parameter_names_are_unique_ordered_stable_and_short(case, naming, share) -> None:
    model, subset = case
    model = _renamed(model, naming)
    space = _space(load_graph(model), share)
    names = list(space.param_of.values())
    assert len(set(names)) == len(names)
    assert all(n.startswith("fuse/") and len(n) <= NAME_CHARS for n in names)
    by_key = [space.param_of[k] for k in sorted(space.classes)]
    assert sorted(names) == by_key  # what Optuna's samplers order by is unchanged
    assert space.known_params >= set(names)
    again = _space(load_graph(model), share)  # a second run of the same model
    assert again.param_of == space.param_of
    part = _space(load_graph(model), share, subset)  # a policy that opens fewer edges
    assert all(part.param_of[k] == space.param_of[k] for k in part.param_of)
    for key, edges in space.classes.items():
        assert f" {edges[0].kind} " in space.param_of[key]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dags(), st.sampled_from(NAMINGS), st.integers(0, 2**16))
def test_kernel_names_are_unique_and_an_unnamed_models_are_its_op_types(
    case, naming, seed
) -> None:
    model, _ = case
    graph = load_graph(_renamed(model, naming))
    space = _space(graph)
    rng = random.Random(seed)
    plan = space.plan([e for e in space.open if rng.random() < 0.5])
    names = kernel_names(graph, (g.ops for g in plan.groups))
    assert len(set(names)) == len(names) == len(plan.groups)
    for g, name in zip(plan.groups, names, strict=True):
        types = {graph.op(o).op_type for o in g.ops}
        blocks = {o.split("/")[1] for o in g.ops} if naming == "scoped" else set()
        if len(blocks) == 1:  # ops that share a scope: it comes first
            assert re.match(f"{blocks.pop()}[/:]", name), (name, g.ops)
        else:  # unnamed ops, or ops of no shared scope: their types alone
            words = re.sub(r"#\d+$", "", name).removesuffix("+...").split("+")
            assert set(words) <= types, (name, types)


def _bert(layers: int, blank: bool = False) -> Graph:
    model = build("bert-base", weights="inputs", layers=layers, scale=0.25)
    return load_graph(_renamed(model, "blank") if blank else model)


def test_bert_parameters_say_role_scope_and_how_many_layers_they_stand_for() -> None:
    graph = _bert(layers=3)
    ctx = FusionContext(graph)
    from search_space.space import build_space

    space = build_space(ctx, CostOracle(graph, load_target(), ctx=ctx), Policy())
    dense = "/encoder/layer.0/intermediate/dense/"
    key = next(
        k
        for k, edges in space.classes.items()
        if (edges[0].src, edges[0].dst) == (dense + "MatMul", dense + "Add")
    )
    name = space.param_of[key]
    assert name.endswith(" epilogue MatMul>Add: encoder/layer.0/intermediate/dense (+2 alike)")
    unnamed = _bert(layers=3, blank=True)
    ctx = FusionContext(unnamed)
    blank = build_space(ctx, CostOracle(unnamed, load_target(), ctx=ctx), Policy())
    assert blank.param_of[key] != name and "epilogue MatMul>Add: MatMul_" in blank.param_of[key]
    assert blank.param_of[key].endswith(" (+2 alike)")  # the same classes, other labels


def test_an_unnamed_bert_names_its_kernels_by_their_ops() -> None:
    graph = _bert(layers=2, blank=True)
    ctx = FusionContext(graph)
    plan = baseline_plan("greedy", ctx, CostOracle(graph, load_target(), ctx=ctx), Policy())
    names = kernel_names(graph, (g.ops for g in plan.groups))
    assert not any("/" in n or re.search(r"_\d", n) for n in names)  # no op name, no scope
    dense = [n for n in names if n.startswith("MatMul+Add")]
    assert "MatMul+Add" in dense and "MatMul+Add#2" in dense  # repeats numbered in plan order
    assert names.index("MatMul+Add") < names.index("MatMul+Add#2")


def test_a_named_models_kernels_say_the_scope_all_their_ops_sit_in() -> None:
    graph = _bert(layers=2)
    ctx = FusionContext(graph)
    plan = baseline_plan("greedy", ctx, CostOracle(graph, load_target(), ctx=ctx), Policy())
    names = kernel_names(graph, (g.ops for g in plan.groups))
    assert len(set(names)) == len(names)
    for g, name in zip(plan.groups, names, strict=True):
        scope = name.split(": ")[0]
        assert all(op.startswith(f"/{scope}/") for op in g.ops), (name, g.ops)
    assert "encoder/layer.1/intermediate: MatMul+Add+Div+Erf+..." in names
