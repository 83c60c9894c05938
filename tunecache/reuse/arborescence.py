"""Minimum-cost arborescences over subsets of an optimization-choice graph.

Without bridges, ETO's reuse pair selection (Zhao et al., "Efficient Tensor Program
Optimization via Information Reuse", PVLDB 15(2), 2022, Section 6, Definition 4) is a
minimum-cost arborescence of the OC graph of :mod:`tunecache.reuse.graph` rooted at the virtual
root: Edmonds' algorithm (Edmonds, "Optimum branchings", J. Res. NBS 71B, 1967). With bridges,
every candidate set of bridges is priced by the minimum arborescence over the required tasks,
the stored workloads and those bridges; :class:`Arborescence` keeps one up to date while the
local search of :mod:`tunecache.reuse.local_search` adds and removes bridges.

* :func:`edmonds` is Chu-Liu/Edmonds with contraction over integer node ids (see its docstring
  for why not ``nx.minimum_spanning_arborescence``);
* :class:`ChoiceContext` holds the read-only facts of one graph (node kinds, sorted in-edges);
* :class:`Arborescence` is a minimum arborescence over a node subset with cheap updates;
* :func:`check_inputs` validates a planning problem and builds its context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping

import networkx as nx

from tunecache.errors import ConfigError, TunecacheError
from tunecache.reuse.graph import ROOT

__all__ = ["EPS", "ChoiceContext", "Arborescence", "edmonds", "check_inputs"]

#: Cost differences below this are ties (weights are trial counts: nobody plans on 1e-9 trials).
EPS = 1e-9
#: Tie-break between equally cheap sources: scratch first, then the store, tasks, bridges.
_RANK = {"root": 0, "store": 1, "task": 2, "bridge": 3}


class ChoiceContext:
    """Read-only facts about one OC graph, shared by every arborescence computed on it.

    Parameters
    ----------
    g
        An OC graph from :func:`~tunecache.reuse.graph.build_choice_graph`; it is read, never
        modified.

    Attributes
    ----------
    g
        The graph.
    kind
        Kind of every node (``"root"``, ``"task"``, ``"store"`` or ``"bridge"``).
    ins
        In-edges of every node, cheapest first, as ``(weight, rank of the source's kind,
        source)``: between equally cheap sources, scratch wins, then the store, tasks, bridges.
    """

    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g
        self.kind: dict[str, str] = {v: d.get("kind", "task") for v, d in g.nodes(data=True)}
        # In-edges of every node sorted cheapest first: (weight, rank of source kind, source).
        self.ins: dict[str, list[tuple[float, int, str]]] = {
            v: sorted((d["weight"], _RANK[self.kind[u]], u) for u, d in g._pred[v].items())
            for v in g
        }

    def best_in(self, v: str, nodes: Collection[str], without: str | None = None) -> tuple[float, str]:
        """Return ``(weight, source)`` of ``v``'s cheapest in-edge from ``nodes`` (not ``without``)."""
        for w, _, u in self.ins[v]:
            if u in nodes and u != without:
                return w, u
        raise TunecacheError(f"internal: {v!r} has no in-edge from the planned nodes")  # pragma: no cover


