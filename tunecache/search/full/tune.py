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

Search sizing is in :mod:`tunecache.search.full.sizing`, the task picker and early stopping in
:mod:`tunecache.search.full.allocator`, the MetaSchedule hooks in
:mod:`tunecache.search.full.hooks` and the trivial tasks in :mod:`tunecache.search.full.trivial`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tunecache.errors import ConfigError, Interrupted, TuningError
from tunecache.interrupt import stop_requested
from tunecache.search.full.allocator import (
    MIN_WINDOW_TRIALS,
    STOP_ENDED,
    STOP_EXHAUSTED,
    STOP_GLOBAL_CAP,
    STOP_INTERRUPTED,
    STOP_TASK_CAP,
    STOP_TIME,
    Allocator,
    EarlyStopping,
    TaskTally,
)
from tunecache.search.full.hooks import Timeline, TrialPool, capped_strategy, tracking_classes
from tunecache.search.full.results import SearchProgress, TaskResult
from tunecache.search.full.sizing import SearchSizing, compact_search, fit_to_time_budget, search_sizing
from tunecache.search.full.task import SCHEDULERS, FullSearchTask, validate
from tunecache.search.full.trivial import fixed_programs, measure_fixed
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.measure import close_runner, make_builder, make_runner
from tunecache.tvm_layer.mslog import ms_loggers

