"""Execute a reuse plan: full searches (tasks and bridges) first, then reuse children after their
sources are committed, with claims so two warmers never tune the same task at once, and
escalation to full search when a reused program is clearly worse than its source.

Every measurement is committed to the store as it lands, and a finished task is marked done, so
an interrupted run resumes where it stopped: done tasks are hits, a task with records but no done
mark is searched again with what is left of its budget.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from tunecache import config
from tunecache.reuse.graph import ROOT
from tunecache.reuse.planner import ModelPlan
from tunecache.store.adapter import make_database, reraise_store_error
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance

__all__ = ["StepOutcome", "Lease", "execute_plan", "default_holder", "holder_is_dead"]

#: Escalate a reused program whose throughput is below this fraction of its source's.
DEFAULT_ESCALATE_BELOW = 0.7


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


def default_holder() -> str:
    """Return a claim holder id unique to this process: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def holder_is_dead(holder: str | None) -> bool:
    """Return whether ``holder`` is a process of this host that no longer runs.

    Its claims can be taken over at once instead of waiting for the lease to expire.
    """
    if not holder:
        return False
    host, _, rest = holder.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class Lease:
    """Hold claims on tasks while they are searched, renewing them in a background thread."""

    def __init__(self, store: Any, hardware: HardwareKey, keys: list[WorkloadKey], holder: str, lease_s: float) -> None:
        self.store, self.hardware, self.keys, self.holder, self.lease_s = store, hardware, keys, holder, lease_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True)

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            for k in self.keys:
                try:
                    self.store.claim(k, self.hardware, self.holder, self.lease_s)
                except Exception:  # noqa: BLE001 - a failed renewal only risks a duplicate search
                    pass

    def __enter__(self) -> "Lease":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for k in self.keys:
            try:
                self.store.release(k, self.hardware, self.holder)
            except Exception:  # noqa: BLE001
                pass


