"""What happened to every task of a compile or warm: the answer to "did my tuning apply?"."""

from __future__ import annotations

import json
import logging
import textwrap
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tunecache.values import OUTCOMES, Outcome, TaskOutcome

__all__ = [
    "OUTCOMES", "TaskReport", "CompileReport", "WarmReport", "compile_report", "format_latency", "format_seconds",
    "format_table", "plural", "table_with_notes", "TABLE_WIDTH",
]

#: Widest a table printed by tunecache may be (columns).
TABLE_WIDTH = 100
#: Narrowest a word-wrapped column (a note, a description) gets before other columns are shortened.
WRAP_MIN = 32

log = logging.getLogger("tunecache")


def plural(n: float, word: str, words: str | None = None) -> str:
    """Return ``"1 task"``, ``"2 tasks"``.

    Examples
    --------
    >>> plural(1, "task"), plural(0, "trial"), plural(2, "entry", "entries")
    ('1 task', '0 trials', '2 entries')
    """
    return f"{n:g} {word if n == 1 else (words or word + 's')}"


def format_latency(s: float | None) -> str:
    """Return a latency with a unit that keeps three significant digits (``-`` for none).

    Examples
    --------
    >>> format_latency(1.3e-6), format_latency(4.25e-4), format_latency(0.0123), format_latency(2.5)
    ('1.30 us', '425 us', '12.3 ms', '2.50 s')
    """
    if s is None:
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.0f} {unit}" if v >= 100 else f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}"
    return f"{s:g} s"  # pragma: no cover


def format_table(header: list[str], rows: list[list[str]], *, max_width: int = TABLE_WIDTH,
                 wrap: tuple[str, ...] = ()) -> str:
    """Return ``rows`` under ``header`` as left-aligned columns with a rule under the header.

    The table fits in ``max_width`` columns. The columns named in ``wrap`` (default: the last
    one) are word-wrapped onto more lines, down to :data:`WRAP_MIN` characters (words are not
    cut, unless one is longer than the column); then the widest other columns are shortened
    with ``...`` (down to 12 characters); then the wrapped columns get narrower still.

    Examples
    --------
    >>> print(format_table(["a", "note"], [["x", "one two three"]], max_width=12))
    a  note
    -  ---------
    x  one two
       three
    """
    n = len(header)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(n)]
    flex = [i for i in range(n) if header[i] in wrap] or [n - 1]
    rest = [i for i in range(n) if i not in flex]
    excess = sum(widths) + 2 * (n - 1) - max_width

    def shrink(group: list[int], floor_of: Any) -> None:
        nonlocal excess
        while excess > 0 and group:
            i = max(group, key=lambda j: widths[j] - floor_of(j))
            floor = floor_of(i)
            if widths[i] <= floor:
                return
            cut = min(excess, widths[i] - floor)
            widths[i] -= cut
            excess -= cut

    shrink(flex, lambda i: max(len(header[i]), min(WRAP_MIN, widths[i])))
    shrink(rest, lambda i: max(len(header[i]), min(12, widths[i])))
    shrink(flex, lambda i: max(len(header[i]), min(8, widths[i])))

    def cell_lines(i: int, text: str) -> list[str]:
        if len(text) <= widths[i]:
            return [text]
        if i in flex:
            return textwrap.wrap(text, widths[i], break_on_hyphens=False) or [""]
        return [text[: max(1, widths[i] - 3)] + "..."]

    def fmt(r: list[str]) -> list[str]:
        cells = [cell_lines(i, c) for i, c in enumerate(r)]
        height = max(len(c) for c in cells)
        return ["  ".join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
                for k in range(height)]

    lines = fmt(header) + fmt(["-" * w for w in widths])
    for r in rows:
        lines += fmt(r)
    return "\n".join(lines)