class Arborescence:
    """A minimum-cost arborescence from ROOT over a node subset, updated as bridges come and go.

    While every node's parent is one of its cheapest in-edges and those choices form no cycle,
    the choice is optimal (the first phase of Edmonds' algorithm already has the answer) and
    adding or removing a bridge is a local update. Otherwise the whole arborescence is
    recomputed with :func:`edmonds` on the node subset.

    Parameters
    ----------
    ctx
        The graph's :class:`ChoiceContext`.
    nodes
        The nodes to span (:data:`~tunecache.reuse.graph.ROOT` is always added). Every one
        must be reachable from ROOT through ``nodes``.
    exact_limit
        Above this many nodes, adding or removing a bridge that breaks the cheapest-in-edge
        tree is a local update (a valid, maybe not minimum, arborescence: ``exact`` becomes
        false until :meth:`rebuild`) instead of a full recomputation. ``None``: always
        recompute.

    Attributes
    ----------
    parent, cost
        Each node's source and the weight of that edge (ROOT has neither).
    total
        The arborescence's cost, the sum of ``cost``.
    simple
        Every parent is a cheapest in-edge: the arborescence is optimal and local updates are
        exact.
    exact
        The arborescence is a minimum one for its node set.

    Examples
    --------
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> arb = Arborescence(ChoiceContext(g), {"a", "b"})
    >>> arb.total
    2000.0
    >>> arb.try_add("x"), arb.total, arb.parent["a"]
    (True, 1080.0, 'x')
    """

    def __init__(self, ctx: ChoiceContext, nodes: Iterable[str], exact_limit: int | None = None) -> None:
        self.ctx = ctx
        self.exact_limit = exact_limit
        self.nodes: set[str] = set(nodes) | {ROOT}
        self.parent: dict[str, str] = {}
        self.cost: dict[str, float] = {}
        self.total = 0.0
        self.simple = True  # every parent is a cheapest in-edge: optimal, local updates exact
        self.exact = True  # the arborescence is a minimum one for its node set
        self.rebuild()

    def copy(self) -> Arborescence:
        """Return an independent copy (the context is shared)."""
        new = object.__new__(Arborescence)
        new.ctx, new.nodes, new.parent = self.ctx, set(self.nodes), dict(self.parent)
        new.exact_limit = self.exact_limit
        new.cost, new.total = dict(self.cost), self.total
        new.simple, new.exact = self.simple, self.exact
        return new

    @property
    def bridges(self) -> list[str]:
        """Return the bridges spanned, sorted."""
        return sorted(v for v in self.nodes if self.ctx.kind[v] == "bridge")

    def rebuild(self) -> None:
        """Recompute a minimum arborescence of the current node set (``exact`` becomes true)."""
        ctx, nodes = self.ctx, self.nodes
        parent: dict[str, str] = {}
        cost: dict[str, float] = {}
        for v in nodes:
            if v != ROOT:
                cost[v], parent[v] = ctx.best_in(v, nodes)
        if _acyclic(parent):
            self.simple = True
        else:
            self.simple = False
            order = sorted(nodes, key=lambda v: v != ROOT)  # ROOT gets id 0
            ids = {v: i for i, v in enumerate(order)}
            edges = [
                (ids[u], ids[v], w)
                for v in order[1:]
                for w, _, u in ctx.ins[v]  # cheapest first: ties go to the first
                if u in nodes
            ]
            parent, cost = {}, {}
            for i in edmonds(len(order), edges):
                iu, iv, w = edges[i]
                parent[order[iv]], cost[order[iv]] = order[iu], w
        self.parent, self.cost = parent, cost
        self.total = math.fsum(cost.values())
        self.exact = True

    def gain_of_adding(self, b: str) -> float:
        """Return the cost saved by adding ``b`` if nodes keep their cheapest in-edges."""
        ctx, nodes, cost = self.ctx, self.nodes, self.cost
        gain = -ctx.best_in(b, nodes)[0]
        for t, d in ctx.g._succ[b].items():
            if t in nodes:
                gain += max(0.0, cost[t] - d["weight"])
        return gain

    def gain_of_adding_pair(self, c: str, b: str) -> float:
        """Return the estimated saving of adding ``c`` and ``b`` (``c -> b`` an edge) together."""
        ctx, nodes, cost, succ = self.ctx, self.nodes, self.cost, self.ctx.g._succ
        wc = ctx.best_in(c, nodes)[0]
        wb = min(ctx.best_in(b, nodes)[0], succ[c][b]["weight"])
        save: dict[str, float] = {}
        for src in (c, b):
            for t, d in succ[src].items():
                if t in nodes:
                    save[t] = max(save.get(t, 0.0), cost[t] - d["weight"])
        return math.fsum(save.values()) - wc - wb

    def try_add(self, b: str, accept: float = -EPS) -> bool:
        """Add ``b`` when the total changes by less than ``accept``; return whether it did."""
        if self.simple:
            ctx, nodes = self.ctx, self.nodes
            wb, src = ctx.best_in(b, nodes)
            delta = wb
            moved: dict[str, tuple[str, float]] = {}
            for t, d in ctx.g._succ[b].items():
                w = d["weight"]
                if t in nodes and w < self.cost[t]:
                    moved[t] = (b, w)
                    delta += w - self.cost[t]
            x = src
            while x != ROOT and x != b:  # a cycle must pass through b
                x = moved[x][0] if x in moved else self.parent[x]
            if x == ROOT:
                if delta >= accept:
                    return False
                nodes.add(b)
                self.parent[b], self.cost[b] = src, wb
                self._apply(moved, delta)
                return True
        if self._too_large():
            return self._local_add(b, accept)
        return self._try_rebuilt(lambda nodes: nodes.add(b), accept)

    def _too_large(self) -> bool:
        """Return whether a move that breaks the cheapest-in-edge tree is made locally."""
        return self.exact_limit is not None and len(self.nodes) > self.exact_limit

    def _apply(self, moved: Mapping[str, tuple[str, float]], delta: float) -> None:
        """Re-parent the ``moved`` nodes and add ``delta`` to the total."""
        for t, (u, w) in moved.items():
            self.parent[t], self.cost[t] = u, w
        self.total += delta

    def _is_below(self, u: str, c: str, moved: Mapping[str, tuple[str, float]]) -> bool:
        """Return whether ``u`` is ``c`` or lies in ``c``'s subtree."""
        x = u
        while x != ROOT:
            if x == c:
                return True
            x = moved[x][0] if x in moved else self.parent[x]
        return False

    def _local_add(self, b: str, accept: float) -> bool:
        """Add ``b`` by a local move that keeps a valid (maybe not minimum) arborescence."""
        ctx, nodes = self.ctx, self.nodes
        wb, src = ctx.best_in(b, nodes)
        above = set()
        x = src
        while x != ROOT:
            above.add(x)
            x = self.parent[x]
        delta = wb
        moved: dict[str, tuple[str, float]] = {}
        for t, d in ctx.g._succ[b].items():
            w = d["weight"]
            if t in nodes and t not in above and w < self.cost[t]:
                moved[t] = (b, w)
                delta += w - self.cost[t]
        if delta >= accept:
            return False
        nodes.add(b)
        self.parent[b], self.cost[b] = src, wb
        for t, (u, w) in moved.items():
            self.parent[t], self.cost[t] = u, w
        self.total += delta
        self.simple = self.exact = False
        return True

    def _local_remove(self, b: str, accept: float) -> bool:
        """Remove ``b``, moving each child to its cheapest source outside its own subtree."""
        ctx, nodes = self.ctx, self.nodes
        delta = -self.cost[b]
        moved: dict[str, tuple[str, float]] = {}
        for t in ctx.g._succ[b]:
            if t in nodes and self.parent[t] == b:
                for w, _, u in ctx.ins[t]:
                    if u in nodes and u != b and not self._is_below(u, t, moved):
                        moved[t] = (u, w)
                        delta += w - self.cost[t]
                        break
        if delta >= accept:
            return False
        nodes.discard(b)
        del self.parent[b], self.cost[b]
        for t, (u, w) in moved.items():
            self.parent[t], self.cost[t] = u, w
        self.total += delta
        self.simple = self.exact = False
        return True

    def try_remove(self, b: str, accept: float = EPS) -> bool:
        """Remove ``b`` when the total changes by less than ``accept``; return whether it did."""
        if self.simple:
            ctx, nodes = self.ctx, self.nodes
            delta = -self.cost[b]
            moved: dict[str, tuple[str, float]] = {}
            for t in ctx.g._succ[b]:
                if t in nodes and self.parent[t] == b:
                    w, u = ctx.best_in(t, nodes, without=b)
                    moved[t] = (u, w)
                    delta += w - self.cost[t]
            if _acyclic_after(self.parent, moved):
                if delta >= accept:
                    return False
                nodes.discard(b)
                del self.parent[b], self.cost[b]
                self._apply(moved, delta)
                return True
        if self._too_large():
            return self._local_remove(b, accept)
        return self._try_rebuilt(lambda nodes: nodes.discard(b), accept)

    def _try_rebuilt(self, change: Callable[[set[str]], None], accept: float) -> bool:
        """Apply ``change`` to a copy's node set, rebuild it exactly, keep it if it gains ``accept``."""
        trial = self.copy()
        change(trial.nodes)
        trial.rebuild()
        if trial.total - self.total >= accept:
            return False
        self.__dict__.update(trial.__dict__)
        return True


