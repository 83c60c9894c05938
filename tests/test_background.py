"""Serve now, improve later (issue 20): ``tune="background"``, the tuning queue and
``tunecache worker``, on tiny real workloads.

A background compile measures nothing: it returns with replayed/predicted programs and queues
its misses; a worker drains the queue (each task tuned once, even with two workers); the next
compile, or ``CompiledModel.refresh()``, serves the tuned programs; a worker killed in the
middle of a task leaves a queue another worker finishes; SIGTERM stops a worker cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _models import relax_matmul_relu
from _stores import copy_sqlite

import tunecache
from tunecache.store import open_store
from tunecache.tvm_layer.target import hardware_key, resolve_target

pytestmark = pytest.mark.tvm

TRIALS = 4


def _inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m + k + n)
    return rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")


def _check(cm: Any, m: int, k: int, n: int) -> None:
    x, w = _inputs(m, k, n)
    np.testing.assert_allclose(cm(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def _cli(*args: str, **kw: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "tunecache.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store holding one tuned model: relu(x @ w) at 16x32x24."""
    db = str(tmp_path_factory.mktemp("store") / "tc.db")
    cm = tunecache.compile(relax_matmul_relu(16, 32, 24), store=db, trials_per_task=TRIALS, seed=3, progress=False)
    assert cm.report.count("tuned") == 1
    return db


def test_background_serves_at_once_queues_and_the_worker_drains_it(warm: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    db = copy_sqlite(warm, tmp_path / "bg.db")
    hw = hardware_key(resolve_target(None))
    before = open_store(db).count_records()
    cm = tunecache.compile(relax_matmul_relu(32, 64, 48), store=db, tune="background", progress=False,
                           name="model_b")
    (task,) = cm.report.tasks
    assert task.outcome == "replayed" and task.trials == 0 and task.queued  # served from the other shape
    assert cm.report.queued == (task.name,) and "1 queued for tuning" in cm.report.summary()
    assert json.loads(cm.report.to_json())["queued"] == [task.name]
    _check(cm, 32, 64, 48)
    st = open_store(db)
    assert st.count_records() == before  # nothing measured
    (entry,) = st.queued(hw)
    assert entry.name == task.name and entry.models == ("model_b",) and entry.served == "replayed"
    assert entry.priority > 0
    # A second model asking for the same task shares its entry.
    tunecache.compile(relax_matmul_relu(32, 64, 48), store=db, tune="background", progress=False, name="model_c")
    (entry,) = st.queued(hw)
    assert entry.models == ("model_b", "model_c") and entry.requests == 2
    assert cm.improvable() == [] and cm.refresh() is cm  # nothing better yet

    listed = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--json"],
                            capture_output=True, text=True, check=True)
    assert [e["name"] for e in json.loads(listed.stdout)] == [task.name]

    from tunecache import warming
    from tunecache.worker import work

    # The batch is planned with each task's calls per model that asked (its shares are its own
    # models', as a warm's are), the calls split between the two models.
    planned: list[Any] = []
    real = warming.warm_tasks
    monkeypatch.setattr(warming, "warm_tasks", lambda *a, **kw: planned.append(kw["model_calls"]) or real(*a, **kw))
    rep = work(store=db, once=True, trials_per_task=TRIALS, progress=False)
    assert planned == [{entry.workload: {"model_b": entry.weight / 2, "model_c": entry.weight / 2}}]
    assert rep.stopped == "drained" and rep.left == 0 and [o.name for o in rep.outcomes] == [task.name]
    assert rep.outcomes[0].outcome in ("reused", "tuned") and 0 < rep.trials <= TRIALS
    assert st.queued() == [] and st.is_done(task_key(task), hw)
    assert cm.improvable() == [task.name]
    fresh = cm.refresh()
    assert fresh is not cm and fresh.report.count("hit") == 1 and fresh.report.queued == ()
    _check(fresh, 32, 64, 48)
    assert fresh.refresh() is fresh
    again = tunecache.compile(relax_matmul_relu(32, 64, 48), store=db, tune="background", progress=False)
    assert again.report.count("hit") == 1 and st.queued() == []  # done: served, never queued again


