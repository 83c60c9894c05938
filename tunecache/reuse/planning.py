"""Reuse planning: choose, for every task, whether to tune it from scratch or from whom to reuse.

This is ETO's reuse pair selector (Zhao et al., "Efficient Tensor Program Optimization via
Information Reuse", PVLDB 15(2), 2022, Section 6) over the optimization-choice graph of
:mod:`tunecache.reuse.graph`:

* Without bridges the cheapest plan is a **minimum-cost arborescence** rooted at the virtual
  root (Edmonds' algorithm; see :func:`_edmonds` for why not ``nx.minimum_spanning_arborescence``).
* With optional bridge workloads (ETO Section 6.2) it is a **directed Steiner tree** problem,
  NP-hard. ETO uses the greedy approximation of Watel and Weisser ("A practical greedy
  approximation for the directed Steiner tree problem", J. Comb. Optim. 32(4), 2016), whose
  guarantee is a factor ``k`` (the number of terminals). :func:`plan_reuse` keeps the same
  ``k`` guarantee with a simpler algorithm (see its Notes) and also never returns a plan
  costlier than the best plan without bridges.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Literal, Mapping

import networkx as nx

from tunecache.errors import ConfigError, TunecacheError
from tunecache.reuse.graph import ROOT

__all__ = [
    "PlanStep",
    "Plan",
    "plan_reuse",
    "exact_steiner_cost",
]

SourceKind = Literal["root", "store", "task", "bridge"]
StepKind = Literal["task", "bridge"]

_PLAN_FORMAT = "tunecache.plan"
_PLAN_VERSION = 1
_SOURCE_KINDS = frozenset({"root", "store", "task", "bridge"})
_STEP_KINDS = frozenset({"task", "bridge"})
#: Cost differences below this are ties (weights are trial counts: nobody plans on 1e-9 trials).
_EPS = 1e-9
#: Above this many nodes, a bridge move that breaks the cheapest-in-edge tree is evaluated by a
#: local update (a valid, maybe not minimum, arborescence) instead of a full recomputation;
#: the arborescence is recomputed exactly after each round of moves.
_EXACT_LIMIT = 200
#: Tie-break between equally cheap sources: scratch first, then the store, tasks, bridges.
_RANK = {"root": 0, "store": 1, "task": 2, "bridge": 3}


# ---------------------------------------------------------------------------------------------
# The plan value
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanStep:
    """One workload of a plan and where its program comes from.

    Attributes
    ----------
    node
        The workload to tune.
    source
        :data:`~tunecache.reuse.graph.ROOT` for a full search, else the workload whose tuned
        program is reused (a stored workload or an earlier step).
    kind
        Kind of ``source``: ``"root"`` (full search), ``"store"`` (reuse a stored program),
        ``"task"`` or ``"bridge"`` (reuse a program tuned earlier in the plan).
    node_kind
        ``"task"`` (asked for) or ``"bridge"`` (tuned only to be reused).
    est_trials
        Estimated measurement trials of this step.
    quality
        Expected latency ratio versus a full search (1.0 for full searches).
    cost
        The planning weight of the step (trials plus the quality price of
        :func:`~tunecache.reuse.graph.reuse_weight`); defaults to ``est_trials``.
    """

    node: str
    source: str
    kind: SourceKind
    node_kind: StepKind
    est_trials: float
    quality: float = 1.0
    cost: float = field(default=math.nan)

    def __post_init__(self) -> None:
        if self.kind not in _SOURCE_KINDS:
            raise ConfigError(f"PlanStep.kind must be one of {sorted(_SOURCE_KINDS)}, got {self.kind!r}")
        if self.node_kind not in _STEP_KINDS:
            raise ConfigError(
                f"PlanStep.node_kind must be one of {sorted(_STEP_KINDS)}, got {self.node_kind!r}"
            )
        if (self.kind == "root") != (self.source == ROOT):
            raise ConfigError(f"PlanStep {self.node!r}: kind 'root' goes with source {ROOT!r} only")
        object.__setattr__(self, "est_trials", float(self.est_trials))
        object.__setattr__(self, "quality", float(self.quality))
        cost = float(self.cost)
        object.__setattr__(self, "cost", self.est_trials if math.isnan(cost) else cost)

    @property
    def is_full_search(self) -> bool:
        """Return whether this step is a full search (no program to reuse)."""
        return self.kind == "root"

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "node": self.node,
            "source": self.source,
            "kind": self.kind,
            "node_kind": self.node_kind,
            "est_trials": self.est_trials,
            "quality": self.quality,
            "cost": self.cost,
        }


@dataclass(frozen=True)
class Plan:
    """A reuse plan: steps in execution order, every source before the steps that reuse it.

    Attributes
    ----------
    steps
        The steps, parents before children (a topological order of the plan's tree).
    scratch_trials
        Trials of tuning every required task from scratch, the baseline the plan beats.

    Raises
    ------
    ConfigError
        If a node appears twice or a step reuses a task or bridge that no earlier step tunes.
    """

    steps: tuple[PlanStep, ...]
    scratch_trials: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "scratch_trials", float(self.scratch_trials))
        seen: dict[str, str] = {}
        for s in self.steps:
            if not isinstance(s, PlanStep):
                raise ConfigError(f"Plan.steps must hold PlanStep values, got {s!r}")
            if s.node in seen or s.node == ROOT:
                raise ConfigError(f"invalid plan: {s.node!r} is planned twice or is the root")
            if s.kind in ("task", "bridge") and seen.get(s.source) != s.kind:
                raise ConfigError(
                    f"invalid plan: {s.node!r} reuses {s.kind} {s.source!r}, which no earlier"
                    " step tunes; list sources before the steps that reuse them"
                )
            if s.kind == "store" and s.source in seen:
                raise ConfigError(f"invalid plan: store source {s.source!r} is also a plan step")
            seen[s.node] = s.node_kind

    # -- summary numbers ------------------------------------------------------------------

    @property
    def total_trials(self) -> float:
        """Return the estimated trials of the whole plan."""
        return math.fsum(s.est_trials for s in self.steps)

    @property
    def total_cost(self) -> float:
        """Return the plan's objective: the sum of its step weights (trials + quality price)."""
        return math.fsum(s.cost for s in self.steps)

    @property
    def speedup(self) -> float:
        """Return ``scratch_trials / total_trials`` (``inf`` for a plan that costs nothing)."""
        if self.total_trials <= 0:
            return math.inf if self.scratch_trials > 0 else 1.0
        return self.scratch_trials / self.total_trials

    # -- navigation -----------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        """Return the planned workloads in execution order."""
        return tuple(s.node for s in self.steps)

    @property
    def bridges(self) -> tuple[str, ...]:
        """Return the bridge workloads the plan tunes, in execution order."""
        return tuple(s.node for s in self.steps if s.node_kind == "bridge")

    @property
    def full_searches(self) -> tuple[str, ...]:
        """Return the workloads tuned by a full search, in execution order."""
        return tuple(s.node for s in self.steps if s.kind == "root")

    def step(self, node: str) -> PlanStep:
        """Return the step that tunes ``node``.

        Raises
        ------
        KeyError
            If the plan does not tune ``node``.
        """
        for s in self.steps:
            if s.node == node:
                return s
        raise KeyError(node)

    def children(self, node: str) -> tuple[str, ...]:
        """Return the workloads that reuse ``node``'s program, in execution order.

        ``node`` may be :data:`~tunecache.reuse.graph.ROOT` (the full searches) or a stored
        workload.
        """
        return tuple(s.node for s in self.steps if s.source == node)

    # -- serialisation --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (totals are included for readers and ignored on load)."""
        return {
            "format": _PLAN_FORMAT,
            "version": _PLAN_VERSION,
            "scratch_trials": self.scratch_trials,
            "total_trials": self.total_trials,
            "total_cost": self.total_cost,
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
        """Build a plan from :meth:`to_dict` output.

        Raises
        ------
        TunecacheError
            If ``d`` is not a tunecache plan of a known version.
        """
        try:
            if d.get("format") != _PLAN_FORMAT or d.get("version") != _PLAN_VERSION:
                raise TunecacheError(
                    f"not a {_PLAN_FORMAT} v{_PLAN_VERSION} document (format={d.get('format')!r},"
                    f" version={d.get('version')!r}); re-plan with this tunecache"
                )
            steps = tuple(
                PlanStep(
                    node=str(s["node"]),
                    source=str(s["source"]),
                    kind=s["kind"],
                    node_kind=s["node_kind"],
                    est_trials=float(s["est_trials"]),
                    quality=float(s.get("quality", 1.0)),
                    cost=float(s.get("cost", s["est_trials"])),
                )
                for s in d["steps"]
            )
            return cls(steps=steps, scratch_trials=float(d["scratch_trials"]))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise TunecacheError(f"malformed plan document: {err!r}") from err

    def to_json(self, **kwargs: Any) -> str:
        """Return the plan as JSON text (``kwargs`` go to :func:`json.dumps`)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Parse :meth:`to_json` output.

        Raises
        ------
        TunecacheError
            If ``text`` is not JSON or not a plan.
        """
        try:
            d = json.loads(text)
        except ValueError as err:
            raise TunecacheError(f"plan is not valid JSON: {err}") from err
        if not isinstance(d, dict):
            raise TunecacheError("plan JSON must be an object")
        return cls.from_dict(d)

    def to_text(self) -> str:
        """Return a readable tree: full searches and store sources at the top, reusers beneath.

        Examples
        --------
        >>> plan = Plan((PlanStep("a", ROOT, "root", "task", 1000),
        ...              PlanStep("b", "a", "task", "task", 30)), scratch_trials=2000)
        >>> print(plan.to_text())
        2 tasks, 0 bridges: 1030 trials estimated vs 2000 from scratch (1.9x fewer)
        full search  a  (1000 trials)
          reuse  b  (30 trials)
        """
        n_tasks = sum(1 for s in self.steps if s.node_kind == "task")
        lines = [
            f"{n_tasks} tasks, {len(self.bridges)} bridges: {self.total_trials:.0f} trials"
            f" estimated vs {self.scratch_trials:.0f} from scratch ({self.speedup:.1f}x fewer)"
        ]
        kids: dict[str, list[PlanStep]] = {}
        for s in self.steps:
            kids.setdefault(s.source, []).append(s)

        def emit(parent: str, depth: int) -> None:
            stack = [(s, depth) for s in reversed(kids.get(parent, ()))]
            while stack:
                s, d = stack.pop()
                verb = "full search" if s.kind == "root" else "reuse"
                name = f"[bridge] {s.node}" if s.node_kind == "bridge" else s.node
                extra = f"{s.est_trials:.0f} trials"
                if s.quality != 1.0:
                    extra += f", expected latency x{s.quality:.2f}"
                lines.append(f"{'  ' * d}{verb}  {name}  ({extra})")
                stack.extend((c, d + 1) for c in reversed(kids.get(s.node, ())))

        emit(ROOT, 0)
        step_nodes = set(self.nodes)
        for src in kids:
            if src != ROOT and src not in step_nodes:
                lines.append(f"stored  {src}  (already tuned, 0 trials)")
                emit(src, 1)
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Minimum arborescences over node subsets
# ---------------------------------------------------------------------------------------------


class _Context:
    """Read-only facts about one OC graph, shared by every arborescence computed on it."""

    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g
        self.kind: dict[str, str] = {v: d.get("kind", "task") for v, d in g.nodes(data=True)}
        # In-edges of every node sorted cheapest first: (weight, rank of source kind, source).
        self.ins: dict[str, list[tuple[float, int, str]]] = {
            v: sorted((d["weight"], _RANK[self.kind[u]], u) for u, d in g._pred[v].items())
            for v in g
        }

    def best_in(self, v: str, nodes: Collection[str], without: str | None = None) -> tuple[float, str]:
        for w, _, u in self.ins[v]:
            if u in nodes and u != without:
                return w, u
        raise TunecacheError(f"internal: {v!r} has no in-edge from the planned nodes")  # pragma: no cover


class _Arborescence:
    """A minimum-cost arborescence from ROOT over a node subset, updated as bridges come and go.

    While every node's parent is one of its cheapest in-edges and those choices form no cycle,
    the choice is optimal (the first phase of Edmonds' algorithm already has the answer) and
    adding or removing a bridge is a local update. Otherwise the whole arborescence is
    recomputed with ``nx.minimum_spanning_arborescence`` on a fresh copy.
    """

    def __init__(self, ctx: _Context, nodes: Iterable[str]) -> None:
        self.ctx = ctx
        self.nodes: set[str] = set(nodes) | {ROOT}
        self.parent: dict[str, str] = {}
        self.cost: dict[str, float] = {}
        self.total = 0.0
        self.simple = True  # every parent is a cheapest in-edge: optimal, local updates exact
        self.exact = True  # the arborescence is a minimum one for its node set
        self._rebuild()

    def copy(self) -> "_Arborescence":
        new = object.__new__(_Arborescence)
        new.ctx, new.nodes, new.parent = self.ctx, set(self.nodes), dict(self.parent)
        new.cost, new.total = dict(self.cost), self.total
        new.simple, new.exact = self.simple, self.exact
        return new

    @property
    def bridges(self) -> list[str]:
        return sorted(v for v in self.nodes if self.ctx.kind[v] == "bridge")

    def _rebuild(self) -> None:
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
            for i in _edmonds(len(order), edges):
                u, v, w = edges[i]
                parent[order[v]], cost[order[v]] = order[u], w
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

    def try_add(self, b: str, accept: float = -_EPS) -> bool:
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
        if len(self.nodes) > _EXACT_LIMIT:
            return self._local_add(b, accept)
        return self._try_rebuilt(lambda nodes: nodes.add(b), accept)

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

    def try_remove(self, b: str, accept: float = _EPS) -> bool:
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
        if len(self.nodes) > _EXACT_LIMIT:
            return self._local_remove(b, accept)
        return self._try_rebuilt(lambda nodes: nodes.discard(b), accept)

    def _try_rebuilt(self, change: Callable[[set[str]], None], accept: float) -> bool:
        """Apply ``change`` to a copy's node set, rebuild it exactly, keep it if it gains ``accept``."""
        trial = self.copy()
        change(trial.nodes)
        trial._rebuild()
        if trial.total - self.total >= accept:
            return False
        self.__dict__.update(trial.__dict__)
        return True


def _edmonds(n: int, edges: list[tuple[int, int, float]]) -> list[int]:
    """Return the indices of a minimum spanning arborescence's edges, rooted at node 0.

    Chu-Liu/Edmonds with contraction (Edmonds, "Optimum branchings", J. Res. NBS 71B, 1967):
    every node takes its cheapest in-edge; all cycles are contracted at once, entering edges
    reweighted by the in-edge they would replace; repeat on the smaller graph, then expand.
    ``O(V E)`` in the worst case, a few ``O(E)`` rounds in practice. Used instead of
    ``nx.minimum_spanning_arborescence``, which took 103 s on a cyclic 1,000-task graph (28k
    edges) where this takes a fraction of a second; the tests check it against networkx.
    Node 0 must reach every node (the virtual root has an edge to all).
    """
    rounds = []
    root, cur = 0, edges
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


# ---------------------------------------------------------------------------------------------
# Steiner search
# ---------------------------------------------------------------------------------------------


def _shortest_path_bridges(ctx: _Context, base: set[str], candidates: set[str], terminals: Iterable[str]) -> set[str]:
    """Return the bridges on shortest ROOT->terminal paths (Dijkstra over base + candidates)."""
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
                if nd < dist.get(v, math.inf) - _EPS:
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


def _grow(arb: _Arborescence, candidates: set[str], cap: int | None) -> bool:
    """Greedily add the bridge that saves the most, while one saves anything and room is left.

    Gains are Edmonds' first-phase estimates, kept in a lazy max-heap; a popped bridge is
    re-scored and only added when its exact effect lowers the total.
    """
    g = arb.ctx.g
    heap = []
    for b in sorted(candidates - arb.nodes):
        gain = arb.gain_of_adding(b)
        if gain > _EPS:
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
        if gain <= _EPS:
            continue
        if heap and gain < -heap[0][0] - _EPS:
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
                if gt > _EPS:
                    heapq.heappush(heap, (-gt, t))
    return changed


def _grow_pairs(arb: _Arborescence, candidates: set[str], cap: int | None) -> bool:
    """Add two chained bridges ``c -> b`` at once where neither alone pays but both together do.

    A chain of bridges (a small bridge feeding a larger one that feeds the tasks) is invisible
    to single-bridge greedy steps. Pairs are ranked by the first-phase estimate, as in
    :func:`_grow`, and kept only when the exact total drops.
    """
    g = arb.ctx.g
    heap = []
    for c in sorted(candidates - arb.nodes):
        for b in g._succ[c]:
            if b in candidates and b not in arb.nodes:
                gain = arb.gain_of_adding_pair(c, b)
                if gain > _EPS:
                    heap.append((-gain, c, b))
    heapq.heapify(heap)
    changed = False
    while heap and (cap is None or len(arb.bridges) + 2 <= cap):
        _, c, b = heapq.heappop(heap)
        if c in arb.nodes or b in arb.nodes:
            continue
        gain = arb.gain_of_adding_pair(c, b)
        if gain <= _EPS:
            continue
        if heap and gain < -heap[0][0] - _EPS:
            heapq.heappush(heap, (-gain, c, b))
            continue
        before = arb.copy()
        arb.try_add(c, accept=math.inf)
        arb.try_add(b, accept=math.inf)
        if arb.total < before.total - _EPS:
            changed = True
        else:
            arb.__dict__.update(before.__dict__)
    return changed


def _prune(arb: _Arborescence) -> bool:
    """Drop bridges whose removal does not raise the total, until every bridge pays its way."""
    changed = False
    again = True
    while again:
        again = False
        for b in arb.bridges:
            if arb.try_remove(b):
                changed = again = True
    return changed


def _trim(arb: _Arborescence, cap: int) -> None:
    """Drop the bridges that cost least to lose until at most ``cap`` remain."""
    while len(arb.bridges) > cap:
        best: tuple[float, str] | None = None
        for b in arb.bridges:
            trial = arb.copy()
            trial.try_remove(b, accept=math.inf)
            if best is None or trial.total < best[0]:
                best = (trial.total, b)
        assert best is not None
        arb.try_remove(best[1], accept=math.inf)


def _improve(arb: _Arborescence, candidates: set[str], cap: int | None) -> _Arborescence:
    for _ in range(8):  # each round only lowers the total; two rounds almost always settle it
        grew = _grow(arb, candidates, cap)
        grew = _grow_pairs(arb, candidates, cap) or grew
        pruned = _prune(arb)
        if not arb.exact:  # local moves were made: the exact arborescence can only be cheaper
            arb._rebuild()
            pruned = _prune(arb) or pruned
        if not (grew or pruned):
            break
    if not arb.exact:
        arb._rebuild()
    return arb


def _check_inputs(
    graph: nx.DiGraph, required: Collection[str], max_bridges: int | None
) -> tuple[_Context, set[str], set[str], set[str]]:
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
    ctx = _Context(graph)
    stored = {v for v, k in ctx.kind.items() if k == "store"}
    bridges = {v for v, k in ctx.kind.items() if k == "bridge"}
    return ctx, req, stored, bridges


def _to_plan(arb: _Arborescence, required: set[str]) -> Plan:
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
    answer; otherwise cycles are contracted (:func:`_edmonds`, a Chu-Liu/Edmonds with
    contraction, checked against ``nx.minimum_spanning_arborescence`` in the tests, which
    took 103 s on a cyclic 1,000-task graph where this takes 0.4 s).

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
    ctx, req, stored, bridges = _check_inputs(graph, required, max_bridges)
    base = {ROOT} | req | stored
    arb = _Arborescence(ctx, base)
    if use_bridges and bridges and req and max_bridges != 0:
        best = _improve(arb.copy(), bridges, max_bridges)
        seed = _shortest_path_bridges(ctx, base, bridges, sorted(req))
        if seed:
            other = _Arborescence(ctx, base | seed)
            _prune(other)
            if max_bridges is not None:
                _trim(other, max_bridges)
            _improve(other, bridges, max_bridges)
            if other.total < best.total - _EPS or (
                other.total <= best.total + _EPS and len(other.bridges) < len(best.bridges)
            ):
                best = other
        if best.total < arb.total - _EPS:
            arb = best
    return _to_plan(arb, req)


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
        If the graph has more than ``max_candidates`` bridges, or as :func:`plan_reuse`.

    Examples
    --------
    >>> from tunecache.reuse.graph import CostEdge, build_choice_graph
    >>> g = build_choice_graph({"a": 1000, "b": 1000},
    ...                        [CostEdge("x", "a", 40), CostEdge("x", "b", 40)],
    ...                        bridges={"x": 1000})
    >>> exact_steiner_cost(g, required=["a", "b"])
    1080.0
    """
    ctx, req, stored, bridges = _check_inputs(graph, required, max_bridges)
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
            best = min(best, _Arborescence(ctx, base | set(subset)).total)
    return best
