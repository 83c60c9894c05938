"""Progress lines for long work (tuning, warming), written to stderr.

On a terminal one line is redrawn in place after every measured round and every finished task;
otherwise (CI logs, files) a line is printed at the first event and then at most every
``interval_s`` seconds, so logs stay readable. The last line, printed by :meth:`close`, carries
the final count: the number the report's summary and JSON give.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from tunecache.report import format_seconds, plural

__all__ = ["ProgressPrinter"]


class ProgressPrinter:
    """Show tasks done, trials spent out of the plan's budget, elapsed and remaining time.

    The search calls :meth:`start` once its plan is made (how many tasks, the most trials the
    plan may spend, and what each step is expected to spend), the printer itself
    (``printer(event)``) after every measured round with a
    :class:`tunecache.search.full.SearchProgress` whose ``total_trials`` counts the whole plan,
    :meth:`step` after every finished task, and :meth:`close` at the end.

    The line counts trials against the most the plan may spend (its promise: no more), but the
    bar and the time left follow what the plan expects. A plan of many narrowed searches may
    spend a fifth of its most (each may escalate to a full search, few do): a zoo warm of 2,467
    trials out of at most 11,279 said "~61m left" for 17 minutes. With each step's expected
    trials, the time left is the unfinished steps' expected trials (less the trials the step
    in flight has spent) at the time a trial took so far.

    Parameters
    ----------
    label
        The line's prefix, ``[tuning]`` or ``[warm]``.
    time_budget_s
        The wall-clock budget, when one is set (caps the estimate of the time left).
    stream
        Where to write (default stderr).
    interval_s
        Least seconds between two lines when ``stream`` is not a terminal.
    total_tasks, max_trials
        The plan's size, when known before :meth:`start`.
    """

    def __init__(
        self,
        label: str = "tuning",
        time_budget_s: float | None = None,
        stream: TextIO | None = None,
        interval_s: float = 5.0,
        total_tasks: int = 0,
        max_trials: int = 0,
    ) -> None:
        self.label = label
        self.time_budget_s = time_budget_s
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.total_tasks = total_tasks
        self.max_trials = max_trials
        self.expected: dict[str, float] = {}
        self.done_nodes: set[str] = set()
        self.done_trials = 0
        self.start_time = time.time()
        self.trials = 0
        self.tasks_done = 0
        self.current = ""
        self._last_print: float | None = None
        self._last_line = ""
        self._closed = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    # -- events ---------------------------------------------------------------------------

    def start(self, total_tasks: int, max_trials: int, expected: Mapping[str, float] | None = None) -> None:
        """The plan is made: ``total_tasks`` steps, at most ``max_trials`` trials.

        ``expected``: the trials each step (by plan node) is expected to spend; without it the
        bar and the time left follow ``max_trials``.
        """
        self.total_tasks, self.max_trials = total_tasks, max_trials
        self.expected = dict(expected or {})
        self._show()

    def __call__(self, event: Any) -> None:
        """A round was measured (a :class:`tunecache.search.full.SearchProgress`)."""
        self.trials = max(self.trials, int(event.total_trials))
        self.current = str(event.task_name).split("#")[0]  # a plan node: name#hash
        self._show()

    def step(self, outcome: Any) -> None:
        """A plan step finished (a :class:`tunecache.values.TaskOutcome`)."""
        self.tasks_done += 1
        node = getattr(outcome, "node", None)
        if node is not None:
            self.done_nodes.add(node)
        self.done_trials += int(getattr(outcome, "trials", 0))
        self.trials = max(self.trials, self.done_trials)  # no round events from Ray workers
        self.current = f"{outcome.outcome}: {outcome.name}"
        self._show()

    def close(self, trials: int | None = None) -> None:
        """Print the final line (with ``trials``, the final count, when given); idempotent.

        Without ``trials`` (the work failed or was interrupted) a terminal line is only ended,
        and nothing more is written to a log.
        """
        if self._closed:
            return
        self._closed = True
        if trials is not None:
            self.trials = trials
            self.current = ""
            self._write(self.line(self.trials, time.time() - self.start_time))
        if self._tty and self._last_line:
            self.stream.write("\n")
            self.stream.flush()

    # -- output ---------------------------------------------------------------------------

    def _show(self) -> None:
        if self._closed:
            return
        now = time.time()
        if not self._tty and self._last_print is not None and now - self._last_print < self.interval_s:
            return
        self._last_print = now
        self._write(self.line(self.trials, now - self.start_time))

    def _write(self, line: str) -> None:
        if self._tty:
            width = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
            line = line[:width]
            pad = " " * max(0, len(self._last_line) - len(line))
            self.stream.write("\r" + line + pad)
        elif line == self._last_line:
            return
        else:
            self.stream.write(line + "\n")
        self._last_line = line
        self.stream.flush()

    def line(self, trials: int, elapsed: float) -> str:
        """Return the progress line for ``trials`` done after ``elapsed`` seconds.

        Examples
        --------
        >>> p = ProgressPrinter("warm", total_tasks=6, max_trials=34)
        >>> p.line(17, 10.0)
        '[warm] [##########..........] 0/6 tasks, 17/34 trials, 10.0s elapsed, ~10.0s left'
        >>> p.start(6, 34, expected={"a": 8, "b": 2})  # both not done: 10 trials expected
        >>> p.line(5, 10.0)
        '[warm] [##########..........] 0/6 tasks, 5/34 trials, 10.0s elapsed, ~10.0s left'
        """
        total = max(self.max_trials, trials)
        frac = min(1.0, trials / total) if total else 0.0
        if self._closed:
            frac = 1.0
        elif self.expected and trials > 0:
            # The unfinished steps' expected trials, less what the one in flight has spent.
            in_flight = max(0, trials - self.done_trials)
            left = max(0.0, sum(v for n, v in self.expected.items() if n not in self.done_nodes) - in_flight)
            frac = trials / (trials + left)
        remaining = elapsed * (1 - frac) / frac if frac > 0 else math.nan
        if self.time_budget_s is not None:
            left = max(0.0, self.time_budget_s - elapsed)
            remaining = left if math.isnan(remaining) else min(remaining, left)
        rem = "?" if math.isnan(remaining) else format_seconds(remaining)
        bar_w = 20
        filled = int(bar_w * frac)
        line = (
            f"[{self.label}] [{'#' * filled}{'.' * (bar_w - filled)}] "
            f"{self.tasks_done}/{plural(self.total_tasks, 'task')}, {trials}/{plural(total, 'trial')}, "
            f"{format_seconds(elapsed)} elapsed, ~{rem} left"
        )
        return line + (f" ({self.current[:48]})" if self.current else "")
