"""Progress lines for long work (tuning, warming), written to stderr.

On a terminal one line is redrawn in place; otherwise (CI logs, files) a line is printed at most
every ``interval_s`` seconds, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from tunecache.report import format_seconds

__all__ = ["ProgressPrinter"]


class ProgressPrinter:
    """Consume search progress events and show tasks done, trials, elapsed and remaining time.

    Parameters
    ----------
    total_tasks
        Tasks that will be searched.
    max_trials
        The trial budget (for the remaining-time estimate).
    time_budget_s
        The wall-clock budget, when one is set (caps the estimate).
    stream
        Where to write (default stderr).
    """

    def __init__(
        self,
        total_tasks: int,
        max_trials: int,
        time_budget_s: float | None = None,
        stream: TextIO | None = None,
        interval_s: float = 5.0,
        label: str = "tuning",
    ) -> None:
        self.total_tasks = total_tasks
        self.max_trials = max(1, max_trials)
        self.time_budget_s = time_budget_s
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.label = label
        self.start = time.time()
        self._last = 0.0
        self._tasks_seen: dict[str, int] = {}
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, event: Any) -> None:
        """Handle a :class:`tunecache.search.full.SearchProgress` (or similar) event."""
        self._tasks_seen[event.task_name] = event.task_trials
        now = time.time()
        if not self._tty and now - self._last < self.interval_s:
            return
        self._last = now
        line = self.line(event.total_trials, now - self.start)
        self.stream.write(("\r" + line) if self._tty else (line + "\n"))
        self.stream.flush()

    def line(self, trials: int, elapsed: float) -> str:
        """Return the progress line for ``trials`` done after ``elapsed`` seconds."""
        frac = min(1.0, trials / self.max_trials)
        remaining = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        if self.time_budget_s is not None and remaining == remaining:
            remaining = min(remaining, max(0.0, self.time_budget_s - elapsed))
        rem = format_seconds(remaining) if remaining == remaining else "?"
        bar_w = 20
        filled = int(bar_w * frac)
        return (
            f"[{self.label}] [{'#' * filled}{'.' * (bar_w - filled)}] "
            f"{len(self._tasks_seen)}/{self.total_tasks} tasks, "
            f"{trials}/{self.max_trials} trials, {format_seconds(elapsed)} elapsed, ~{rem} left"
        )

    def close(self) -> None:
        """Finish the line on a terminal."""
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()