__all__ = ["SCHEDULERS", "FullSearchTask", "tune_tasks"]

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
    seed_predicted: bool = True,
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
        ``trials_per_task * len(tasks)``. With ``scheduler="tunecache"`` it is never exceeded:
        the last round is cut to fit (MetaSchedule's own scheduler checks it before each round,
        so its last round may overshoot it by less than one round).
    max_trials_per_task
        Most candidates one task may get. Default: ``max_trials_global`` when early stopping is
        on (trials that converged tasks leave go to the others), else ``trials_per_task``.
    time_budget_s
        Wall-clock budget in seconds, from this call's start (set-up and trivial tasks
        included). With ``scheduler="tunecache"`` it is checked before every round: once spent,
        no round starts, and the call ends after the round in flight (a task that has not had a
        round by then gets none: ``stop_reason == "time budget"``, 0 trials). With
        ``"gradient"`` it is checked after each joined round, and not during MetaSchedule's first
        round-robin pass. A stop request (:mod:`tunecache.interrupt`: the first Ctrl-C) is
        checked at the same points: the round in flight is measured and committed, no round
        starts after it (``stop_reason == "interrupted"``), and the call returns normally; the
        caller checks :func:`tunecache.interrupt.stop_requested`.
    early_stopping
        When a task counts as converged (:class:`EarlyStopping`); ``None`` turns it off.
        Needs ``scheduler="tunecache"``.
    trivial_once
        Measure the programs of tasks with a fixed design space (no sampling instruction) once,
        outside the search (:func:`fixed_programs`).
    seed_predicted
        With ``scheduler="tunecache"``: before the loop, measure once the program
        :func:`tunecache.search.predict.predict_program` chooses for each searched task that has
        no valid record in ``database`` (one trial of its budget,
        :mod:`tunecache.search.full.seed`): its search starts from it.
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
        Override MetaSchedule's XGBoost cost model (``CostModel.create("xgb")``): a model, or a
        function of no arguments returning one, called only when a task is left for
        MetaSchedule's task loop (a call whose tasks all have a fixed design space pays nothing
        for a model it would not use, such as a pre-trained one).
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
    timeline = Timeline()
    tasks = list(tasks)
    validate(
        tasks,
        trials_per_task,
        max_trials_global,
        time_budget_s,
        max_trials_per_task,
        scheduler,
        early_stopping,
    )
    budget = _budget(
        tasks,
        trials_per_task=trials_per_task,
        max_trials_global=max_trials_global,
        max_trials_per_task=max_trials_per_task,
        time_budget_s=time_budget_s,
        early_stopping=early_stopping,
        scheduler=scheduler,
        start=timeline.start,
    )

    load_tvm(str(target.kind.name))
    from tvm.s_tir.meta_schedule.utils import cpu_count

    work = os.fspath(work_dir)
    os.makedirs(work, exist_ok=True)
    threads = num_threads if num_threads is not None else max(1, cpu_count(logical=False))
    names = [t.name for t in tasks]
    # Not MetaSchedule's get_loggers_from_work_dir: its dictConfig closes every handler of the
    # process and crashes on a handler without a name (tunecache.tvm_layer.mslog).
    # The engine's global cap is exact: every task's strategy draws its candidates from one pool.
    pool = TrialPool(budget.n_global) if scheduler == "tunecache" else None
    with ms_loggers(work, names, console=console_log) as loggers:
        contexts = _tune_contexts(tasks, target, budget.sizing, seed, threads, loggers, pool)
        tallies = [TaskTally() for _ in tasks]
        hooks = tracking_classes()
        own_builder = builder is None
        inner_builder = (
            make_builder(artifact_dir=os.path.join(work, "artifacts")) if own_builder else builder
        )
        own_runner = runner is None
        inner_runner = make_runner() if own_runner else runner
        fixed: dict[int, list[Any]] = {}
        try:
            if trivial_once:
                fixed = _trivial_pass(contexts, tallies, names, budget, target=target, database=database,
                                      builder=inner_builder, runner=inner_runner, timeline=timeline,
                                      progress=progress)  # fmt: skip
            if seed_predicted and scheduler == "tunecache" and not budget.out_of_time() and not stop_requested():
                from tunecache.search.full.seed import seed_tasks

                seeded = seed_tasks([i for i in range(len(tasks)) if i not in fixed], contexts, tallies, target,
                                    database, inner_builder, inner_runner,
                                    limit=budget.n_global - sum(t.trials for t in tallies))
                if seeded:  # a seed is a trial of its task: its search gets one fewer
                    capped = [replace(t, max_trials=budget.caps[i] - tallies[i].trials) if i in seeded else t
                              for i, t in enumerate(tasks)]
                    contexts = _tune_contexts(capped, target, budget.sizing, seed, threads, loggers, pool)
            _search_the_rest(
                contexts,
                tasks,
                tallies,
                fixed,
                budget,
                hooks=hooks,
                timeline=timeline,
                database=database,
                builder=inner_builder,
                runner=inner_runner,
                work=work,
                threads=threads,
                scheduler=scheduler,
                seed=seed,
                early_stopping=early_stopping,
                time_budget_s=time_budget_s,
                progress=progress,
                cost_model=cost_model,
                pool=pool,
            )
        except ConfigError:
            raise
        except KeyboardInterrupt as err:  # a second Ctrl-C: what was committed stays
            raise Interrupted(sum(t.trials for t in tallies)) from err
        except Exception as err:  # TVM raises its own error types; convert at the boundary
            if stop_requested() or "KeyboardInterrupt" in str(err):
                raise Interrupted(sum(t.trials for t in tallies)) from err
            text = str(err).strip() or type(err).__name__
            raise TuningError(
                f"MetaSchedule tuning failed for tasks {names} on target {target}: {text}. "
                f"The logs under {os.path.join(work, 'logs')} show the last round."
            ) from err
        finally:
            if own_builder:
                inner_builder.close()
            if own_runner:
                close_runner(inner_runner)
        _settle_stop_reasons(tallies, budget)
        return _results(names, tallies, fixed)


def _cost_model(given: Any, threads: int) -> Any:
    """The task loop's cost model: ``given``, what ``given()`` makes, or a fresh XGBoost one."""
    from tvm.s_tir import meta_schedule as ms

    if callable(given) and not isinstance(given, ms.cost_model.CostModel):
        given = given()
    return ms.cost_model.CostModel.create("xgb", num_tuning_cores=threads) if given is None else given


