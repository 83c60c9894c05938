"""From tasks to a reuse plan: reuse edges, bridges and costs, then the arborescence.

:func:`plan_tasks` is TVM-free given each task's loop nest and sketch signature;
:func:`tunecache.tvm_layer.bridges.describe_tasks` computes those with TVM (loop-nest analysis
and design-space sketches).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunecache.reuse.bridge import bridge_nest
from tunecache.reuse.conditions import can_reuse, dominates
from tunecache.reuse.costs import CostModel, reuse_cost
from tunecache.reuse.graph import ROOT, CostEdge, build_choice_graph
from tunecache.reuse.loopnest import LoopNest
from tunecache.reuse.planning import Plan, plan_reuse
from tunecache.store.keys import WorkloadKey

__all__ = ["PlanTask", "ModelPlan", "plan_tasks"]


@dataclass(frozen=True)
class PlanTask:
    """A task (or a stored workload) as the planner sees it."""

    key: WorkloadKey
    name: str
    weight: float
    nest: LoopNest
    sketch: str  # decision signature (tunecache.tvm_layer.sketch.decision_signature)
    trivial: bool = False  # design space of one program with nothing sampled: costs one trial

    @property
    def node(self) -> str:
        return f"{self.name}#{self.key.shash[:8]}"


@dataclass(frozen=True)
class ModelPlan:
    """A plan plus what its nodes stand for.

    Attributes
    ----------
    plan
        The :class:`~tunecache.reuse.planning.Plan` over node ids.
    tasks
        Node id -> the planned task.
    stored
        Node id -> the stored workload used as a zero-cost source.
    bridges
        Node id -> the bridge's loop nest (materialize it with
        :func:`tunecache.tvm_layer.bridges.materialize_bridge`).
    hits
        Names of tasks served from the store (not planned).
    cost_model
        The cost model used (seconds per trial included).
    models
        Node id -> the task's calls in each model that has it (model spec -> calls), for a plan
        of several models' tasks (``tunecache warm``); empty when the plan is one model's. A
        task's share of its model's estimated time (``search.execute``) is taken per model.
    """

    plan: Plan
    tasks: dict[str, PlanTask]
    stored: dict[str, PlanTask] = field(default_factory=dict)
    bridges: dict[str, LoopNest] = field(default_factory=dict)
    hits: tuple[str, ...] = ()
    cost_model: CostModel = field(default_factory=CostModel)
    models: dict[str, dict[str, float]] = field(default_factory=dict)

    def source_of(self, node: str) -> dict[str, Any]:
        """Return ``{"kind": root|store|task|bridge, ...}`` for a node's source."""
        step = self.plan.step(node)
        src = step.source
        if src == ROOT:
            return {"kind": "root"}
        if src in self.stored:
            return {"kind": "store", "workload": str(self.stored[src].key), "name": self.stored[src].name}
        if src in self.bridges:
            return {"kind": "bridge", "node": src, "extents": list(self.bridges[src].extents)}
        return {"kind": "task", "node": src, "workload": str(self.tasks[src].key)}

    def to_json(self) -> str:
        """Return the plan as JSON: every node names its source."""
        nodes = []
        for s in self.plan.steps:
            entry: dict[str, Any] = {"node": s.node, "node_kind": s.node_kind, "est_trials": s.est_trials,
                                     "quality": s.quality, "source": self.source_of(s.node)}
            if s.node in self.tasks:
                t = self.tasks[s.node]
                entry.update(workload=str(t.key), name=t.name, family=t.nest.family, extents=list(t.nest.extents),
                             weight=t.weight)
            elif s.node in self.bridges:
                b = self.bridges[s.node]
                entry.update(family=b.family, extents=list(b.extents))
            nodes.append(entry)
        cm = self.cost_model
        return json.dumps({
            "nodes": nodes,
            "hits": list(self.hits),
            "estimated_trials": self.plan.total_trials,
            "scratch_trials": self.plan.scratch_trials,
            "estimated_seconds": self.plan.total_trials * cm.seconds_per_trial,
            "scratch_seconds": self.plan.scratch_trials * cm.seconds_per_trial,
            "full_searches": len(self.plan.full_searches),
            "bridges": len(self.plan.bridges),
            "cost_model": {"full_trials": cm.full_trials, "max_reuse_trials": cm.max_reuse_trials,
                           "seconds_per_trial": cm.seconds_per_trial},
        }, indent=2)

    def to_text(self) -> str:
        """Return a readable tree with store hits and time estimates."""
        cm = self.cost_model
        lines = [self.plan.to_text()]
        if self.hits:
            lines.append(f"store hits (not planned): {len(self.hits)}: " + ", ".join(self.hits[:12])
                         + (" ..." if len(self.hits) > 12 else ""))
        lines.append(
            f"estimated time: {self.plan.total_trials * cm.seconds_per_trial / 60:.1f} min vs "
            f"{self.plan.scratch_trials * cm.seconds_per_trial / 60:.1f} min from scratch "
            f"({cm.seconds_per_trial:.2f} s/trial)"
        )
        return "\n".join(lines)


