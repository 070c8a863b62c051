"""Local search in the model: moves of a trial's fusion decisions (block moves, single flips,
swaps), the steepest descent over them, and the TVM-style mutation of the incumbent that
enqueues a descent's end as the next trial."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import optuna

__all__ = ["Prepare", "descend", "enqueue_neighbours"]

# told the moves a search is about to score, before it scores them one by one (e.g. to score
# their new kernels in one call); it may change no score
Prepare = Callable[[list[dict[str, Any]]], None]


def _mutations(
    params: dict[str, Any],
    blocks: Sequence[Sequence[str]],
    order: Iterable[int],
    swaps: Sequence[tuple[str, str]] = (),
) -> list[dict[str, Any]]:
    """One move from ``params``: each block it leaves partly unfused switched on whole, then
    each fusion decision flipped, in ``order`` (a permutation of the sorted ``fuse/`` names,
    which sort as their class keys do), then each pair of ``swaps`` (the parameters of classes
    that share an operator) that is half on exchanged: the operator leaves one neighbour's
    group for the other's, which two single flips reach only through a plan that fuses both or
    neither."""
    names = sorted(n for n in params if n.startswith("fuse/"))

    def on(name: str) -> Any:  # the parameter's "fused" value, bool or 0/1 (numeric samplers)
        return True if isinstance(params[name], bool) else 1

    moves = []
    for block in blocks:
        keys = [k for k in block if k in params]
        if keys and not all(params[k] for k in keys):
            moves.append({**params, **{k: on(k) for k in keys}})
    for name in (names[i] for i in order):
        value = params[name]
        moves.append({**params, name: (not value) if isinstance(value, bool) else 1 - value})
    return moves + _swapped(params, swaps)


def _swapped(params: dict[str, Any], swaps: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Each pair of ``swaps`` that is half on in ``params``, exchanged."""
    moves = []
    for ka, kb in swaps:
        if ka in params and kb in params and bool(params[ka]) != bool(params[kb]):
            moves.append({**params, ka: params[kb], kb: params[ka]})
    return moves


def _cheapest(
    start: dict[str, Any],
    moves: list[dict[str, Any]],
    score: Callable[[dict[str, Any]], float],
    swaps: Sequence[tuple[str, str]],
    seen: set[frozenset[tuple[str, Any]]],
    cost: float,
    prepare: Prepare | None = None,
) -> tuple[list[dict[str, Any]], list[float]]:
    """The untried ``moves`` (block moves and flips) with their scores, and the untried swaps
    of ``start`` too when none of those lowers ``cost``: swaps are a second tier, scored only
    at a local optimum of one-class moves (each exchange makes new groups for a learned model
    to tile, so scoring them at every step made learned studies several times slower).
    ``prepare`` is told each tier's moves before they are scored."""
    fresh = _unseen(moves, seen)
    if prepare is not None:
        prepare(fresh)
    costs = [score(p) for p in fresh]
    if swaps and not any(c < cost for c in costs):
        more = _unseen(_swapped(start, swaps), seen)
        if prepare is not None:
            prepare(more)
        fresh += more
        costs += [score(p) for p in more]
    return fresh, costs


def _unseen(moves: list[dict[str, Any]], seen: set[frozenset[tuple[str, Any]]]) -> list[dict]:
    """The moves not in ``seen`` (in order; a move listed twice stays twice), then all added
    to it."""
    keys = [_key(p) for p in moves]
    out = [p for p, k in zip(moves, keys, strict=True) if k not in seen]
    seen.update(keys)
    return out


def _key(params: dict[str, Any]) -> frozenset[tuple[str, Any]]:
    """Equal for equal parameters (names are unique: the items are the dict)."""
    return frozenset(params.items())


