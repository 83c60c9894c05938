"""``tunecache worker --executor ray`` on a local two-node Ray cluster (issue 20).

Two ``ray start`` processes on loopback, with different resources: the head offers CPUs only,
the second node offers this machine's hardware resource (the one measurement needs). The Ray
worker drains the same queue as the local worker, into the same done tasks.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _models import relax_matmul_relu

import tunecache
from tunecache.store import open_store
from tunecache.tvm_layer.target import hardware_key, resolve_target

pytestmark = pytest.mark.tvm

TRIALS = 4
SHAPES = ((8, 16, 8), (16, 16, 16))


def _ray_cli() -> str:
    ray = shutil.which("ray", path=os.path.dirname(sys.executable))
    if ray is None:
        pytest.skip("the `ray` command is not installed beside this Python (pip install 'tunecache[ray]')")
    return ray


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head node (1 CPU, no hardware resource) and a second node offering this host's hardware."""
    from tunecache.search.ray_executor import hardware_resource

    ray = _ray_cli()
    res = hardware_resource(hardware_key(resolve_target(None)))
    port = _free_port()
    # Ray 2.5x turns token authentication on for `ray start --head` and keeps the token in
    # ~/.ray; on loopback, for a test, both nodes and this driver run without it.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    tmp = str(tmp_path_factory.mktemp("ray"))
    head = [ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
            "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"]
    node = [ray, "start", f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
            f"--resources={json.dumps({res: 1})}"]
    patch = pytest.MonkeyPatch()
    try:
        patch.setenv("RAY_AUTH_MODE", "disabled")
        subprocess.run(head, check=True, capture_output=True, env=env, timeout=120)
        subprocess.run(node, check=True, capture_output=True, env=env, timeout=120)
        yield f"127.0.0.1:{port}"
    except subprocess.CalledProcessError as err:
        pytest.fail(f"ray start failed: {err.stderr.decode()[-2000:]}")
    finally:
        patch.undo()
        subprocess.run([ray, "stop", "--force"], capture_output=True, env=env, timeout=120)


def _queue(db: str) -> set[str]:
    for shape in SHAPES:
        tunecache.compile(relax_matmul_relu(*shape), store=db, tune="background", progress=False)
    return {str(e.workload) for e in open_store(db).queued()}


def test_a_ray_worker_drains_the_same_queue_as_a_local_one(two_nodes: str, tmp_path: Path) -> None:
    """The local worker from Python, the Ray one from the command line, each on its own copy."""
    from tunecache.worker import work

    hw = hardware_key(resolve_target(None))
    done: dict[str, set[str]] = {}
    for ex in ("local", "ray"):
        db = str(tmp_path / f"{ex}.db")
        waiting = _queue(db)
        assert len(waiting) == len(SHAPES)
        if ex == "local":
            rep = work(store=db, once=True, trials_per_task=TRIALS, progress=False)
            assert rep.stopped == "drained" and rep.left == 0 and rep.dropped == (), rep.summary()
        else:
            proc = subprocess.run([sys.executable, "-m", "tunecache.cli", "worker", "--once", "--db", db,
                                   "--budget", str(TRIALS), "--executor", "ray", "--address", two_nodes, "--json",
                                   "-q"], capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stderr[-3000:]
            got = json.loads(proc.stdout)
            assert got["stopped"] == "drained" and got["left"] == 0 and got["dropped"] == []
            tuned = {t["workload"] for t in got["tasks"] if t["outcome"] in ("tuned", "reused") and not t["bridge"]}
            assert tuned == waiting
        st = open_store(db)
        assert st.queued() == []
        done[ex] = {str(w.key) for w in st.workloads() if st.is_done(w.key, hw) and st.best_k(w.key, hw, 1)}
        assert waiting <= done[ex]  # and the bridges the plan tuned, if any
        assert all(0 < st.count_records(hw, workload=w.key) <= TRIALS for w in st.workloads())
        # Each task's best was re-measured where it was searched (on the Ray worker for "ray").
        assert all(st.best_k(w.key, hw, 1)[0].cv is not None for w in st.workloads()
                   if str(w.key) in waiting and st.count_records(hw, workload=w.key) > 1)
    assert done["ray"] == done["local"]