def _prov(hw: HardwareKey, kind: str, source: WorkloadKey | None = None, source_uid: str | None = None) -> Provenance:
    import tunecache

    return Provenance(kind=kind, source_workload=str(source) if source else None, source_record=source_uid,
                      host=config.current_host(), user=config.current_user(),
                      tunecache_version=tunecache.__version__, tvm_version=hw.tvm_version)


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
    """
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.search.measure import make_builder, make_runner
    from tunecache.tvm_layer.convert import workload_of

    holder = holder or default_holder()
    start = time.time()
    keys = {n: workload_of(m)[0] for n, m in mods.items()}
    for n, s in mp.stored.items():
        keys[n] = s.key
    names = {n: (mp.tasks[n].name if n in mp.tasks else n) for n in mods}
    work = {n: t.nest.work for n, t in mp.tasks.items()}
    work.update({n: b.work for n, b in mp.bridges.items()})
    work.update({n: s.nest.work for n, s in mp.stored.items()})
    own_dir = work_dir is None
    wd = Path(tempfile.mkdtemp(prefix="tunecache-plan-")) if own_dir else Path(work_dir)  # type: ignore[arg-type]
    builder = make_builder()
    runner = runner or make_runner()
    out: dict[str, StepOutcome] = {}

    def finish(o: StepOutcome) -> None:
        out[o.node] = o
        if o.outcome != "fallback":
            store.mark_done(o.key, hardware, holder)
        if on_step is not None:
            on_step(o)

    def over_budget() -> bool:
        return time_budget_s is not None and time.time() - start > time_budget_s

    def full_search(nodes: list[str], note: str = "full search") -> list[StepOutcome]:
        budgets = {n: max(0, full_trials - store.count_records(hardware, workload=keys[n])) for n in nodes}
        todo = [n for n in nodes if budgets[n] > 0]
        done: list[StepOutcome] = []
        for n in nodes:
            if budgets[n] == 0:
                best = store.best_k(keys[n], hardware, 1)
                done.append(StepOutcome(n, names[n], keys[n], "tuned" if best else "fallback",
                                        note="budget already spent (resumed)", latency_s=best[0].latency_s if best else None))
        if not todo:
            return done
        db = make_database(store, hardware, target, provenance=_prov(hardware, "tuned"),
                           names={keys[n].shash: names[n] for n in todo})
        remaining = None if time_budget_s is None else max(1.0, time_budget_s - (time.time() - start))
        try:
            results = tune_tasks([FullSearchTask(n, mods[n], float(mp.tasks[n].weight) if n in mp.tasks else 1.0)
                                  for n in todo], target, db, trials_per_task=max(budgets[n] for n in todo),
                                 max_trials_global=sum(budgets[n] for n in todo), time_budget_s=remaining, seed=seed,
                                 work_dir=str(wd / "full"), progress=progress, builder=builder, runner=runner)
        except RuntimeError as err:
            reraise_store_error(db, err)
            raise
        for n, r in zip(todo, results):
            best = store.best_k(keys[n], hardware, 1)
            done.append(StepOutcome(n, names[n], keys[n], "tuned" if best else "fallback", r.trials, r.seconds,
                                    note=note if best else "no candidate built and ran",
                                    latency_s=best[0].latency_s if best else None))
        return done

    def reuse(n: str, src: str) -> StepOutcome:
        from tunecache.search.narrow import narrowed_search

        src_key = keys[src]
        sources = store.best_k(src_key, hardware, 3)
        if not sources:
            (o,) = full_search([n], note="source has no valid program")
            return o
        db = make_database(store, hardware, target, provenance=_prov(hardware, "reused", src_key, sources[0].uid),
                           names={keys[n].shash: names[n]})
        t0 = time.time()
        try:
            res = narrowed_search(sources, mods[n], target, builder=builder, runner=runner, max_trials=reuse_trials,
                                  seed=seed or 0, database=db, task_name=names[n])
        except RuntimeError as err:
            reraise_store_error(db, err)
            raise
        secs = time.time() - t0
        best = store.best_k(keys[n], hardware, 1)
        src_tput = work.get(src, 0) / sources[0].latency_s if sources[0].latency_s else 0.0
        tput = work.get(n, 0) / best[0].latency_s if best and best[0].latency_s else 0.0
        if not best or (src_tput > 0 and tput < escalate_below * src_tput):
            why = "no valid reused program" if not best else f"throughput {tput / src_tput:.2f}x its source's"
            (o,) = full_search([n])  # seeded: the narrowed candidates are alpha's records already
            return replace(o, trials=o.trials + res.trials, seconds=o.seconds + secs, escalated=True,
                           source=str(src_key), note=f"escalated to full search ({why})")
        return StepOutcome(n, names[n], keys[n], "reused", res.trials, secs, source=str(src_key),
                           note=f"narrowed search from {names.get(src, src)}", latency_s=best[0].latency_s)

    try:
        pending = [s for s in mp.plan.steps]
        deadline = time.time() + wait_s
        while pending and not over_budget():
            ready_full, ready_reuse, waiting = [], [], []
            for s in pending:
                n = s.node
                if store.is_done(keys[n], hardware):
                    best = store.best_k(keys[n], hardware, 1)
                    finish(StepOutcome(n, names[n], keys[n], "hit", note="done in the store",
                                       latency_s=best[0].latency_s if best else None))
                    continue
                src_ok = s.source == ROOT or s.source in mp.stored or s.source in out
                other = store.claim_holder(keys[n], hardware) if src_ok else None
                steal = other if other != holder and holder_is_dead(other) else None
                if not src_ok or not store.claim(keys[n], hardware, holder, lease_s, steal_from=steal):
                    waiting.append(s)
                    continue
                (ready_full if s.source == ROOT else ready_reuse).append(s)
            if ready_full:
                with Lease(store, hardware, [keys[s.node] for s in ready_full], holder, lease_s):
                    for o in full_search([s.node for s in ready_full]):
                        finish(o)
            for s in ready_reuse:
                if over_budget():
                    store.release(keys[s.node], hardware, holder)
                    continue
                with Lease(store, hardware, [keys[s.node]], holder, lease_s):
                    finish(reuse(s.node, s.source))
            pending = [s for s in waiting if s.node not in out] + [s for s in ready_reuse if s.node not in out]
            if pending and not ready_full and not ready_reuse:
                if time.time() > deadline:
                    break
                time.sleep(1.0)  # another warmer holds these: wait for its done mark or lease expiry
    finally:
        builder.close()
        if own_dir:
            shutil.rmtree(wd, ignore_errors=True)
    for s in mp.plan.steps:
        if s.node not in out:
            out[s.node] = StepOutcome(s.node, names[s.node], keys[s.node], "fallback",
                                      note="time budget spent" if over_budget() else "claimed by another warmer")
    return out
