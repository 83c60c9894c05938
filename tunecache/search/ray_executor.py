"""Execute a reuse plan on a Ray cluster: one Ray task per plan node.

The plan's edges become Ray task dependencies: a reuse child's task takes its source's
``ObjectRef`` as an argument, so Ray starts it only once the source's task has returned, i.e.
once the source's records are committed to the shared store. Every task does exactly what the
local executor does for one node (:func:`tunecache.search.execute.run_node`: claim, search under
a lease, done mark), so Ray workers, local warmers and interrupted runs all agree through the
store's claims and done marks.

Design choices
--------------
- A task receives only plain values (the store URL, the target as a dict, the hardware key as a
  dict, the node's module as MetaSchedule workload JSON, the source's workload key) and opens
  the store, rebuilds the target and the module, and builds its own builder and runner.
- Measuring needs the hardware being tuned: every task asks for one unit of the Ray custom
  resource ``tunecache_hw_<hardware id>`` (:func:`hardware_resource`). A node that has that
  hardware advertises one unit (``ray start --resources '{"tunecache_hw_<id>": 1}'``), so it
  measures one candidate batch at a time and concurrent searches never disturb each other's
  timings. Before its search a task checks that its node's hardware key really is the one
  asked for.
- Building is not a separate Ray step: MetaSchedule's search alternates between proposing a
  batch, building it and measuring it, and the next batch depends on the measurements, so a
  remote build would cost a Ray round trip (and an artifact transfer) per batch. A task builds
  its batches in parallel in its own builder processes instead.
- A task whose resource no live node offers is reported as a ``fallback`` outcome whose note
  names the missing resource, both before submission (nothing is submitted) and while waiting
  (a node that leaves for longer than ``lost_grace_s``): the driver never waits forever on an
  infeasible task.
- Ray sets ``OMP_NUM_THREADS`` to a task's CPU count (1) in its workers, and TVM's runtime reads
  it: candidates would be measured on one thread. A task unsets it (unless ``TVM_NUM_THREADS``
  is set) before it starts its build and run processes, so candidates run with the node's
  default thread count, as under the local executor.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunecache.config import DEFAULT_SEARCH
from tunecache.errors import ConfigError, DependencyError
from tunecache.reuse.graph import ROOT
from tunecache.reuse.planner import ModelPlan
from tunecache.search.execute import NodeSpec, node_specs
from tunecache.store.keys import HardwareKey
from tunecache.tvm_layer.convert import error_line
from tunecache.values import DEFAULT_ESCALATE_BELOW, SearchContext, TaskOutcome

__all__ = ["execute_plan_ray", "hardware_resource", "RESOURCE_PREFIX"]

#: Prefix of the Ray custom resource that marks a node able to measure for a hardware key.
RESOURCE_PREFIX = "tunecache_hw_"


def hardware_resource(hardware: HardwareKey) -> str:
    """Return the Ray custom resource a node offers to measure for ``hardware``.

    Examples
    --------
    >>> hardware_resource(HardwareKey('{"kind":"llvm"}'))  # doctest: +ELLIPSIS
    'tunecache_hw_...'
    """
    return f"{RESOURCE_PREFIX}{hardware.id}"


def _unschedulable(resource: str | None, hardware: HardwareKey, what: str) -> str:
    if not resource:
        return f"unschedulable: {what} a CPU"
    return (f"unschedulable: {what} the Ray custom resource {resource!r} ({hardware.describe()}); on a node with "
            f"that hardware run `ray start --address=<head> --resources '{{\"{resource}\": 1}}'`")


@dataclass(frozen=True)
class _Job:
    """What every node's Ray task needs besides its node: plain, picklable values."""

    store_url: str
    target: dict[str, Any]
    hardware: dict[str, Any]
    full_trials: int
    reuse_trials: int
    escalate_below: float
    seed: int | None
    deadline: float | None
    lease_s: float
    wait_s: float
    runner_url: str | None
    resource: str | None
    check_hardware: bool
    search: str = DEFAULT_SEARCH


