"""Full search: MetaSchedule's evolutionary search over a list of tasks, sized to the budget.

This is the last rung of the ladder (store hit -> reuse -> narrowed search -> **full search**).
:func:`tune_tasks` runs MetaSchedule's task loop (``TaskScheduler.tune``: XGBoost cost model,
evolutionary search per task) with tunecache's warm builder and steady runner
(:mod:`tunecache.tvm_layer.measure`), commits every measured record to the ``Database`` it is given,
and returns one frozen :class:`TaskResult` per task. Progress is reported as frozen
:class:`SearchProgress` events.

What tunecache's engine changes in that loop (``scheduler="tunecache"``, the default), so that
every second of the budget buys a useful measurement:

1. **Trivial tasks once.** Before the loop, each task's design space is generated. A task whose
   space has no sampling instruction (elementwise ops, reshapes, transposes: one or a few fixed
   programs) has each distinct program built and measured once, committed, and is never handed
   to the evolutionary search. Stock MetaSchedule measures its one program in the first round,
   then re-picks it for empty rounds (a full evolutionary search each) until the search gives up
   after five; on ResNet-18 that was 60% of the wall time (``shared/TVM_NOTES.md``).
2. **Our task picker.** The loop's ``next_task_id`` is tunecache's (a ``PyTaskScheduler``; the
   loop itself, search, building, running and callbacks are MetaSchedule's). It joins each round
   as soon as it was measured, so the cost model learns from every round before the next search;
   gives every task one round first, heaviest (weight x FLOPs) first; then picks the task with
   the largest weighted gradient of latency (Ansor's objective, sum of weight x latency: backward
   improvement over a window plus the optimistic ``best / trials``, as MetaSchedule's
   ``GradientBased`` does, but per trial rather than per round).
3. **Converged tasks stop.** A task whose best improved by at most
   :attr:`EarlyStopping.min_improvement` over the last :attr:`EarlyStopping.window_trials`
   trials is terminated, and so is one whose search came back empty. With early stopping on, a
   task may go beyond ``trials_per_task`` (up to ``max_trials_per_task``, by default the global
   budget): the trials a converged task leaves go to the tasks with the largest weighted
   gradient. ``max_trials_global`` stays the cap on the sum.
4. **The time budget is checked before every round** (and covers the trivial tasks and set-up):
   once spent, no round starts; the round in flight finishes and is committed.
5. **Rounds cost what they measure.** A time budget cuts rounds to a few candidates
   (:func:`fit_to_time_budget`), so that every task is measured; the evolutionary search that
   generates them is cut too (:func:`compact_search`): it costs about the same for 4 candidates
   as for 32, and at its full size it took most of a short budget.

``scheduler="gradient"`` runs MetaSchedule's own ``GradientBased`` scheduler (round-robin first
pass, then gradient picks, the budget checked after each joined round) -- the stock behaviour,
kept for comparison (``tools/bench_tune.py``).

Search sizing (:func:`search_sizing`) lives here too: MetaSchedule's defaults
(population 512, 50 unmeasured seeds, 4 genetic iterations, 64 trials per round) are sized for
thousands of trials; with tens to a few hundred trials per task most of that search is wasted
on a 2-core machine (see ``shared/TVM_NOTES.md``).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tunecache.errors import ConfigError, TuningError
from tunecache.tvm_layer.measure import make_builder, make_runner
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.mslog import ms_loggers

__all__ = [
    "EarlyStopping",
    "FullSearchTask",
    "SearchProgress",
    "SearchSizing",
    "TaskResult",
    "compact_search",
    "fit_to_time_budget",
    "fixed_programs",
    "search_sizing",
    "tune_tasks",
]

#: Run seconds MetaSchedule's ``AddToDatabase`` stores for a candidate that failed.
FAILED_RUN_SECS = 1e10
#: Task schedulers :func:`tune_tasks` can run.
SCHEDULERS = ("tunecache", "gradient")


@dataclass(frozen=True)
class FullSearchTask:
    """One tuning task: a TIR module and how much it matters.

    Attributes
    ----------
    name
        Unique task name (used in logs, progress events and results).
    mod
        A ``tvm.ir.IRModule`` holding the one ``PrimFunc`` to tune, or the ``PrimFunc`` itself
        (for a task extracted from a Relax model this is ``ExtractedTask.dispatched[0]``).
    weight
        How many times the model calls this task; the gradient scheduler spends more trials on
        tasks whose weighted latency is larger. Must be positive.
    max_trials
        Most candidates this task may get in this search, below the search's own per-task cap
        (``None``: that cap alone). A resumed task gets what is left of its budget, so it is
        never tuned past it; a round is cut to fit.
    """

    name: str
    mod: Any
    weight: float = 1.0
    max_trials: int | None = None

    @classmethod
    def from_extracted(cls, task: Any) -> FullSearchTask:
        """Convert a MetaSchedule ``ExtractedTask`` (from ``relax_integration.extract_tasks``)."""
        return cls(name=str(task.task_name), mod=task.dispatched[0], weight=float(task.weight))


@dataclass(frozen=True)
class SearchSizing:
    """Evolutionary-search settings for one task and the batch size per scheduler round.

    Attributes mirror ``ms.search_strategy.EvolutionarySearch`` arguments, plus
    ``num_trials_per_iter`` (candidates built and measured per round).
    """

    population_size: int
    init_min_unmeasured: int
    genetic_num_iters: int
    num_trials_per_iter: int
    init_measured_ratio: float = 0.2
    max_fail_count: int = 5
    genetic_mutate_prob: float = 0.85
    genetic_max_fail_count: int = 10
    eps_greedy: float = 0.05


def search_sizing(trials_per_task: int) -> SearchSizing:
    """Choose evolutionary-search settings for a per-task trial budget.

    The rule: at most 64 trials per round and at least two rounds per task (so the cost model is
    trained on measurements at least once before the last round), never fewer than 8 trials per
    round; a small population for budgets up to 128 trials (population 64, 16 unmeasured seeds,
    2 genetic iterations: measured here to cost a fraction of MetaSchedule's defaults per trial
    with no loss at these budgets), a middle size up to 512, MetaSchedule's defaults above.

    Parameters
    ----------
    trials_per_task
        Measured candidates the task may get (>= 1).

    Returns
    -------
    SearchSizing

    Raises
    ------
    ConfigError
        If ``trials_per_task`` is less than 1.

    Examples
    --------
    >>> search_sizing(64).num_trials_per_iter
    32
    >>> search_sizing(64).population_size
    64
    """
    if trials_per_task < 1:
        raise ConfigError(f"trials_per_task must be >= 1, got {trials_per_task!r}")
    per_iter = min(64, max(8, math.ceil(trials_per_task / 2)))
    per_iter = min(per_iter, trials_per_task)
    if trials_per_task <= 128:
        return SearchSizing(64, 16, 2, per_iter)
    if trials_per_task <= 512:
        return SearchSizing(256, 32, 3, per_iter)
    return SearchSizing(512, 50, 4, per_iter)


#: Rough cost of one measured trial and of one round's candidate generation on a small CPU
#: (TVM_NOTES: 0.3-1.5 s a trial here), used only to fit a time budget's first pass.
FIRST_PASS_SECONDS_PER_TRIAL = 0.5
FIRST_PASS_SECONDS_PER_ROUND = 1.5
#: Share of a time budget the first pass (one round of every task) may take.
FIRST_PASS_SHARE = 0.5


def fit_to_time_budget(sizing: SearchSizing, n_tasks: int, time_budget_s: float | None) -> SearchSizing:
    """Shrink the round size so that one round of every task fits in part of a time budget.

    Every task's first round comes before any second round (the scheduler picks fresh tasks
    first), but a round of ``num_trials_per_iter`` candidates for each of many tasks can outlast
    a short budget, and a task never measured falls back to TVM's default schedule (often 10-50x
    slower). So the round size is cut until ``n_tasks`` rounds are estimated to take at most
    :data:`FIRST_PASS_SHARE` of the budget (never below one candidate).

    Examples
    --------
    >>> fit_to_time_budget(search_sizing(64), 22, 240.0).num_trials_per_iter
    7
    >>> fit_to_time_budget(search_sizing(64), 2, 240.0).num_trials_per_iter
    32
    """
    if time_budget_s is None or n_tasks < 1:
        return sizing
    allowed = FIRST_PASS_SHARE * time_budget_s / n_tasks - FIRST_PASS_SECONDS_PER_ROUND
    per_iter = max(1, min(sizing.num_trials_per_iter, int(allowed // FIRST_PASS_SECONDS_PER_TRIAL)))
    return replace(sizing, num_trials_per_iter=per_iter)


#: The evolutionary search of a round cut to fit a time budget, in tunecache's engine: a
#: population of 32 evolved once. One search costs about the same whatever the round's size
#: (a resnet18 conv here: 2.4 s at population 64 with 2 genetic iterations, 0.75 s at 32 with
#: one), so with rounds of a few candidates the default spent most of a budget generating them.
COMPACT_POPULATION = 32
COMPACT_INIT_MIN_UNMEASURED = 8
COMPACT_GENETIC_ITERS = 1
#: Rounds of fewer candidates than this get the compact search.
COMPACT_BELOW_TRIALS_PER_ITER = 8


def compact_search(sizing: SearchSizing) -> SearchSizing:
    """The search of ``sizing`` made as cheap as its rounds are small.

    Parameters
    ----------
    sizing
        Settings whose round size may have been cut (:func:`fit_to_time_budget`).

    Returns
    -------
    SearchSizing
        ``sizing`` itself for rounds of :data:`COMPACT_BELOW_TRIALS_PER_ITER` candidates or more;
        else the same round size with at most the compact population, unmeasured seeds and
        genetic iterations.

    Examples
    --------
    >>> compact_search(fit_to_time_budget(search_sizing(64), 23, 180.0)).population_size
    32
    >>> compact_search(search_sizing(64)) == search_sizing(64)
    True
    """
    if sizing.num_trials_per_iter >= COMPACT_BELOW_TRIALS_PER_ITER:
        return sizing
    return replace(
        sizing,
        population_size=min(sizing.population_size, COMPACT_POPULATION),
        init_min_unmeasured=min(sizing.init_min_unmeasured, COMPACT_INIT_MIN_UNMEASURED),
        genetic_num_iters=min(sizing.genetic_num_iters, COMPACT_GENETIC_ITERS),
    )


#: Why a task stopped (:attr:`TaskResult.stop_reason`).
STOP_TRIVIAL = "trivial"  # every distinct program of a fixed design space measured once
STOP_STORED = "stored"  # fixed design space, and the database already had a valid record
STOP_CONVERGED = "converged"  # early stopping: no improvement over the window
STOP_EXHAUSTED = "exhausted"  # the search found no unmeasured candidate
STOP_TASK_CAP = "task trial cap"  # max_trials_per_task reached
STOP_GLOBAL_CAP = "global trial cap"  # max_trials_global reached
STOP_TIME = "time budget"  # time_budget_s spent
STOP_ENDED = "search ended"  # MetaSchedule ended the task itself (or the loop ended)


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


@dataclass(frozen=True)
class TaskResult:
    """What full search did for one task in one :func:`tune_tasks` call.

    Attributes
    ----------
    name
        The task's name.
    trials
        Candidates measured (built and run, or failed trying): the task's trial allocation.
    valid_trials
        Candidates that built and ran.
    seconds
        Wall seconds spent on this task's rounds: its search, building, measuring and
        processing of results (shared start-up is not counted). Its time allocation.
    best_latency_s
        Best (lowest) median run time measured in this call, or ``None`` if no candidate ran.
        A single measurement: re-measure (:mod:`tunecache.search.remeasure`) before trusting it.
    trivial
        The task's design space has no sampling instruction: its distinct programs were each
        measured once, outside the evolutionary search.
    rounds
        Scheduler rounds of the evolutionary search for this task (0 for a trivial task).
    empty_rounds
        Of those, rounds that measured nothing (the search found no new candidate).
    idle_seconds
        Wall seconds of those empty rounds.
    stop_reason
        Why the task stopped: ``"trivial"``, ``"stored"``, ``"converged"``, ``"exhausted"``,
        ``"task trial cap"``, ``"global trial cap"``, ``"time budget"`` or ``"search ended"``.
    """

    name: str
    trials: int
    valid_trials: int
    seconds: float
    best_latency_s: float | None
    trivial: bool = False
    rounds: int = 0
    empty_rounds: int = 0
    idle_seconds: float = 0.0
    stop_reason: str = STOP_ENDED


@dataclass(frozen=True)
class SearchProgress:
    """One progress event, sent after every measured round.

    Attributes
    ----------
    task_name
        The task whose round just finished.
    task_trials
        Trials measured for that task so far.
    total_trials
        Trials measured for all tasks so far.
    max_trials
        The global trial budget of this call.
    elapsed_s
        Wall seconds since :func:`tune_tasks` started.
    best_latency_s
        The task's best latency so far, or ``None``.
    """

    task_name: str
    task_trials: int
    total_trials: int
    max_trials: int
    elapsed_s: float
    best_latency_s: float | None


@dataclass
class _TaskTally:
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
        return bool(self.history) and self.history[0][0] <= trials


class _Timeline:
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
        now = time.perf_counter()
        spent = now - self.last_event
        self.last_event = now
        return spent

    def round_started(self) -> None:
        self.rounds.append(self.mark())  # the search that produced this round

    def round_stage_done(self) -> None:
        spent = self.mark()
        if self.rounds:
            self.rounds[-1] += spent

    def callbacks_started(self) -> None:
        self.callback_start = time.perf_counter()

    def round_joined(self) -> float:
        now = time.perf_counter()
        spent = (self.rounds.popleft() if self.rounds else 0.0) + (now - self.callback_start)
        self.last_event = now
        return spent


    def restart(self) -> None:
        """Start attributing time to rounds from now (set-up before the loop is not a round's)."""
        self.last_event = time.perf_counter()
        self.callback_start = self.last_event


def _median_secs(run_secs: Any) -> float:
    return float(statistics.median(float(x) for x in run_secs))


class _Allocator:
    """tunecache's choice of the next task; the body of the ``PyTaskScheduler``'s ``next_task_id``.

    Pure Python over the tracker's tallies and four calls on MetaSchedule's scheduler object
    (``tasks_``, ``join_running_task``, ``terminate_task`` and each record's ``flop``), so it is
    driven by a fake scheduler in the tests.

    Each call: join every round in flight (the measure callbacks, the tracker included, run
    there), stop the tasks that are done (time budget, global or per-task cap, converged,
    exhausted) with their reason, then pick: first every task that has had no round, heaviest
    ``weight * flop`` first; then the largest ``weight * (alpha * backward + (1 - alpha) *
    best / trials)``, where ``backward`` is the best's improvement per trial over the last
    ``grad_window`` trials (Ansor's and MetaSchedule's gradient, per trial). Ties go to the task
    with fewer trials, then the lower index. Returns -1 when no task is left.
    """

    def __init__(
        self,
        tallies: list[_TaskTally],
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


def _tracking_classes() -> tuple[Any, Any, Any, Any, Any]:
    """Define the MetaSchedule wrappers that feed a :class:`_Timeline` and pick tasks (needs TVM)."""
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.s_tir.meta_schedule.runner import PyRunner
    from tvm.s_tir.meta_schedule.task_scheduler import PyTaskScheduler

    @derived_object
    class _TimedBuilder(PyBuilder):
        def __init__(self, inner: Any, timeline: _Timeline) -> None:
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
        def __init__(self, inner: Any, timeline: _Timeline) -> None:
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
        def __init__(self, timeline: _Timeline) -> None:
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
            tallies: list[_TaskTally],
            timeline: _Timeline,
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
                    secs = _median_secs(result.run_secs)
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
        """MetaSchedule's task loop with tunecache's :class:`_Allocator` as ``next_task_id``."""

        def __init__(self, allocator: _Allocator) -> None:
            super().__init__()
            self.allocator = allocator

        def next_task_id(self) -> int:
            return self.allocator.next_task(self._outer())

    return _TimedBuilder, _TimedRunner, _CallbacksStart, _Tracker, _EngineScheduler


def _capped_strategy(inner: Any, max_trials: int) -> Any:
    """``inner`` (a MetaSchedule search strategy) with its own cap on candidates.

    MetaSchedule hands every task the same ``max_trials_per_task`` in ``pre_tuning``; the
    strategy then cuts its last round to fit. Passing the smaller of the two here gives one task
    a cap of its own with the same exact cut.
    """
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.search_strategy import PySearchStrategy

    @derived_object
    class _Capped(PySearchStrategy):
        def __init__(self, inner: Any, max_trials: int) -> None:
            super().__init__()
            self.inner = inner
            self.max_trials = max_trials

        def _initialize_with_tune_context(self, context: Any) -> None:
            self.inner._initialize_with_tune_context(context)

        def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any,
                       database: Any = None, cost_model: Any = None) -> None:
            self.inner.pre_tuning(min(max_trials, self.max_trials), num_trials_per_iter, design_spaces,
                                  database, cost_model)

        def post_tuning(self) -> None:
            self.inner.post_tuning()

        def generate_measure_candidates(self) -> Any:
            return self.inner.generate_measure_candidates()

        def notify_runner_results(self, measure_candidates: Any, results: Any) -> None:
            self.inner.notify_runner_results(measure_candidates, results)

        def clone(self) -> Any:
            return _Capped(self.inner.clone(), self.max_trials)

    return _Capped(inner, max_trials)


def _stop_idle_tasks(task_scheduler: Any, current: int, tallies: list[_TaskTally]) -> None:
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




def fixed_programs(context: Any) -> list[Any] | None:
    """Return the distinct programs of a task whose design space is fixed, else ``None``.

    A design space is fixed when none of its schedules holds a sampling instruction
    (``Sample*``): then the evolutionary search can only ever propose the design spaces
    themselves. Each is post-processed (as MetaSchedule does before building) and duplicates
    are dropped by structural hash.

    Parameters
    ----------
    context
        A ``TuneContext`` with a space generator (``"post-order-apply"``).

    Returns
    -------
    list of tvm.s_tir.Schedule or None
        The post-processed schedules, one per distinct program; ``None`` if the space samples
        or no schedule survives its postprocessors (left to the search, which reports it).
    """
    load_tvm()
    import tvm_ffi

    spaces = list(context.space_generator.generate_design_space(context.mod))
    if not spaces:
        return None
    for sch in spaces:
        if any(inst.kind.name.startswith("Sample") for inst in sch.trace.insts):
            return None
    postprocs = list(context.space_generator.postprocs or [])
    programs: list[Any] = []
    seen: set[int] = set()
    for space in spaces:
        sch = space.copy()
        sch.enter_postproc()
        if not all(p.apply(sch) for p in postprocs):
            continue
        h = int(tvm_ffi.structural_hash(sch.mod))
        if h not in seen:
            seen.add(h)
            programs.append(sch)
    return programs or None


def _has_valid_record(database: Any, mod: Any) -> bool:
    workload = database.commit_workload(mod)
    for record in database.get_top_k(workload, 1):
        if record.run_secs is not None and _median_secs(record.run_secs) < FAILED_RUN_SECS:
            return True
    return False


def _measure_fixed(
    fixed: dict[int, list[Any]],
    contexts: list[Any],
    tallies: list[_TaskTally],
    target: Any,
    database: Any,
    builder: Any,
    runner: Any,
) -> None:
    """Build and measure every fixed task's programs in one batch; commit them; fill tallies."""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.tvm_layer.measure import measure_mods

    todo: list[tuple[int, Any]] = []
    for i, programs in fixed.items():
        if _has_valid_record(database, contexts[i].mod):
            tallies[i].stop = STOP_STORED
        else:
            todo.extend((i, sch) for sch in programs)
    if not todo:
        return
    start = time.perf_counter()
    results = measure_mods([sch.mod for _, sch in todo], target, builder=builder, runner=runner)
    share = (time.perf_counter() - start) / len(todo)
    for (i, sch), res in zip(todo, results, strict=True):
        run_secs = list(res.run_secs) if res.ok else [FAILED_RUN_SECS]
        workload = database.commit_workload(contexts[i].mod)
        database.commit_tuning_record(
            ms.database.TuningRecord(
                sch.trace,
                workload,
                run_secs,
                target,
                ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True),
            )
        )
        tally = tallies[i]
        tally.trials += 1
        tally.seconds += share
        tally.stop = STOP_TRIVIAL
        if res.ok:
            tally.valid += 1
            secs = _median_secs(res.run_secs)
            tally.best = secs if tally.best is None else min(tally.best, secs)


