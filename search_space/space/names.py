"""Readable names for what a study shows: its parameters and a plan's kernels.

A fusion parameter says which role the class plays, between which op types, where its first
edge sits in the model (its source's node-name scope, e.g.
``encoder/layer.0/intermediate/dense``) and how many identical edges it stands for::

    fuse/30 epilogue MatMul>Add: encoder/layer.0/intermediate/dense (+11 alike)

The number is the class key's rank among the classes of every fusible edge of the graph: the
names sort as the keys do (Optuna's samplers visit parameters in name order, so a seed draws
what it drew under the keys), they are unique, and a class keeps its name whichever edges a
policy opens. A config parameter keeps its group signature first for the same reason and
adds the kernel's kind and op types. A kernel is named by its scope and op types; a model
whose nodes carry no scope (unnamed nodes, ``OpType_12``) gets its op types alone, numbered
``#2``, ``#3``... in plan order where they repeat.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from search_space.fusion import Edge
from search_space.ir import FusionGroup, Graph

__all__ = ["NAME_CHARS", "config_name", "fuse_names", "kernel_names", "op_types", "scope_of"]

NAME_CHARS = 120  # a parameter name's length at most (Optuna's RDB column holds 512)
WHERE_CHARS = 60  # the scope part of a parameter name
TYPES = 4  # op types a name lists before "+..."


def _path(op_name: str) -> list[str]:
    """A node name's scope: its '/'-separated parts but the last (the op's own leaf)."""
    return [p for p in op_name.split("/")[:-1] if p]


def scope_of(ops: Iterable[str]) -> str:
    """The scope the ops' names share (``encoder/layer.0/attention/output``); ops whose names
    have none (unnamed nodes) are left out; "" when the others share none."""
    paths = [p for p in map(_path, ops) if p]
    if not paths:
        return ""
    common = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return "/".join(common)


def op_types(graph: Graph, ops: Sequence[str], most: int = TYPES) -> str:
    """The ops' types joined by '+' (``MatMul+Add+Div+Erf+...``): views left out unless
    there is nothing else, each type once, in order, at most ``most`` of them."""
    kept = [o for o in ops if not graph.op(o).is_view] or list(ops)
    types = list(dict.fromkeys(graph.op(o).op_type for o in kept))
    return "+".join(types[:most]) + ("+..." if len(types) > most else "")


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]


def _where(edge: Edge) -> str:
    """Where an edge sits: its source's scope (the two readers' shared scope for a horizontal
    edge), else its source op's name."""
    shared = scope_of([edge.src, edge.dst]) if edge.kind == "horizontal" else ""
    return shared or scope_of([edge.src]) or edge.src


def fuse_names(graph: Graph, classes: Mapping[str, Sequence[Edge]]) -> dict[str, str]:
    """Each class key -> its parameter name (``classes``: every class of the graph's fusible
    edges, which the ranks count)."""
    ranks = {k: i for i, k in enumerate(sorted(classes))}
    width = len(str(max(len(ranks) - 1, 0)))
    out = {}
    for key, edges in classes.items():
        e = edges[0]
        src, dst = graph.op(e.src).op_type, graph.op(e.dst).op_type
        pair = f"{src}&{dst}" if e.kind == "horizontal" else f"{src}>{dst}"
        more = f" (+{len(edges) - 1} alike)" if len(edges) > 1 else ""
        name = f"fuse/{ranks[key]:0{width}d} {e.kind} {pair}: {_tail(_where(e), WHERE_CHARS)}"
        out[key] = name[: NAME_CHARS - len(more)] + more
    return out


def config_name(graph: Graph, group: FusionGroup, signature: str) -> str:
    """The config parameter of groups of ``signature`` (``group`` is one of them):
    ``config/<signature> <kind> <op types>``, the same for every group of the signature."""
    return f"config/{signature} {group.kind} {op_types(graph, group.ops)}"[:NAME_CHARS]


def kernel_names(graph: Graph, groups: Iterable[Sequence[str]]) -> list[str]:
    """A unique name for each kernel (its ops, in plan order): ``<scope>: <op types>``, or
    the op types alone where its ops' names carry no scope; a name already given is numbered
    ``#2``, ``#3``..."""
    names: list[str] = []
    used: set[str] = set()
    for ops in groups:
        scope = scope_of(ops)
        base = f"{scope}: {op_types(graph, ops)}" if scope else op_types(graph, ops)
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}#{k}"
        used.add(name)
        names.append(name)
    return names