def edmonds(n: int, edges: list[tuple[int, int, float]]) -> list[int]:
    """Return the indices of a minimum spanning arborescence's edges, rooted at node 0.

    Chu-Liu/Edmonds with contraction (Edmonds, "Optimum branchings", J. Res. NBS 71B, 1967):
    every node takes its cheapest in-edge; all cycles are contracted at once, entering edges
    reweighted by the in-edge they would replace; repeat on the smaller graph, then expand.
    ``O(V E)`` in the worst case, a few ``O(E)`` rounds in practice. Used instead of
    ``nx.minimum_spanning_arborescence``, which took 103 s on a cyclic 1,000-task graph (28k
    edges) where this takes a fraction of a second; the tests check it against networkx.

    Parameters
    ----------
    n
        Number of nodes, ``0 .. n - 1``; node 0 is the root.
    edges
        ``(source, target, weight)`` triples. Node 0 must reach every node (the virtual root
        has an edge to all). Between equally cheap in-edges of a node the first listed wins.

    Returns
    -------
    list of int
        Indices into ``edges`` of the ``n - 1`` chosen edges, one entering each node but the
        root.

    Examples
    --------
    The cheapest in-edges ``1 -> 2`` and ``2 -> 1`` form a cycle; breaking it from the root
    at its cheaper entry gives ``0 -> 1 -> 2``:

    >>> edges = [(0, 1, 10.0), (0, 2, 12.0), (1, 2, 1.0), (2, 1, 1.0)]
    >>> sorted(edmonds(3, edges))
    [0, 2]
    """
    rounds = []
    root, cur = 0, edges
    chosen: list[int] = []
    while True:
        best = [-1] * n
        bw = [math.inf] * n
        for i, (u, v, w) in enumerate(cur):
            if w < bw[v] and v != root and u != v:
                bw[v], best[v] = w, i
        stamp = [0] * n
        in_cycle = [-1] * n
        cycles: list[list[int]] = []
        for s in range(n):
            x = s
            while x != root and stamp[x] == 0:
                stamp[x] = s + 1
                x = cur[best[x]][0]
            if x != root and stamp[x] == s + 1:  # walked into this walk: a new cycle
                members = [x]
                in_cycle[x] = len(cycles)
                y = cur[best[x]][0]
                while y != x:
                    in_cycle[y] = len(cycles)
                    members.append(y)
                    y = cur[best[y]][0]
                cycles.append(members)
        if not cycles:
            chosen = [best[v] for v in range(n) if v != root]
            break
        cid = in_cycle[:]
        n_new = len(cycles)
        for v in range(n):
            if cid[v] < 0:
                cid[v], n_new = n_new, n_new + 1
        keep: dict[tuple[int, int], tuple[float, int]] = {}
        for i, (u, v, w) in enumerate(cur):
            cu, cv = cid[u], cid[v]
            if cu != cv:
                w2 = w - bw[v] if in_cycle[v] >= 0 else w
                old = keep.get((cu, cv))
                if old is None or w2 < old[0]:
                    keep[(cu, cv)] = (w2, i)
        nxt = [(cu, cv, w2) for (cu, cv), (w2, _) in keep.items()]
        back = [i for _, i in keep.values()]
        rounds.append((cur, best, in_cycle, cycles, back))
        n, root, cur = n_new, cid[root], nxt
    while rounds:
        prev, best, in_cycle, cycles, back = rounds.pop()
        chosen = [back[j] for j in chosen]
        entered = {prev[i][1] for i in chosen if in_cycle[prev[i][1]] >= 0}
        for members in cycles:
            chosen.extend(best[x] for x in members if x not in entered)
    return chosen


