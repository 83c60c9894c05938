"""The reuse plan value and its cost: which workloads to tune, in what order, and where each
one's program comes from.

A :class:`Plan` is the output of ETO's reuse pair selector (Zhao et al., "Efficient Tensor
Program Optimization via Information Reuse", PVLDB 15(2), 2022, Section 6): a tree rooted at
the virtual root :data:`~tunecache.reuse.graph.ROOT` whose edges say "tune this workload by a
full search" or "reuse that program". Its cost is the sum of its steps' estimated trials
(:attr:`Plan.total_trials`) and the planning objective, trials plus a price for worse programs
(:attr:`Plan.total_cost`). Plans are plain data: they serialise to JSON (:meth:`Plan.to_json`)
and print as a tree (:meth:`Plan.to_text`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tunecache.errors import ConfigError, TunecacheError
from tunecache.reuse.graph import ROOT

__all__ = ["PlanStep", "Plan", "SourceKind", "StepKind"]

SourceKind = Literal["root", "store", "task", "bridge"]
StepKind = Literal["task", "bridge"]

_PLAN_FORMAT = "tunecache.plan"
_PLAN_VERSION = 1
_SOURCE_KINDS = frozenset({"root", "store", "task", "bridge"})
_STEP_KINDS = frozenset({"task", "bridge"})



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
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
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
    def from_json(cls, text: str) -> Plan:
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