def table_with_notes(header: list[str], rows: list[list[str]], note: str = "note", *,
                     max_width: int = TABLE_WIDTH) -> str:
    """:func:`format_table`, with the ``note`` column's long cells as numbered notes below it.

    A note that fits the room the other columns leave stays in its row; a longer one is replaced
    by ``[k]`` and written in full under the table (identical notes share a number), so that a
    long note neither squeezes the table nor is cut.

    Examples
    --------
    >>> print(table_with_notes(["task", "note"], [["a", "ok"], ["b", "x " * 60], ["c", "x " * 60]], max_width=30))
    task  note
    ----  ----
    a     ok
    b     [1]
    c     [1]
    <BLANKLINE>
    [1] x x x x x x x x x x x x x
        x x x x x x x x x x x x x
        x x x x x x x x x x x x x
        x x x x x x x x x x x x x
        x x x x x x x x
    """
    i = header.index(note)
    others = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header)) if j != i]
    room = max(len(note), max_width - sum(others) - 2 * len(others))
    numbers: dict[str, int] = {}
    table = []
    for r in rows:
        text = r[i]
        if len(text) > room:
            text = f"[{numbers.setdefault(text, len(numbers) + 1)}]"
        table.append([*r[:i], text, *r[i + 1:]])
    lines = [format_table(header, table, max_width=max_width, wrap=(note,))]
    if numbers:
        lines.append("")
        for text, k in numbers.items():
            lines.append(textwrap.fill(text, max_width, initial_indent=f"[{k}] ", subsequent_indent="    "))
    return "\n".join(lines)


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
        For ``reused``: the workload whose program was reused; for ``replayed``: the task whose
        program was replayed (no measurement).
    note
        Why: e.g. the miss explanation, or why a task fell back.
    queued
        Queued for ``tunecache worker`` (``tune="background"``): served as reported until a
        later compile or :meth:`~tunecache.api.CompiledModel.refresh` picks up its tuned program.
    record
        The uid of the stored record the task was built with (``None``: a replayed, predicted
        or fallback program, or a bridge).
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
    queued: bool = False
    record: str | None = None

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
    notes: tuple[str, ...] = ()  # what import/preparation changed or left out for this model, and why

    def count(self, outcome: str) -> int:
        """Return how many tasks had ``outcome``."""
        return sum(1 for t in self.tasks if t.outcome == outcome)

    @property
    def trials(self) -> int:
        """Return the total measurements spent."""
        return sum(t.trials for t in self.tasks)

    @property
    def queued(self) -> tuple[str, ...]:
        """Return the names of the tasks queued for ``tunecache worker`` (``tune="background"``)."""
        return tuple(t.name for t in self.tasks if t.queued)

    def summary(self) -> str:
        """Return the one-line summary, e.g. ``22 tasks: 19 hit, 0 reused, 3 tuned (...)``.

        When tasks were searched it says the most the plan could spend (its progress line's total).
        """
        most = self.budget.get("max_trials")
        trials = plural(self.trials, "trial") if most is None else f"{self.trials} of at most {most} trials"
        replayed = "".join(f"{self.count(o)} {o}, " for o in ("replayed", "predicted") if self.count(o))
        queued = f"; {len(self.queued)} queued for tuning" if self.queued else ""
        return (
            f"{plural(len(self.tasks), 'task')}: {self.count('hit')} hit, {replayed}{self.count('reused')} reused, "
            f"{self.count('tuned')} tuned ({trials}, {format_seconds(self.seconds_tuning)}), "
            f"{self.count('fallback')} fallback{queued}"
        )

    def annotate(self, notes: Sequence[str], degraded: Mapping[str, str]) -> CompileReport:
        """Return the report with the model's notes, and each task whose kernel the build
        degraded to TVM's default schedule (``degraded``: name -> why) as a ``fallback``."""
        tasks = tuple(replace(t, outcome="fallback", latency_s=None, note=degraded[t.name])
                      if t.name in degraded else t for t in self.tasks)
        return replace(self, tasks=tasks, notes=tuple(notes))

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
                "queued": list(self.queued),
                "budget": self.budget,
                "tasks": [t.to_dict() for t in self.tasks],
                "notes": list(self.notes),
            },
            indent=2,
        )

    def __str__(self) -> str:
        header = ["task", "family", "w", "outcome", "trials", "time", "latency", "note"]
        rows = []
        for t in self.tasks:
            rows.append([
                t.name,
                t.family,
                str(t.weight),
                t.outcome,
                str(t.trials),
                format_seconds(t.seconds) if t.seconds else "-",
                format_latency(t.latency_s),
                t.note,
            ])
        lines = [table_with_notes(header, rows), "", self.summary()]
        if self.build:
            lines.append(f"library: {self.build} ({format_seconds(self.seconds_build)})")
        lines += [textwrap.fill(n, TABLE_WIDTH, initial_indent="note: ", subsequent_indent="      ",
                                break_on_hyphens=False) for n in self.notes]
        return "\n".join(lines)