def _node_task(job: _Job, spec: NodeSpec, mod_json: str, source: NodeSpec | None,
               _source_outcome: TaskOutcome | None = None) -> TaskOutcome:
    """The body of one node's Ray task (runs on a worker; ``_source_outcome`` only orders it).

    ``spec`` and ``source`` carry no module (``mod=None``); the node's module is rebuilt from
    ``mod_json``.
    """
    from tunecache.search.execute import run_node
    from tunecache.search.remeasure import remeasure_bests
    from tunecache.store import Store
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import workload_from_json
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    hw = HardwareKey.from_dict(job.hardware)
    load_tvm(hw.target_kind or "llvm")
    target = resolve_target(job.target)
    if job.check_hardware:
        here = hardware_key(target)
        if here.id != hw.id:
            return TaskOutcome(spec.node, spec.name, spec.key, "fallback",
                               note=f"Ray node {socket.gethostname()} offers {job.resource} but its hardware is "
                                    f"{here.describe()}, not {hw.describe()}: restart it without that resource")
    if "TVM_NUM_THREADS" not in os.environ:
        os.environ.pop("OMP_NUM_THREADS", None)  # Ray's default (1) would make TVM measure on one thread
    mod = workload_from_json(spec.key, mod_json).mod
    builder, runner = _worker_tools(hw.target_kind or "llvm", job.runner_url)
    store = Store(job.store_url)
    work_dir = tempfile.mkdtemp(prefix="tunecache-ray-")
    ctx = SearchContext(target, store, hw, job.full_trials, job.reuse_trials, builder, runner, Path(work_dir),
                        escalate_below=job.escalate_below, seed=job.seed, deadline=job.deadline,
                        lease_s=job.lease_s, wait_s=job.wait_s, search=job.search)
    try:
        spec = replace(spec, mod=mod)
        outcome = run_node(spec, source, ctx)
        # Re-measured on the machine that searched, as the local executor does after its plan.
        remeasure_bests([(spec, outcome)], ctx, deadline=job.deadline)
        return outcome
    finally:
        store.close()
        shutil.rmtree(work_dir, ignore_errors=True)


#: Builder and runner of this Ray worker process, by (target kind, runner URL).
_TOOLS: dict[tuple[str, str | None], tuple[Any, Any]] = {}


def _worker_tools(kind: str, runner_url: str | None) -> tuple[Any, Any]:
    """Return this worker process's builder and runner, made on its first task.

    Ray reuses worker processes, and starting a builder's processes and a runner's costs ~4 s:
    later tasks in the same worker reuse them. Their processes exit with the worker (they stop
    at end of input), so nothing outlives the Ray instance.
    """
    from tunecache.tvm_layer.measure import make_builder, make_runner

    key = (kind, runner_url)
    if key not in _TOOLS:
        if runner_url:
            from tunecache.tvm_layer.measure import rpc_runner

            runner = rpc_runner(runner_url)
        else:
            runner = make_runner()
        _TOOLS[key] = (make_builder(warm_up_for=kind), runner)
    return _TOOLS[key]


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise DependencyError("the Ray executor needs Ray: run `pip install 'tunecache[ray]'`") from err
    return ray


def _shared_store_url(store: Any) -> str:
    url = getattr(store, "url", None)
    if not isinstance(url, str) or hasattr(store, "overlay"):
        raise ConfigError(f"the Ray executor needs a store given by URL that every worker can open, got {store!r}")
    if url == "sqlite://":
        raise ConfigError("the Ray executor cannot use an in-memory store (workers could not see it): "
                          "give --db a SQLite file (one machine) or a postgresql:// URL (a cluster)")
    return url


def _feasible(ray: Any, resource: str | None) -> bool:
    """Whether some live node offers one unit of ``resource`` and a CPU."""
    for n in ray.nodes():
        r = n.get("Resources", {})
        if n.get("Alive") and r.get("CPU", 0) >= 1 and (not resource or r.get(resource, 0) >= 1):
            return True
    return False