def _acyclic(parent: Mapping[str, str]) -> bool:
    """Return whether following ``parent`` from every node reaches ROOT."""
    state: dict[str, int] = {ROOT: 2}  # 1 = on the current walk, 2 = reaches ROOT
    for start in parent:
        path = []
        x = start
        while state.get(x, 0) == 0:
            state[x] = 1
            path.append(x)
            x = parent[x]
        if state[x] == 1:
            return False
        for y in path:
            state[y] = 2
    return True


def _acyclic_after(parent: Mapping[str, str], moved: Mapping[str, tuple[str, float]]) -> bool:
    """Return whether ``parent`` with ``moved`` applied still reaches ROOT from moved nodes."""
    done = {ROOT}
    for start in moved:
        seen = set()
        x = start
        while x not in done:
            if x in seen:
                return False
            seen.add(x)
            x = moved[x][0] if x in moved else parent[x]
        done |= seen
    return True


def check_inputs(
    graph: nx.DiGraph, required: Collection[str], max_bridges: int | None
) -> tuple[ChoiceContext, set[str], set[str], set[str]]:
    """Check a planning problem and return its context and node sets.

    Parameters
    ----------
    graph
        An OC graph from :func:`~tunecache.reuse.graph.build_choice_graph`.
    required
        The tasks to tune.
    max_bridges
        The most bridges a plan may tune; ``None`` for no limit.

    Returns
    -------
    tuple
        ``(context, required, stored, bridges)``: the graph's :class:`ChoiceContext`, the
        required tasks, the stored workloads and the bridge nodes of the graph, as sets.

    Raises
    ------
    ConfigError
        If the graph has no virtual root, ``required`` is a string, a required name is not a
        task node of the graph, or ``max_bridges`` is not ``None`` or an int >= 0.

    Examples
    --------
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000}, [CostEdge("a", "b", 40)])
    >>> ctx, req, stored, bridges = check_inputs(g, ["b"], None)
    >>> sorted(req), stored, bridges
    (['b'], set(), set())
    """
    if ROOT not in graph or graph.nodes[ROOT].get("kind") != "root":
        raise ConfigError(
            f"graph has no virtual root {ROOT!r}; build it with tunecache.reuse.build_choice_graph"
        )
    if isinstance(required, str):
        raise ConfigError(f"required must be a collection of workload names, got the string {required!r}")
    req = set(required)
    for v in sorted(req):
        if v not in graph:
            raise ConfigError(f"required task {v!r} is not in the choice graph; add it to tasks")
        if graph.nodes[v].get("kind") != "task":
            raise ConfigError(
                f"required node {v!r} is a {graph.nodes[v].get('kind')!r} node; only tasks can be required"
            )
    if max_bridges is not None and (not isinstance(max_bridges, int) or max_bridges < 0):
        raise ConfigError(f"max_bridges must be None or an int >= 0, got {max_bridges!r}")
    ctx = ChoiceContext(graph)
    stored = {v for v, k in ctx.kind.items() if k == "store"}
    bridges = {v for v, k in ctx.kind.items() if k == "bridge"}
    return ctx, req, stored, bridges
