"""Shape-aware reuse: loop nests, reuse conditions, cost estimates, bridges, planning."""

from tunecache.reuse.graph import (
    DEFAULT_QUALITY_WEIGHT,
    ROOT,
    CostEdge,
    NodeKind,
    build_choice_graph,
    reuse_weight,
)
from tunecache.reuse.planning import Plan, PlanStep, exact_steiner_cost, plan_reuse

__all__ = [
    "ROOT",
    "NodeKind",
    "CostEdge",
    "DEFAULT_QUALITY_WEIGHT",
    "reuse_weight",
    "build_choice_graph",
    "Plan",
    "PlanStep",
    "plan_reuse",
    "exact_steiner_cost",
]