def execute_plan_ray(
    mp: ModelPlan,
    mods: dict[str, Any],
    target: Any,
    store: Any,
    hardware: HardwareKey,
    *,
    full_trials: int,
    reuse_trials: int,
    address: str | None = None,
    seed: int | None = None,
    on_step: Callable[[TaskOutcome], None] | None = None,
    time_budget_s: float | None = None,
    resource: str | None = None,
    runner: str | None = None,
    escalate_below: float = DEFAULT_ESCALATE_BELOW,
    lease_s: float = 60.0,
    wait_s: float = 3600.0,
    poll_s: float = 2.0,
    lost_grace_s: float = 60.0,
    budget_grace_s: float = 300.0,
    num_cpus: int | None = None,
    search: str = DEFAULT_SEARCH,
) -> dict[str, TaskOutcome]:
    """Run ``mp``'s nodes as Ray tasks; return an outcome per node, as :func:`execute_plan` does.

    Parameters
    ----------
    mp, mods, target, store, hardware
        As in :func:`tunecache.search.execute.execute_plan`. ``store`` must be a
        :class:`~tunecache.store.Store` every worker can open by its URL: a SQLite file on one
        machine (or a shared file system), PostgreSQL on a cluster.
    full_trials, reuse_trials
        Budgets of a full and of a narrowed search.
    address
        ``None``: start a local Ray instance (``num_cpus`` CPUs, default all; it offers the
        hardware resource only if this machine's hardware key is ``hardware``) and shut it
        down at the end. ``"auto"`` or ``"HOST:PORT"``: join that running cluster. If Ray is
        already initialized in this process it is used as it is and left running.
    seed
        Search seed.
    on_step
        Called in this process as each node's task returns.
    time_budget_s
        Wall-clock budget: tasks that start after it is spent do nothing ("time budget
        spent"); a running search ends after its round in flight. Tasks still running
        ``budget_grace_s`` after it are cancelled.
    resource
        The Ray custom resource each task needs one unit of; default
        :func:`hardware_resource` (``tunecache_hw_<hardware.id>``), or none with a ``runner``.
        ``""`` asks for none (any node with a CPU).
    runner
        ``rpc://HOST:PORT/KEY``: measure through a TVM RPC tracker instead of on the task's
        node. Tasks then run on any node (they only build and search); the tracker hands each
        device to one session at a time, so measurements do not overlap on a device.
    escalate_below, lease_s, wait_s
        As in :func:`~tunecache.search.execute.execute_plan`; ``wait_s`` bounds how long a
        task waits for another warmer's claim.
    poll_s, lost_grace_s
        How often the driver checks that some node still offers ``resource``, and how long it
        may be missing before the remaining tasks are cancelled and reported.
    search
        The full search's kind (:data:`tunecache.config.SEARCHES`); with ``"gradient"`` each
        node's task reads the store's rows and neighbours on its worker (no model is shared
        between nodes).

    Returns
    -------
    dict of str to TaskOutcome
        One outcome per plan step. An unschedulable node is a ``fallback`` whose note names the
        missing resource and how to add it.

    Raises
    ------
    ConfigError
        If the store is in memory or not given by URL.
    DependencyError
        If Ray is not installed.
    """
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.target import hardware_key, target_dict

    ray = _import_ray()
    url = _shared_store_url(store)
    if resource is None:  # measuring on the task's node needs that hardware; through RPC, any node builds
        res = hardware_resource(hardware) if runner is None else None
    else:
        res = resource or None
    start = time.time()
    specs = node_specs(mp, mods)
    job = _Job(store_url=url, target=target_dict(target), hardware=hardware.to_dict(), full_trials=int(full_trials),
               reuse_trials=int(reuse_trials), escalate_below=float(escalate_below), seed=seed,
               deadline=None if time_budget_s is None else start + time_budget_s, lease_s=float(lease_s),
               wait_s=float(wait_s), runner_url=runner, resource=res,
               check_hardware=runner is None and res == hardware_resource(hardware), search=search)
    out: dict[str, TaskOutcome] = {}

    def finish(o: TaskOutcome) -> None:
        out[o.node] = o
        if on_step is not None:
            on_step(o)

    def fail_all(nodes: list[str], note: str) -> None:
        for n in nodes:
            s = specs[n]
            finish(TaskOutcome(n, s.name, s.key, "fallback", note=note))

    started = False
    if not ray.is_initialized():
        if address is None:
            offer = {res: 1.0} if res and hardware_key(target).id == hardware.id else {}
            root = str(Path(__file__).resolve().parents[2])
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            ray.init(num_cpus=num_cpus or os.cpu_count() or 1, resources=offer, include_dashboard=False,
                     log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
        else:
            ray.init(address=address)
        started = True
    refs: dict[Any, str] = {}
    try:
        steps = list(mp.plan.steps)
        if not _feasible(ray, res):
            fail_all([s.node for s in steps], _unschedulable(res, hardware, "no live Ray node offers"))
            return out
        remote = ray.remote(_node_task).options(num_cpus=1, resources={res: 1} if res else {}, max_retries=1,
                                                name="tunecache-node")
        node_ref: dict[str, Any] = {}
        for s in steps:
            spec = specs[s.node]
            if store.is_done(spec.key, hardware):
                best = store.best_k(spec.key, hardware, 1)
                finish(TaskOutcome(s.node, spec.name, spec.key, "hit", note="done in the store",
                                   latency_s=best[0].latency_s if best else None))
                continue
            source = None if s.source == ROOT else replace(specs[s.source], mod=None)
            after = node_ref.get(s.source)  # a Ray dependency: starts once the source's task returned
            ref = remote.remote(job, replace(spec, mod=None), workload_of(spec.mod)[1], source, after)
            node_ref[s.node] = ref
            refs[ref] = s.node
        pending = list(refs)
        hard_stop = None if time_budget_s is None else start + time_budget_s + budget_grace_s
        lost_since: float | None = None
        reason = ""
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=poll_s)
            for r in ready:
                try:
                    finish(ray.get(r))
                except ray.exceptions.RayError as err:  # the task (or its source's) crashed or was cancelled
                    failed = specs[refs[r]]
                    finish(TaskOutcome(failed.node, failed.name, failed.key, "fallback",
                                       note=f"Ray task failed: {error_line(err)}"))
            if ready or not pending:
                continue
            now = time.time()
            if _feasible(ray, res):
                lost_since = None
            else:
                lost_since = lost_since or now
                if now - lost_since > lost_grace_s:
                    reason = _unschedulable(res, hardware, f"for {lost_grace_s:.0f} s no live Ray node offered")
                    break
            if hard_stop is not None and now > hard_stop:
                reason = "time budget spent (task cancelled)"
                break
        for r in pending:
            ray.cancel(r)
        fail_all([refs[r] for r in pending], reason)
        return out
    finally:
        if sys.exc_info()[0] is not None:  # interrupted: do not leave searches running
            for r in refs:
                try:
                    ray.cancel(r)
                except Exception:  # noqa: BLE001 - best effort while unwinding
                    pass
        if started:
            ray.shutdown()
