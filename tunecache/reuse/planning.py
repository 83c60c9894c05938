"""Reuse planning: choose, for every task, whether to tune it from scratch or from whom to reuse.

This is ETO's reuse pair selector (Zhao et al., "Efficient Tensor Program Optimization via
Information Reuse", PVLDB 15(2), 2022, Section 6) over the optimization-choice graph of
:mod:`tunecache.reuse.graph`:

* Without bridges the cheapest plan is a **minimum-cost arborescence** rooted at the virtual
  root (Edmonds' algorithm; see :func:`~tunecache.reuse.arborescence.edmonds` for why not
  ``nx.minimum_spanning_arborescence``).
* With optional bridge workloads (ETO Section 6.2) it is a **directed Steiner tree** problem,
  NP-hard. ETO uses the greedy approximation of Watel and Weisser ("A practical greedy
  approximation for the directed Steiner tree problem", J. Comb. Optim. 32(4), 2016), whose
  guarantee is a factor ``k`` (the number of terminals). :func:`plan_reuse` keeps the same
  ``k`` guarantee with a simpler algorithm (see its Notes) and also never returns a plan
  costlier than the best plan without bridges.

The pieces live in sibling modules, all pure (no TVM, no database): the plan value and its cost
in :mod:`tunecache.reuse.plan`, Edmonds' algorithm and the incremental arborescence in
:mod:`tunecache.reuse.arborescence`, the bridge local search in
:mod:`tunecache.reuse.local_search`, and the exact optimum for small graphs in
:mod:`tunecache.reuse.steiner`. This module joins them into :func:`plan_reuse` and re-exports
:class:`Plan`, :class:`PlanStep` and :func:`exact_steiner_cost`.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import networkx as nx

from tunecache.reuse.arborescence import EPS, Arborescence, check_inputs
from tunecache.reuse.graph import ROOT
from tunecache.reuse.local_search import improve, prune, shortest_path_bridges, trim
from tunecache.reuse.plan import Plan, PlanStep
from tunecache.reuse.steiner import exact_steiner_cost

__all__ = [
    "PlanStep",
    "Plan",
    "plan_reuse",
    "exact_steiner_cost",
]

#: Above this many nodes, a bridge move that breaks the cheapest-in-edge tree is evaluated by a
#: local update (a valid, maybe not minimum, arborescence) instead of a full recomputation;
#: the arborescence is recomputed exactly after each round of moves.
_EXACT_LIMIT = 200


def _to_plan(arb: Arborescence, required: set[str]) -> Plan:
    """Return the plan of an arborescence: its non-stored nodes in pre-order, sources first."""
    ctx = arb.ctx
    g = ctx.g
    kids: dict[str, list[str]] = {}
    for v, u in arb.parent.items():
        kids.setdefault(u, []).append(v)
    for lst in kids.values():
        lst.sort(key=lambda v: (ctx.kind[v] == "store", v))
    steps: list[PlanStep] = []
    stack = list(reversed(kids.get(ROOT, [])))
    while stack:  # pre-order: every source before its reusers
        v = stack.pop()
        if ctx.kind[v] != "store":
            u = arb.parent[v]
            d = g[u][v]
            steps.append(
                PlanStep(
                    node=v,
                    source=u,
                    kind=ctx.kind[u],  # type: ignore[arg-type]
                    node_kind=ctx.kind[v],  # type: ignore[arg-type]
                    est_trials=d["trials"],
                    quality=d["quality"],
                    cost=d["weight"],
                )
            )
        stack.extend(reversed(kids.get(v, [])))
    scratch = math.fsum(g.nodes[v]["full_cost"] for v in required)
    return Plan(tuple(steps), scratch_trials=scratch)


def plan_reuse(
    graph: nx.DiGraph,
    *,
    required: Collection[str],
    use_bridges: bool = True,
    max_bridges: int | None = None,
) -> Plan:
    """Return a cheap plan that tunes every required task, reusing programs where it pays.

    Without bridge nodes (or with ``use_bridges=False`` or ``max_bridges=0``) the plan is a
    minimum-cost arborescence of the OC graph restricted to the root, the required tasks and
    the stored workloads: the optimum of ETO's reuse pair selection (Definition 4). With bridge
    nodes it approximates the minimum directed Steiner arborescence whose terminals are the
    required tasks and whose optional Steiner nodes are the bridges (ETO Section 6.2).

    Parameters
    ----------
    graph
        An OC graph from :func:`~tunecache.reuse.graph.build_choice_graph`. It is not modified.
    required
        The tasks to tune. Task nodes of the graph not listed here are left out of the plan.
    use_bridges
        Whether bridge nodes may be tuned to serve as reuse sources.
    max_bridges
        The most bridges the plan may tune; ``None`` for no limit.

    Returns
    -------
    Plan
        Steps in execution order (sources before reusers). Stored workloads never appear as
        steps, only as sources.

    Raises
    ------
    ConfigError
        If the graph has no virtual root, a required name is not a task node of the graph, or
        ``max_bridges`` is negative.

    Notes
    -----
    The arborescence is Edmonds' algorithm. When every task's cheapest in-edge already forms a
    tree (always so when reuse only flows from smaller to larger shapes) that tree is the
    answer; otherwise cycles are contracted (:func:`~tunecache.reuse.arborescence.edmonds`,
    a Chu-Liu/Edmonds with contraction, checked against ``nx.minimum_spanning_arborescence``
    in the tests, which took 103 s on a cyclic 1,000-task graph where this takes 0.4 s).

    The Steiner approximation is a greedy local search run from two starts, keeping the
    cheaper result:

    1. no bridges;
    2. the bridges on shortest root-to-task paths (Dijkstra over all nodes).

    From each start it alternates *grow* (add the bridge whose inclusion lowers the minimum
    arborescence cost the most; candidates are ranked by Edmonds' first-phase estimate in a
    lazy heap and added only when the recomputed arborescence is cheaper) and *prune* (drop
    every bridge whose removal does not raise the cost), until neither changes anything. Above
    200 planned nodes, a move that breaks the cheapest-in-edge tree is scored by a local
    update (a valid arborescence, maybe not the minimum one) and the minimum arborescence is
    recomputed after each round.

    Guarantees: the plan is never costlier than the best plan without bridges, nor (without a
    ``max_bridges`` cap that binds on start 2) than the shortest-path tree, whose cost is at
    most ``k`` times the optimum for ``k`` required tasks, since each task's shortest path
    costs no more than the optimum. That is the ratio of the Watel-Weisser greedy ETO uses
    (Watel and Weisser, J. Comb. Optim. 32(4), 2016). Every bridge in the plan strictly
    lowers its cost. On random instances small enough for :func:`exact_steiner_cost` the
    measured gap is small (see ``tests/test_planning.py`` and ``tools/bench_plan.py``).

    Examples
    --------
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph(
    ...     {"a": 1000, "b": 1000},
    ...     [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...     bridges={"x": 1000},
    ... )
    >>> plan = plan_reuse(g, required=["a", "b"])
    >>> [(s.node, s.source) for s in plan.steps]
    [('x', '<scratch>'), ('a', 'x'), ('b', 'x')]
    >>> plan.total_trials, plan.scratch_trials
    (1080.0, 2000.0)
    >>> plan_reuse(g, required=["a", "b"], use_bridges=False).total_trials
    2000.0
    """
    ctx, req, stored, bridges = check_inputs(graph, required, max_bridges)
    base = {ROOT} | req | stored
    arb = Arborescence(ctx, base, exact_limit=_EXACT_LIMIT)
    if use_bridges and bridges and req and max_bridges != 0:
        best = improve(arb.copy(), bridges, max_bridges)
        seed = shortest_path_bridges(ctx, base, bridges, sorted(req))
        if seed:
            other = Arborescence(ctx, base | seed, exact_limit=_EXACT_LIMIT)
            prune(other)
            if max_bridges is not None:
                trim(other, max_bridges)
            improve(other, bridges, max_bridges)
            if other.total < best.total - EPS or (
                other.total <= best.total + EPS and len(other.bridges) < len(best.bridges)
            ):
                best = other
        if best.total < arb.total - EPS:
            arb = best
    return _to_plan(arb, req)