def _group(t: PlanTask) -> tuple[str, str, str]:
    return (t.nest.family, t.nest.signature, t.sketch)


def plan_tasks(
    tasks: Sequence[PlanTask],
    *,
    stored: Sequence[PlanTask] = (),
    cost_model: CostModel = CostModel(),
    bridges: bool = True,
    hits: Sequence[str] = (),
    bridge_check: Callable[[LoopNest, Sequence[PlanTask]], bool] | None = None,
) -> ModelPlan:
    """Plan which tasks reuse which (ETO Definitions 2, 4 and 5, Section 6).

    Parameters
    ----------
    tasks
        Tasks to tune (store misses), distinct keys.
    stored
        Workloads tuned on this hardware already: zero-cost reuse sources (a few per task,
        :func:`tunecache.planning.reuse_sources`; only task-task and task-source pairs are
        compared).
    cost_model
        Cost estimates.
    bridges
        Consider 1-hop bridge operators (element-wise minimum of a pair that fails only
        dominance).
    hits
        Names of tasks that are exact store hits (reported, not planned).
    bridge_check
        Called for each bridge the plan keeps, with its nest and the tasks it serves; a bridge
        it rejects (e.g. its materialized sketch differs) is dropped and the plan re-made.

    Returns
    -------
    ModelPlan
    """
    by_node = {t.node: t for t in tasks}
    st = {f"store:{s.node}": s for s in stored}
    full = {n: (1.0 if t.trivial else cost_model.full_trials) for n, t in by_node.items()}
    groups: dict[tuple[str, str, str], list[tuple[str, PlanTask]]] = defaultdict(list)
    for n, t in by_node.items():
        groups[_group(t)].append((n, t))
    for n, s in st.items():
        groups[_group(s)].append((n, s))
    edges: list[CostEdge] = []
    bridge_nests: dict[str, LoopNest] = {}
    bridge_users: dict[str, list[PlanTask]] = defaultdict(list)
    for members in groups.values():
        if not any(n in by_node for n, _ in members):
            continue
        for i, (na, a) in enumerate(members):
            for nb, b in members[i + 1:]:
                if na not in by_node and nb not in by_node:
                    continue  # two stored workloads: no edge to plan between them
                verdict = can_reuse(a.nest, b.nest, a.sketch, b.sketch)
                if verdict.ok:
                    for (ns, s), (nt, t) in (((na, a), (nb, b)), ((nb, b), (na, a))):
                        if nt in by_node:
                            trials, q = reuse_cost(s.nest, t.nest, cost_model)
                            edges.append(CostEdge(ns, nt, trials, q))
                elif bridges and verdict.reason == "no dominance" and (na in by_node or nb in by_node):
                    nest = bridge_nest(a.nest, b.nest)
                    bnode = f"bridge:{a.nest.family}{list(nest.extents)}"
                    bridge_nests[bnode] = nest
                    bridge_users[bnode] += [a, b]
    for bnode, bnest in bridge_nests.items():
        for t in {u.node: u for u in bridge_users[bnode]}.values():
            node = t.node if t.node in by_node else None
            if node is not None and dominates(t.nest.extents, bnest.extents):
                trials, q = reuse_cost(bnest, t.nest, cost_model)
                edges.append(CostEdge(bnode, node, trials, q))
    rejected: set[str] = set()
    while True:
        bmap = {b: cost_model.full_trials for b in bridge_nests if b not in rejected}
        g = build_choice_graph(full, [e for e in edges if e.source not in rejected], bridges=bmap, stored=st.keys())
        plan = plan_reuse(g, required=list(by_node), use_bridges=bridges)
        bad = [b for b in plan.bridges if bridge_check is not None
               and not bridge_check(bridge_nests[b], bridge_users[b])]
        if not bad:
            break
        rejected.update(bad)
    return ModelPlan(
        plan=plan,
        tasks=by_node,
        stored={n: s for n, s in st.items()},
        bridges={b: bridge_nests[b] for b in plan.bridges},
        hits=tuple(hits),
        cost_model=cost_model,
    )
