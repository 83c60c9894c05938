"""The search ladder for store misses: plan reuse -> narrowed search -> full search.

:func:`search_misses` is the one entry point ``tunecache.compile`` and ``tunecache.warm`` use
for tasks the store could not serve. Each rung commits what it measures to the store through
the MetaSchedule adapter, so a crash loses at most the round in flight.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tunecache.tvm_layer.database import make_database, reraise_store_error
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.store import Store

__all__ = ["MissTask", "MissOutcome", "search_misses", "plan_and_execute", "REMEASURE_SHARE"]

#: Share of a time budget kept for re-measuring the bests of the searched tasks.
REMEASURE_SHARE = 0.1


@dataclass(frozen=True)
class MissTask:
    """A task the store missed: its key, name, weight and TIR module (a TVM object)."""

    key: WorkloadKey
    name: str
    weight: float
    mod: Any


@dataclass(frozen=True)
class MissOutcome:
    """What the ladder did for one task.

    Attributes
    ----------
    outcome
        ``reused`` or ``tuned`` when a valid program was committed, else ``fallback``.
    trials, seconds
        Measurements and wall time spent on the task.
    source
        For ``reused``: the workload whose program was the starting point.
    note
        Why a task fell back, or how it was searched.
    latency_s
        The best latency the search measured (before re-measurement), if any.
    """

    outcome: str
    trials: int
    seconds: float
    source: str | None = None
    note: str = ""
    latency_s: float | None = None


def search_misses(
    tasks: Sequence[MissTask],
    target: Any,
    store: Store,
    hardware: HardwareKey,
    *,
    trials_per_task: int,
    reuse_trials: int | None = None,
    reuse: bool = True,
    escalate_below: float | None = None,
    bridges: bool = False,
    time_budget_s: float | None = None,
    seed: int | None = None,
    work_dir: str | Path | None = None,
    progress: Callable[[Any], None] | None = None,
) -> dict[WorkloadKey | str, MissOutcome]:
    """Search programs for store misses and commit them; return an outcome per task key.

    Parameters
    ----------
    tasks
        The missed tasks (distinct keys).
    target, hardware
        The TVM target and the hardware key records are committed under.
    store
        Where measurements are committed (every candidate, failures included).
    trials_per_task
        Trial budget of a full search per task.
    reuse_trials
        Budget of a narrowed reuse search (default: a quarter of ``trials_per_task``, >= 4).
    reuse
        Plan reuse (stored programs and other misses as sources) and run narrowed searches;
        ``False`` runs full search on every task (e.g. ``tune="always"``).
    escalate_below
        Escalate a reused program to full search when its throughput is below this fraction
        of its source's (default :data:`tunecache.search.execute.DEFAULT_ESCALATE_BELOW`).
    bridges
        Let the plan tune bridge operators (off for compile: a bridge is extra work a single
        model rarely repays; ``tunecache warm`` turns it on).
    time_budget_s
        Wall-clock budget for all tasks together, re-measuring the bests included
        (:data:`REMEASURE_SHARE` of it is kept for that when reuse is planned).
    seed
        Search seed (``None``: random).
    work_dir
        MetaSchedule's logs and artifacts; a temporary directory (deleted after) by default.
    progress
        Receives :class:`tunecache.search.full.SearchProgress` events.
    """
    from tunecache.search.full import FullSearchTask, tune_tasks

    if not tasks:
        return {}
    if reuse:
        return _plan_and_execute(tasks, target, store, hardware, trials_per_task=trials_per_task,
                                 reuse_trials=reuse_trials or max(4, trials_per_task // 4), bridges=bridges,
                                 escalate_below=escalate_below,
                                 time_budget_s=time_budget_s, seed=seed, work_dir=work_dir, progress=progress)
    own_dir = work_dir is None
    wd = Path(tempfile.mkdtemp(prefix="tunecache-")) if own_dir else Path(work_dir)  # type: ignore[arg-type]
    db = make_database(store, hardware, target, names={t.key.shash: t.name for t in tasks})
    try:
        results = tune_tasks(
            [FullSearchTask(t.name, t.mod, float(t.weight)) for t in tasks],
            target,
            db,
            trials_per_task=trials_per_task,
            time_budget_s=time_budget_s,
            seed=seed,
            work_dir=str(wd),
            progress=progress,
        )
    except RuntimeError as err:
        reraise_store_error(db, err)
        raise
    finally:
        if own_dir:
            shutil.rmtree(wd, ignore_errors=True)
    out: dict[WorkloadKey, MissOutcome] = {}
    for t, r in zip(tasks, results):
        if r.valid_trials > 0:
            out[t.key] = MissOutcome("tuned", r.trials, r.seconds, note="full search", latency_s=r.best_latency_s)
            store.mark_done(t.key, hardware)  # a warm treats this task as done
        else:
            why = "no candidate built and ran" if r.trials else "the budget ran out before this task was measured"
            out[t.key] = MissOutcome("fallback", r.trials, r.seconds, note=why)
    return out


def plan_and_execute(tasks: Sequence[MissTask], target: Any, store: Store, hardware: HardwareKey, *,
                     trials_per_task: int, reuse_trials: int, bridges: bool, escalate_below: float | None = None,
                     time_budget_s: float | None = None, seed: int | None = None, work_dir: Any = None,
                     progress: Any = None, transfer: bool = True) -> tuple[Any, dict[str, Any]]:
    """Plan reuse over ``tasks``, execute the plan, re-measure the bests; return the plan and its steps.

    Returns
    -------
    (ModelPlan, dict)
        The :class:`~tunecache.reuse.planner.ModelPlan` and a
        :class:`~tunecache.search.execute.StepOutcome` per plan node (tasks and bridges).
        Benchmarks use the plan to trace each reused task back to the full search it came from.
        ``transfer``: see :func:`~tunecache.search.execute.execute_plan`. ``time_budget_s``
        covers planning, the searches and re-measuring the bests (the last
        :data:`REMEASURE_SHARE` of it).
    """
    from tunecache.cli.plan import make_plan
    from tunecache.tvm_layer.bridges import materialize_bridge
    from tunecache.search.execute import DEFAULT_ESCALATE_BELOW, execute_plan
    from tunecache.tvm_layer.measure import make_builder

    start = time.time()
    mp = make_plan(list(tasks), target, hardware, store, bridges=bridges, full_trials=float(trials_per_task))
    by_key = {t.key: t for t in tasks}
    mods = {node: by_key[pt.key].mod for node, pt in mp.tasks.items()}
    mods.update({n: materialize_bridge(nest, nest.extents) for n, nest in mp.bridges.items()})
    builder = make_builder()  # one pool of build workers for the plan and the re-measuring
    try:
        steps = execute_plan(mp, mods, target, store, hardware, full_trials=trials_per_task, reuse_trials=reuse_trials,
                             escalate_below=DEFAULT_ESCALATE_BELOW if escalate_below is None else escalate_below,
                             time_budget_s=None if time_budget_s is None else (1 - REMEASURE_SHARE) * time_budget_s,
                             seed=seed, work_dir=work_dir, progress=progress, transfer=transfer, builder=builder)
        _remeasure_bests([(by_key[pt.key], steps[n]) for n, pt in mp.tasks.items() if n in steps], target, store,
                         hardware, deadline=None if time_budget_s is None else start + time_budget_s, builder=builder)
    finally:
        builder.close()
    return mp, steps


def _plan_and_execute(tasks: Sequence[MissTask], target: Any, store: Store, hardware: HardwareKey, *,
                      trials_per_task: int, reuse_trials: int, bridges: bool, escalate_below: float | None,
                      time_budget_s: float | None,
                      seed: int | None, work_dir: Any, progress: Any) -> dict[WorkloadKey | str, MissOutcome]:
    """Rungs 2 and 3: plan reuse over the misses, then narrowed searches and full searches."""
    mp, steps = plan_and_execute(tasks, target, store, hardware, trials_per_task=trials_per_task,
                                 reuse_trials=reuse_trials, bridges=bridges, escalate_below=escalate_below,
                                 time_budget_s=time_budget_s, seed=seed, work_dir=work_dir, progress=progress)
    out: dict[WorkloadKey | str, MissOutcome] = {}
    for node, o in steps.items():
        outcome = o.outcome if o.outcome in ("tuned", "reused", "fallback") else "tuned"
        note = o.note if node not in mp.bridges else f"bridge {list(mp.bridges[node].extents)}: {o.note}"
        out[o.key if node in mp.tasks else node] = MissOutcome(outcome, o.trials, o.seconds, o.source, note, o.latency_s)
    return out


def _remeasure_bests(done: Sequence[tuple[MissTask, Any]], target: Any, store: Store, hardware: HardwareKey,
                     k: int = 2, deadline: float | None = None, builder: Any = None) -> None:
    """Re-measure the best records of every searched task before they serve as its stored best.

    A single tuning measurement is sometimes a lucky one (../shared/TVM_NOTES.md): the store's
    ranking latency becomes the median of a fresh, repeated measurement (raw run times stay in
    the record for the cost model). Tasks go heaviest first (weight x latency); none starts
    after ``deadline`` (a ``time.time()``), so a time budget covers re-measuring too.
    """
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.search.remeasure import remeasure_best

    todo = [(t, o) for t, o in done if o.outcome in ("tuned", "reused") and o.trials > 0]
    todo.sort(key=lambda to: -to[0].weight * (to[1].latency_s or 0.0))
    if not todo or (deadline is not None and time.time() >= deadline):
        return
    own_builder = builder is None
    builder, runner = builder or make_builder(), make_runner(repeat=10)
    try:
        for t, _o in todo:
            if deadline is not None and time.time() >= deadline:
                break
            remeasure_best(store, hardware, t.key, t.mod, target, k, runner=runner, builder=builder)
    finally:
        if own_builder:
            builder.close()
