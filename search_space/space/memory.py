"""Memory a plan needs: the peak bytes of the intermediates alive while its groups run."""

from __future__ import annotations

from collections.abc import Sequence

from search_space.ir import FusionGroup, Graph, alias_root

__all__ = ["peak_live_bytes"]


def peak_live_bytes(graph: Graph, groups: Sequence[FusionGroup]) -> int:
    """Peak bytes of intermediates alive while the groups run in order (graph inputs, weights
    and constants excluded; a tensor lives from its group until its last reading group)."""
    position = {n: i for i, g in enumerate(groups) for n in g.ops}
    last: dict[str, int] = {}
    born: dict[str, int] = {}
    for i, g in enumerate(groups):
        for t in g.outputs:
            root = alias_root(graph, t)
            if graph.tensors[root].kind == "intermediate":
                born.setdefault(root, i)
                end = i if t not in graph.outputs else len(groups)
                for c in graph.consumers(t):
                    end = max(end, position.get(c.name, i))
                last[root] = max(last.get(root, i), end)
        for t in g.inputs:
            root = alias_root(graph, t)
            if root in born:
                last[root] = max(last.get(root, i), i)
    peak = 0
    events: list[tuple[int, int]] = []
    for t, start in born.items():
        events.append((start, graph.tensors[t].nbytes))
        events.append((last[t] + 1, -graph.tensors[t].nbytes))
    live = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        live += delta
        peak = max(peak, live)
    return peak
