"""The Ray executor and the RPC runner of ``tunecache warm``, on this machine.

A local 2-CPU Ray instance warms the two tiny models into the same workloads as the local
executor; a node whose hardware resource no Ray node offers is reported, not waited for; a TVM
RPC tracker and server on loopback measure a warm's candidates. Every Ray instance, tracker and
server started here is stopped by its fixture.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunecache.store import Store

pytestmark = pytest.mark.tvm
HERE = Path(__file__).parent
MODEL_A = f"{HERE / '_warm_models.py'}:model_a"
MODELS = [MODEL_A, f"{HERE / '_warm_models.py'}:model_b"]
TRIALS = 4


def _done_workloads(db: Path, hw: Any) -> set[str]:
    s = Store(str(db))
    try:
        return {str(w.key) for w in s.workloads() if s.is_done(w.key, hw)}
    finally:
        s.close()


def _assert_valid(db: Path, hw: Any) -> None:
    s = Store(str(db))
    try:
        keys = {r.workload for r in s.records()}
        assert keys
        for k in keys:
            best = s.best_k(k, hw, 1)
            assert best and best[0].is_valid and 0 < best[0].latency_s < 1.0, (k, best)
            assert 0 < s.count_records(hw, workload=k) <= TRIALS
    finally:
        s.close()


@pytest.fixture(scope="module")
def target_hw() -> tuple[Any, Any]:
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    tgt = resolve_target(None)
    return tgt, hardware_key(tgt)


@pytest.fixture(scope="module")
def plan_ab(target_hw: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The two models' plan (no bridges: three full searches) and its task modules, against an empty store."""
    from tunecache.planning import collect_tasks, make_plan

    tgt, hw = target_hw
    tasks = collect_tasks(MODELS, tgt)
    st = Store(str(tmp_path_factory.mktemp("plan") / "empty.db"))
    mp = make_plan(tasks, tgt, hw, st, bridges=False, full_trials=TRIALS)
    st.close()
    return mp, {t.node: next(x.mod for x in tasks if x.key == t.key) for t in mp.tasks.values()}


