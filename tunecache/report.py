"""What happened to every task of a compile or warm: the answer to "did my tuning apply?"."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tunecache.values import OUTCOMES, Outcome, TaskOutcome

__all__ = [
    "OUTCOMES", "TaskReport", "CompileReport", "WarmReport", "compile_report", "format_seconds", "format_table",
]

log = logging.getLogger("tunecache")


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Return ``rows`` under ``header`` as left-aligned columns with a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)])


def format_seconds(s: float) -> str:
    """Return ``12m03s`` / ``4.2s`` style durations."""
    if s >= 60:
        m, sec = divmod(int(round(s)), 60)
        return f"{m}m{sec:02d}s"
    return f"{s:.1f}s"


@dataclass(frozen=True)
class TaskReport:
    """The outcome of one task.

    Attributes
    ----------
    name
        Task name (e.g. ``fused_conv2d_add_relu``).
    workload
        ``str(WorkloadKey)``.
    family, shapes
        Operator family and buffer shapes.
    weight
        How often the task occurs in the model.
    outcome
        One of :data:`OUTCOMES`.
    trials
        Measurements spent on this task in this run (0 for hits and fallbacks).
    seconds
        Wall time spent searching for this task in this run.
    latency_s
        Latency of the program used (store's ranking latency), ``None`` for fallbacks.
    source
        For ``reused``: the workload whose program was reused.
    note
        Why: e.g. the miss explanation, or why a task fell back.
    """

    name: str
    workload: str
    family: str
    shapes: tuple[tuple[int, ...], ...]
    weight: int
    outcome: Outcome
    trials: int = 0
    seconds: float = 0.0
    latency_s: float | None = None
    source: str | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        d = asdict(self)
        d["shapes"] = [list(s) for s in self.shapes]
        return d


@dataclass(frozen=True)
class CompileReport:
    """Per-task outcomes plus totals; ``print(report)`` shows a table."""

    tasks: tuple[TaskReport, ...]
    target: str = ""
    hardware: str = ""
    seconds_total: float = 0.0
    seconds_tuning: float = 0.0
    budget: dict[str, Any] = field(default_factory=dict)
    build: str = ""  # how the library was made: "built", "built, cached" or "loaded from the library cache"
    seconds_build: float = 0.0

    def count(self, outcome: str) -> int:
        """Return how many tasks had ``outcome``."""
        return sum(1 for t in self.tasks if t.outcome == outcome)

    @property
    def trials(self) -> int:
        """Return the total measurements spent."""
        return sum(t.trials for t in self.tasks)

    def summary(self) -> str:
        """Return the one-line summary, e.g. ``22 tasks: 19 hit, 0 reused, 3 tuned (...)``."""
        return (
            f"{len(self.tasks)} tasks: {self.count('hit')} hit, {self.count('reused')} reused, "
            f"{self.count('tuned')} tuned ({self.trials} trials, {format_seconds(self.seconds_tuning)}), "
            f"{self.count('fallback')} fallback"
        )

    def finish(self, target: Any, hw: Any, t0: float, tuning_s: float, budget: dict[str, Any], build: str,
               t_build: float) -> CompileReport:
        """Return the report with the compile's context and timings added; log its summary."""
        report = replace(self, target=str(target), hardware=hw.describe(), seconds_total=time.time() - t0,
                         seconds_tuning=tuning_s, budget=budget, build=build, seconds_build=time.time() - t_build)
        log.info(report.summary())
        return report

    def to_json(self) -> str:
        """Return the report as JSON text."""
        return json.dumps(
            {
                "summary": self.summary(),
                "target": self.target,
                "hardware": self.hardware,
                "seconds_total": self.seconds_total,
                "seconds_tuning": self.seconds_tuning,
                "build": self.build,
                "seconds_build": self.seconds_build,
                "trials": self.trials,
                "counts": {o: self.count(o) for o in OUTCOMES},
                "budget": self.budget,
                "tasks": [t.to_dict() for t in self.tasks],
            },
            indent=2,
        )

    def __str__(self) -> str:
        header = ["task", "family", "w", "outcome", "trials", "time", "latency_ms", "source / note"]
        rows = []
        for t in self.tasks:
            rows.append([
                t.name[:60],
                t.family,
                str(t.weight),
                t.outcome,
                str(t.trials),
                format_seconds(t.seconds) if t.seconds else "-",
                f"{t.latency_s * 1e3:.4f}" if t.latency_s is not None else "-",
                (f"{t.note} [{t.source}]" if t.source else t.note)[:90],
            ])
        lines = [format_table(header, rows), "", self.summary()]
        if self.build:
            lines.append(f"library: {self.build} ({format_seconds(self.seconds_build)})")
        return "\n".join(lines)


def compile_report(tasks: list[Any], lookup: Any, result: Any, best: dict[Any, Any], tune: str, store: Any,
                   hw: Any) -> CompileReport:
    """Report every task of a compile, and every bridge its plan tuned.

    Parameters
    ----------
    tasks
        The model's tasks (``key``, ``name``, ``weight``, ``desc``).
    lookup
        The ladder's store lookup before searching (:class:`tunecache.pipeline.Lookup`).
    result
        The search of the misses (:class:`tunecache.pipeline.SearchResult`), or ``None``.
    best
        Each task's best stored record now (what the library was built from).
    tune
        The compile's tuning mode.
    store, hw
        Where a miss of ``tune="never"`` is explained from.
    """
    rows = []
    for t in tasks:
        rec = best.get(t.key)
        latency = rec.latency_s if rec is not None else None
        common: dict[str, Any] = dict(name=t.name, workload=str(t.key), family=t.desc.family, shapes=t.desc.shapes,
                                      weight=int(t.weight))
        s = result.for_task(t.key) if result is not None else None
        before = lookup.best.get(t.key)
        if s is not None and s.outcome != "fallback":  # "hit": another warmer finished it meanwhile
            outcome: Outcome = "tuned" if s.outcome == "hit" else s.outcome
            rows.append(TaskReport(**common, outcome=outcome, trials=s.trials, seconds=s.seconds,
                                   latency_s=latency, source=s.source, note=s.note))
        elif before is not None and tune != "always":
            how = before.provenance.kind + (f" from {before.provenance.source_workload}"
                                            if before.provenance.source_workload else "")
            rows.append(TaskReport(**common, outcome="hit", latency_s=latency, note=f"stored record ({how})"))
        elif rec is not None:
            rows.append(TaskReport(**common, outcome="hit", trials=s.trials if s else 0,
                                   seconds=s.seconds if s else 0.0,
                                   latency_s=latency, note="re-tune found nothing better; stored record used"))
        else:
            if s is not None:
                note = s.note
            elif t.key in lookup.failed and tune != "never":
                note = ("searched before on this hardware: no candidate built and ran; "
                        "TVM's default schedule (tune='always' searches again)")
            elif tune == "never":
                note = "not in store (tune='never'): " + store.explain_miss(t.key, hw).reason
            else:
                note = "not searched"
            rows.append(TaskReport(**common, outcome="fallback", trials=s.trials if s else 0,
                                   seconds=s.seconds if s else 0.0, note=note))
    if result is not None:
        for node, nest in result.plan.bridges.items():  # operators tuned so that tasks could reuse them
            if node in result.outcomes:
                o = result.outcomes[node]
                rows.append(TaskReport(name=f"[bridge] {node}", workload=str(o.key), family=nest.family, shapes=(),
                                       weight=0, outcome=o.outcome, trials=o.trials, seconds=o.seconds,
                                       latency_s=o.latency_s,
                                       note=f"bridge {list(nest.extents)}: {o.note}"))
    return CompileReport(tasks=tuple(rows))


@dataclass(frozen=True)
class WarmReport:
    """The outcome of a warm: per plan node, plus the plan and totals."""

    outcomes: tuple[TaskOutcome, ...]
    plan_text: str
    plan_json: str
    hits: tuple[str, ...]
    seconds: float
    scratch_trials: float
    estimated_trials: float
    dry_run: bool = False
    timeline: tuple[tuple[float, int], ...] = field(default=())

    @property
    def trials(self) -> int:
        """Return the trials spent."""
        return sum(o.trials for o in self.outcomes)

    def count(self, outcome: str) -> int:
        """Return how many plan nodes had ``outcome``."""
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def summary(self) -> str:
        """Return a one-line summary."""
        if self.dry_run:
            steps = len(json.loads(self.plan_json)['nodes'])
            return (f"dry run: {steps} steps to search, {len(self.hits)} store hits; "
                    f"{self.estimated_trials:.0f} trials estimated vs {self.scratch_trials:.0f} from scratch")
        return (f"{len(self.outcomes)} steps: {self.count('tuned')} tuned, {self.count('reused')} reused, "
                f"{self.count('hit')} already done, {self.count('fallback')} not done; {len(self.hits)} store hits; "
                f"{self.trials} trials in {format_seconds(self.seconds)} "
                f"(from scratch: {self.scratch_trials:.0f} trials)")

    def __str__(self) -> str:
        rows = [[o.name[:56], o.outcome + (" (escalated)" if o.escalated else ""), str(o.trials),
                 format_seconds(o.seconds) if o.seconds else "-",
                 f"{o.latency_s * 1e3:.4f}" if o.latency_s else "-", o.note[:60]] for o in self.outcomes]
        header = ["node", "outcome", "trials", "time", "latency_ms", "note"]
        return "\n".join([format_table(header, rows), "", self.summary()])

    def to_json(self) -> str:
        """Return the report as JSON."""
        return json.dumps({
            "summary": self.summary(),
            "trials": self.trials, "seconds": self.seconds, "scratch_trials": self.scratch_trials,
            "estimated_trials": self.estimated_trials, "hits": list(self.hits),
            "steps": [{"node": o.node, "name": o.name, "workload": str(o.key), "outcome": o.outcome, "trials": o.trials,
                       "seconds": o.seconds, "source": o.source, "escalated": o.escalated, "latency_s": o.latency_s,
                       "note": o.note} for o in self.outcomes],
            "plan": json.loads(self.plan_json),
        }, indent=2)

    def plot(self, path: str | Path) -> Path | None:
        """Write a PNG of trials spent over time against tuning every task from scratch."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = [0.0] + [t for t, _ in self.timeline]
        ys = [0] + [n for _, n in self.timeline]
        ax.step(xs, ys, where="post", label="tunecache (plan + reuse)")
        ax.axhline(self.scratch_trials, color="gray", linestyle="--", label="every task from scratch")
        ax.axhline(self.estimated_trials, color="tab:orange", linestyle=":", label="plan estimate")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("trials")
        ax.set_title(f"warm: {self.trials} trials vs {self.scratch_trials:.0f} from scratch")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        p = Path(path)
        fig.savefig(p, dpi=100)
        plt.close(fig)
        return p
