"""``tunecache worker``: tune what background compiles queued, highest priority first.

A compile with ``tune="background"`` measures nothing; it queues its misses in the store
(:mod:`tunecache.queueing`). A worker takes the waiting tasks of its hardware key, rebuilds each
from the module the store holds, and tunes them as ``tunecache warm`` does (one reuse plan over
the batch, narrowed searches where a stored program is similar, full search otherwise,
:func:`tunecache.warming.warm_tasks`), committing as it goes. A task leaves the queue when its
search is marked done. Then, since a worker is there for the quality of what users are served
rather than for saving trials, the tasks the batch tuned or reused get one more full search
seeded with what the plan found, up to ``trials_per_task`` records each (the local executor).

Two workers never tune the same task: a worker skips tasks another live worker has claimed, and
the claims with their leases (:mod:`tunecache.store.claims`) settle the rest. A worker that is
killed leaves its claims to expire (or to be taken over at once on the same host, where its
process is seen to be gone); its queue entries stay, and another worker finishes them.
SIGTERM and Ctrl-C stop a worker after the measurements in flight, with everything measured
committed.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tunecache.config import DEFAULT_TRIALS_PER_TASK, check_seconds, check_trials, default_reuse_trials
from tunecache.errors import ConfigError, Interrupted
from tunecache.store.values import QueueEntry
from tunecache.values import TaskOutcome

__all__ = ["DEFAULT_POLL_S", "MAX_TRIES", "WorkerReport", "work"]

#: Seconds between two looks at an empty queue.
DEFAULT_POLL_S = 10.0
#: Times one run of a worker takes the same task (a task still queued after that waits for
#: another run, or another worker).
MAX_TRIES = 2


@dataclass(frozen=True)
class WorkerReport:
    """What a worker did before it stopped.

    Attributes
    ----------
    outcomes
        Every plan step done, in order (as :class:`tunecache.values.TaskOutcome`): the queued
        tasks, and the bridge operators their plans tuned so that more of them could reuse.
    queued
        The workload keys (``str``) of the queued tasks taken.
    dropped
        Tasks taken off the queue without a program: ``(name, why)`` (a module the store lacks,
        a search in which no candidate built and ran).
    batches
        How many batches of queued tasks were planned.
    seconds
        Wall time.
    stopped
        Why it stopped: ``"drained"`` (``once``), ``"interrupted"``, ``"max tasks"`` or
        ``"time budget"``.
    left
        Tasks of this hardware key still queued when it stopped (held by other workers,
        interrupted, or left for lack of time).
    """

    outcomes: tuple[TaskOutcome, ...] = ()
    queued: frozenset[str] = frozenset()
    dropped: tuple[tuple[str, str], ...] = ()
    batches: int = 0
    seconds: float = 0.0
    stopped: str = "drained"
    left: int = 0

    @property
    def trials(self) -> int:
        """Return the trials spent."""
        return sum(o.trials for o in self.outcomes)

    def summary(self) -> str:
        """Return a one-line summary."""
        from tunecache.report import format_seconds, plural

        tuned = sum(o.outcome in ("tuned", "reused") and str(o.key) in self.queued for o in self.outcomes)
        bridges = sum(str(o.key) not in self.queued for o in self.outcomes)
        also = f" and {plural(bridges, 'bridge operator')}" if bridges else ""
        return (f"worker: {plural(tuned, 'queued task')}{also} tuned in "
                f"{plural(self.batches, 'batch', 'batches')} ({plural(self.trials, 'trial')}, "
                f"{format_seconds(self.seconds)}), "
                f"{len(self.dropped)} dropped, {self.left} still queued; stopped: {self.stopped}")

    def to_json(self) -> str:
        """Return the report as JSON text."""
        import json

        return json.dumps({
            "summary": self.summary(), "stopped": self.stopped, "seconds": self.seconds, "trials": self.trials,
            "batches": self.batches, "left": self.left,
            "tasks": [{"name": o.name, "workload": str(o.key), "outcome": o.outcome, "trials": o.trials,
                       "seconds": o.seconds, "source": o.source, "note": o.note, "latency_s": o.latency_s,
                       "bridge": str(o.key) not in self.queued}
                      for o in self.outcomes],
            "dropped": [{"name": n, "why": w} for n, w in self.dropped],
        }, indent=2)


def work(
    target: Any = None,
    *,
    store: Any = None,
    once: bool = False,
    trials_per_task: int = DEFAULT_TRIALS_PER_TASK,
    reuse_trials: int | None = None,
    batch: int = 16,
    max_tasks: int | None = None,
    time_budget_s: float | None = None,
    poll_s: float = DEFAULT_POLL_S,
    executor: str = "local",
    address: str | None = None,
    runner: str | None = None,
    seed: int | None = None,
    progress: bool = True,
    holder: str | None = None,
    stop: threading.Event | None = None,
    on_batch: Callable[[list[QueueEntry]], None] | None = None,
) -> WorkerReport:
    """Tune the store's queued tasks of ``target``'s hardware key until stopped.

    Parameters
    ----------
    target
        As in :func:`tunecache.compile` (default: this host's CPU). Only tasks queued for its
        hardware key are taken: measurements are only valid on that hardware.
    store
        Store URL, path or object (default ``$TUNECACHE_DB`` / the user cache file).
    once
        Drain the queue and return (tasks other live workers hold are left to them); otherwise
        wait ``poll_s`` seconds on an empty queue and look again, until ``stop`` is set,
        SIGTERM or Ctrl-C.
    trials_per_task, reuse_trials
        Budgets of a full search and of a narrowed search, as in :func:`tunecache.warm`.
    batch
        Tasks planned together (highest priority first): tasks of one batch may reuse each other.
    max_tasks
        Return after this many tasks were taken.
    time_budget_s
        Return once this much wall time is spent (a batch in flight stops early).
    executor, address, runner
        As in :func:`tunecache.warm` (``"ray"`` spreads each batch over a Ray cluster).
    holder
        Claim holder id (default: ``host:pid:random``).
    stop
        Set it (from another thread) to stop after the batch in flight.
    on_batch
        Called with each batch's entries before it is tuned (tests, progress).

    Returns
    -------
    WorkerReport

    Raises
    ------
    ConfigError, TargetError, StoreError
        For a bad argument, target or store.
    """
    from tunecache.pipeline import lookup
    from tunecache.store import open_store
    from tunecache.store.claims import default_holder
    from tunecache.tvm_layer.target import hardware_key, resolve_target
    from tunecache.warming import ray_cluster

    if executor not in ("local", "ray"):
        raise ConfigError(f"executor={executor!r}: use 'local' or 'ray'")
    check_trials("trials_per_task", trials_per_task)
    reuse_trials = default_reuse_trials(trials_per_task) if reuse_trials is None else check_trials(
        "reuse_trials", reuse_trials)
    time_budget_s = check_seconds("time_budget_s", time_budget_s)
    if batch < 1:
        raise ConfigError(f"batch={batch}: take at least 1 task at a time")
    t0 = time.time()
    tgt = resolve_target(target)
    hw = hardware_key(tgt)
    st = open_store(store)
    if st.read_only:
        raise ConfigError(f"store {st.display_url} is read-only ({st.read_only_reason}): a worker commits "
                          "what it tunes; give it a store it can write")
    me = holder or default_holder()
    stop = stop or threading.Event()
    outcomes: list[TaskOutcome] = []
    dropped: list[tuple[str, str]] = []
    queued: set[str] = set()
    tries: dict[str, int] = {}
    batches, taken, stopped = 0, 0, "drained"
    with ray_cluster(address if executor == "ray" else None), _stop_on_sigterm(stop), \
            _Measurers(executor == "local" and not runner) as measurers:
        while True:
            if stop.is_set():
                stopped = "interrupted"
                break
            if max_tasks is not None and taken >= max_tasks:
                stopped = "max tasks"
                break
            left_s = None if time_budget_s is None else time_budget_s - (time.time() - t0)
            if left_s is not None and left_s <= 0:
                stopped = "time budget"
                break
            # A task taken twice in this run and still queued (its search was cut short, or
            # its source had nothing to give) waits for another run instead of spinning here.
            todo = [e for e in _takeable(st, hw, me) if tries.get(str(e.workload), 0) < MAX_TRIES]
            if max_tasks is not None:
                todo = todo[:max_tasks - taken]
            todo = todo[:batch]
            if not todo:
                if once:
                    break
                stop.wait(poll_s)
                continue
            tasks, bad = _rebuild(todo, st)
            for e, why in bad:
                st.dequeue(e.workload, e.hardware)
                dropped.append((e.name, why))
            taken += len(todo)
            queued.update(str(e.workload) for e in todo)
            for e in todo:
                tries[str(e.workload)] = tries.get(str(e.workload), 0) + 1
            if not tasks:
                continue
            if on_batch is not None:
                on_batch(todo)
            batches += 1
            try:
                rep = _tune(tasks, tgt, hw, st, trials_per_task, reuse_trials, left_s, executor, address, runner,
                            seed, progress, me, measurers, model_calls=_model_calls(todo))
            except Interrupted:
                stopped = "interrupted"
                break
            for o in rep.outcomes:
                outcomes.append(o)
                if o.outcome == "fallback" and o.trials > 0:  # searched: nothing built and ran
                    st.dequeue(o.key, hw)
                    dropped.append((o.name, o.note or "no candidate built and ran"))
            searched = {o.key for o in rep.outcomes}
            failed = lookup(tasks, st, hw).failed
            for t in tasks:  # searched before with nothing that ran: the warm does not plan it again
                if t.key in failed and t.key not in searched:
                    st.dequeue(t.key, hw)
                    dropped.append((t.name, "searched before: no candidate built and ran"))
            if stop.is_set():
                stopped = "interrupted"
                break
    left = len(st.queued(hw))
    return WorkerReport(outcomes=tuple(outcomes), queued=frozenset(queued), dropped=tuple(dropped), batches=batches,
                        seconds=time.time() - t0, stopped=stopped, left=left)


def _takeable(st: Any, hw: Any, me: str) -> list[QueueEntry]:
    """The queued tasks of ``hw`` no other live worker holds, highest priority first."""
    from tunecache.store.claims import holder_is_dead

    out = []
    for e in st.queued(hw):
        other = st.claim_holder(e.workload, hw)
        if other and other != me and not holder_is_dead(other):
            continue
        out.append(e)
    return out


def _rebuild(entries: list[QueueEntry], st: Any) -> tuple[list[Any], list[tuple[QueueEntry, str]]]:
    """The tasks of queue entries, rebuilt from the modules the store holds; and the entries
    that cannot be rebuilt, with why."""
    from tunecache.tvm_layer.convert import workload_from_json
    from tunecache.tvm_layer.frontend.tasks import TaskInfo

    tasks, bad = [], []
    for e in entries:
        sw = st.get_workload(e.workload)
        if sw is None or not sw.mod_json:
            bad.append((e, "the store holds no module for this workload"))
            continue
        try:
            mod = workload_from_json(sw.key, sw.mod_json).mod
        except Exception as err:  # noqa: BLE001 - one unreadable module is dropped, not fatal
            bad.append((e, f"its stored module does not load: {type(err).__name__}: {str(err)[:200]}"))
            continue
        tasks.append(TaskInfo(name=e.name or sw.desc.name, weight=max(1, e.weight), mod=mod, desc=sw.desc,
                              key=e.workload))
    return tasks, bad


def _model_calls(entries: list[QueueEntry]) -> dict[Any, dict[str, float]]:
    """Each queued task's calls per model that asked for it, so that a batch shares each task by
    its own models' time as a warm does (:func:`tunecache.warming.warm_tasks`' ``model_calls``):
    a batch of a large model's and a small model's tasks would otherwise leave the small one's
    under the share below which a reused task gets its replay only.

    The queue keeps a task's calls summed over the models that asked (``weight``) and their names
    (the first 16): each named model gets an equal part (exact for a task of one model). Entries
    that name no model are left out: they share the batch's time among themselves.
    """
    return {e.workload: {m: e.weight / len(e.models) for m in e.models} for e in entries if e.models}


def _tune(tasks: list[Any], tgt: Any, hw: Any, st: Any, trials: int, reuse_trials: int, left_s: float | None,
          executor: str, address: str | None, runner: str | None, seed: int | None, progress: bool,
          holder: str, measurers: _Measurers, *, model_calls: dict[Any, dict[str, float]] | None = None) -> Any:
    """One batch, planned and tuned as ``tunecache warm`` does (``model_calls``: :func:`_model_calls`)."""
    from tunecache.warming import warm_tasks

    return warm_tasks(tasks, tgt, hw, st, time.time(), full_trials=trials, reuse_trials=reuse_trials,
                      time_budget_s=left_s, executor=executor, address=address, runner=runner, seed=seed,
                      progress=progress, holder=holder, label="worker", polish=True, measurers=measurers.get(),
                      model_calls=model_calls, refit_model=False)


class _Measurers:
    """The worker's builder and local runner, started at its first batch and kept for the next
    ones (their worker processes take seconds to start: a worker taking one task a batch spent
    8 of each 10 s batch starting them, session 22)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.pair: tuple[Any, Any] | None = None

    def get(self) -> tuple[Any, Any] | None:
        if self.enabled and self.pair is None:
            from tunecache.tvm_layer.measure import make_builder, make_runner

            self.pair = (make_builder(), make_runner())
        return self.pair

    def __enter__(self) -> _Measurers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pair is not None:
            from tunecache.tvm_layer.measure import close_runner

            builder, runner = self.pair
            self.pair = None
            builder.close()
            close_runner(runner)


@contextlib.contextmanager
def _stop_on_sigterm(stop: threading.Event) -> Iterator[None]:
    """SIGTERM stops the worker as a Ctrl-C does: after the measurements in flight (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from tunecache.interrupt import request_stop

    def handler(signum: int, frame: Any) -> None:
        stop.set()
        request_stop()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