def test_unschedulable_hardware_is_reported_by_a_ray_instance_it_starts(
    plan_ab: tuple[Any, dict[str, Any]], target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    """Another machine's hardware key: the local instance offers no resource for it."""
    import ray

    from tunecache.search.ray_executor import execute_plan_ray, hardware_resource
    from tunecache.store import HardwareKey

    assert not ray.is_initialized()
    mp, mods = plan_ab
    tgt, hw = target_hw
    other = HardwareKey(hw.target, hw.fingerprint, tvm_version="0.0-other")
    seen: list[Any] = []
    t0 = time.time()
    out = execute_plan_ray(mp, mods, tgt, Store(str(tmp_path / "u.db")), other, full_trials=TRIALS, reuse_trials=TRIALS,
                           on_step=seen.append)
    assert time.time() - t0 < 60
    assert not ray.is_initialized()  # the instance it started is shut down
    assert set(out) == {s.node for s in mp.plan.steps} and len(seen) == len(out)
    for o in out.values():
        assert o.outcome == "fallback" and o.trials == 0
        assert hardware_resource(other) in o.note and "ray start" in o.note and "--resources" in o.note


@pytest.fixture(scope="module")
def local_ray(target_hw: tuple[Any, Any]) -> Iterator[str]:
    """A 2-CPU local Ray instance offering this machine's hardware resource."""
    import ray

    from tunecache.search.ray_executor import hardware_resource

    res = hardware_resource(target_hw[1])
    ray.init(num_cpus=2, resources={res: 1}, include_dashboard=False, log_to_driver=False)
    try:
        yield res
    finally:
        ray.shutdown()


def test_unschedulable_resource_on_a_running_cluster_is_reported_not_waited_for(
    local_ray: str, plan_ab: tuple[Any, dict[str, Any]], target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    import ray

    from tunecache.search.ray_executor import execute_plan_ray

    mp, mods = plan_ab
    tgt, hw = target_hw
    t0 = time.time()
    out = execute_plan_ray(mp, mods, tgt, Store(str(tmp_path / "u.db")), hw, full_trials=TRIALS, reuse_trials=TRIALS,
                           resource="tunecache_hw_nonexistent")
    assert time.time() - t0 < 30
    assert ray.is_initialized()  # a running instance is left running
    assert all(o.outcome == "fallback" and "tunecache_hw_nonexistent" in o.note for o in out.values())


def test_tasks_whose_resource_disappears_are_cancelled_and_reported(
    local_ray: str, plan_ab: tuple[Any, dict[str, Any]], target_hw: tuple[Any, Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resource is there at submission and gone while waiting (a node left): no hang."""
    from tunecache.search import ray_executor

    calls = []
    monkeypatch.setattr(ray_executor, "_feasible", lambda ray, res: calls.append(res) or len(calls) == 1)
    mp, mods = plan_ab
    t0 = time.time()
    out = ray_executor.execute_plan_ray(mp, mods, target_hw[0], Store(str(tmp_path / "u.db")), target_hw[1],
                                        full_trials=TRIALS, reuse_trials=TRIALS, resource="tunecache_hw_gone",
                                        poll_s=0.5, lost_grace_s=1.0)
    assert time.time() - t0 < 30
    assert all(o.outcome == "fallback" and "tunecache_hw_gone" in o.note and "no live Ray node offered" in o.note
               for o in out.values()), out


def test_in_memory_store_is_refused(local_ray: str, plan_ab: tuple[Any, dict[str, Any]],
                                    target_hw: tuple[Any, Any]) -> None:
    from tunecache.errors import ConfigError
    from tunecache.search.ray_executor import execute_plan_ray

    with pytest.raises(ConfigError, match="in-memory"):
        execute_plan_ray(*plan_ab, target_hw[0], Store("memory"), target_hw[1], full_trials=TRIALS,
                         reuse_trials=TRIALS)


def test_a_reuse_child_starts_only_after_its_source_is_committed(
    local_ray: str, plan_ab: tuple[Any, dict[str, Any]], target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    """Make one matmul reuse the other; with no hardware resource two tasks may run at once, so
    only the Ray dependency keeps the child from starting before its source's records exist."""
    from dataclasses import replace

    from tunecache.reuse.planning import Plan, PlanStep
    from tunecache.search.ray_executor import execute_plan_ray

    mp, mods = plan_ab
    tgt, hw = target_hw
    pair = sorted((n for n, t in mp.tasks.items() if t.nest.family == "matmul" and "relu" not in t.name),
                  key=lambda n: -mp.tasks[n].nest.work)
    assert len(pair) == 2, list(mp.tasks)
    src, child = pair
    # Only the source and the child: with 2 CPUs free, nothing but the dependency delays the child.
    steps = [s for s in mp.plan.steps if s.node == src] + [PlanStep(child, src, "task", "task", TRIALS)]
    forced = replace(mp, plan=Plan(tuple(steps), mp.plan.scratch_trials))
    order: list[str] = []
    db = tmp_path / "dep.db"
    out = execute_plan_ray(forced, mods, tgt, Store(str(db)), hw, full_trials=TRIALS, reuse_trials=TRIALS, seed=1,
                           resource="", on_step=lambda o: order.append(o.node))
    assert order.index(src) < order.index(child)
    o = out[child]
    assert o.outcome in ("reused", "tuned") and o.source == str(mp.tasks[src].key), o
    assert "no valid program" not in o.note, o  # the source's records were there when it started
    assert _done_workloads(db, hw) == {str(mp.tasks[src].key), str(mp.tasks[child].key)}


def test_ray_executor_warms_the_same_workloads_as_the_local_one(
    local_ray: str, target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    from tunecache.warming import warm

    hw = target_hw[1]
    reps = {}
    for ex in ("local", "ray"):
        reps[ex] = warm(MODELS, store=str(tmp_path / f"{ex}.db"), full_trials=TRIALS, reuse_trials=TRIALS,
                        executor=ex, bridges=False, seed=1, progress=False)
    for ex, rep in reps.items():
        assert rep.count("fallback") == 0, (ex, str(rep))
        assert {o.outcome for o in rep.outcomes} <= {"tuned", "reused"}
        _assert_valid(tmp_path / f"{ex}.db", hw)
    done_local = _done_workloads(tmp_path / "local.db", hw)
    assert len(done_local) == 3  # model_a and model_b share their first layer
    assert _done_workloads(tmp_path / "ray.db", hw) == done_local
    assert {str(o.key) for o in reps["ray"].outcomes} == {str(o.key) for o in reps["local"].outcomes}
    # A second Ray warm finds everything done.
    again = warm(MODELS, store=str(tmp_path / "ray.db"), full_trials=TRIALS, executor="ray", bridges=False,
                 progress=False)
    assert again.trials == 0 and len(again.hits) == 3


def test_ray_warm_with_the_gradient_search(local_ray: str, tmp_path: Path, target_hw: tuple[Any, Any]) -> None:
    """``warm(executor="ray", search="gradient")``: the workers tune the dense tasks with the
    gradient search (the outcomes say so) and their records land in the store."""
    from tunecache.warming import warm

    rep = warm([MODEL_A], store=str(tmp_path / "g.db"), full_trials=TRIALS, reuse_trials=TRIALS, executor="ray",
               bridges=False, seed=1, progress=False, search="gradient")
    assert rep.count("fallback") == 0 and rep.trials > 0, str(rep)
    assert any("(gradient)" in o.note for o in rep.outcomes if o.outcome == "tuned"), str(rep)
    _assert_valid(tmp_path / "g.db", target_hw[1])


@pytest.mark.postgres
def test_ray_workers_share_a_postgresql_store(local_ray: str, pg_url: str, target_hw: tuple[Any, Any]) -> None:
    """The cluster configuration: every worker writes to one PostgreSQL store."""
    from tunecache.warming import warm

    rep = warm([MODEL_A], store=pg_url, full_trials=TRIALS, reuse_trials=TRIALS, executor="ray", bridges=False, seed=1,
               progress=False)
    assert rep.count("fallback") == 0 and rep.trials > 0, str(rep)
    s = Store(pg_url)
    try:
        assert all(s.is_done(o.key, target_hw[1]) and s.best_k(o.key, target_hw[1], 1) for o in rep.outcomes)
    finally:
        s.close()


# -- RPC ------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)  # its own session: the server's forked children too
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@pytest.fixture(scope="module")
def rpc_tracker_and_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A TVM RPC tracker and one server (key ``tc-test``) on loopback; yields (runner URL, server log)."""
    from tunecache.errors import ConfigError
    from tunecache.tvm_layer.measure import rpc_runner

    port, key = _free_port(), "tc-test"
    log = tmp_path_factory.mktemp("rpc") / "server.log"
    procs = [subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                               "--port-end", str(port + 1)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        sport = _free_port()
        with open(log, "wb") as fh:
            procs.append(subprocess.Popen([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                           "--port", str(sport), "--port-end", str(sport + 1),
                                           "--tracker", f"127.0.0.1:{port}", "--key", key],
                                          stdout=fh, stderr=subprocess.STDOUT, start_new_session=True))
        url = f"rpc://127.0.0.1:{port}/{key}"
        deadline = time.time() + 60
        while True:  # until the server has registered with the tracker
            try:
                rpc_runner(url)
                break
            except ConfigError:
                if time.time() > deadline or any(p.poll() is not None for p in procs):
                    raise
                time.sleep(1.0)
        yield url, log
    finally:
        for p in reversed(procs):
            _stop(p)


def test_rpc_runner_measures_a_warm_through_tracker_and_server(
    rpc_tracker_and_server: tuple[str, Path], target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    from tunecache.warming import warm

    url, log = rpc_tracker_and_server
    db = tmp_path / "rpc.db"
    rep = warm([MODEL_A], store=str(db), full_trials=TRIALS, reuse_trials=TRIALS, bridges=False, seed=1,
               runner=url, progress=False)
    assert rep.count("fallback") == 0 and rep.trials > 0, str(rep)
    _assert_valid(db, target_hw[1])
    text = log.read_text(errors="replace")
    assert "load_module" in text and ".tar" in text  # the server loaded the builder's tar artifacts


def test_ray_workers_measure_through_the_rpc_tracker(
    local_ray: str, rpc_tracker_and_server: tuple[str, Path], plan_ab: tuple[Any, dict[str, Any]],
    target_hw: tuple[Any, Any], tmp_path: Path
) -> None:
    from tunecache.search.ray_executor import execute_plan_ray

    url, log = rpc_tracker_and_server
    mp, mods = plan_ab
    db = tmp_path / "ray-rpc.db"
    out = execute_plan_ray(mp, mods, target_hw[0], Store(str(db)), target_hw[1], full_trials=TRIALS,
                           reuse_trials=TRIALS, seed=1, runner=url)
    assert all(o.outcome == "tuned" for o in out.values()), out
    _assert_valid(db, target_hw[1])
    assert "load_module" in log.read_text(errors="replace")


def test_rpc_runner_without_tracker_or_server_fails_fast() -> None:
    from tunecache.errors import ConfigError
    from tunecache.tvm_layer.measure import rpc_runner

    t0 = time.time()
    with pytest.raises(ConfigError, match="cannot reach the TVM RPC tracker"):
        rpc_runner(f"rpc://127.0.0.1:{_free_port()}/nobody")
    with pytest.raises(ConfigError, match="expected rpc://HOST:PORT/KEY"):
        rpc_runner("rpc://127.0.0.1/nokey")
    assert time.time() - t0 < 30
