"""Reuse planning (ETO Section 6) on random choice graphs: properties, brute force, measured gap.

No TVM anywhere: graphs are built from plain numbers.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from collections.abc import Iterable

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunecache.errors import ConfigError, TunecacheError
from tunecache.reuse import (
    ROOT,
    CostEdge,
    Plan,
    PlanStep,
    build_choice_graph,
    exact_steiner_cost,
    plan_reuse,
    planning,
    reuse_weight,
)
from tunecache.reuse.synthetic import random_choice_graph, synthetic_choice_graph

#: Deterministic examples (derandomized), no per-example deadline.
PROPERTY = settings(
    derandomize=True,
    deadline=None,
    max_examples=120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOL = 1e-6


# ---------------------------------------------------------------------------------------------
# Random choice graphs
# ---------------------------------------------------------------------------------------------


@st.composite
def choice_graphs(
    draw: st.DrawFn, max_tasks: int = 5, max_bridges: int = 0, max_stored: int = 1
) -> tuple[nx.DiGraph, list[str]]:
    """Draw an OC graph (tasks, bridges, stored workloads, random reuse edges) and its tasks."""
    n_tasks = draw(st.integers(1, max_tasks))
    n_bridges = draw(st.integers(0, max_bridges))
    n_stored = draw(st.integers(0, max_stored))
    full = st.sampled_from([100.0, 500.0, 1000.0])
    tasks = {f"t{i}": draw(full) for i in range(n_tasks)}
    bridges = {f"b{i}": draw(full) for i in range(n_bridges)}
    stored = [f"s{i}" for i in range(n_stored)]
    density = draw(st.sampled_from([0.2, 0.5, 0.9]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    edges = []
    for src in [*tasks, *bridges, *stored]:
        for tgt in [*tasks, *bridges]:
            if src != tgt and rng.random() < density:
                trials = rng.choice([0.0, 5.0, 30.0, 60.0, 200.0, 700.0, rng.uniform(0, 1200)])
                edges.append(CostEdge(src, tgt, trials, rng.choice([1.0, 1.0, 1.05, 1.3])))
    g = build_choice_graph(tasks, edges, bridges=bridges, stored=stored)
    return g, sorted(tasks)


def _reaches_root(parent: dict[str, str], stored: set[str]) -> bool:
    """Whether every chain of sources ends at ROOT or a stored workload, through planned nodes."""
    for start in parent:
        seen = set()
        x = start
        while x != ROOT and x not in stored:
            if x in seen or x not in parent:
                return False
            seen.add(x)
            x = parent[x]
    return True


def brute_force_cost(g: nx.DiGraph, required: Iterable[str]) -> float:
    """Cheapest valid choice of one source per planned node, trying every choice; each bridge
    may also be left out."""
    stored = {v for v, k in g.nodes(data="kind") if k == "store"}
    bridges = sorted(v for v, k in g.nodes(data="kind") if k == "bridge")
    nodes = sorted(required) + bridges
    options = []
    for v in nodes:
        opts: list[tuple[str | None, float]] = [
            (u, d["weight"]) for u, d in g.pred[v].items() if u in stored or u == ROOT or u in nodes
        ]
        if v in bridges:
            opts.append((None, 0.0))  # bridge left out
        options.append(opts)
    best = math.inf
    for choice in itertools.product(*options):
        total = math.fsum(w for _, w in choice)
        if total < best:
            parent = {v: u for v, (u, _) in zip(nodes, choice, strict=False) if u is not None}
            if _reaches_root(parent, stored):
                best = total
    return best


def chain_reaches_root(plan: Plan, g: nx.DiGraph, node: str) -> bool:
    src = {s.node: s.source for s in plan.steps}
    x, hops = node, 0
    while x in src and hops <= len(src):
        x, hops = src[x], hops + 1
    return x == ROOT or g.nodes[x]["kind"] == "store"


def arborescence_cost(g: nx.DiGraph, nodes: Iterable[str]) -> float:
    """Min arborescence cost over ROOT + nodes + stored, computed by networkx directly."""
    keep = {ROOT, *nodes} | {v for v, k in g.nodes(data="kind") if k == "store"}
    h = nx.DiGraph()
    h.add_nodes_from(keep)
    h.add_weighted_edges_from((u, v, d["weight"]) for u, v, d in g.edges(data=True) if u in keep and v in keep)
    if h.number_of_nodes() == 1:
        return 0.0
    arb = nx.minimum_spanning_arborescence(h)
    return math.fsum(g[u][v]["weight"] for u, v in arb.edges)


# ---------------------------------------------------------------------------------------------
# Properties without bridges
# ---------------------------------------------------------------------------------------------


@PROPERTY
@given(choice_graphs(max_tasks=6, max_bridges=3, max_stored=2), st.booleans())
def test_plan_spans_every_required_task_from_the_root(case, use_bridges) -> None:
    g, required = case
    plan = plan_reuse(g, required=required, use_bridges=use_bridges)
    tasks = [s.node for s in plan.steps if s.node_kind == "task"]
    assert sorted(tasks) == sorted(required)
    for s in plan.steps:
        assert chain_reaches_root(plan, g, s.node)
        assert g.nodes[s.node]["kind"] == s.node_kind
        assert g.nodes[s.source]["kind"] == s.kind


@PROPERTY
@given(choice_graphs(max_tasks=6, max_bridges=3, max_stored=2))
def test_plan_never_costlier_than_scratch_and_costs_its_edges(case) -> None:
    g, required = case
    plan = plan_reuse(g, required=required)
    assert plan.scratch_trials == sum(g.nodes[v]["full_cost"] for v in required)
    assert plan.total_cost <= plan.scratch_trials + TOL
    assert plan.total_trials <= plan.total_cost + TOL  # weights are trials plus a quality price
    for s in plan.steps:
        d = g[s.source][s.node]
        assert (s.cost, s.est_trials, s.quality) == (d["weight"], d["trials"], d["quality"])
    assert plan.total_cost == pytest.approx(math.fsum(g[s.source][s.node]["weight"] for s in plan.steps))


@PROPERTY
@given(choice_graphs(max_tasks=5, max_bridges=0, max_stored=1))
def test_without_bridges_plan_equals_brute_force(case) -> None:
    """Up to 7 nodes (root, 5 tasks, 1 stored): the arborescence is the exhaustive optimum."""
    g, required = case
    plan = plan_reuse(g, required=required)
    assert plan.total_cost == pytest.approx(brute_force_cost(g, required), abs=TOL)
    assert plan.total_cost == pytest.approx(arborescence_cost(g, required), abs=TOL)


@PROPERTY
@given(choice_graphs(max_tasks=6, max_bridges=3, max_stored=2))
def test_execution_order_puts_sources_first(case) -> None:
    g, required = case
    plan = plan_reuse(g, required=required)
    position = {s.node: i for i, s in enumerate(plan.steps)}
    for i, s in enumerate(plan.steps):
        if s.kind in ("task", "bridge"):
            assert position[s.source] < i
        assert s.node in plan.children(s.source)


@PROPERTY
@given(choice_graphs(max_tasks=6, max_bridges=3, max_stored=2))
def test_json_round_trip(case) -> None:
    g, required = case
    plan = plan_reuse(g, required=required)
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert json.loads(again.to_json()) == json.loads(plan.to_json())
    text = plan.to_text()
    for s in plan.steps:
        assert (f"[bridge] {s.node}" if s.node_kind == "bridge" else s.node) in text


@PROPERTY
@given(choice_graphs(max_tasks=5, max_bridges=3, max_stored=2))
def test_planning_leaves_the_graph_untouched(case) -> None:
    g, required = case
    before = nx.to_dict_of_dicts(g)
    before = {u: {v: dict(d) for v, d in nbrs.items()} for u, nbrs in before.items()}
    plan_reuse(g, required=required)
    assert {u: {v: dict(d) for v, d in nbrs.items()} for u, nbrs in nx.to_dict_of_dicts(g).items()} == before


@PROPERTY
@given(choice_graphs(max_tasks=25, max_bridges=0, max_stored=3))
def test_without_bridges_plan_equals_networkx_arborescence(case) -> None:
    """Larger cyclic graphs: our Edmonds agrees with ``nx.minimum_spanning_arborescence``."""
    g, required = case
    plan = plan_reuse(g, required=required)
    assert plan.total_cost == pytest.approx(arborescence_cost(g, required), abs=TOL)


# ---------------------------------------------------------------------------------------------
# Bridges: a directed Steiner tree approximation
# ---------------------------------------------------------------------------------------------


@PROPERTY
@given(choice_graphs(max_tasks=3, max_bridges=2, max_stored=1))
def test_exact_steiner_cost_equals_brute_force(case) -> None:
    g, required = case
    assert exact_steiner_cost(g, required=required) == pytest.approx(brute_force_cost(g, required), abs=TOL)


@PROPERTY
@given(choice_graphs(max_tasks=5, max_bridges=5, max_stored=1))
def test_bridged_plan_is_bounded_by_the_optimum(case) -> None:
    g, required = case
    plan = plan_reuse(g, required=required)
    exact = exact_steiner_cost(g, required=required)
    no_bridges = plan_reuse(g, required=required, use_bridges=False)
    assert plan.total_cost >= exact - TOL
    assert plan.total_cost <= no_bridges.total_cost + TOL
    assert plan.total_cost <= len(required) * exact + TOL  # the k-approximation guarantee


@PROPERTY
@given(choice_graphs(max_tasks=5, max_bridges=5, max_stored=1))
def test_every_kept_bridge_lowers_the_cost(case) -> None:
    g, required = case
    plan = plan_reuse(g, required=required)
    for b in plan.bridges:
        others = [v for v in plan.nodes if v != b]
        assert arborescence_cost(g, others) > plan.total_cost
    assert plan.total_cost == pytest.approx(arborescence_cost(g, plan.nodes), abs=TOL)


@PROPERTY
@given(choice_graphs(max_tasks=6, max_bridges=5, max_stored=1))
def test_local_moves_on_large_plans_stay_valid(case) -> None:
    """Force the large-graph path (local moves, exact recomputation per round) on small graphs."""
    g, required = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(planning, "_EXACT_LIMIT", 2)
        plan = plan_reuse(g, required=required)
    assert plan.total_cost >= exact_steiner_cost(g, required=required) - TOL
    assert plan.total_cost <= plan_reuse(g, required=required, use_bridges=False).total_cost + TOL
    assert plan.total_cost == pytest.approx(arborescence_cost(g, plan.nodes), abs=TOL)
    assert sorted(s.node for s in plan.steps if s.node_kind == "task") == sorted(required)


@PROPERTY
@given(choice_graphs(max_tasks=5, max_bridges=5, max_stored=1), st.integers(0, 3))
def test_max_bridges_is_respected(case, cap) -> None:
    g, required = case
    plan = plan_reuse(g, required=required, max_bridges=cap)
    assert len(plan.bridges) <= cap
    assert plan.total_cost >= exact_steiner_cost(g, required=required, max_bridges=cap) - TOL



def test_measured_approximation_gap(record_property: pytest.RecordProperty) -> None:
    """Gap of plan_reuse versus the exact optimum on fixed random and synthetic instances.

    Measured when written: 400 random graphs (2-7 tasks, 1-7 bridges, cycles) max 1.171,
    mean 1.0010; 150 synthetic 1-hop-bridge graphs (10 tasks) max 1.0015, mean 1.00001. The
    worst random cases need a chain of two or three bridges that only pays as a whole, or a
    swap of a kept bridge for such a chain. The proven bound is k (the number of tasks, see
    plan_reuse); the assertions below guard the measured behaviour with a margin.
    """
    rng = random.Random(20220201)
    gaps = {"random": [], "synthetic": []}
    for _ in range(400):
        g, required = random_choice_graph(rng, max_bridges=7)
        exact = exact_steiner_cost(g, required=required)
        gaps["random"].append(plan_reuse(g, required=required).total_cost / exact)
    for seed in range(150):
        g, required = synthetic_choice_graph(10, seed=seed, n_stored=2, max_ratio=64.0)
        if sum(1 for _, k in g.nodes(data="kind") if k == "bridge") > 12:
            continue
        exact = exact_steiner_cost(g, required=required)
        gaps["synthetic"].append(plan_reuse(g, required=required).total_cost / exact)
    for name, values in gaps.items():
        assert values and min(values) >= 1 - TOL
        summary = {"n": len(values), "max": max(values), "mean": statistics.fmean(values)}
        record_property(f"gap_{name}", json.dumps(summary))
        print(f"approximation gap on {name} instances: {summary}")
        assert summary["max"] <= 1.25
        assert summary["mean"] <= 1.01


def test_synthetic_scale_plan_is_fast_and_saves_trials() -> None:
    g, required = synthetic_choice_graph(300, seed=7)
    plan = plan_reuse(g, required=required)
    no_bridges = plan_reuse(g, required=required, use_bridges=False)
    assert plan.bridges
    assert plan.total_cost < no_bridges.total_cost < plan.scratch_trials


# ---------------------------------------------------------------------------------------------
# Examples and caller mistakes
# ---------------------------------------------------------------------------------------------


def test_stored_sources_cost_nothing_and_are_not_steps() -> None:
    g = build_choice_graph(
        {"a": 1000, "b": 1000}, [CostEdge("s", "a", 20), CostEdge("a", "b", 30)], stored=["s"]
    )
    assert g[ROOT]["s"]["weight"] == 0.0
    plan = plan_reuse(g, required=["a", "b"])
    assert [(s.node, s.source, s.kind) for s in plan.steps] == [("a", "s", "store"), ("b", "a", "task")]
    assert plan.total_trials == 50.0
    assert plan.children("s") == ("a",)
    assert "stored  s" in plan.to_text()


def test_bridge_example_from_the_docstring() -> None:
    g = build_choice_graph(
        {"a": 1000, "b": 1000, "c": 1000},
        [CostEdge("x", "a", 40), CostEdge("x", "b", 40), CostEdge("a", "c", 10, quality=1.5)],
        bridges={"x": 1000},
    )
    plan = plan_reuse(g, required=["a", "b", "c"])
    assert plan.bridges == ("x",)
    assert plan.nodes[0] == "x"
    assert plan.step("c").cost == reuse_weight(10, 1.5, 1000) == 510.0
    assert plan_reuse(g, required=["a", "b", "c"], max_bridges=0).bridges == ()
    assert plan_reuse(g, required=[]).steps == ()


def test_plan_rejects_sources_after_their_reusers() -> None:
    with pytest.raises(ConfigError):
        Plan((PlanStep("b", "a", "task", "task", 30), PlanStep("a", ROOT, "root", "task", 1000)), 2000)
    with pytest.raises(TunecacheError):
        Plan.from_json('{"format": "something else"}')
    with pytest.raises(TunecacheError):
        Plan.from_json("not json")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tasks": {ROOT: 1000}},
        {"tasks": {"a": -1}},
        {"tasks": {"a": math.inf}},
        {"tasks": {"a": 1000}, "stored": ["a"]},
        {"tasks": {"a": 1000}, "bridges": {"a": 1000}},
        {"tasks": {"a": 1000}, "edges": [CostEdge("zz", "a", 10)]},
        {"tasks": {"a": 1000}, "stored": ["s"], "edges": [CostEdge("a", "s", 10)]},
        {"tasks": {"a": 1000}, "quality_weight": -1},
    ],
)
def test_build_choice_graph_rejects_caller_mistakes(kwargs) -> None:
    kwargs = {"edges": [], **kwargs}
    with pytest.raises(ConfigError):
        build_choice_graph(kwargs.pop("tasks"), kwargs.pop("edges"), **kwargs)


def test_cost_edge_and_plan_reuse_reject_caller_mistakes() -> None:
    for bad in [("a", "a", 1.0), ("a", "b", -1.0), ("a", "b", math.nan), ("", "b", 1.0)]:
        with pytest.raises(ConfigError):
            CostEdge(*bad)
    with pytest.raises(ConfigError):
        CostEdge("a", "b", 1.0, quality=0.0)
    g = build_choice_graph({"a": 1000}, [], bridges={"x": 10}, stored=["s"])
    for required in (["missing"], ["x"], ["s"], "a"):
        with pytest.raises(ConfigError):
            plan_reuse(g, required=required)
    with pytest.raises(ConfigError):
        plan_reuse(g, required=["a"], max_bridges=-1)
    with pytest.raises(ConfigError):
        plan_reuse(nx.DiGraph(), required=[])
    many = build_choice_graph({"a": 1000}, [], bridges={f"x{i}": 10 for i in range(20)})
    with pytest.raises(ConfigError):
        exact_steiner_cost(many, required=["a"])