def task_key(task: Any) -> Any:
    from tunecache.store.keys import WorkloadKey

    mod_eq, _, shash = task.workload.partition(":")
    return WorkloadKey(shash, mod_eq)


def _queue_three(db: str) -> list[str]:
    names = []
    for shape in ((8, 16, 8), (16, 16, 16), (24, 8, 16)):
        cm = tunecache.compile(relax_matmul_relu(*shape), store=db, tune="background", progress=False,
                               name=f"m{shape[0]}")
        names += list(cm.report.queued)
    return names


def test_two_workers_tune_each_queued_task_once(tmp_path: Path) -> None:
    db = str(tmp_path / "two.db")
    _queue_three(db)
    waiting = {str(e.workload) for e in open_store(db).queued()}
    assert len(waiting) == 3
    args = ("worker", "--once", "--db", db, "--budget", str(TRIALS), "--batch", "1", "--json", "-q")
    procs = [_cli(*args), _cli(*args)]
    outs = [p.communicate(timeout=400) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    done = [t["workload"] for o in outs for t in json.loads(o[0])["tasks"]
            if t["outcome"] in ("tuned", "reused") and not t["bridge"]]
    assert sorted(done) == sorted(waiting), outs  # every task once: none twice, none left
    assert open_store(db).queued() == []


def _wait_for_claim(db: str, hw: Any, proc: subprocess.Popen[str], timeout: float = 180) -> None:
    st = open_store(db)
    end = time.time() + timeout
    while time.time() < end:
        if any(st.claim_holder(e.workload, hw) for e in st.queued(hw)):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the worker never claimed a task")


def test_a_killed_worker_leaves_a_queue_another_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "kill.db")
    hw = hardware_key(resolve_target(None))
    tunecache.compile(relax_matmul_relu(16, 16, 16), store=db, tune="background", progress=False)
    victim = _cli("worker", "--once", "--db", db, "--budget", "64", "-q")
    _wait_for_claim(db, hw, victim)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    st = open_store(db)
    (entry,) = st.queued(hw)  # still waiting, its claim held by a dead process
    assert st.claim_holder(entry.workload, hw) is not None

    # One more task, so the worker below runs two batches of one task: it starts its builder's and
    # runner's worker processes (seconds each) once, not once a batch.
    tunecache.compile(relax_matmul_relu(8, 16, 8), store=db, tune="background", progress=False)
    assert len(st.queued(hw)) == 2
    import tunecache.tvm_layer.measure as measure
    from tunecache.worker import work

    started: list[str] = []
    real_builder, real_runner = measure.make_builder, measure.make_runner
    monkeypatch.setattr(measure, "make_builder", lambda *a, **kw: started.append("builder") or real_builder(*a, **kw))
    monkeypatch.setattr(measure, "make_runner", lambda *a, **kw: started.append("runner") or real_runner(*a, **kw))
    # It takes the dead worker's claim over.
    rep = work(store=db, once=True, batch=1, trials_per_task=TRIALS, progress=False)
    assert rep.batches == 2 and [o.outcome in ("tuned", "reused") for o in rep.outcomes] == [True, True]
    assert rep.left == 0 and st.queued() == [] and st.is_done(entry.workload, hw)
    assert sorted(started) == ["builder", "runner"]


