"""From models to a reuse plan: the models' distinct tasks, the store's sources, the plan.

:func:`collect_tasks` imports models and merges their tasks by workload key;
:func:`make_plan` plans the store misses among them against the workloads the store already
holds (zero-cost sources), ETO-style (:func:`tunecache.reuse.planner.plan_tasks`), choosing those
sources through the store's reuse index (:func:`reuse_sources`, :func:`index_workloads`);
:func:`scratch_plan` is the plan that searches every task in full (``tune="always"``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import Any

from tunecache.reuse.costs import CostModel, calibrate
from tunecache.reuse.graph import ROOT
from tunecache.reuse.index import UNREADABLE_GROUP, entry_of, group_of, log_work, task_of
from tunecache.reuse.planner import ModelPlan, PlanTask, plan_tasks
from tunecache.reuse.planning import Plan, PlanStep
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.values import ReuseEntry

__all__ = ["collect_tasks", "index_store", "index_workloads", "make_plan", "reuse_sources", "scratch_plan",
           "update_index"]

log = logging.getLogger("tunecache")


def collect_tasks(specs: Sequence[str], target: Any) -> list[Any]:
    """Import each model spec and return its tasks deduplicated by workload key (weights summed).

    Parameters
    ----------
    specs
        Model specs as :func:`tunecache.models.load_model_spec` reads them.
    target
        The ``tvm.target.Target`` the models are prepared for.

    Returns
    -------
    list of tunecache.tvm_layer.frontend.TaskInfo
    """
    from tunecache.models import load_model_spec
    from tunecache.tvm_layer import frontend

    merged: dict[WorkloadKey, Any] = {}
    for spec in specs:
        model, inputs, _name = load_model_spec(spec)
        mod = frontend.prepare_for_tuning(frontend.import_model(model, inputs), target)
        for t in frontend.extract_tasks(mod, target):
            if t.key in merged:
                merged[t.key] = replace(merged[t.key], weight=merged[t.key].weight + t.weight)
            else:
                merged[t.key] = t
    return list(merged.values())


#: Reuse sources asked of the store per miss, on each side of its size (nearest first): the
#: planner's fan-in, which keeps planning independent of the store's size.
SOURCES_PER_MISS = 8

#: Stored workloads a plan on a read-only store describes when the reuse index lacks them
#: (each costs a decode and a sketch analysis, ~25 ms, and cannot be kept; a writable store
#: indexes them all, once per workload and target).
INDEX_PER_PLAN = 2000

#: Newest records read to calibrate the cost model's seconds per trial.
CALIBRATION_RECORDS = 2000


def index_workloads(store: Any, hw: HardwareKey, target: Any, *, limit: int | None = None) -> list[ReuseEntry]:
    """Make the reuse-index entries of the stored workloads of ``hw`` that lack one.

    A workload gets its entry when a plan describes it (see :func:`make_plan`); this catches
    the rest: stores written before the index existed, imported MetaSchedule databases, bridges.
    Each is decoded and analysed once; the entries are committed when the store is writable.

    Parameters
    ----------
    store
        The store.
    hw, target
        The hardware key whose workloads are indexed, and its ``tvm.target.Target``.
    limit
        Most workloads indexed in this call (``None``: all).

    Returns
    -------
    list of ReuseEntry
        The entries of the unindexed workloads (also when the store could not keep them).
    """
    out: list[ReuseEntry] = []
    batch = 200
    while limit is None or len(out) < limit:
        want = batch if limit is None else min(batch, limit - len(out))
        todo = store.unindexed_workloads(hw, limit=want)
        made, fresh = _index_batch(store, hw, target, todo)
        out += made
        if store.read_only or len(todo) < want or not fresh:
            break  # a read-only store would hand the same workloads back
        if len(out) >= 1000 and len(out) % 1000 < batch:
            log.info("tunecache: indexed %d stored workloads for reuse so far", len(out))
    if out:
        log.info("tunecache: indexed %d stored workloads for reuse (once per workload)", len(out))
        if store.read_only:
            log.warning("tunecache: %d stored workloads have no reuse-index entry and the store is "
                        "read-only; its owner can add them with `tunecache db upgrade`", len(out))
    return out


def _index_batch(store: Any, hw: HardwareKey, target: Any, todo: Sequence[Any]) -> tuple[list[ReuseEntry], int]:
    """Describe one batch of unindexed workloads; commit their entries when the store is writable.

    Returns the batch's entries and how many of them were made here (not found in the index).
    """
    from tunecache.tvm_layer import convert
    from tunecache.tvm_layer.bridges import describe_tasks

    if not todo:
        return [], 0
    known = {e.workload: e for e in store.reuse_entries(hw.target_id, [w.key for w in todo])}
    fresh: list[ReuseEntry] = []
    for sw in todo:
        if sw.key in known:
            continue
        try:
            mod = convert.workload_from_json(sw.key, sw.mod_json).mod
            (task,) = describe_tasks([(sw.key, sw.desc.name or sw.key.shash[:8], 0.0, mod)], target)
            fresh.append(entry_of(task, hw.target_id))
        except Exception as err:  # noqa: BLE001 - an unreadable stored workload is never a source
            log.debug("tunecache: stored workload %s is not a reuse source: %s", sw.key, err)
            fresh.append(ReuseEntry(sw.key, hw.target_id, sw.desc.name, sw.desc.family, UNREADABLE_GROUP,
                                    0.0, "{}", "", False))
    if fresh and not store.read_only:
        store.commit_reuse_entries(fresh)
    return list(known.values()) + fresh, len(fresh)


def index_store(store: Any, *, hardware: Collection[str] | None = None,
                on_progress: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Fill the reuse index of every hardware key of ``store`` whose target this TVM can build.

    ``tunecache db upgrade`` runs it after the schema upgrade (a store written before the index
    existed gets it in full); later plans index only what is new.

    Parameters
    ----------
    store
        A writable store.
    hardware
        Only these hardware ids (``None``: every hardware key with records).
    on_progress
        Called with a hardware key's description and the entries made for it, per batch.

    Returns
    -------
    dict
        Hardware id -> entries made (``-1`` where its target cannot be built here).
    """
    import json

    from tunecache.tvm_layer.target import resolve_target

    out: dict[str, int] = {}
    for hw in store.hardware_keys():
        if hardware is not None and hw.id not in hardware:
            continue
        try:
            target = resolve_target(json.loads(hw.target))
        except Exception as err:  # noqa: BLE001 - another machine's target: its owner indexes it
            log.warning("tunecache: not indexing %s: its target cannot be built here (%s)", hw.describe(), err)
            out[hw.id] = -1
            continue
        made = 0
        while True:
            batch = index_workloads(store, hw, target, limit=200)
            made += len(batch)
            if on_progress is not None and batch:
                on_progress(hw.describe(), made)
            if len(batch) < 200:
                break
        out[hw.id] = made
    return out