def compile_report(tasks: list[Any], lookup: Any, result: Any, best: dict[Any, Any], tune: str, store: Any,
                   hw: Any, replays: dict[Any, Any] | None = None,
                   queued: Collection[Any] = ()) -> CompileReport:
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
    replays
        How the misses of ``tune="never"`` were replayed (:class:`tunecache.replay.Replay` by
        workload key): a replayed miss is reported ``replayed`` with its source.
    queued
        Workload keys queued for ``tunecache worker`` (``tune="background"``).
    """
    replays = replays or {}
    unmeasured = tune in ("never", "background")
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
        elif t.key in replays and replays[t.key].record is not None:
            r = replays[t.key]
            why = ("searched before on this hardware: no candidate built and ran (tune='always' searches "
                   "again)" if t.key in lookup.failed else f"not in store: {store.explain_miss(t.key, hw).reason}")
            rows.append(TaskReport(**common, outcome="predicted" if r.how == "predicted" else "replayed",
                                   source=r.source_name or r.source, note=f"{r.note}; {why}"))
        else:
            if s is not None:
                note = s.note
            elif t.key in lookup.failed and not unmeasured:
                note = ("searched before on this hardware: no candidate built and ran; "
                        "TVM's default schedule (tune='always' searches again)")
            elif unmeasured:
                note = f"not in store (tune={tune!r}): " + store.explain_miss(t.key, hw).reason
                if t.key in replays:
                    note += "; " + replays[t.key].note
            else:
                note = "not searched"
            rows.append(TaskReport(**common, outcome="fallback", trials=s.trials if s else 0,
                                   seconds=s.seconds if s else 0.0, note=note))
    uids = {str(t.key): best[t.key].uid for t in tasks if best.get(t.key) is not None}
    rows = [replace(r, record=uids.get(r.workload)) if r.outcome in ("hit", "reused", "tuned") else r for r in rows]
    if queued:
        waiting = {str(k) for k in queued}
        rows = [replace(r, queued=True, note=r.note + "; queued for tuning") if r.workload in waiting else r
                for r in rows]
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
    max_trials: int = 0  # the most the plan may spend (escalations included): the progress total
    timeline: tuple[tuple[float, int], ...] = field(default=())
    #: Tasks every candidate of which failed to build or run, in this warm or before: not
    #: searched again (a model compiles with a replayed, predicted or default program for them).
    unmeasurable: tuple[str, ...] = ()

    @property
    def trials(self) -> int:
        """Return the trials spent."""
        return sum(o.trials for o in self.outcomes)

    @property
    def not_done(self) -> int:
        """Return how many plan nodes fell back for a reason a new run may not have (interrupted,
        out of time): the ``fallback`` outcomes that are not :attr:`unmeasurable` tasks."""
        return sum(1 for o in self.outcomes if o.outcome == "fallback" and o.name not in self.unmeasurable)

    def count(self, outcome: str) -> int:
        """Return how many plan nodes had ``outcome``."""
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def summary(self) -> str:
        """Return a one-line summary."""
        hits = plural(len(self.hits), "store hit")
        if self.dry_run:
            steps = len(json.loads(self.plan_json)['nodes'])
            return (f"dry run: {plural(steps, 'step')} to search, {hits}; "
                    f"{self.estimated_trials:.0f} trials estimated vs {self.scratch_trials:.0f} from scratch"
                    f"{self._most()}")
        unmeasurable = f", {len(self.unmeasurable)} unmeasurable" if self.unmeasurable else ""
        return (f"{plural(len(self.outcomes), 'step')} ({hits}): {self.count('tuned')} tuned, "
                f"{self.count('reused')} reused, {self.count('hit')} done before, {self.not_done} not done"
                f"{unmeasurable}; {self.trials} of at most {self.max_trials} trials in {format_seconds(self.seconds)}")

    def _most(self) -> str:
        if self.max_trials <= self.estimated_trials:
            return f" (at most {self.max_trials})"
        return f" (at most {self.max_trials} if narrowed searches escalate to full search)"

    def __str__(self) -> str:
        rows = [[o.name, o.outcome + (" (escalated)" if o.escalated else ""), str(o.trials),
                 format_seconds(o.seconds) if o.seconds else "-", format_latency(o.latency_s), o.note]
                for o in self.outcomes]
        header = ["node", "outcome", "trials", "time", "latency", "note"]
        return "\n".join([table_with_notes(header, rows), "", self.summary()])

    def to_json(self) -> str:
        """Return the report as JSON."""
        return json.dumps({
            "summary": self.summary(),
            "trials": self.trials, "seconds": self.seconds, "scratch_trials": self.scratch_trials,
            "estimated_trials": self.estimated_trials, "max_trials": self.max_trials, "hits": list(self.hits),
            "not_done": self.not_done, "unmeasurable": list(self.unmeasurable),
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
        if self.max_trials > self.estimated_trials:
            ax.axhline(self.max_trials, color="tab:red", linestyle=":", label="at most (escalations)")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("trials")
        ax.set_title(f"warm: {self.trials} of at most {self.max_trials} trials "
                     f"({self.estimated_trials:.0f} estimated, {self.scratch_trials:.0f} from scratch)")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        p = Path(path)
        fig.savefig(p, dpi=100)
        plt.close(fig)
        return p
