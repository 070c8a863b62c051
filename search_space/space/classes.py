"""Fusion classes: edges whose endpoint ops have identical types, attributes and shapes in
identical neighbourhoods share one class, so twelve identical BERT layers cost one layer of
decision variables. A class's key (``Add>Transpose:fc4e81d4``) is structural and stable: it
orders the space's parameters (:mod:`search_space.space.names`) and never depends on which
other edges are open."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from search_space.fusion import Edge, FusionContext
from search_space.ir import Graph, alias_root

__all__ = ["edge_classes", "op_hashes"]


def op_hashes(ctx: FusionContext) -> dict[str, str]:
    """Each kernel op's structural hash: its type, attributes and shapes with its neighbours'
    (the same op in every repeated layer shares one; what sharing classes and the graph view's
    collapsed layers go by)."""
    return {n: _op_hash(ctx.graph, ctx, n) for n in ctx.nodes}


def _op_hash(graph: Graph, ctx: FusionContext, name: str) -> str:
    def own(n: str) -> str:
        o = graph.op(n)
        shapes = [graph.tensors[alias_root(graph, t)].shape if t else None for t in o.inputs]
        outs = [graph.tensors[t].shape for t in o.outputs if t]
        return f"{o.op_type}{o.attributes}{shapes}{outs}"

    parts = [own(name)]
    parts += sorted(own(p) for p in ctx.pred[name])
    parts += ["->" + own(s) for s in sorted(ctx.succ[name], key=own)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:10]


def edge_classes(ctx: FusionContext, edges: Iterable[Edge], share: bool) -> dict[str, list[Edge]]:
    """The edges by class key, in the order of their first edge; without ``share`` every edge
    is a class of its own."""
    classes: dict[str, list[Edge]] = {}
    hashes: dict[str, str] = {}
    graph = ctx.graph
    for e in edges:
        if share:
            for n in (e.src, e.dst):
                if n not in hashes:
                    hashes[n] = _op_hash(graph, ctx, n)
            inputs = graph.op(e.dst).inputs
            slot = inputs.index(e.tensor) if e.tensor in inputs else -1
            raw = f"{hashes[e.src]}>{hashes[e.dst]}:{e.kind}:{slot}"
        else:
            raw = f"{e.src}>{e.dst}:{e.kind}"
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        key = f"{graph.op(e.src).op_type}>{graph.op(e.dst).op_type}:{digest}"
        classes.setdefault(key, []).append(e)
    return classes