def enqueue_neighbours(
    study: optuna.Study,
    limit: int = 3,
    stall: int = 10,
    blocks: Sequence[Sequence[str]] = (),
    seed: int = 0,
    incumbent: optuna.trial.FrozenTrial | None = None,
    score: Callable[[dict[str, Any]], float] | None = None,
    depth: int = 0,
    swaps: Sequence[tuple[str, str]] = (),
    user_attrs: dict[str, Any] | None = None,
    prepare: Prepare | None = None,
) -> int:
    """Local search around the incumbent: once the best trial is ``stall`` trials old, enqueue
    up to ``limit`` mutations of it not tried yet (TVM-style mutation of the best). Block moves
    come first: each switches on every fusion class of one block (``blocks``, parameters in
    the order to try, e.g. :meth:`SearchSpace.block_moves`) the incumbent leaves partly
    unfused: a pattern such as attention pays off only whole, which one flip at a time never
    shows. Then single flips of one fusion decision, in a shuffle seeded by ``seed`` and the
    trial count, then ``swaps`` (parameters of pairs of classes sharing an operator, e.g.
    :meth:`SearchSpace.swap_moves`) exchanged where one is on and the other off. ``incumbent``
    overrides the best trial by stored value (a refitted model may rank the trials otherwise).
    With ``score`` (a cost of a trial's parameters, e.g. the study's model on the repaired
    plan), every untried mutation is scored and the ``limit`` cheapest are enqueued (steepest
    descent; the order above breaks ties): the budget goes to the moves the model believes in,
    not to the first ones drawn; swaps are then a second tier, scored only when no block move
    or flip lowers the incumbent's score (a local optimum of one-class moves, where an operator
    moving between neighbours' groups is what is left). A mutation scored ``inf`` (e.g. over a
    memory limit) is never enqueued. With ``depth`` > 0 as well, the descent goes on in the
    model alone from the cheapest mutation, up to ``depth`` more moves while one lowers the
    score (no trial spent on the way), and its end takes the first trial: the trials go to the
    model's local optimum, where one move at a time would need a stall per step.
    ``user_attrs`` go on every enqueued trial (e.g. where it came from); ``prepare`` is told
    the moves before ``score`` scores them.

    Returns:
        How many trials were enqueued.
    """
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete or len(study.directions) != 1:
        return 0
    best = incumbent or min(complete, key=lambda t: t.values[0])
    if complete[-1].number - best.number < stall:
        return 0  # the sampler is still improving: leave it the budget
    seen = {_key(t.params) for t in study.trials}
    rng = np.random.default_rng([seed, len(study.trials)])
    n_names = sum(1 for n in best.params if n.startswith("fuse/"))
    if score is None:
        fresh = []
        for params in _mutations(best.params, blocks, rng.permutation(n_names), swaps):
            if _key(params) not in seen:
                seen.add(_key(params))
                fresh.append(params)
    else:
        moves = _mutations(best.params, blocks, rng.permutation(n_names))
        here = score(best.params) if swaps else math.inf  # only swaps need the incumbent's
        fresh, costs = _cheapest(best.params, moves, score, swaps, seen, here, prepare)
        kept = sorted(
            (i for i in range(len(fresh)) if math.isfinite(costs[i])), key=lambda i: (costs[i], i)
        )
        fresh = [fresh[i] for i in kept]
        if depth > 0 and fresh:
            end, _ = descend(
                fresh[0], score, blocks, depth, seed, costs[kept[0]], seen, swaps, prepare
            )
            if end is not fresh[0]:
                fresh = [end, *fresh[: limit - 1]]
    for params in fresh[:limit]:
        study.enqueue_trial(params, user_attrs, skip_if_exists=True)
    return min(limit, len(fresh))


def descend(
    start: dict[str, Any],
    score: Callable[[dict[str, Any]], float],
    blocks: Sequence[Sequence[str]] = (),
    depth: int = 16,
    seed: int = 0,
    cost: float | None = None,
    seen: set[frozenset[tuple[str, Any]]] | None = None,
    swaps: Sequence[tuple[str, str]] = (),
    prepare: Prepare | None = None,
) -> tuple[dict[str, Any], float]:
    """Steepest descent in the model from ``start``: up to ``depth`` moves (block moves, single
    flips and, where none of those lowers the score, ``swaps``, as the local search makes them),
    each to the cheapest mutation not in ``seen`` while it lowers ``score``. ``cost`` is the
    start's score when known; every point scored is added to ``seen``; ``prepare`` is told
    each step's moves before they are scored. No trial is spent: this is a search in the
    model alone.

    Returns:
        The end (``start`` itself when no move lowered the score) and its score.
    """
    seen = set() if seen is None else seen
    seen.add(_key(start))
    current = start
    cost = score(start) if cost is None else cost
    rng = np.random.default_rng([seed, depth])
    n_names = sum(1 for n in start if n.startswith("fuse/"))
    for _ in range(depth):
        moves = _mutations(current, blocks, rng.permutation(n_names))
        step, costs = _cheapest(current, moves, score, swaps, seen, cost, prepare)
        if not step:
            break
        i = min(range(len(step)), key=lambda j: (costs[j], j))
        if not costs[i] < cost:
            break
        current, cost = step[i], costs[i]
    return current, cost