def update_index(store: Any, hw: HardwareKey, target: Any, described: Sequence[PlanTask]) -> list[ReuseEntry]:
    """Bring the reuse index up to date before choosing sources for ``described`` misses.

    The misses' own entries are committed (once tuned, they are the next model's sources), and
    the stored workloads the index lacks are indexed (:func:`index_workloads`).

    Returns
    -------
    list of ReuseEntry
        Entries a read-only store could not keep, for :func:`reuse_sources`' ``extra``
        (empty for a writable store, which has them all).
    """
    if store.read_only:
        return index_workloads(store, hw, target, limit=INDEX_PER_PLAN)
    store.commit_reuse_entries(entry_of(t, hw.target_id) for t in described)
    index_workloads(store, hw, target)
    return []


def reuse_sources(store: Any, hw: HardwareKey, misses: Sequence[PlanTask], *, exclude: Collection[WorkloadKey] = (),
                  extra: Sequence[ReuseEntry] = (), per_miss: int = SOURCES_PER_MISS) -> list[PlanTask]:
    """Return the stored workloads the planner considers as sources of ``misses``.

    For each miss, the store's ``per_miss`` nearest entries of its reuse group on each side of
    its size (:meth:`~tunecache.store.BaseStore.reuse_candidates`), plus the same choice among
    ``extra`` entries (those :func:`index_workloads` made that the store could not keep).

    Parameters
    ----------
    store, hw
        The store and the hardware key the sources' programs must be measured on.
    misses
        The described misses.
    exclude
        Workloads that are never sources (the tasks being planned, the hits).
    extra
        Entries to choose from besides the store's.
    per_miss
        Fan-in per miss and side.

    Returns
    -------
    list of PlanTask
        Distinct workloads, weight 0.
    """
    skip = set(exclude)
    chosen: dict[WorkloadKey, PlanTask] = {}
    for t in misses:
        group, size = group_of(t.nest, t.sketch), log_work(t.nest)
        found = list(store.reuse_candidates(hw, group, size, limit=per_miss, exclude=skip))
        near = sorted((e for e in extra if e.group == group and e.workload not in skip),
                      key=lambda e: (abs(e.log_work - size), str(e.workload)))
        found += [e for e in near if e.log_work >= size][:per_miss] + [e for e in near if e.log_work < size][:per_miss]
        for e in found:
            task = task_of(e)
            if task is not None:
                chosen.setdefault(e.workload, task)
    return sorted(chosen.values(), key=lambda t: str(t.key))


