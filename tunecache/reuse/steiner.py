"""The exact optimum of reuse planning with bridges, by brute force over bridge subsets.

With optional bridge workloads, ETO's reuse pair selection (Zhao et al., "Efficient Tensor
Program Optimization via Information Reuse", PVLDB 15(2), 2022, Section 6.2) is a minimum
directed Steiner arborescence: terminals are the required tasks, optional Steiner nodes the
bridges. :func:`exact_steiner_cost` solves small instances exactly, the reference the local
search of :func:`~tunecache.reuse.planning.plan_reuse` is measured against
(``tests/test_planning.py``, ``tools/bench_plan.py``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection

import networkx as nx

from tunecache.errors import ConfigError
from tunecache.reuse.arborescence import Arborescence, check_inputs
from tunecache.reuse.graph import ROOT

__all__ = ["exact_steiner_cost"]


def exact_steiner_cost(
    graph: nx.DiGraph,
    *,
    required: Collection[str],
    max_bridges: int | None = None,
    max_candidates: int = 16,
) -> float:
    """Return the optimal plan cost by trying every subset of bridges (for small instances).

    The optimum directed Steiner arborescence spans the required tasks, the stored workloads
    and *some* subset of bridges; for a fixed subset the minimum arborescence is optimal, so
    the minimum over all subsets is the exact optimum. This costs ``2 ** len(bridges)``
    arborescences: a reference for tests and benchmarks, not a planner.

    Parameters
    ----------
    graph
        An OC graph from :func:`~tunecache.reuse.graph.build_choice_graph`.
    required
        The tasks to tune.
    max_bridges
        Only consider subsets of at most this many bridges.
    max_candidates
        Refuse graphs with more bridges than this.

    Returns
    -------
    float
        The minimum total weight of a plan (``Plan.total_cost`` of an optimal plan).

    Raises
    ------
    ConfigError
        If the graph has more than ``max_candidates`` bridges, or as
        :func:`~tunecache.reuse.planning.plan_reuse`.

    Examples
    --------
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> exact_steiner_cost(g, required=["a", "b"])
    1080.0
    """
    ctx, req, stored, bridges = check_inputs(graph, required, max_bridges)
    if len(bridges) > max_candidates:
        raise ConfigError(
            f"exact_steiner_cost tries 2**{len(bridges)} bridge subsets; at most"
            f" {max_candidates} bridges allowed (raise max_candidates or use plan_reuse)"
        )
    base = {ROOT} | req | stored
    order = sorted(bridges)
    top = len(order) if max_bridges is None else min(max_bridges, len(order))
    best = math.inf
    for r in range(top + 1):
        for subset in itertools.combinations(order, r):
            best = min(best, Arborescence(ctx, base | set(subset)).total)
    return best
