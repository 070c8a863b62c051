"""Shared by the fusion rule tests: cached contexts of exports and zoo models, plan checks."""

from __future__ import annotations

import functools
from collections import Counter

import networkx as nx
from conftest import EXPORTS

from search_space import load_graph
from search_space.fusion import FusionContext
from search_space.rules import default_registry, greedy

TOKENS = {"input_ids": (2, 16), "attention_mask": (2, 16)}


def _shapes(name: str) -> dict[str, tuple[int, ...]]:
    if name.startswith(("bert", "gpt2", "llama")):
        return TOKENS
    if name.startswith("encoder_layer"):
        return {"x": (2, 8, 32)}
    return {"image": (2, 3, 32, 32)}


@functools.cache
def export_ctx(name: str) -> FusionContext:
    return FusionContext(load_graph(EXPORTS / name, input_shapes=_shapes(name)))


@functools.cache
def zoo_ctx(name: str, scale: float, layers: int | None = None) -> FusionContext:
    from search_space.zoo import build

    return FusionContext(load_graph(build(name, weights="inputs", scale=scale, layers=layers)))


ALL = default_registry().rules("all")


def applied_counts(ctx: FusionContext, rules=ALL) -> Counter[str]:
    return Counter(m.rule for m in greedy(ctx, rules)[1])


def types(ctx: FusionContext, ops) -> Counter[str]:
    return Counter(ctx.graph.op(n).op_type for n in ops)


def assert_valid_plan(ctx: FusionContext, parts: list[frozenset[str]]) -> None:
    """A partition of the kernel ops into legal groups whose contraction is acyclic."""
    flat = [n for p in parts for n in p]
    assert sorted(flat) == sorted(ctx.nodes) and len(flat) == len(set(flat))
    owner = {n: i for i, p in enumerate(parts) for n in p}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(parts)))
    for i, p in enumerate(parts):
        assert ctx.check(p).ok, ctx.check(p).reason
        dag.add_edges_from((i, owner[s]) for n in p for s in ctx.succ[n] if owner[s] != i)
    assert nx.is_directed_acyclic_graph(dag)