def test_sigterm_stops_a_worker_after_the_round_in_flight(tmp_path: Path) -> None:
    db = str(tmp_path / "term.db")
    hw = hardware_key(resolve_target(None))
    tunecache.compile(relax_matmul_relu(16, 16, 16), store=db, tune="background", progress=False)
    proc = _cli("worker", "--db", db, "--budget", "200", "--json", "-q")  # polls: only a signal ends it
    _wait_for_claim(db, hw, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["stopped"] == "interrupted"
    st = open_store(db)
    (entry,) = st.queued(hw)  # not done: still queued, and its claim given back
    assert st.claim_holder(entry.workload, hw) is None and not st.is_done(entry.workload, hw)


def test_a_read_only_store_serves_in_the_background_and_queues_nothing(warm: str, tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    db = copy_sqlite(warm, tmp_path / "ro.db")
    ro = open_store(db, read_only=True)
    with caplog.at_level("WARNING", logger="tunecache"):
        cm = tunecache.compile(relax_matmul_relu(32, 64, 48), store=ro, tune="background", progress=False)
    (task,) = cm.report.tasks
    assert task.outcome == "replayed" and not task.queued and cm.report.queued == ()
    assert "nothing queued for tuning" in caplog.text and "read-only" in caplog.text
    _check(cm, 32, 64, 48)
    assert open_store(db).queued() == []


def test_worker_refuses_bad_settings_with_a_sentence(tmp_path: Path) -> None:
    from tunecache.errors import ConfigError
    from tunecache.worker import work

    with pytest.raises(ConfigError, match="executor"):
        work(store=str(tmp_path / "x.db"), executor="spark")
    bad = subprocess.run([sys.executable, "-m", "tunecache.cli", "worker", "--once", "--bacth", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--bacth" in bad.stderr
    empty = subprocess.run([sys.executable, "-m", "tunecache.cli", "worker", "--once", "--db", str(tmp_path / "e.db")],
                           capture_output=True, text=True)
    assert empty.returncode == 0 and "0 queued tasks tuned" in empty.stdout and "0 still queued" in empty.stdout
    listed = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", str(tmp_path / "e.db")],
                            capture_output=True, text=True)
    assert listed.returncode == 0 and "queue is empty" in listed.stdout


def test_cli_compile_in_background_queues_and_db_queue_lists_by_model(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    spec = f"{Path(__file__).parent / '_warm_models.py'}:model_a"
    proc = subprocess.run([sys.executable, "-m", "tunecache.cli", "compile", spec, "--tune", "background", "--db", db,
                           "--json", "--no-library-cache"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rep = json.loads(proc.stdout)
    assert rep["queued"] and rep["trials"] == 0 and "queued for tuning" in proc.stderr
    listed = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--json"],
                            capture_output=True, text=True, check=True)
    entries = json.loads(listed.stdout)
    assert sorted(e["name"] for e in entries) == sorted(rep["queued"])
    (model,) = {m for e in entries for m in e["models"]}
    table = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--model", model],
                           capture_output=True, text=True, check=True)
    assert f"{len(entries)} tasks queued (by model: {model} {len(entries)})" in table.stdout
    hw_id = entries[0]["hardware"]
    mine = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--hardware", hw_id[:8],
                           "--json"], capture_output=True, text=True, check=True)
    assert len(json.loads(mine.stdout)) == len(entries)  # a key with queued tasks and no records yet
    other = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--hardware", "zz"],
                           capture_output=True, text=True)
    assert other.returncode == 1 and hw_id in other.stderr
    none = subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "queue", "--db", db, "--model", "other"],
                          capture_output=True, text=True, check=True)
    assert "queue is empty for model other" in none.stdout


def test_a_task_that_stays_queued_is_not_taken_forever(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose search leaves a task neither done nor failed (cut short, nothing to give):
    the worker takes it at most MAX_TRIES times in one run, then stops instead of spinning."""
    from types import SimpleNamespace

    from tunecache import worker
    from tunecache.values import TaskOutcome

    db = str(tmp_path / "stuck.db")
    tunecache.compile(relax_matmul_relu(8, 8, 8), store=db, tune="background", progress=False)
    calls: list[int] = []

    def no_progress(tasks: list[Any], *args: Any, **kwargs: Any) -> Any:  # deterministic: a real search may finish
        calls.append(len(tasks))
        return SimpleNamespace(outcomes=[TaskOutcome(t.name, t.name, t.key, "fallback", note="time budget spent")
                                         for t in tasks])

    monkeypatch.setattr(worker, "_tune", no_progress)
    rep = worker.work(store=db, once=True, progress=False)
    assert calls == [1] * worker.MAX_TRIES and rep.stopped == "drained" and rep.left == 1 and rep.dropped == ()
