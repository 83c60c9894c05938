"""The optimization-choice graph: who can reuse whose tuned program, and at what cost.

ETO (Zhao et al., "Efficient Tensor Program Optimization via Information Reuse",
PVLDB 15(2), 2022, Section 6) casts reuse planning as a graph problem. Every workload to tune
is a node; an edge ``s -> t`` says "tune ``t`` by a short search narrowed around ``s``'s tuned
program", weighted by the estimated search cost; a special root has an edge to every node,
meaning "tune from scratch" with a full search. A cheapest plan is then a minimum-cost
arborescence rooted at the root (:func:`tunecache.reuse.planning.plan_reuse`).

tunecache adds two node kinds to ETO's graph:

* *store* nodes: workloads already tuned and kept in the store. They cost nothing to own
  (``ROOT -> store`` has weight 0) and only ever act as sources.
* *bridge* nodes (ETO Section 6.2): optional workloads nobody asked for, worth tuning only when
  they let several required tasks reuse them cheaply. With bridges the planning problem becomes
  a directed Steiner tree problem.

Everything here is plain data: node names are strings, nothing imports TVM.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import networkx as nx

from tunecache.errors import ConfigError

__all__ = [
    "ROOT",
    "NodeKind",
    "CostEdge",
    "DEFAULT_QUALITY_WEIGHT",
    "reuse_weight",
    "build_choice_graph",
]

#: Name of the virtual root ("tune from scratch"). Reserved: no workload may use it.
ROOT = "<scratch>"

#: The kind of a node in the choice graph (the ``kind`` node attribute).
NodeKind = Literal["root", "task", "bridge", "store"]

#: Default price of quality, in full searches per unit of latency ratio (see :func:`reuse_weight`).
DEFAULT_QUALITY_WEIGHT = 1.0

_EMPTY: Mapping[str, float] = types.MappingProxyType({})


def _check_cost(what: str, value: float) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{what} must be a number, got {value!r}") from err
    if not math.isfinite(out) or out < 0:
        raise ConfigError(f"{what} must be a finite number >= 0, got {value!r}")
    return out


@dataclass(frozen=True)
class CostEdge:
    """An estimated cost of tuning ``target`` by reusing ``source``'s tuned program.

    Parameters
    ----------
    source
        The workload whose tuned program is reused (a task, a bridge or a stored workload).
    target
        The workload to tune (a task or a bridge).
    trials
        Estimated measurement trials of the narrowed search (ETO Section 6.1 counts trials).
    quality
        Expected latency of the result relative to a full search of ``target``: 1.0 is as
        good, 1.1 is 10% slower. Must be > 0.

    Raises
    ------
    ConfigError
        If a name is empty, ``source == target``, ``trials`` is negative or not finite, or
        ``quality`` is not a finite positive number.

    Examples
    --------
    >>> CostEdge("conv_a", "conv_b", trials=32)
    CostEdge(source='conv_a', target='conv_b', trials=32.0, quality=1.0)
    """

    source: str
    target: str
    trials: float
    quality: float = 1.0

    def __post_init__(self) -> None:
        for name in ("source", "target"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"CostEdge.{name} must be a non-empty string, got {value!r}")
        if self.source == self.target:
            raise ConfigError(f"CostEdge from {self.source!r} to itself; drop self-reuse edges")
        object.__setattr__(self, "trials", _check_cost("CostEdge.trials", self.trials))
        q = self.quality
        if not isinstance(q, (int, float)) or not math.isfinite(q) or q <= 0:
            raise ConfigError(f"CostEdge.quality must be a finite number > 0, got {q!r}")
        object.__setattr__(self, "quality", float(q))


def reuse_weight(
    trials: float, quality: float, full_cost: float, quality_weight: float = DEFAULT_QUALITY_WEIGHT
) -> float:
    """Return the planning weight of a reuse edge: trials plus a price for worse programs.

    ``weight = trials + quality_weight * max(quality - 1, 0) * full_cost``

    A reuse edge whose program is expected to be as fast as a full search (``quality == 1``)
    costs just its trials. An edge expected to give a program 10% slower is charged
    ``0.1 * quality_weight`` of a full search on top: with the default ``quality_weight=1.0``,
    "10% slower" is worth as much as 10% of a full search. ``quality < 1`` earns no bonus, so
    weights never drop below the trials. ``quality_weight=0`` plans on trials alone.

    Parameters
    ----------
    trials
        Estimated trials of the narrowed search.
    quality
        Expected latency ratio versus a full search of the target.
    full_cost
        Trials of a full search of the target (its ``ROOT`` edge).
    quality_weight
        Price of quality, in full searches per unit of latency ratio.

    Returns
    -------
    float
        The edge weight, ``>= trials``.

    Examples
    --------
    >>> reuse_weight(40, 1.0, 1000)
    40.0
    >>> reuse_weight(40, 1.25, 1000)
    290.0
    """
    return float(trials) + quality_weight * max(float(quality) - 1.0, 0.0) * float(full_cost)


def build_choice_graph(
    tasks: Mapping[str, float],
    edges: Iterable[CostEdge],
    *,
    bridges: Mapping[str, float] = _EMPTY,
    stored: Iterable[str] = (),
    quality_weight: float = DEFAULT_QUALITY_WEIGHT,
) -> nx.DiGraph:
    """Build ETO's optimization-choice (OC) graph of a set of workloads.

    Nodes carry ``kind`` (:data:`NodeKind`) and ``full_cost`` (trials of a full search; 0 for
    store nodes and the root). Edges carry ``weight`` (the planning objective, see
    :func:`reuse_weight`), ``trials`` and ``quality``. The graph has:

    * ``ROOT -> v`` for every task and bridge, weight = ``full_cost`` of ``v``, quality 1;
    * ``ROOT -> s`` for every stored workload, weight 0 (it is already tuned);
    * one edge per :class:`CostEdge`; when several edges join the same pair, the lightest wins.

    Because the root reaches every node directly, a spanning arborescence always exists.

    Parameters
    ----------
    tasks
        Required workloads and the trials of a full search of each.
    edges
        Reuse edges. Sources may be tasks, bridges or stored workloads; targets must be tasks or
        bridges (a stored workload needs no tuning).
    bridges
        Optional workloads (ETO's bridge operators) and their full-search trials.
    stored
        Workloads already tuned and held in the store. Exact hits for a required task should be
        served before planning, so a name may not be both a task and stored.
    quality_weight
        Price of expected slowdown in the edge weight (see :func:`reuse_weight`); >= 0.

    Returns
    -------
    networkx.DiGraph
        The OC graph, with ``graph["root"] == ROOT`` and ``graph["quality_weight"]``.

    Raises
    ------
    ConfigError
        If a name is reserved (:data:`ROOT`) or appears in two roles, a full cost is negative
        or not finite, ``quality_weight`` is negative, or an edge names an unknown node or
        targets a stored workload.

    Examples
    --------
    >>> g = build_choice_graph({"a": 1000, "b": 1000}, [CostEdge("a", "b", 30)])
    >>> g[ROOT]["b"]["weight"], g["a"]["b"]["weight"]
    (1000.0, 30.0)
    >>> g.nodes["b"]["kind"]
    'task'
    """
    qw = _check_cost("quality_weight", quality_weight)
    g = nx.DiGraph(root=ROOT, quality_weight=qw)
    g.add_node(ROOT, kind="root", full_cost=0.0)
    stored_names = sorted(set(stored))
    roles: dict[str, str] = {}
    for role, names in (("task", tasks), ("bridge", bridges), ("store", stored_names)):
        for name in names:
            if not isinstance(name, str) or not name:
                raise ConfigError(f"workload names must be non-empty strings, got {name!r}")
            if name == ROOT:
                raise ConfigError(f"{ROOT!r} is reserved for the virtual root; rename the workload")
            if name in roles:
                raise ConfigError(
                    f"{name!r} is both a {roles[name]} and a {role}; give each workload one role"
                    " (serve exact store hits before planning)"
                )
            roles[name] = role
    for role, costs in (("task", tasks), ("bridge", bridges)):
        for name, full in costs.items():
            full = _check_cost(f"full cost of {role} {name!r}", full)
            g.add_node(name, kind=role, full_cost=full)
            g.add_edge(ROOT, name, weight=full, trials=full, quality=1.0)
    for name in stored_names:
        g.add_node(name, kind="store", full_cost=0.0)
        g.add_edge(ROOT, name, weight=0.0, trials=0.0, quality=1.0)
    for e in edges:
        if not isinstance(e, CostEdge):
            raise ConfigError(f"edges must be CostEdge values, got {e!r}")
        for end in (e.source, e.target):
            if end not in roles:
                raise ConfigError(
                    f"{e} names unknown workload {end!r}; add it to tasks, bridges or stored,"
                    " or drop the edge"
                )
        if roles[e.target] == "store":
            raise ConfigError(f"{e} targets stored workload {e.target!r}, which needs no tuning")
        w = reuse_weight(e.trials, e.quality, g.nodes[e.target]["full_cost"], qw)
        old = g.get_edge_data(e.source, e.target)
        if old is None or w < old["weight"]:
            g.add_edge(e.source, e.target, weight=w, trials=e.trials, quality=e.quality)
    return g