def make_plan(misses: Sequence[Any], target: Any, hw: HardwareKey, store: Any, *, bridges: bool,
              full_trials: float, hits: Sequence[Any] = (), check_bridges: bool = True,
              per_miss: int = SOURCES_PER_MISS) -> ModelPlan:
    """Plan the store misses ``misses``; the stored workloads of ``hw`` are zero-cost sources.

    Sources come from the store's reuse index, ``per_miss`` nearest per miss and side of its
    size (:func:`reuse_sources`): planning reads and decodes no stored workload it does not
    consider, however large the store. The misses' own entries are committed to the index so
    that, once tuned, they are found as sources.

    Parameters
    ----------
    misses
        Tasks the store has no program for (``key``, ``name``, ``weight``, ``mod``), distinct keys.
    target, hw
        The target and the hardware key whose stored workloads may be reused.
    store
        The store (any :class:`tunecache.store.BaseStore`).
    bridges
        Consider bridge operators; ``check_bridges`` materializes each and compares its sketch.
    full_trials
        Trial budget of one full search (the cost of tuning a task from scratch).
    hits
        The tasks the store serves: named in the plan, not planned, and not reuse sources (as
        tasks of the model they are reported as hits).
    per_miss
        Reuse sources considered per miss and side.

    Returns
    -------
    ModelPlan
    """
    from tunecache.tvm_layer.bridges import bridge_checker, describe_tasks

    described = describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target)
    extra = update_index(store, hw, target, described)
    planned = {t.key for t in misses} | {t.key for t in hits}
    stored = reuse_sources(store, hw, described, exclude=planned, extra=extra, per_miss=per_miss)
    recent = store.recent_provenance(hw, limit=CALIBRATION_RECORDS)
    cm = calibrate(replace(CostModel(), full_trials=full_trials, target_kind=str(target.kind.name)), recent)
    return plan_tasks(
        described,
        stored=stored,
        cost_model=cm,
        bridges=bridges,
        hits=[t.name for t in hits],
        bridge_check=bridge_checker(target) if (bridges and check_bridges) else None,
    )


def scratch_plan(misses: Sequence[Any], target: Any, *, full_trials: float) -> ModelPlan:
    """Return the plan that searches every task of ``misses`` in full (no reuse, no bridges).

    Parameters
    ----------
    misses
        Tasks (``key``, ``name``, ``weight``, ``mod``), distinct keys.
    target
        The target whose sketches describe the tasks.
    full_trials
        Trial budget of one full search.

    Returns
    -------
    ModelPlan
    """
    from tunecache.tvm_layer.bridges import describe_tasks

    tasks: list[PlanTask] = describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target)
    steps = tuple(PlanStep(t.node, ROOT, "root", "task", float(full_trials)) for t in tasks)
    cm = replace(CostModel(), full_trials=full_trials, target_kind=str(target.kind.name))
    return ModelPlan(plan=Plan(steps, scratch_trials=float(full_trials) * len(tasks)),
                     tasks={t.node: t for t in tasks}, cost_model=cm)
