"""Full search: MetaSchedule's evolutionary search over a list of tasks, sized to the budget.

This is the last rung of the ladder (store hit -> reuse -> narrowed search -> **full search**).
:func:`tune_tasks` runs ``tvm.s_tir.meta_schedule.tune.tune_tasks`` (XGBoost cost model,
gradient task scheduler with task weights) with tunecache's warm builder and steady runner
(:mod:`tunecache.search.measure`), commits every measured record to the ``Database`` it is given,
and returns one frozen :class:`TaskResult` per task. Progress is reported as frozen
:class:`SearchProgress` events.

Search sizing (:func:`search_sizing`) lives here too: MetaSchedule's defaults
(population 512, 50 unmeasured seeds, 4 genetic iterations, 64 trials per round) are sized for
thousands of trials; with tens to a few hundred trials per task most of that search is wasted
on a 2-core machine (see ``shared/TVM_NOTES.md``).
"""

from __future__ import annotations

import contextlib
import math
import sys
import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.errors import ConfigError, TuningError
from tunecache.search.measure import make_builder, make_runner
from tunecache.tvm_layer import load_tvm

__all__ = [
    "FullSearchTask",
    "SearchProgress",
    "SearchSizing",
    "TaskResult",
    "search_sizing",
    "tune_tasks",
]

_MS_LOGGER = "tvm.s_tir.meta_schedule"
#: Run seconds MetaSchedule's ``AddToDatabase`` stores for a candidate that failed.
FAILED_RUN_SECS = 1e10


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
    """

    name: str
    mod: Any
    weight: float = 1.0

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


@dataclass(frozen=True)
class TaskResult:
    """What full search did for one task in one :func:`tune_tasks` call.

    Attributes
    ----------
    name
        The task's name.
    trials
        Candidates measured (built and run, or failed trying).
    valid_trials
        Candidates that built and ran.
    seconds
        Wall seconds spent on this task's rounds: its search, building, measuring and
        processing of results (the scheduler interleaves tasks; shared start-up is not counted).
    best_latency_s
        Best (lowest) median run time measured in this call, or ``None`` if no candidate ran.
        A single measurement: re-measure before trusting small differences.
    """

    name: str
    trials: int
    valid_trials: int
    seconds: float
    best_latency_s: float | None


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


def _median_secs(run_secs: Any) -> float:
    return float(statistics.median(float(x) for x in run_secs))


def _tracking_classes() -> tuple[Any, Any, Any, Any]:
    """Define the small MetaSchedule wrappers that feed a :class:`_Timeline` (needs TVM)."""
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import PyBuilder
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback
    from tvm.s_tir.meta_schedule.runner import PyRunner

    @derived_object
    class _TimedBuilder(PyBuilder):
        def __init__(self, inner: Any, timeline: _Timeline) -> None:
            super().__init__()
            self.inner = inner
            self.timeline = timeline

        def build(self, build_inputs: Any) -> Any:
            self.timeline.round_started()
            try:
                return self.inner.build(build_inputs)
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
                return self.inner.run(runner_inputs)
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
        """Counts trials per task, reports progress and enforces the time budget."""

        def __init__(
            self,
            names: list[str],
            timeline: _Timeline,
            max_trials: int,
            time_budget_s: float | None,
            progress: Callable[[SearchProgress], None] | None,
        ) -> None:
            super().__init__()
            self.names = names
            self.tallies = [_TaskTally() for _ in names]
            self.timeline = timeline
            self.max_trials = max_trials
            self.time_budget_s = time_budget_s
            self.progress = progress
            self.total_trials = 0
            self.budget_hit = False

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
                self.total_trials += 1
                if result.error_msg is None and result.run_secs is not None:
                    secs = _median_secs(result.run_secs)
                    if secs < FAILED_RUN_SECS:
                        tally.valid += 1
                        tally.best = secs if tally.best is None else min(tally.best, secs)
            tally.seconds += self.timeline.round_joined()
            elapsed = self.timeline.last_event - self.timeline.start
            if self.time_budget_s is not None and elapsed > self.time_budget_s:
                self.budget_hit = True
                _stop_idle_tasks(task_scheduler, task_id)
            if self.progress is not None:
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

    return _TimedBuilder, _TimedRunner, _CallbacksStart, _Tracker


def _quiet_console(logger_name: str) -> None:
    """Raise MetaSchedule's console handler to WARNING; its file handlers keep everything."""
    import logging

    for handler in logging.getLogger(logger_name).handlers:
        if type(handler) is logging.StreamHandler:  # FileHandler subclasses StreamHandler
            handler.setLevel(logging.WARNING)


def _stop_idle_tasks(task_scheduler: Any, current: int) -> None:
    """Terminate the task being joined and every live task with no round in flight.

    A task whose round is in flight (``measure_candidates`` set) is left alone: terminating it
    would drop its measured results; it is terminated when its round is joined.
    """
    for i, record in enumerate(task_scheduler.tasks_):
        if record.is_terminated:
            continue
        if i == current or record.measure_candidates is None:
            task_scheduler.terminate_task(i)