@dataclass(frozen=True)
class _Budget:
    """The trial and time limits of one :func:`tune_tasks` call, resolved from its arguments."""

    n_global: int  # most trials in all
    per_task_cap: int  # most trials one task may get
    caps: tuple[int, ...]  # each task's own cap: per_task_cap, or its max_trials if smaller
    sizing: SearchSizing
    deadline: float | None  # perf_counter() time at which the time budget is spent

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline


def _budget(
    tasks: Sequence[FullSearchTask],
    *,
    trials_per_task: int,
    max_trials_global: int | None,
    max_trials_per_task: int | None,
    time_budget_s: float | None,
    early_stopping: EarlyStopping | None,
    scheduler: str,
    start: float,
) -> _Budget:
    """Resolve the defaults of the trial caps and size the search (see :func:`tune_tasks`)."""
    n_global = trials_per_task * len(tasks) if max_trials_global is None else max_trials_global
    if max_trials_per_task is None:
        reallocate = early_stopping is not None and scheduler == "tunecache"
        max_trials_per_task = n_global if reallocate else trials_per_task
    per_task_cap = min(max_trials_per_task, n_global)
    caps = tuple(per_task_cap if t.max_trials is None else min(per_task_cap, t.max_trials) for t in tasks)
    sizing = fit_to_time_budget(search_sizing(trials_per_task), len(tasks), time_budget_s)
    if scheduler == "tunecache" and time_budget_s is not None:
        sizing = compact_search(sizing)
    deadline = None if time_budget_s is None else start + time_budget_s
    return _Budget(n_global, per_task_cap, caps, sizing, deadline)