def _validate(
    tasks: Sequence[FullSearchTask],
    trials_per_task: int,
    max_trials_global: int | None,
    time_budget_s: float | None,
    max_trials_per_task: int | None,
    scheduler: str,
    early_stopping: EarlyStopping | None,
) -> None:
    if not tasks:
        raise ConfigError("tune_tasks needs at least one task; got an empty list")
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"task names must be unique; repeated: {dupes}")
    bad = [(t.name, t.weight) for t in tasks if not (t.weight > 0 and math.isfinite(t.weight))]
    if bad:
        raise ConfigError(f"task weights must be positive and finite; got {bad}")
    if trials_per_task < 1:
        raise ConfigError(f"trials_per_task must be >= 1, got {trials_per_task!r}")
    if max_trials_global is not None and max_trials_global < 1:
        raise ConfigError(f"max_trials_global must be >= 1 or None, got {max_trials_global!r}")
    if max_trials_per_task is not None and max_trials_per_task < 1:
        raise ConfigError(f"max_trials_per_task must be >= 1 or None, got {max_trials_per_task!r}")
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError(f"time_budget_s must be positive or None, got {time_budget_s!r}")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if scheduler == "gradient" and early_stopping is not None:
        raise ConfigError(
            "early stopping needs scheduler='tunecache' (MetaSchedule's GradientBased scheduler "
            "cannot skip a task in its first round-robin pass); pass early_stopping=None"
        )


