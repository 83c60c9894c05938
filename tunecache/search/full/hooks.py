"""MetaSchedule hooks of the engine: timed builder and runner, callbacks, task picker, capped strategy.

MetaSchedule runs the loop (search, building, running, measure callbacks); tunecache plugs into
it through its ``Py*`` extension classes, defined here once TVM is loaded
(:func:`tracking_classes`, :func:`capped_strategy`). A :class:`Timeline` attributes the loop's
wall time to the rounds of each task.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tunecache.search.full.allocator import STOP_TIME, Allocator, TaskTally
from tunecache.search.full.results import FAILED_RUN_SECS, SearchProgress, median_secs
from tunecache.tvm_layer import load_tvm

__all__ = ["Timeline", "TrialPool", "capped_strategy", "tracking_classes"]


class TrialPool:
    """The candidates a :func:`~tunecache.search.full.tune_tasks` call may still measure, shared
    by every task's search strategy (:func:`capped_strategy`).

    MetaSchedule's task loop checks its global cap before a round and then measures the whole
    round, so the last round overshot the cap by up to a round (a budget of 48 trials spent 50).
    Taking each round's candidates from one pool cuts the last round to what is left.

    Attributes
    ----------
    left
        Candidates that may still be handed out.
    """

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self, wanted: int) -> int:
        """Hand out up to ``wanted`` candidates; return how many (0 when the pool is empty)."""
        n = max(0, min(wanted, self.left))
        self.left -= n
        return n


class Timeline:
    """Attributes wall time to scheduler rounds from builder, runner and callback timestamps.

    MetaSchedule's scheduler builds and runs rounds in the order it later joins them (with a
    runner whose futures are ready on return, as ``LocalRunner``'s are), so rounds are matched
    to tasks first-in first-out. A round's time: the search before its build (since the last
    build/run/callback event), its build, its run, and the callbacks that process its results.
    """

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.last_event = self.start
        self.rounds: deque[float] = deque()  # seconds so far of rounds not yet joined
        self.callback_start = self.start

    def mark(self) -> float:
        """Seconds since the last event; now is the last event."""
        now = time.perf_counter()
        spent = now - self.last_event
        self.last_event = now
        return spent

    def round_started(self) -> None:
        """A round's build begins (the builder): what came before it is its search."""
        self.rounds.append(self.mark())  # the search that produced this round

    def round_stage_done(self) -> None:
        """The build or run of the newest round ended: add its time to that round."""
        spent = self.mark()
        if self.rounds:
            self.rounds[-1] += spent

    def callbacks_started(self) -> None:
        """The measure callbacks of a joined round begin (the first callback)."""
        self.callback_start = time.perf_counter()

    def round_joined(self) -> float:
        """The oldest round in flight is joined (the tracker): return its seconds in all."""
        now = time.perf_counter()
        spent = (self.rounds.popleft() if self.rounds else 0.0) + (now - self.callback_start)
        self.last_event = now
        return spent

    def restart(self) -> None:
        """Start attributing time to rounds from now (set-up before the loop is not a round's)."""
        self.last_event = time.perf_counter()
        self.callback_start = self.last_event


