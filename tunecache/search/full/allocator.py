"""The task allocator: which task gets the next round, and when a task stops.

:class:`Allocator` is the body of tunecache's ``PyTaskScheduler.next_task_id`` (the MetaSchedule
wrapper is in :mod:`tunecache.search.full.hooks`): every task gets one round first, heaviest
first; then the task with the largest weighted gradient of latency; tasks stop on the time
budget, the trial caps, an empty round or convergence (:class:`EarlyStopping`), each with its
``STOP_*`` reason. It is pure Python over one :class:`TaskTally` per task, so the tests drive it
with a fake scheduler.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunecache.errors import ConfigError
from tunecache.interrupt import stop_requested

__all__ = [
    "MIN_WINDOW_TRIALS",
    "STOP_CONVERGED",
    "STOP_ENDED",
    "STOP_EXHAUSTED",
    "STOP_GLOBAL_CAP",
    "STOP_INTERRUPTED",
    "STOP_STORED",
    "STOP_TASK_CAP",
    "STOP_TIME",
    "STOP_TRIVIAL",
    "Allocator",
    "EarlyStopping",
    "TaskTally",
]

#: Why a task stopped (:attr:`~tunecache.search.full.results.TaskResult.stop_reason`).
STOP_TRIVIAL = "trivial"  # every distinct program of a fixed design space measured once
STOP_STORED = "stored"  # fixed design space, and the database already had a valid record
STOP_CONVERGED = "converged"  # early stopping: no improvement over the window
STOP_EXHAUSTED = "exhausted"  # the search found no unmeasured candidate
STOP_TASK_CAP = "task trial cap"  # max_trials_per_task reached
STOP_GLOBAL_CAP = "global trial cap"  # max_trials_global reached
STOP_TIME = "time budget"  # time_budget_s spent
STOP_ENDED = "search ended"  # MetaSchedule ended the task itself (or the loop ended)
STOP_INTERRUPTED = "interrupted"  # a stop request (Ctrl-C): no round starts after the one in flight


#: Shortest default early-stopping window. Two rounds of a time-fitted search can be 20
#: trials, and a resnet18 conv whose best had not moved for 20 trials was stopped at 5.0 ms
#: where stock MetaSchedule reached 3.8 ms (bench_tune, 300 s): 3x3 convs still improve at 256
#: trials here, small tasks settle by about 32 (../shared/TVM_NOTES.md).
MIN_WINDOW_TRIALS = 48


@dataclass(frozen=True)
class EarlyStopping:
    """When a task counts as converged and stops (its unused trials go to other tasks).

    Attributes
    ----------
    min_improvement
        Relative improvement of the task's best latency that counts as progress (0.02: 2%).
    window_trials
        Trials over which the improvement is measured; ``None``: two rounds
        (``2 * num_trials_per_iter`` of :func:`search_sizing`), and never fewer than
        :data:`MIN_WINDOW_TRIALS`. A task is converged once it has at least this many trials
        after some earlier round and its best latency is no more than ``min_improvement``
        better than the best at that round.
    """

    min_improvement: float = 0.02
    window_trials: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.min_improvement < 1:
            raise ConfigError(
                f"EarlyStopping.min_improvement must be in [0, 1), got {self.min_improvement!r}"
            )
        if self.window_trials is not None and self.window_trials < 1:
            raise ConfigError(
                f"EarlyStopping.window_trials must be >= 1 or None, got {self.window_trials!r}"
            )


@dataclass
class TaskTally:
    """What one task has had so far in a :func:`~tunecache.search.full.tune_tasks` call.

    Filled by the tracker (a measure callback: :func:`~tunecache.search.full.hooks.tracking_classes`)
    after every joined round and by the trivial pass; read by :class:`Allocator` and turned into
    the task's :class:`~tunecache.search.full.results.TaskResult` at the end. Mutable: one per
    task, updated in place.

    Attributes
    ----------
    trials, valid
        Candidates measured, and of those the ones that built and ran.
    seconds
        Wall seconds of the task's rounds.
    best
        Best median run time so far, or ``None``.
    rounds, empty_rounds, idle_seconds
        Joined rounds, those that measured nothing, and their wall seconds.
    last_round_empty
        Whether the last joined round measured nothing (the search is exhausted).
    history
        ``(trials after the round, best after the round)`` for every joined round.
    stop
        Why the task stopped (a ``STOP_*`` reason), ``None`` while it runs.
    """

    trials: int = 0
    valid: int = 0
    seconds: float = 0.0
    best: float | None = None
    rounds: int = 0
    empty_rounds: int = 0
    idle_seconds: float = 0.0
    last_round_empty: bool = False
    #: (trials after the round, best after the round) for every joined round.
    history: list[tuple[int, float | None]] = field(default_factory=list)
    stop: str | None = None

    def best_at(self, trials: int) -> float | None:
        """The best latency as of the last round that ended at or before ``trials`` trials."""
        best = None
        seen = False
        for n, b in self.history:
            if n > trials:
                break
            best, seen = b, True
        return best if seen else None

    def has_round_at_or_before(self, trials: int) -> bool:
        """Whether some round ended at or before ``trials`` trials (a window can look back)."""
        return bool(self.history) and self.history[0][0] <= trials


class Allocator:
    """tunecache's choice of the next task; the body of the ``PyTaskScheduler``'s ``next_task_id``.

    Pure Python over the tracker's tallies and four calls on MetaSchedule's scheduler object
    (``tasks_``, ``join_running_task``, ``terminate_task`` and each record's ``flop``), so it is
    driven by a fake scheduler in the tests.

    Each call: join every round in flight (the measure callbacks, the tracker included, run
    there), stop the tasks that are done (a stop request, time budget, global or per-task cap,
    converged, exhausted) with their reason, then pick: first every task that has had no round, heaviest
    ``weight * flop`` first; then the largest ``weight * (alpha * backward + (1 - alpha) *
    best / trials)``, where ``backward`` is the best's improvement per trial over the last
    ``grad_window`` trials (Ansor's and MetaSchedule's gradient, per trial). Ties go to the task
    with fewer trials, then the lower index. Returns -1 when no task is left.
    """

    def __init__(
        self,
        tallies: list[TaskTally],
        weights: list[float],
        *,
        max_trials_per_task: Sequence[int],
        max_trials_global: int,
        deadline: float | None,
        early_stopping: EarlyStopping | None,
        window_trials: int,
        grad_window: int,
        alpha: float = 0.2,
        clock: Callable[[], float] = time.perf_counter,
        should_stop: Callable[[], bool] = stop_requested,
    ) -> None:
        self.tallies = tallies
        self.weights = weights
        self.max_trials_per_task = list(max_trials_per_task)
        self.max_trials_global = max_trials_global
        self.deadline = deadline
        self.early_stopping = early_stopping
        self.window_trials = window_trials
        self.grad_window = grad_window
        self.alpha = alpha
        self.clock = clock
        self.should_stop = should_stop

    def converged(self, i: int) -> bool:
        """Whether task ``i``'s best improved by at most ``min_improvement`` over the window."""
        es = self.early_stopping
        tally = self.tallies[i]
        if es is None or tally.best is None:
            return False
        then_trials = tally.trials - self.window_trials
        if not tally.has_round_at_or_before(then_trials):
            return False
        then = tally.best_at(then_trials)
        if then is None:
            return False
        return then - tally.best <= es.min_improvement * then

    def _why_stop(self, i: int, total: int) -> str | None:
        tally = self.tallies[i]
        if self.should_stop():
            return STOP_INTERRUPTED
        if self.deadline is not None and self.clock() >= self.deadline:
            return STOP_TIME
        if total >= self.max_trials_global:
            return STOP_GLOBAL_CAP
        if tally.trials >= self.max_trials_per_task[i]:
            return STOP_TASK_CAP
        if tally.last_round_empty:
            return STOP_EXHAUSTED
        if self.converged(i):
            return STOP_CONVERGED
        return None

    def score(self, i: int) -> float:
        """Task ``i``'s weighted gradient: the weighted latency its next trial may win."""
        tally = self.tallies[i]
        if tally.best is None or tally.trials == 0:
            return -math.inf  # nothing ran yet: picked only when no task has a valid best
        back = 0.0
        then_trials = tally.trials - self.grad_window
        if tally.has_round_at_or_before(then_trials):
            then = tally.best_at(then_trials)
            if then is not None:
                back = (then - tally.best) / self.grad_window
        forward = tally.best / tally.trials
        return self.weights[i] * (self.alpha * back + (1 - self.alpha) * forward)

    def next_task(self, scheduler: Any) -> int:
        """Join the rounds in flight, stop finished tasks, and pick the next task.

        Parameters
        ----------
        scheduler
            MetaSchedule's task scheduler (its ``tasks_``, ``join_running_task`` and
            ``terminate_task``), or a fake with the same three members.

        Returns
        -------
        int
            The index of the task to search next, or -1 when every task has stopped.
        """
        records = list(scheduler.tasks_)
        for i, record in enumerate(records):
            if not record.is_terminated and record.runner_futures is not None:
                scheduler.join_running_task(i)
        records = list(scheduler.tasks_)
        total = sum(t.trials for t in self.tallies)
        alive = []
        for i, record in enumerate(records):
            if record.is_terminated:
                continue
            why = self._why_stop(i, total)
            if why is None:
                alive.append(i)
            else:
                self.tallies[i].stop = why
                scheduler.terminate_task(i)
        if not alive:
            return -1
        fresh = [i for i in alive if self.tallies[i].rounds == 0]
        if fresh:
            return max(fresh, key=lambda i: (self.weights[i] * float(records[i].flop), -i))
        return max(alive, key=lambda i: (self.score(i), -self.tallies[i].trials, -i))

