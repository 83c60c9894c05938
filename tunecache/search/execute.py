"""Execute a reuse plan: full searches (tasks and bridges) first, then reuse children after their
sources are committed, with claims so two warmers never tune the same task at once, and
escalation to full search when a reused program is clearly worse than its source.

Every measurement is committed to the store as it lands, and a finished task is marked done, so
an interrupted run resumes where it stopped: done tasks are hits, a task with records but no done
mark is searched again with what is left of its budget.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from tunecache import config
from tunecache.reuse.graph import ROOT
from tunecache.reuse.planner import ModelPlan
from tunecache.tvm_layer.database import make_database, reraise_store_error
from tunecache.store.claims import Lease, default_holder, holder_is_dead
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance

__all__ = [
    "StepOutcome",
    "NodeSpec",
    "execute_plan",
    "search_full",
    "search_reuse",
    "run_node",
    "node_specs",
    "full_search_deadline",
]

#: Escalate a reused program whose throughput is below this fraction of its source's.
DEFAULT_ESCALATE_BELOW = 0.7
#: Rough cost of a narrowed search on a small CPU (operator sets: 12 trials in 3-5 s), used
#: only to keep part of a time budget for the reuse children while full searches run.
REUSE_SECONDS_PER_TRIAL = 0.4
REUSE_SECONDS_PER_SEARCH = 1.0
#: A time budget with at least this many seconds left once every step of a plan ran goes to one
#: more full search of the plan's tasks (:func:`top_up`).
TOP_UP_MIN_S = 10.0


def full_search_deadline(deadline: float | None, reuse_left: int, reuse_trials: int,
                         now: float | None = None) -> float | None:
    """Return when the full searches of a plan pass must stop so the reuse children still fit.

    Without it a time budget went to the roots' full searches, which use all the time they are
    given, and every task reused from them fell back to TVM's default schedule. The reserve is
    ``reuse_left`` narrowed searches at :data:`REUSE_SECONDS_PER_TRIAL` a trial plus
    :data:`REUSE_SECONDS_PER_SEARCH`; the full searches always keep at least half of the time
    left (their first pass measures every root once).

    Examples
    --------
    >>> full_search_deadline(1000.0, 10, 8, now=700.0)
    958.0
    >>> full_search_deadline(1000.0, 100, 8, now=700.0)  # reserve larger than half
    850.0
    >>> full_search_deadline(None, 10, 8) is None
    True
    """
    if deadline is None:
        return None
    now = time.time() if now is None else now
    reserve = reuse_left * (reuse_trials * REUSE_SECONDS_PER_TRIAL + REUSE_SECONDS_PER_SEARCH)
    return max(deadline - reserve, now + 0.5 * max(0.0, deadline - now))


@dataclass(frozen=True)
class StepOutcome:
    """What happened to one plan node.

    ``outcome`` is ``tuned`` (full search), ``reused`` (narrowed search), ``hit`` (already done
    in the store), or ``fallback`` (no valid program).
    """

    node: str
    name: str
    key: WorkloadKey
    outcome: str
    trials: int = 0
    seconds: float = 0.0
    source: str | None = None
    note: str = ""
    escalated: bool = False
    latency_s: float | None = None


@dataclass(frozen=True)
class NodeSpec:
    """One plan node as the per-node search functions see it.

    Attributes
    ----------
    node
        Plan node id.
    name
        Task name (the node id for a bridge).
    key
        Workload key.
    mod
        The node's TIR ``IRModule``; ``None`` for a source that is only read from the store
        (a stored workload).
    weight
        Calls per model run, plus those of the tasks reused from it (full search's scheduler weight).
    work
        Floating-point work of one call (escalation compares throughput with its source's).
    """

    node: str
    name: str
    key: WorkloadKey
    mod: Any = None
    weight: float = 1.0
    work: float = 0.0


def _prov(hw: HardwareKey, kind: str, source: WorkloadKey | None = None, source_uid: str | None = None) -> Provenance:
    import tunecache

    return Provenance(kind=kind, source_workload=str(source) if source else None, source_record=source_uid,
                      host=config.current_host(), user=config.current_user(),
                      tunecache_version=tunecache.__version__, tvm_version=hw.tvm_version)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(1.0, deadline - time.time())


def search_full(
    specs: Sequence[NodeSpec],
    target: Any,
    store: Any,
    hardware: HardwareKey,
    *,
    full_trials: int,
    builder: Any,
    runner: Any,
    work_dir: str | os.PathLike[str],
    seed: int | None = None,
    deadline: float | None = None,
    progress: Callable[[Any], None] | None = None,
    note: str = "full search",
    cost_model: Any = None,
) -> list[StepOutcome]:
    """Full search of ``specs`` in one task-scheduler run; one outcome per spec, in order.

    A spec's budget is ``full_trials`` less the records it already has (a resumed search).
    Claims and done marks are the caller's business. ``deadline`` is a ``time.time()`` after
    which no new search round starts. ``cost_model``: an XGBoost model to search with and keep
    training (shared by every full search of a plan; default a fresh one).
    """
    from tunecache.search.full import FullSearchTask, tune_tasks

    budgets = {s.node: max(0, full_trials - store.count_records(hardware, workload=s.key)) for s in specs}
    todo = [s for s in specs if budgets[s.node] > 0]
    done: dict[str, StepOutcome] = {}
    for s in specs:
        if budgets[s.node] == 0:
            best = store.best_k(s.key, hardware, 1)
            done[s.node] = StepOutcome(s.node, s.name, s.key, "tuned" if best else "fallback",
                                       note="budget already spent (resumed)",
                                       latency_s=best[0].latency_s if best else None)
    if todo:
        db = make_database(store, hardware, target, provenance=_prov(hardware, "tuned"),
                           names={s.key.shash: s.name for s in todo})
        try:
            # A resumed task gets only what is left of its budget (a fresh one may get more: the
            # trials that converged tasks leave go to the others).
            results = tune_tasks([FullSearchTask(s.node, s.mod, s.weight,
                                                 budgets[s.node] if budgets[s.node] < full_trials else None)
                                  for s in todo], target, db,
                                 trials_per_task=max(budgets[s.node] for s in todo),
                                 max_trials_global=sum(budgets[s.node] for s in todo),
                                 time_budget_s=_remaining(deadline), seed=seed, work_dir=str(Path(work_dir) / "full"),
                                 progress=progress, builder=builder, runner=runner, cost_model=cost_model)
        except RuntimeError as err:
            reraise_store_error(db, err)
            raise
        for s, r in zip(todo, results):
            best = store.best_k(s.key, hardware, 1)
            done[s.node] = StepOutcome(s.node, s.name, s.key, "tuned" if best else "fallback", r.trials, r.seconds,
                                       note=note if best else "no candidate built and ran",
                                       latency_s=best[0].latency_s if best else None)
    return [done[s.node] for s in specs]


def search_reuse(
    spec: NodeSpec,
    source: NodeSpec,
    target: Any,
    store: Any,
    hardware: HardwareKey,
    *,
    full_trials: int,
    reuse_trials: int,
    builder: Any,
    runner: Any,
    work_dir: str | os.PathLike[str],
    escalate_below: float = DEFAULT_ESCALATE_BELOW,
    seed: int | None = None,
    deadline: float | None = None,
    progress: Callable[[Any], None] | None = None,
    cost_model: Any = None,
) -> StepOutcome:
    """Narrowed search of ``spec`` from ``source``'s best stored programs.

    Falls back to a full search when the source has no valid program, and escalates to one
    when the reused program's throughput is below ``escalate_below`` times the source's. The
    source must be committed (its records in the store) before this is called.
    """
    from tunecache.search.narrow import narrowed_search

    sources = store.best_k(source.key, hardware, 3)
    if not sources:
        (o,) = search_full([spec], target, store, hardware, full_trials=full_trials, builder=builder, runner=runner,
                           work_dir=work_dir, seed=seed, deadline=deadline, progress=progress,
                           note="source has no valid program", cost_model=cost_model)
        return o
    db = make_database(store, hardware, target, provenance=_prov(hardware, "reused", source.key, sources[0].uid),
                       names={spec.key.shash: spec.name})
    t0 = time.time()
    try:
        res = narrowed_search(sources, spec.mod, target, builder=builder, runner=runner, max_trials=reuse_trials,
                              seed=seed or 0, database=db, task_name=spec.name)
    except RuntimeError as err:
        reraise_store_error(db, err)
        raise
    secs = time.time() - t0
    best = store.best_k(spec.key, hardware, 1)
    src_tput = source.work / sources[0].latency_s if sources[0].latency_s else 0.0
    tput = spec.work / best[0].latency_s if best and best[0].latency_s else 0.0
    if not best or (src_tput > 0 and tput < escalate_below * src_tput):
        why = "no valid reused program" if not best else f"throughput {tput / src_tput:.2f}x its source's"
        # Seeded: the narrowed candidates are this workload's records already.
        (o,) = search_full([spec], target, store, hardware, full_trials=full_trials, builder=builder, runner=runner,
                           work_dir=work_dir, seed=seed, deadline=deadline, progress=progress, cost_model=cost_model)
        return replace(o, trials=o.trials + res.trials, seconds=o.seconds + secs, escalated=True,
                       source=str(source.key), note=f"escalated to full search ({why})")
    return StepOutcome(spec.node, spec.name, spec.key, "reused", res.trials, secs, source=str(source.key),
                       note=f"narrowed search from {source.name}", latency_s=best[0].latency_s)


def run_node(
    spec: NodeSpec,
    source: NodeSpec | None,
    target: Any,
    store: Any,
    hardware: HardwareKey,
    *,
    full_trials: int,
    reuse_trials: int,
    builder: Any,
    runner: Any,
    work_dir: str | os.PathLike[str],
    escalate_below: float = DEFAULT_ESCALATE_BELOW,
    seed: int | None = None,
    deadline: float | None = None,
    holder: str | None = None,
    lease_s: float = 60.0,
    wait_s: float = 3600.0,
    progress: Callable[[Any], None] | None = None,
) -> StepOutcome:
    """Do one plan node the way :func:`execute_plan` does, claims included (used by the Ray executor).

    A node done in the store is a ``hit``. Otherwise it is claimed (waiting up to ``wait_s``
    while another live warmer holds it; a dead local holder's claim is taken over), searched
    under a renewed lease (``source is None``: full search; else narrowed search from
    ``source``), and marked done unless it fell back.
    """
    holder = holder or default_holder()
    give_up = time.time() + wait_s
    while True:
        if store.is_done(spec.key, hardware):
            best = store.best_k(spec.key, hardware, 1)
            return StepOutcome(spec.node, spec.name, spec.key, "hit", note="done in the store",
                               latency_s=best[0].latency_s if best else None)
        if deadline is not None and time.time() > deadline:
            return StepOutcome(spec.node, spec.name, spec.key, "fallback", note="time budget spent")
        other = store.claim_holder(spec.key, hardware)
        steal = other if other and other != holder and holder_is_dead(other) else None
        if store.claim(spec.key, hardware, holder, lease_s, steal_from=steal):
            break
        if time.time() > give_up:
            return StepOutcome(spec.node, spec.name, spec.key, "fallback", note="claimed by another warmer")
        time.sleep(1.0)
    common = dict(full_trials=full_trials, builder=builder, runner=runner, work_dir=work_dir, seed=seed,
                  deadline=deadline, progress=progress)
    with Lease(store, hardware, [spec.key], holder, lease_s):
        if source is None:
            (o,) = search_full([spec], target, store, hardware, **common)  # type: ignore[arg-type]
        else:
            o = search_reuse(spec, source, target, store, hardware, reuse_trials=reuse_trials,
                             escalate_below=escalate_below, **common)  # type: ignore[arg-type]
        if o.outcome != "fallback":
            store.mark_done(o.key, hardware, holder)
    return o


def node_specs(mp: ModelPlan, mods: dict[str, Any]) -> dict[str, NodeSpec]:
    """Return a :class:`NodeSpec` for every task, bridge and stored node of ``mp``.

    ``mods`` holds the TIR module of every task and bridge node; stored nodes get none.
    """
    from tunecache.tvm_layer.convert import workload_of

    def served(n: str) -> float:
        """Weight of the tasks that reuse ``n``'s program, directly or down the chain."""
        return sum(float(mp.tasks[c].weight if c in mp.tasks else 0.0) + served(c) for c in mp.plan.children(n))

    specs: dict[str, NodeSpec] = {}
    for n, m in mods.items():
        # A full search's weight is what its result is worth: its own calls plus those of every
        # task reused from it (a bridge has none of its own), so the task scheduler does not
        # starve a bridge that half the model reuses.
        if n in mp.tasks:
            t = mp.tasks[n]
            specs[n] = NodeSpec(n, t.name, workload_of(m)[0], m, float(t.weight) + served(n), float(t.nest.work))
        else:
            work = float(mp.bridges[n].work) if n in mp.bridges else 0.0
            specs[n] = NodeSpec(n, n, workload_of(m)[0], m, max(1.0, served(n)), work)
    for n, s in mp.stored.items():
        specs[n] = NodeSpec(n, s.name, s.key, None, 1.0, float(s.nest.work))
    return specs


def top_up(mp: ModelPlan, specs: dict[str, NodeSpec], out: dict[str, StepOutcome], target: Any, store: Any,
           hardware: HardwareKey, **common: Any) -> dict[str, StepOutcome]:
    """Spend what a time budget has left after every step of a plan on one more full search.

    Under a time budget the roots' full searches stop early to leave time for their reuse
    children (:func:`full_search_deadline`), and a narrowed search stops as soon as its
    neighbourhood stops paying, so a plan often finishes with a fifth of its budget unused
    (resnet18, 200 s: 156-164 s). That time goes to one task-scheduler run over the tasks the plan
    tuned or reused, each weighted by its own calls, each starting from its records in the store
    (evolutionary search seeds its population from them), up to ``full_trials`` records a task.
    Returns ``out`` with the trials and seconds of the tasks searched again added to their
    outcome; the outcome kind (``tuned``/``reused``) and its source stay.
    """
    tasks = [replace(specs[n], weight=mp.tasks[n].weight) for n in mp.tasks
             if n in out and out[n].outcome in ("tuned", "reused")]
    if not tasks:
        return out
    merged = dict(out)
    for o in search_full(tasks, target, store, hardware, note="budget left after the plan", **common):
        prev = merged[o.node]
        if o.trials and o.outcome == "tuned":
            merged[o.node] = replace(prev, trials=prev.trials + o.trials, seconds=prev.seconds + o.seconds,
                                     latency_s=o.latency_s, note=f"{prev.note}; {o.trials} more trials with the "
                                                                 "time budget left after the plan")
    return merged


def execute_plan(
    mp: ModelPlan,
    mods: dict[str, Any],
    target: Any,
    store: Any,
    hardware: HardwareKey,
    *,
    full_trials: int,
    reuse_trials: int = 32,
    escalate_below: float = DEFAULT_ESCALATE_BELOW,
    time_budget_s: float | None = None,
    seed: int | None = None,
    holder: str | None = None,
    lease_s: float = 60.0,
    wait_s: float = 3600.0,
    progress: Callable[[Any], None] | None = None,
    on_step: Callable[[StepOutcome], None] | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    runner: Any = None,
    transfer: bool = True,
    builder: Any = None,
) -> dict[str, StepOutcome]:
    """Run ``mp``'s steps in order; return an outcome per node (tasks and bridges).

    Parameters
    ----------
    mp
        The plan (:func:`tunecache.reuse.planner.plan_tasks`).
    mods
        TIR module of every task and bridge node.
    target, store, hardware
        Where and what records are committed under.
    full_trials
        Budget of a full search (or of an escalation).
    reuse_trials
        Budget of a narrowed search.
    escalate_below
        Escalate when the reused program's throughput (work / latency) is below this fraction
        of its source's.
    time_budget_s
        Wall-clock budget: once spent, no new step starts (finished steps stay committed).
    holder, lease_s
        Claim holder id and lease length; claims of other holders are waited for (up to
        ``wait_s``) and taken over when their lease expires.
    on_step
        Called after every finished step (progress, resumability reporting).
    runner
        A MetaSchedule runner (e.g. an RPC runner); default the local one.
    builder
        A builder to use and leave open (its worker processes take seconds to start); default
        a new one (:func:`tunecache.tvm_layer.measure.make_builder`), closed at the end.
    transfer
        Every full search of the plan (roots, bridges, escalations) uses one XGBoost cost
        model, pre-trained on the store's records of ``hardware``
        (:func:`tunecache.search.transfer.pretrained_cost_model`) and trained further by each
        search. ``False``: a fresh model per search (MetaSchedule's default), which predicts at
        random until it has seen 100 measurements, i.e. for most of a small search.

    Notes
    -----
    Full searches that are ready together share one task-scheduler run (:func:`search_full`);
    a reuse child runs (:func:`search_reuse`) once its source is committed.
    :func:`tunecache.search.ray_executor.execute_plan_ray` runs the same per-node functions as
    Ray tasks.
    """
    from tunecache.tvm_layer.measure import make_builder, make_runner

    holder = holder or default_holder()
    start = time.time()
    deadline = None if time_budget_s is None else start + time_budget_s
    specs = node_specs(mp, mods)
    own_dir = work_dir is None
    wd = Path(tempfile.mkdtemp(prefix="tunecache-plan-")) if own_dir else Path(work_dir)  # type: ignore[arg-type]
    own_builder = builder is None
    builder = builder or make_builder()
    runner = runner or make_runner()
    common = dict(full_trials=full_trials, builder=builder, runner=runner, work_dir=wd, seed=seed, deadline=deadline,
                  progress=progress, cost_model=None)

    def share_model() -> None:
        """Pre-train the shared cost model once, when the first search starts (a resumed plan
        whose steps are all done in the store pays nothing)."""
        if transfer and common["cost_model"] is None:
            from tunecache.search.transfer import pretrained_cost_model

            common["cost_model"], _info = pretrained_cost_model(store, hardware, target)
    out: dict[str, StepOutcome] = {}

    def finish(o: StepOutcome) -> None:
        out[o.node] = o
        if o.outcome != "fallback":
            store.mark_done(o.key, hardware, holder)
        if on_step is not None:
            on_step(o)

    def over_budget() -> bool:
        return deadline is not None and time.time() > deadline

    try:
        pending = [s for s in mp.plan.steps]
        give_up = time.time() + wait_s
        while pending and not over_budget():
            ready_full, ready_reuse, waiting = [], [], []
            for s in pending:
                spec = specs[s.node]
                if store.is_done(spec.key, hardware):
                    best = store.best_k(spec.key, hardware, 1)
                    finish(StepOutcome(s.node, spec.name, spec.key, "hit", note="done in the store",
                                       latency_s=best[0].latency_s if best else None))
                    continue
                src_ok = s.source == ROOT or s.source in mp.stored or s.source in out
                other = store.claim_holder(spec.key, hardware) if src_ok else None
                steal = other if other != holder and holder_is_dead(other) else None
                if not src_ok or not store.claim(spec.key, hardware, holder, lease_s, steal_from=steal):
                    waiting.append(s)
                    continue
                (ready_full if s.source == ROOT else ready_reuse).append(s)
            # One lease renews every task claimed in this pass until the pass ends: the reuse
            # children wait while the full searches run, longer than a lease.
            claimed = [specs[s.node].key for s in ready_full + ready_reuse]
            with Lease(store, hardware, claimed, holder, lease_s) if claimed else contextlib.nullcontext():
                if ready_full:
                    share_model()
                    reuse_left = sum(1 for s in mp.plan.steps if s.source != ROOT and s.node not in out)
                    full_common = {**common, "deadline": full_search_deadline(deadline, reuse_left, reuse_trials)}
                    for o in search_full([specs[s.node] for s in ready_full], target, store, hardware,
                                         **full_common):  # type: ignore[arg-type]
                        finish(o)
                for s in ready_reuse:
                    if over_budget():
                        continue  # released when the lease ends
                    share_model()  # an escalation is a full search
                    finish(search_reuse(specs[s.node], specs[s.source], target, store, hardware,
                                        reuse_trials=reuse_trials, escalate_below=escalate_below,
                                        **common))  # type: ignore[arg-type]
            pending = [s for s in waiting if s.node not in out] + [s for s in ready_reuse if s.node not in out]
            if pending and not ready_full and not ready_reuse:
                if time.time() > give_up:
                    break
                time.sleep(1.0)  # another warmer holds these: wait for its done mark or lease expiry
        if not pending and deadline is not None and deadline - time.time() > TOP_UP_MIN_S:
            share_model()
            out = top_up(mp, specs, out, target, store, hardware, **common)  # type: ignore[arg-type]
    finally:
        if own_builder:
            builder.close()
        if own_dir:
            shutil.rmtree(wd, ignore_errors=True)
    for s in mp.plan.steps:
        if s.node not in out:
            spec = specs[s.node]
            out[s.node] = StepOutcome(s.node, spec.name, spec.key, "fallback",
                                      note="time budget spent" if over_budget() else "claimed by another warmer")
    return out
