"""From models to a reuse plan: the models' distinct tasks, the store's sources, the plan.

:func:`collect_tasks` imports models and merges their tasks by workload key;
:func:`make_plan` plans the store misses among them against the workloads the store already
holds (zero-cost sources), ETO-style (:func:`tunecache.reuse.planner.plan_tasks`);
:func:`scratch_plan` is the plan that searches every task in full (``tune="always"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tunecache.reuse.costs import CostModel, calibrate
from tunecache.reuse.graph import ROOT
from tunecache.reuse.planner import ModelPlan, PlanTask, plan_tasks
from tunecache.reuse.planning import Plan, PlanStep
from tunecache.store.keys import HardwareKey, WorkloadKey

__all__ = ["collect_tasks", "make_plan", "scratch_plan"]


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


def make_plan(misses: Sequence[Any], target: Any, hw: HardwareKey, store: Any, *, bridges: bool,
              full_trials: float, hits: Sequence[Any] = (), check_bridges: bool = True) -> ModelPlan:
    """Plan the store misses ``misses``; the stored workloads of ``hw`` are zero-cost sources.

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

    Returns
    -------
    ModelPlan
    """
    from tunecache.tvm_layer.bridges import bridge_checker, describe_tasks
    from tunecache.tvm_layer.convert import workload_from_json

    recs = store.records(hardware=hw, valid_only=True)
    planned = {t.key for t in misses} | {t.key for t in hits}
    stored_items = []
    for key in sorted({r.workload for r in recs} - planned, key=str):
        sw = store.get_workload(key)
        if sw is None or not sw.mod_json:
            continue
        try:
            mod = workload_from_json(WorkloadKey(key.shash, key.mod_eq), sw.mod_json).mod
        except Exception:  # noqa: BLE001 - an undecodable stored workload is simply not a source
            continue
        stored_items.append((key, sw.desc.name or key.shash[:8], 0.0, mod))
    cm = calibrate(replace(CostModel(), full_trials=full_trials, target_kind=str(target.kind.name)), recs)
    return plan_tasks(
        describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target),
        stored=describe_tasks(stored_items, target),
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
