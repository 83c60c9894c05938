"""The ladder, in one place: look up the store -> plan reuse -> search -> build -> report.

For every task of a model: a **hit** is served from the store; the misses are planned together
(a narrowed search around a similar stored or planned program where one dominates: **reused**;
else MetaSchedule's full search: **tuned**), every search commits what it measures, the bests
are re-measured; the model is built with the store's best programs (TVM's default schedule,
**fallback**, where there is none) and every task is reported. :func:`compile_model` is the
driver ``tunecache.compile`` calls; :func:`lookup` and :func:`search` are the rungs
``tunecache.warm`` shares with it.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunecache.config import DEFAULT_SEARCH, default_reuse_trials
from tunecache.errors import Interrupted
from tunecache.reuse.planner import ModelPlan
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Record
from tunecache.values import DEFAULT_ESCALATE_BELOW, TaskOutcome

__all__ = ["REMEASURE_SHARE", "Lookup", "SearchResult", "compile_model", "lookup", "search", "stored_records"]

#: Share of a time budget kept for re-measuring the bests of the searched tasks.
REMEASURE_SHARE = 0.1


@dataclass(frozen=True)
class Lookup:
    """What the store holds for a model's tasks, read once: rung 1 of the ladder.

    Attributes
    ----------
    best
        Each task's best stored record on this hardware (``None``: a miss).
    failed
        Tasks searched before on this hardware with no candidate that built and ran (e.g. a
        gather whose random index inputs are out of bounds): searching again would fail the
        same way, so unless ``tune="always"`` they are served a replayed or predicted program
        (TVM's default schedule where there is none) and never searched or queued.
    """

    best: dict[WorkloadKey, Record | None]
    failed: frozenset[WorkloadKey]

    def misses(self, tasks: Sequence[Any], tune: str) -> list[Any]:
        """The tasks to search: every task for ``tune="always"``, else the misses not failed before."""
        return [t for t in tasks if tune == "always" or (self.best[t.key] is None and t.key not in self.failed)]


def lookup(tasks: Sequence[Any], store: Any, hw: HardwareKey) -> Lookup:
    """Read each task's best stored record once, and which misses failed before."""
    best = {t.key: next(iter(store.best_k(t.key, hw, 1)), None) for t in tasks}
    failed = frozenset(t.key for t in tasks if best[t.key] is None
                       and any(r.latency_s is None and not r.stale for r in store.records(hardware=hw, workload=t.key)))
    return Lookup(best, failed)


@dataclass(frozen=True)
class SearchResult:
    """Rungs 2-3 for a set of misses: the plan, an outcome per plan node, the wall time.

    ``plan`` is cut to what its steps may spend (:func:`tunecache.search.budget.bounded_plan`);
    the search spent at most :attr:`max_trials` (:func:`tunecache.search.budget.plan_budget`).
    """

    plan: ModelPlan
    outcomes: dict[str, TaskOutcome]
    seconds: float
    max_trials: int = 0  # the most the plan could spend (tunecache.search.budget.plan_budget)

    @property
    def trials(self) -> int:
        """Trials spent in all (every plan node's outcome)."""
        return sum(o.trials for o in self.outcomes.values())

    @property
    def estimated_trials(self) -> int:
        """The trials the planner expected the plan to spend (no escalation)."""
        return math.ceil(self.plan.plan.total_trials - 1e-9)

    def for_task(self, key: WorkloadKey) -> TaskOutcome | None:
        """The outcome of the planned task with workload ``key``, if it was planned."""
        return next((self.outcomes.get(n) for n, t in self.plan.tasks.items() if t.key == key), None)


def stored_records(store: Any, hw: HardwareKey, keys: Sequence[WorkloadKey]) -> int:
    """How many records ``store`` holds for the workloads ``keys`` on ``hw`` (what a rerun
    of an interrupted search resumes from)."""
    return sum(store.count_records(hw, workload=k) for k in set(keys))


def search(misses: Sequence[Any], target: Any, store: Any, hw: HardwareKey, *, trials_per_task: int,
           reuse_trials: int | None = None, reuse: bool = True, bridges: bool = False,
           escalate_below: float | None = None, time_budget_s: float | None = None, seed: int | None = None,
           work_dir: str | Path | None = None, progress: Any = None,
           transfer: bool = True, hits: Sequence[Any] = (), search_kind: str = DEFAULT_SEARCH) -> SearchResult:
    """Plan the misses, execute the plan, re-measure the bests: one path for every search.

    ``reuse=False`` (``tune="always"``) plans a full search of every task, each with its whole
    budget (:attr:`~tunecache.values.SearchContext.fresh`). ``time_budget_s`` covers planning,
    the searches and re-measuring the bests (the last :data:`REMEASURE_SHARE` of it).
    ``misses`` are tasks (``key``, ``name``, ``weight``, ``mod``), ``hits`` the tasks the store
    served (named in the plan, never its sources). ``progress`` receives the search's progress
    events (a callable); a :class:`tunecache.progress.ProgressPrinter` is also told the plan's
    size (``start``) and every finished step (``step``). No task gets more than
    ``trials_per_task`` trials, so the search no more than
    :func:`tunecache.search.budget.plan_budget`. ``search_kind`` is ``compile``'s ``search``. Other parameters as in
    :func:`tunecache.compile` and :class:`~tunecache.values.SearchContext`.

    A Ctrl-C stops the search after the measurements in flight (:mod:`tunecache.interrupt`):
    :class:`~tunecache.errors.Interrupted` is raised with the trials spent and the records kept.
    """
    from tunecache.interrupt import stop_on_interrupt
    from tunecache.planning import make_plan, scratch_plan
    from tunecache.search.budget import bounded_plan, plan_budget
    from tunecache.search.execute import execute_plan, search_context
    from tunecache.search.remeasure import remeasure_plan
    from tunecache.tvm_layer.bridges import materialize_bridge

    start = time.time()
    reuse_trials = reuse_trials or default_reuse_trials(trials_per_task)
    if reuse:
        mp = make_plan(misses, target, hw, store, bridges=bridges, full_trials=float(trials_per_task), hits=hits)
    else:
        mp = scratch_plan(misses, target, full_trials=float(trials_per_task))
    mp = bounded_plan(mp, trials_per_task, reuse_trials)
    max_trials = plan_budget(mp, trials_per_task)
    if progress is not None and hasattr(progress, "start"):
        progress.start(len(mp.plan.steps), max_trials, {s.node: s.est_trials for s in mp.plan.steps})
    by_key = {t.key: t for t in misses}
    mods = {node: by_key[pt.key].mod for node, pt in mp.tasks.items()}
    mods.update({n: materialize_bridge(nest, nest.extents) for n, nest in mp.bridges.items()})
    try:
        with stop_on_interrupt(), search_context(
                target, store, hw, full_trials=trials_per_task, reuse_trials=reuse_trials, work_dir=work_dir,
                time_budget_s=None if time_budget_s is None else (1 - REMEASURE_SHARE) * time_budget_s,
                escalate_below=DEFAULT_ESCALATE_BELOW if escalate_below is None else escalate_below,
                seed=seed, progress=progress, fresh=not reuse, search=search_kind) as ctx:
            outcomes = execute_plan(mp, mods, ctx, transfer=transfer, on_step=getattr(progress, "step", None))
            remeasure_plan(mp, misses, outcomes, ctx, deadline=None if time_budget_s is None else start + time_budget_s)
    except Interrupted as stop:
        raise Interrupted(stop.trials, stored_records(store, hw, [t.key for t in misses])) from stop
    return SearchResult(mp, outcomes, time.time() - start, max_trials)


def compile_model(imported: Any, target: Any, hw: HardwareKey, store: Any, *, tune: str, trials_per_task: int,
                  reuse_trials: int | None = None, time_budget_s: float | None = None, seed: int | None = None,
                  work_dir: Any = None,
                  progress: bool = True, escalate_below: float | None = None,
                  cache: Any = None, model_name: str = "",
                  search: str = DEFAULT_SEARCH) -> tuple[Any, Path | None, Any]:
    """The whole ladder for one imported model; return ``(executable, library path, report)``.

    ``tune``, ``trials_per_task``, ... as in :func:`tunecache.compile`; ``cache`` is a
    :class:`tunecache.libcache.LibraryCache` or ``None``; ``model_name`` names the model in
    the tuning queue (``tune="background"``). The report is a
    :class:`~tunecache.report.CompileReport` with the compile's context and timings.
    """
    from tunecache.gcpause import gc_paused

    with gc_paused():  # all but a search (tunecache.gcpause)
        return _ladder(imported, target, hw, store, tune=tune, trials_per_task=trials_per_task,
                       reuse_trials=reuse_trials, time_budget_s=time_budget_s, seed=seed, work_dir=work_dir,
                       progress=progress,
                       escalate_below=escalate_below, cache=cache, model_name=model_name, search_kind=search)


def _ladder(imported: Any, target: Any, hw: HardwareKey, store: Any, *, tune: str, trials_per_task: int,
            reuse_trials: int | None, time_budget_s: float | None, seed: int | None, work_dir: Any, progress: bool,
            escalate_below: float | None, cache: Any, model_name: str,
            search_kind: str = DEFAULT_SEARCH) -> tuple[Any, Path | None, Any]:
    """:func:`compile_model`'s steps, in order."""
    from tunecache import library
    from tunecache.gcpause import gc_running
    from tunecache.report import compile_report
    from tunecache.tvm_layer import frontend

    t0 = time.time()
    budget = {"trials_per_task": trials_per_task, "time_budget_s": time_budget_s, "tune": tune}
    model_id = frontend.model_hash(imported, target) if cache is not None else None
    # 0. a model compiled before whose tasks are all hits: its library, without preparing it again
    if model_id is not None and tune != "always":
        known = library.load_known(model_id, target, store, hw, cache, lookup)
        if known is not None:
            report = compile_report(known.tasks, known.lookup, None, known.lookup.best, tune, store, hw)
            return known.executable, known.path, report.finish(target, hw, t0, 0.0, budget, known.how, t0)

    mod = frontend.prepare_for_tuning(imported, target)
    tasks = frontend.extract_tasks(mod, target)
    found = lookup(tasks, store, hw)                                                  # 1. hits
    misses = found.misses(tasks, tune)
    miss_keys = {t.key for t in misses}
    result = None
    if misses and tune in ("auto", "always"):                                         # 2-3. plan, search
        library.commit_workloads(misses, store)
        with gc_running(), _progress(progress, time_budget_s) as printer:
            result = search(misses, target, store, hw, trials_per_task=trials_per_task, reuse_trials=reuse_trials,
                            reuse=tune != "always",
                            escalate_below=escalate_below, time_budget_s=time_budget_s, seed=seed,
                            work_dir=work_dir, progress=printer, hits=[t for t in tasks if t.key not in miss_keys],
                            search_kind=search_kind)
            if printer is not None:
                printer.close(result.trials)
    replays = {}
    queued: frozenset[WorkloadKey] = frozenset()
    # A task searched before with no candidate that ran (a gather whose random indices fall out
    # of bounds when measured) is served a replayed or predicted program in every mode, and
    # never queued: searching it again fails the same way.
    failed = [t for t in tasks if t.key in found.failed and t not in misses]
    unserved = (misses if tune in ("never", "background") else []) + failed
    if unserved:                                                                      # 2'. replay
        from tunecache.replay import replay_misses

        replays = replay_misses(unserved, target, hw, store)
        if tune == "background" and misses:                                           # 2''. queue
            queued = _queue(misses, replays, store, hw, model_name)
    final = dict(found.best)
    final.update({t.key: next(iter(store.best_k(t.key, hw, 1)), None) for t in misses})  # searched: read again
    t_build = time.time()                                                             # 4. build
    with frontend.degraded_kernels() as degraded:
        executable, path, how = library.build(mod, target, store, hw, tasks, final, cache, model_id,
                                              {k: r.record for k, r in replays.items() if r.record is not None})
    report = compile_report(tasks, found, result, final, tune, store, hw, replays, queued)  # 5. report
    report = report.annotate(frontend.preparation_notes(mod), degraded)
    if result is not None:
        budget["estimated_trials"] = result.estimated_trials
        budget["max_trials"] = result.max_trials
    return executable, path, report.finish(target, hw, t0, result.seconds if result else 0.0, budget, how, t_build)


def _queue(misses: Sequence[Any], replays: dict[WorkloadKey, Any], store: Any, hw: HardwareKey,
           model_name: str) -> frozenset[WorkloadKey]:
    """Queue a background compile's misses for ``tunecache worker``; return the keys queued.

    A read-only store queues nothing (the report says so through the outcome notes)."""
    import logging

    from tunecache import library
    from tunecache.errors import ReadOnlyStoreError
    from tunecache.queueing import queue_entries

    try:
        library.commit_workloads(misses, store)
        store.enqueue(queue_entries(misses, replays, hw, model_name))
    except ReadOnlyStoreError as err:
        logging.getLogger("tunecache").warning("tunecache: nothing queued for tuning: %s", err)
        return frozenset()
    return frozenset(t.key for t in misses if not store.is_done(t.key, hw))


@contextlib.contextmanager
def _progress(show: bool, time_budget_s: float | None) -> Any:
    """A progress line on stderr while searching (``None`` when not shown); the search tells it
    the plan's size. Closed with the final count by the caller, or here (interrupted, failed)."""
    from tunecache.progress import ProgressPrinter

    printer = ProgressPrinter(label="tuning", time_budget_s=time_budget_s) if show else None
    try:
        yield printer
    finally:
        if printer is not None:
            printer.close()