def tracking_classes() -> tuple[Any, Any, Any, Any, Any]:
    """Define the MetaSchedule wrappers that feed a :class:`Timeline` and pick tasks (needs TVM).

    The classes derive from TVM's ``Py*`` extension classes, so they are defined only once TVM
    is loaded, at the first call.

    Returns
    -------
    tuple
        ``(TimedBuilder, TimedRunner, CallbacksStart, Tracker, EngineScheduler)``:
        ``TimedBuilder(inner, timeline)`` and ``TimedRunner(inner, timeline)`` wrap a builder and
        a runner and mark each round's stages on the timeline; ``CallbacksStart(timeline)`` is
        the first measure callback; ``Tracker(names, tallies, timeline, max_trials,
        time_budget_s, progress, stop_after_budget)`` is the last, and fills the
        :class:`~tunecache.search.full.allocator.TaskTally` of each task;
        ``EngineScheduler(allocator)`` is MetaSchedule's task loop with an
        :class:`~tunecache.search.full.allocator.Allocator` picking the tasks.
    """
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class _TimedBuilder(PyBuilder):
        def __init__(self, inner: Any, timeline: Timeline) -> None:
            super().__init__()
            self.inner = inner
            self.timeline = timeline

        def build(self, build_inputs: Any) -> Any:
            self.timeline.round_started()
            try:
                return self.inner.build(build_inputs) if len(build_inputs) else []
            finally:
                self.timeline.round_stage_done()

    @derived_object
    class _TimedRunner(PyRunner):
        def __init__(self, inner: Any, timeline: Timeline) -> None:
            super().__init__()
            self.inner = inner
            self.timeline = timeline

        def run(self, runner_inputs: Any) -> Any:
            try:
                return self.inner.run(runner_inputs) if len(runner_inputs) else []
            finally:
                self.timeline.round_stage_done()

    @derived_object
    class _CallbacksStart(PyMeasureCallback):
        def __init__(self, timeline: Timeline) -> None:
            super().__init__()
            self.timeline = timeline

        def apply(self, task_scheduler: Any, task_id: int, *_: Any) -> None:
            self.timeline.callbacks_started()

    @derived_object
    class _Tracker(PyMeasureCallback):
        """Counts trials per task, keeps each task's history and reports progress.

        With ``stop_after_budget`` (MetaSchedule's own scheduler) it also enforces the time
        budget after each joined round; tunecache's scheduler checks it before each round.
        """

        def __init__(
            self,
            names: list[str],
            tallies: list[TaskTally],
            timeline: Timeline,
            max_trials: int,
            time_budget_s: float | None,
            progress: Callable[[SearchProgress], None] | None,
            stop_after_budget: bool,
        ) -> None:
            super().__init__()
            self.names = names
            self.tallies = tallies
            self.timeline = timeline
            self.max_trials = max_trials
            self.time_budget_s = time_budget_s
            self.progress = progress
            self.stop_after_budget = stop_after_budget
            self.budget_hit = False

        @property
        def total_trials(self) -> int:
            return sum(t.trials for t in self.tallies)

        def apply(
            self,
            task_scheduler: Any,
            task_id: int,
            measure_candidates: Any,
            builder_results: Any,
            runner_results: Any,
        ) -> None:
            tally = self.tallies[task_id]
            for result in runner_results:
                tally.trials += 1
                if result.error_msg is None and result.run_secs is not None:
                    secs = median_secs(result.run_secs)
                    if secs < FAILED_RUN_SECS:
                        tally.valid += 1
                        tally.best = secs if tally.best is None else min(tally.best, secs)
            spent = self.timeline.round_joined()
            tally.seconds += spent
            tally.rounds += 1
            tally.last_round_empty = len(runner_results) == 0
            if tally.last_round_empty:
                tally.empty_rounds += 1
                tally.idle_seconds += spent
            tally.history.append((tally.trials, tally.best))
            elapsed = self.timeline.last_event - self.timeline.start
            if (
                self.stop_after_budget
                and self.time_budget_s is not None
                and elapsed > self.time_budget_s
            ):
                self.budget_hit = True
                _stop_idle_tasks(task_scheduler, task_id, self.tallies)
            if self.progress is not None and not tally.last_round_empty:
                self.progress(
                    SearchProgress(
                        task_name=self.names[task_id],
                        task_trials=tally.trials,
                        total_trials=self.total_trials,
                        max_trials=self.max_trials,
                        elapsed_s=elapsed,
                        best_latency_s=tally.best,
                    )
                )

    @derived_object
    class _EngineScheduler(PyTaskScheduler):
        """MetaSchedule's task loop with tunecache's :class:`Allocator` as ``next_task_id``."""

        def __init__(self, allocator: Allocator) -> None:
            super().__init__()
            self.allocator = allocator

        def next_task_id(self) -> int:
            return self.allocator.next_task(self._outer())

    return _TimedBuilder, _TimedRunner, _CallbacksStart, _Tracker, _EngineScheduler


def capped_strategy(inner: Any, max_trials: int | None, pool: TrialPool | None = None) -> Any:
    """``inner`` (a MetaSchedule search strategy) with its own cap on candidates.

    MetaSchedule hands every task the same ``max_trials_per_task`` in ``pre_tuning``; the
    strategy then cuts its last round to fit. Passing the smaller of the two here gives one task
    a cap of its own with the same exact cut. With a ``pool``, every round's candidates are also
    taken from it: a round is cut to what the pool has left, and the task ends when it is empty.

    Parameters
    ----------
    inner
        A MetaSchedule search strategy (e.g. ``EvolutionarySearch``), not yet initialized.
    max_trials
        Most candidates this task may get (``None``: MetaSchedule's cap alone).
    pool
        The call's shared :class:`TrialPool`, or ``None``.

    Returns
    -------
    PySearchStrategy
        A strategy that forwards every call to ``inner``, with ``pre_tuning``'s
        ``max_trials`` at most ``max_trials`` and rounds cut to the pool.
    """
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class _Capped(PySearchStrategy):
        def __init__(self, inner: Any, max_trials: int | None, pool: TrialPool | None) -> None:
            super().__init__()
            self.inner = inner
            self.max_trials = max_trials
            self.pool = pool

        def _initialize_with_tune_context(self, context: Any) -> None:
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any,
                       database: Any = None, cost_model: Any = None) -> None:
            cap = max_trials if self.max_trials is None else min(max_trials, self.max_trials)
            self.inner.pre_tuning(cap, num_trials_per_iter, design_spaces, database, cost_model)

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self) -> Any:
            candidates = self.inner.generate_measure_candidates()
            if candidates is None or self.pool is None or len(candidates) == 0:
                return candidates
            n = self.pool.take(len(candidates))
            if n == 0:
                return None  # the call's budget is spent: MetaSchedule ends the task
            return candidates if n == len(candidates) else list(candidates)[:n]

        def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self) -> Any:
            return _Capped(self.inner.clone(), self.max_trials, self.pool)

    return _Capped(inner, max_trials, pool)


def _stop_idle_tasks(task_scheduler: Any, current: int, tallies: list[TaskTally]) -> None:
    """Terminate the task being joined and every live task with no round in flight.

    A task whose round is in flight (``measure_candidates`` set) is left alone: terminating it
    would drop its measured results; it is terminated when its round is joined.
    """
    for i, record in enumerate(task_scheduler.tasks_):
        if record.is_terminated:
            continue
        if i == current or record.measure_candidates is None:
            tallies[i].stop = STOP_TIME
            task_scheduler.terminate_task(i)