def _tune_contexts(
    tasks: Sequence[FullSearchTask],
    target: Any,
    sizing: SearchSizing,
    seed: int | None,
    threads: int,
    loggers: Sequence[Any],
    pool: TrialPool | None = None,
) -> list[Any]:
    """One MetaSchedule ``TuneContext`` per task: its evolutionary search sized by ``sizing``
    (capped for a task with its own ``max_trials``, and drawing its candidates from ``pool``
    when one is given), its forked random state and its logger."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.utils import fork_seed

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
                search_strategy=strategy if task.max_trials is None and pool is None
                else capped_strategy(strategy, task.max_trials, pool),
                task_name=task.name,
                rand_state=rand_state,
                num_threads=threads,
                logger=logger,
            ).clone()
        )
    return contexts


def _trivial_pass(
    contexts: list[Any],
    tallies: list[TaskTally],
    names: list[str],
    budget: _Budget,
    *,
    target: Any,
    database: Any,
    builder: Any,
    runner: Any,
    timeline: Timeline,
    progress: Callable[[SearchProgress], None] | None,
) -> dict[int, list[Any]]:
    """Find the tasks with a fixed design space and measure their programs once (time allowing).

    Returns the fixed tasks' programs by task index: these tasks are not searched, whether or
    not the time budget let them be measured.
    """
    fixed: dict[int, list[Any]] = {}
    if budget.out_of_time() or stop_requested():
        return fixed
    for i, ctx in enumerate(contexts):
        programs = fixed_programs(ctx)
        if programs is not None:
            fixed[i] = programs
    if fixed and not budget.out_of_time():
        measure_fixed(fixed, contexts, tallies, target, database, builder, runner)
        if progress is not None:
            for i in fixed:
                progress(
                    SearchProgress(
                        task_name=names[i],
                        task_trials=tallies[i].trials,
                        total_trials=sum(t.trials for t in tallies),
                        max_trials=budget.n_global,
                        elapsed_s=time.perf_counter() - timeline.start,
                        best_latency_s=tallies[i].best,
                    )
                )
    return fixed


def _search_the_rest(
    contexts: list[Any],
    tasks: list[FullSearchTask],
    tallies: list[TaskTally],
    fixed: dict[int, list[Any]],
    budget: _Budget,
    *,
    hooks: tuple[Any, Any, Any, Any, Any],
    pool: TrialPool | None,
    timeline: Timeline,
    database: Any,
    builder: Any,
    runner: Any,
    work: str,
    threads: int,
    scheduler: str,
    seed: int | None,
    early_stopping: EarlyStopping | None,
    time_budget_s: float | None,
    progress: Callable[[SearchProgress], None] | None,
    cost_model: Any,
) -> None:
    """Run MetaSchedule's task loop over the tasks that are not fixed, with what is left of the
    global budget (nothing when the time budget is already spent); fill their tallies."""
    from tvm.s_tir import meta_schedule as ms

    searched = [i for i in range(len(tasks)) if i not in fixed]
    spent = sum(t.trials for t in tallies)
    if budget.out_of_time() or stop_requested():
        for tally in tallies:
            tally.stop = tally.stop or (STOP_INTERRUPTED if stop_requested() else STOP_TIME)
        searched = []
    if not searched or spent >= budget.n_global:
        return
    if pool is not None:
        pool.left = budget.n_global - spent
    timed_builder_cls, timed_runner_cls, callbacks_start_cls, tracker_cls, engine_scheduler_cls = hooks
    n_global = budget.n_global
    task_cap = min(budget.per_task_cap, n_global - spent)
    sub_caps = [min(budget.caps[i], task_cap) for i in searched]
    sub_tallies = [tallies[i] for i in searched]
    weights = [float(tasks[i].weight) for i in searched]
    # The tracker counts the searched tasks' trials (their seeds included): add the others'.
    outside = spent - sum(t.trials for t in sub_tallies)

    def progress_of_all(event: SearchProgress) -> None:
        assert progress is not None
        progress(replace(event, total_trials=outside + event.total_trials))

    tracker = tracker_cls(
        [tasks[i].name for i in searched],
        sub_tallies,
        timeline,
        n_global,
        time_budget_s,
        progress_of_all if progress is not None and outside else progress,
        scheduler == "gradient",
    )
    if scheduler == "gradient":
        scheduler_seed = -1 if seed is None else int(seed) % (2**31 - 1) + 1
        task_scheduler = ms.task_scheduler.GradientBased(seed=scheduler_seed)
    else:
        window = max(2 * budget.sizing.num_trials_per_iter, MIN_WINDOW_TRIALS)
        if early_stopping is not None and early_stopping.window_trials is not None:
            window = early_stopping.window_trials
        task_scheduler = engine_scheduler_cls(
            Allocator(
                sub_tallies,
                weights,
                max_trials_per_task=sub_caps,
                # its tallies count the seeds already measured (tunecache.search.full.seed)
                max_trials_global=n_global - outside,
                deadline=budget.deadline,
                early_stopping=early_stopping,
                window_trials=window,
                grad_window=3 * budget.sizing.num_trials_per_iter,
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
            num_trials_per_iter=budget.sizing.num_trials_per_iter,
            builder=timed_builder_cls(builder, timeline),
            runner=timed_runner_cls(runner, timeline),
            database=database,
            cost_model=_cost_model(cost_model, threads),
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


def _settle_stop_reasons(tallies: list[TaskTally], budget: _Budget) -> None:
    """Give every task that has no stop reason yet the one that applies at the end."""
    total = sum(t.trials for t in tallies)
    for tally, cap in zip(tallies, budget.caps, strict=True):
        if tally.stop is None:
            if stop_requested():
                tally.stop = STOP_INTERRUPTED
            elif tally.trials >= cap:
                tally.stop = STOP_TASK_CAP
            elif total >= budget.n_global:
                tally.stop = STOP_GLOBAL_CAP
            elif tally.last_round_empty:
                tally.stop = STOP_EXHAUSTED
            else:
                tally.stop = STOP_ENDED


def _results(names: list[str], tallies: list[TaskTally], fixed: dict[int, list[Any]]) -> list[TaskResult]:
    """One frozen :class:`~tunecache.search.full.results.TaskResult` per task, in task order."""
    results = []
    for i, (name, tally) in enumerate(zip(names, tallies, strict=True)):
        assert tally.stop is not None  # _settle_stop_reasons gave every task a stop reason
        results.append(
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
        )
    return results
