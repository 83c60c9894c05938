"""What happened to every task of a compile or warm: the answer to "did my tuning apply?"."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["OUTCOMES", "TaskReport", "CompileReport", "format_seconds"]

#: hit: served from the store; reused: narrowed search from a similar workload; tuned: full
#: search; fallback: compiled with TVM's default schedule (no record).
OUTCOMES = ("hit", "reused", "tuned", "fallback")


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
    outcome: str
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
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        lines = [fmt(header), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows), "", self.summary()]
        if self.build:
            lines.append(f"library: {self.build} ({format_seconds(self.seconds_build)})")
        return "\n".join(lines)