def _validate(
    tasks: Sequence[FullSearchTask],
    trials_per_task: int,
    max_trials_global: int | None,
    time_budget_s: float | None,
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
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError(f"time_budget_s must be positive or None, got {time_budget_s!r}")


def tune_tasks(
    tasks: Sequence[FullSearchTask],
    target: Any,
    database: Any,
    *,
    trials_per_task: int,
    max_trials_global: int | None = None,
    time_budget_s: float | None = None,
    seed: int | None = None,
    work_dir: str | os.PathLike[str],
    progress: Callable[[SearchProgress], None] | None = None,
    builder: Any = None,
    runner: Any = None,
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
        task's workload seed that task's first population.
    trials_per_task
        Most candidates measured per task; also sizes the search (:func:`search_sizing`).
    max_trials_global
        Most candidates measured in all; default ``trials_per_task * len(tasks)``.
    time_budget_s
        Wall-clock budget in seconds, checked after every measured round: once exceeded, no
        new round is started. Rounds already built and measured finish and are committed, so
        the call can overrun by up to one round per task. During MetaSchedule's first pass (one
        round per task, joined together) the budget is only seen after the pass.
    seed
        Seed for the search, the task scheduler and per-task random states (``None``: random).
        Measurement noise still feeds the cost model, so runs are not bit-identical.
    work_dir
        Directory for MetaSchedule's logs (``work_dir/logs``) and build artifacts.
    progress
        Called with a :class:`SearchProgress` after every measured round.
    builder, runner
        Override the defaults (:func:`~tunecache.search.measure.make_builder`,
        :func:`~tunecache.search.measure.make_runner`). Defaults created here are shut down
        on return; pass your own to reuse their worker processes (~3 s to start) across calls.
    num_threads
        Threads for the search and the cost model; default the physical core count.
    console_log
        Let MetaSchedule print its INFO/DEBUG log (tables, XGBoost iterations) to stdout. By
        default only warnings reach the console; the full log is always in ``work_dir/logs``.

    Returns
    -------
    list[TaskResult]
        One per task, in the order of ``tasks``.

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
    tasks = list(tasks)
    _validate(tasks, trials_per_task, max_trials_global, time_budget_s)
    n_global = trials_per_task * len(tasks) if max_trials_global is None else max_trials_global
    sizing = search_sizing(trials_per_task)

    load_tvm(str(target.kind.name))
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
    from tvm.s_tir.meta_schedule.utils import cpu_count, fork_seed

    work = os.fspath(work_dir)
    os.makedirs(work, exist_ok=True)
    threads = num_threads if num_threads is not None else max(1, cpu_count(logical=False))
    names = [t.name for t in tasks]
    # MetaSchedule's console handler binds sys.stdout when it is created and at once logs the
    # logging directory: bind it to stderr so stdout stays the caller's (e.g. `--json` reports).
    with contextlib.redirect_stdout(sys.stderr):
        loggers = get_loggers_from_work_dir(work, names)
    if not console_log:
        _quiet_console(_MS_LOGGER)
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
                search_strategy=strategy,
                task_name=task.name,
                rand_state=rand_state,
                num_threads=threads,
                logger=logger,
            ).clone()
        )

    timeline = _Timeline()
    timed_builder_cls, timed_runner_cls, callbacks_start_cls, tracker_cls = _tracking_classes()
    own_builder = builder is None
    inner_builder = (
        make_builder(artifact_dir=os.path.join(work, "artifacts")) if own_builder else builder
    )
    own_runner = runner is None
    inner_runner = make_runner() if own_runner else runner
    tracker = tracker_cls(names, timeline, n_global, time_budget_s, progress)
    callbacks = [
        callbacks_start_cls(timeline),
        *ms.measure_callback.MeasureCallback.create("default"),
        tracker,
    ]
    scheduler_seed = -1 if seed is None else int(seed) % (2**31 - 1) + 1
    try:
        ms.tune.tune_tasks(
            tasks=contexts,
            task_weights=[float(t.weight) for t in tasks],
            work_dir=work,
            max_trials_global=n_global,
            max_trials_per_task=trials_per_task,
            num_trials_per_iter=sizing.num_trials_per_iter,
            builder=timed_builder_cls(inner_builder, timeline),
            runner=timed_runner_cls(inner_runner, timeline),
            database=database,
            cost_model=ms.cost_model.CostModel.create("xgb", num_tuning_cores=threads),
            measure_callbacks=callbacks,
            task_scheduler=ms.task_scheduler.GradientBased(seed=scheduler_seed),
        )
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
    return [
        TaskResult(
            name=name,
            trials=tally.trials,
            valid_trials=tally.valid,
            seconds=tally.seconds,
            best_latency_s=tally.best,
        )
        for name, tally in zip(names, tracker.tallies, strict=True)
    ]