def tune_tasks(
    tasks: Sequence[FullSearchTask],
    target: Any,
    database: Any,
    *,
    trials_per_task: int,
    max_trials_global: int | None = None,
    max_trials_per_task: int | None = None,
    time_budget_s: float | None = None,
    early_stopping: EarlyStopping | None = EarlyStopping(),
    trivial_once: bool = True,
    scheduler: str = "tunecache",
    seed: int | None = None,
    work_dir: str | os.PathLike[str],
    progress: Callable[[SearchProgress], None] | None = None,
    builder: Any = None,
    runner: Any = None,
    cost_model: Any = None,
    num_threads: int | None = None,
    console_log: bool = False,
) -> list[TaskResult]:
    """Run MetaSchedule's full evolutionary search over ``tasks``, committing to ``database``.

    Parameters
    ----------
    tasks
        Frozen task specs; names must be unique. Use :meth:`FullSearchTask.from_extracted` for
        MetaSchedule ``ExtractedTask`` values.
    target
        A ``tvm.target.Target`` (e.g. ``Target({"kind": "llvm", "num-cores": 2, "mcpu": ...})``).
    database
        A MetaSchedule ``Database`` (``ms.database.MemoryDatabase()``, a ``PyDatabase``, ...).
        Every measured candidate is committed to it, failures included with run time
        ``[1e10]`` (MetaSchedule's ``AddToDatabase`` behaviour). Records already in it for a
        task's workload seed that task's first population; a trivial task that already has a
        valid record is not measured again (``stop_reason == "stored"``).
    trials_per_task
        Each task's nominal share: sizes the search (:func:`search_sizing`) and the default
        global budget.
    max_trials_global
        Most candidates measured in all (trivial tasks included); default
        ``trials_per_task * len(tasks)``. Checked before each round, so the last round may
        overshoot it by less than one round.
    max_trials_per_task
        Most candidates one task may get. Default: ``max_trials_global`` when early stopping is
        on (trials that converged tasks leave go to the others), else ``trials_per_task``.
    time_budget_s
        Wall-clock budget in seconds, from this call's start (set-up and trivial tasks
        included). With ``scheduler="tunecache"`` it is checked before every round: once spent,
        no round starts, and the call ends after the round in flight (a task that has not had a
        round by then gets none: ``stop_reason == "time budget"``, 0 trials). With
        ``"gradient"`` it is checked after each joined round, and not during MetaSchedule's first
        round-robin pass.
    early_stopping
        When a task counts as converged (:class:`EarlyStopping`); ``None`` turns it off.
        Needs ``scheduler="tunecache"``.
    trivial_once
        Measure the programs of tasks with a fixed design space (no sampling instruction) once,
        outside the search (:func:`fixed_programs`).
    scheduler
        ``"tunecache"`` (default): tunecache's task picker (see the module docstring).
        ``"gradient"``: MetaSchedule's ``GradientBased`` scheduler, as stock ``tune_tasks`` runs.
    seed
        Seed for the search, the task scheduler and per-task random states (``None``: random).
        Measurement noise still feeds the cost model, so runs are not bit-identical.
    work_dir
        Directory for MetaSchedule's logs (``work_dir/logs``) and build artifacts.
    progress
        Called with a :class:`SearchProgress` after every round that measured something (and
        once per trivial task).
    builder, runner
        Override the defaults (:func:`~tunecache.tvm_layer.measure.make_builder`,
        :func:`~tunecache.tvm_layer.measure.make_runner`). Defaults created here are shut down
        on return; pass your own to reuse their worker processes (~3 s to start) across calls.
    cost_model
        Override MetaSchedule's XGBoost cost model (``CostModel.create("xgb")``).
    num_threads
        Threads for the search and the cost model; default the physical core count.
    console_log
        Let MetaSchedule print its INFO/DEBUG log (tables, XGBoost iterations) to stdout. By
        default only warnings reach the console; the full log is always in ``work_dir/logs``.

    Returns
    -------
    list[TaskResult]
        One per task, in the order of ``tasks``: trials and seconds spent (the allocation), best
        latency, whether the task was trivial and why it stopped.

    Raises
    ------
    ConfigError
        If an argument is out of range (the message names it and its value).
    TuningError
        If MetaSchedule fails as a whole (not a single candidate).

    Examples
    --------
    >>> db = ms.database.MemoryDatabase()                                    # doctest: +SKIP
    >>> results = tune_tasks([FullSearchTask("mm", mod)], target, db,
    ...                      trials_per_task=64, work_dir="/tmp/tc")        # doctest: +SKIP
    >>> results[0].valid_trials                                              # doctest: +SKIP
    64
    """
    timeline = _Timeline()
    tasks = list(tasks)
    _validate(
        tasks,
        trials_per_task,
        max_trials_global,
        time_budget_s,
        max_trials_per_task,
        scheduler,
        early_stopping,
    )
    n_global = trials_per_task * len(tasks) if max_trials_global is None else max_trials_global
    if max_trials_per_task is None:
        reallocate = early_stopping is not None and scheduler == "tunecache"
        max_trials_per_task = n_global if reallocate else trials_per_task
    per_task_cap = min(max_trials_per_task, n_global)
    caps = [per_task_cap if t.max_trials is None else min(per_task_cap, t.max_trials) for t in tasks]
    sizing = fit_to_time_budget(search_sizing(trials_per_task), len(tasks), time_budget_s)
    if scheduler == "tunecache" and time_budget_s is not None:
        sizing = compact_search(sizing)
    deadline = None if time_budget_s is None else timeline.start + time_budget_s

    load_tvm(str(target.kind.name))
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import cpu_count, fork_seed

    work = os.fspath(work_dir)
    os.makedirs(work, exist_ok=True)
    threads = num_threads if num_threads is not None else max(1, cpu_count(logical=False))
    names = [t.name for t in tasks]
    # Not MetaSchedule's get_loggers_from_work_dir: its dictConfig closes every handler of the
    # process and crashes on a handler without a name (tunecache.tvm_layer.mslog).
    with ms_loggers(work, names, console=console_log) as loggers:
        contexts = []
        for task, logger, rand_state in zip(
            tasks,
            loggers,
            fork_seed(seed, n=len(tasks)),
            strict=True,
        ):
            strategy = ms.search_strategy.EvolutionarySearch(
                population_size=sizing.population_size,
                init_measured_ratio=sizing.init_measured_ratio,
                init_min_unmeasured=sizing.init_min_unmeasured,
                max_fail_count=sizing.max_fail_count,
                genetic_num_iters=sizing.genetic_num_iters,
                genetic_mutate_prob=sizing.genetic_mutate_prob,
                genetic_max_fail_count=sizing.genetic_max_fail_count,
                eps_greedy=sizing.eps_greedy,
            )
            contexts.append(
                ms.TuneContext(
                    mod=task.mod,
                    target=target,
                    space_generator="post-order-apply",
                    search_strategy=strategy if task.max_trials is None else _capped_strategy(strategy, task.max_trials),
                    task_name=task.name,
                    rand_state=rand_state,
                    num_threads=threads,
                    logger=logger,
                ).clone()
            )

        tallies = [_TaskTally() for _ in tasks]
        (
            timed_builder_cls,
            timed_runner_cls,
            callbacks_start_cls,
            tracker_cls,
            engine_scheduler_cls,
        ) = _tracking_classes()
        own_builder = builder is None
        inner_builder = (
            make_builder(artifact_dir=os.path.join(work, "artifacts")) if own_builder else builder
        )
        own_runner = runner is None
        inner_runner = make_runner() if own_runner else runner
        fixed: dict[int, list[Any]] = {}

        def out_of_time() -> bool:
            return deadline is not None and time.perf_counter() >= deadline

        try:
            if trivial_once and not out_of_time():
                for i, ctx in enumerate(contexts):
                    programs = fixed_programs(ctx)
                    if programs is not None:
                        fixed[i] = programs
            if fixed and not out_of_time():
                _measure_fixed(
                    fixed, contexts, tallies, target, database, inner_builder, inner_runner
                )
                if progress is not None:
                    for i in fixed:
                        progress(
                            SearchProgress(
                                task_name=names[i],
                                task_trials=tallies[i].trials,
                                total_trials=sum(t.trials for t in tallies),
                                max_trials=n_global,
                                elapsed_s=time.perf_counter() - timeline.start,
                                best_latency_s=tallies[i].best,
                            )
                        )
            searched = [i for i in range(len(tasks)) if i not in fixed]
            spent = sum(t.trials for t in tallies)
            if out_of_time():
                for tally in tallies:
                    tally.stop = tally.stop or STOP_TIME
                searched = []
            if searched and spent < n_global:
                task_cap = min(per_task_cap, n_global - spent)
                sub_caps = [min(caps[i], task_cap) for i in searched]
                sub_tallies = [tallies[i] for i in searched]
                weights = [float(tasks[i].weight) for i in searched]
                tracker = tracker_cls(
                    [names[i] for i in searched],
                    sub_tallies,
                    timeline,
                    n_global,
                    time_budget_s,
                    progress,
                    scheduler == "gradient",
                )
                if scheduler == "gradient":
                    scheduler_seed = -1 if seed is None else int(seed) % (2**31 - 1) + 1
                    task_scheduler = ms.task_scheduler.GradientBased(seed=scheduler_seed)
                else:
                    window = max(2 * sizing.num_trials_per_iter, MIN_WINDOW_TRIALS)
                    if early_stopping is not None and early_stopping.window_trials is not None:
                        window = early_stopping.window_trials
                    task_scheduler = engine_scheduler_cls(
                        _Allocator(
                            sub_tallies,
                            weights,
                            max_trials_per_task=sub_caps,
                            max_trials_global=n_global - spent,
                            deadline=deadline,
                            early_stopping=early_stopping,
                            window_trials=window,
                            grad_window=3 * sizing.num_trials_per_iter,
                        )
                    )
                callbacks = [
                    callbacks_start_cls(timeline),
                    *ms.measure_callback.MeasureCallback.create("default"),
                    tracker,
                ]
                timeline.restart()
                try:
                    ms.tune.tune_tasks(
                        tasks=[contexts[i] for i in searched],
                        task_weights=weights,
                        work_dir=work,
                        max_trials_global=n_global - spent,
                        max_trials_per_task=task_cap,
                        num_trials_per_iter=sizing.num_trials_per_iter,
                        builder=timed_builder_cls(inner_builder, timeline),
                        runner=timed_runner_cls(inner_runner, timeline),
                        database=database,
                        cost_model=cost_model
                        if cost_model is not None
                        else ms.cost_model.CostModel.create("xgb", num_tuning_cores=threads),
                        measure_callbacks=callbacks,
                        task_scheduler=task_scheduler,
                    )
                except Exception as err:
                    # TVM 0.27: GradientBased joins the task it picked inside NextTaskId, then asserts
                    # it is alive. When that join's measure callback spends the time budget, the
                    # tracker terminates the task and TVM's check fails. Every joined round is
                    # committed by then: after a budget stop that assertion just ends the search.
                    if not (tracker.budget_hit and "is_terminated" in str(err)):
                        raise
                    for tally in sub_tallies:  # a round still in flight is dropped, as at any budget stop
                        tally.stop = tally.stop or STOP_TIME
        except ConfigError:
            raise
        except Exception as err:  # TVM raises its own error types; convert at the boundary
            raise TuningError(
                f"MetaSchedule tuning failed for tasks {names} on target {target}: {err}. "
                f"The logs under {os.path.join(work, 'logs')} show the last round."
            ) from err
        finally:
            if own_builder:
                inner_builder.close()
            if own_runner:
                inner_runner.pool.shutdown(wait=True)  # LocalRunner keeps one worker process
        total = sum(t.trials for t in tallies)
        for tally, cap in zip(tallies, caps, strict=True):
            if tally.stop is None:
                if tally.trials >= cap:
                    tally.stop = STOP_TASK_CAP
                elif total >= n_global:
                    tally.stop = STOP_GLOBAL_CAP
                elif tally.last_round_empty:
                    tally.stop = STOP_EXHAUSTED
                else:
                    tally.stop = STOP_ENDED
        return [
            TaskResult(
                name=name,
                trials=tally.trials,
                valid_trials=tally.valid,
                seconds=tally.seconds,
                best_latency_s=tally.best,
                trivial=i in fixed,
                rounds=tally.rounds,
                empty_rounds=tally.empty_rounds,
                idle_seconds=tally.idle_seconds,
                stop_reason=tally.stop,
            )
            for i, (name, tally) in enumerate(zip(names, tallies, strict=True))
        ]