"""Local search for bridges: grow and prune a minimum arborescence until no move pays.

With optional bridge workloads, ETO's reuse pair selection (Zhao et al., "Efficient Tensor
Program Optimization via Information Reuse", PVLDB 15(2), 2022, Section 6.2) is a directed
Steiner tree problem, NP-hard; ETO approximates it with the greedy algorithm of Watel and
Weisser ("A practical greedy approximation for the directed Steiner tree problem", J. Comb.
Optim. 32(4), 2016). :func:`~tunecache.reuse.planning.plan_reuse` runs :func:`improve` from
two starts, no bridges and :func:`shortest_path_bridges`; the moves here price each bridge set
by the minimum arborescence of :class:`~tunecache.reuse.arborescence.Arborescence` and modify
it in place:

* :func:`grow` adds the bridge that saves the most, :func:`grow_pairs` two chained bridges
  that only pay together;
* :func:`prune` drops bridges that do not pay, :func:`trim` enforces a bridge budget.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable

from tunecache.reuse.arborescence import EPS, Arborescence, ChoiceContext
from tunecache.reuse.graph import ROOT

__all__ = ["shortest_path_bridges", "grow", "grow_pairs", "prune", "trim", "improve"]


def shortest_path_bridges(
    ctx: ChoiceContext, base: set[str], candidates: set[str], terminals: Iterable[str]
) -> set[str]:
    """Return the bridges on shortest ROOT->terminal paths (Dijkstra over base + candidates).

    The second start of :func:`~tunecache.reuse.planning.plan_reuse`: the union of the
    terminals' shortest paths costs at most ``k`` times the optimum for ``k`` terminals.

    Parameters
    ----------
    ctx
        The graph's :class:`~tunecache.reuse.arborescence.ChoiceContext`.
    base
        The nodes every plan spans (ROOT, the required tasks, the stored workloads).
    candidates
        The bridges paths may go through.
    terminals
        The required tasks; each must be reachable from ROOT through ``base | candidates``.

    Returns
    -------
    set of str
        The candidates on the shortest paths found (ties go to the first path found).

    Examples
    --------
    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> from tunecache.reuse.graph import ROOT
    >>> base = {ROOT, "a", "b"}
    >>> shortest_path_bridges(ChoiceContext(g), base, {"x"}, ["a", "b"])  # 1040 > 1000 trials
    set()
    >>> g2 = build_choice_graph({"a": 1000, "b": 1000},
    ...                         [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                         bridges={"x": 500})
    >>> shortest_path_bridges(ChoiceContext(g2), base, {"x"}, ["a", "b"])  # 540 < 1000 trials
    {'x'}
    """
    allowed = base | candidates
    g = ctx.g
    dist: dict[str, float] = {ROOT: 0.0}
    pred: dict[str, str] = {}
    done: set[str] = set()
    counter = itertools.count()
    heap = [(0.0, next(counter), ROOT)]
    while heap:
        d, _, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for v, data in g._succ[u].items():
            if v in allowed and v not in done:
                nd = d + data["weight"]
                if nd < dist.get(v, math.inf) - EPS:
                    dist[v], pred[v] = nd, u
                    heapq.heappush(heap, (nd, next(counter), v))
    out: set[str] = set()
    for t in terminals:
        x = t
        while x != ROOT:
            if x in candidates:
                out.add(x)
            x = pred[x]
    return out


def grow(arb: Arborescence, candidates: set[str], cap: int | None) -> bool:
    """Greedily add the bridge that saves the most, while one saves anything and room is left.

    Gains are Edmonds' first-phase estimates, kept in a lazy max-heap; a popped bridge is
    re-scored and only added when its exact effect lowers the total.

    Parameters
    ----------
    arb
        The arborescence to grow; modified in place.
    candidates
        The bridges that may be added.
    cap
        The most bridges ``arb`` may span; ``None`` for no limit.

    Returns
    -------
    bool
        Whether a bridge was added.

    Examples
    --------
    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> arb = Arborescence(ChoiceContext(g), {"a", "b"})
    >>> grow(arb, {"x"}, None), arb.bridges, arb.total
    (True, ['x'], 1080.0)
    >>> grow(Arborescence(ChoiceContext(g), {"a", "b"}), {"x"}, 0)
    False
    """
    g = arb.ctx.g
    heap = []
    for b in sorted(candidates - arb.nodes):
        gain = arb.gain_of_adding(b)
        if gain > EPS:
            heap.append((-gain, b))
    heapq.heapify(heap)
    rejected: set[str] = set()
    n_bridges = len(arb.bridges)
    changed = False
    while heap and (cap is None or n_bridges < cap):
        _, b = heapq.heappop(heap)
        if b in arb.nodes or b in rejected:
            continue
        gain = arb.gain_of_adding(b)
        if gain <= EPS:
            continue
        if heap and gain < -heap[0][0] - EPS:
            heapq.heappush(heap, (-gain, b))
            continue
        if not arb.try_add(b):
            rejected.add(b)
            continue
        changed = True
        n_bridges += 1
        # Bridges that b can feed may now be worth more.
        for t in g._succ[b]:
            if t in candidates and t not in arb.nodes and t not in rejected:
                gt = arb.gain_of_adding(t)
                if gt > EPS:
                    heapq.heappush(heap, (-gt, t))
    return changed


def grow_pairs(arb: Arborescence, candidates: set[str], cap: int | None) -> bool:
    """Add two chained bridges ``c -> b`` at once where neither alone pays but both together do.

    A chain of bridges (a small bridge feeding a larger one that feeds the tasks) is invisible
    to single-bridge greedy steps. Pairs are ranked by the first-phase estimate, as in
    :func:`grow`, and kept only when the exact total drops.

    Parameters
    ----------
    arb
        The arborescence to grow; modified in place.
    candidates
        The bridges that may be added.
    cap
        The most bridges ``arb`` may span; ``None`` for no limit.

    Returns
    -------
    bool
        Whether a pair was added.

    Examples
    --------
    Bridge ``y`` feeds the tasks cheaply but costs as much as a task from scratch; ``x``
    makes ``y`` cheap, but alone feeds nothing:

    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "y", 10), CostEdge("y", "a", 10), CostEdge("y", "b", 10)],
    ...                        bridges={"x": 100, "y": 2000})
    >>> arb = Arborescence(ChoiceContext(g), {"a", "b"})
    >>> grow(arb, {"x", "y"}, None)
    False
    >>> grow_pairs(arb, {"x", "y"}, None), arb.bridges, arb.total
    (True, ['x', 'y'], 130.0)
    """
    g = arb.ctx.g
    heap = []
    for c in sorted(candidates - arb.nodes):
        for b in g._succ[c]:
            if b in candidates and b not in arb.nodes:
                gain = arb.gain_of_adding_pair(c, b)
                if gain > EPS:
                    heap.append((-gain, c, b))
    heapq.heapify(heap)
    changed = False
    while heap and (cap is None or len(arb.bridges) + 2 <= cap):
        _, c, b = heapq.heappop(heap)
        if c in arb.nodes or b in arb.nodes:
            continue
        gain = arb.gain_of_adding_pair(c, b)
        if gain <= EPS:
            continue
        if heap and gain < -heap[0][0] - EPS:
            heapq.heappush(heap, (-gain, c, b))
            continue
        before = arb.copy()
        arb.try_add(c, accept=math.inf)
        arb.try_add(b, accept=math.inf)
        if arb.total < before.total - EPS:
            changed = True
        else:
            arb.__dict__.update(before.__dict__)
    return changed


def prune(arb: Arborescence) -> bool:
    """Drop bridges whose removal does not raise the total, until every bridge pays its way.

    Parameters
    ----------
    arb
        The arborescence to prune; modified in place.

    Returns
    -------
    bool
        Whether a bridge was dropped.

    Examples
    --------
    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> arb = Arborescence(ChoiceContext(g), {"a", "x"})  # x feeds a only: not worth it
    >>> prune(arb), arb.bridges, arb.total
    (True, [], 1000.0)
    """
    changed = False
    again = True
    while again:
        again = False
        for b in arb.bridges:
            if arb.try_remove(b):
                changed = again = True
    return changed


def trim(arb: Arborescence, cap: int) -> None:
    """Drop the bridges that cost least to lose until at most ``cap`` remain.

    Parameters
    ----------
    arb
        The arborescence to trim; modified in place.
    cap
        The most bridges to keep.

    Examples
    --------
    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> arb = Arborescence(ChoiceContext(g), {"a", "b", "x"})
    >>> trim(arb, 0)
    >>> arb.bridges, arb.total
    ([], 2000.0)
    """
    while len(arb.bridges) > cap:
        best: tuple[float, str] | None = None
        for b in arb.bridges:
            trial = arb.copy()
            trial.try_remove(b, accept=math.inf)
            if best is None or trial.total < best[0]:
                best = (trial.total, b)
        assert best is not None
        arb.try_remove(best[1], accept=math.inf)


def improve(arb: Arborescence, candidates: set[str], cap: int | None) -> Arborescence:
    """Alternate :func:`grow`, :func:`grow_pairs` and :func:`prune` until nothing changes.

    At most eight rounds; after a round with local moves (``arb.exact`` false) the minimum
    arborescence is recomputed and pruned again, and the result is always exact.

    Parameters
    ----------
    arb
        The start; modified in place.
    candidates
        The bridges that may be added.
    cap
        The most bridges ``arb`` may span; ``None`` for no limit.

    Returns
    -------
    Arborescence
        ``arb``, never costlier than it was.

    Examples
    --------
    >>> from tunecache.reuse.arborescence import Arborescence, ChoiceContext
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> improve(Arborescence(ChoiceContext(g), {"a", "b"}), {"x"}, None).total
    1080.0
    """
    for _ in range(8):  # each round only lowers the total; two rounds almost always settle it
        grew = grow(arb, candidates, cap)
        grew = grow_pairs(arb, candidates, cap) or grew
        pruned = prune(arb)
        if not arb.exact:  # local moves were made: the exact arborescence can only be cheaper
            arb.rebuild()
            pruned = prune(arb) or pruned
        if not (grew or pruned):
            break
    if not arb.exact:
        arb.rebuild()
    return arb
