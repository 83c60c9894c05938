"""Concurrent writers and SIGKILL crashes against real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from tunecache.store import Store, check_store
from tunecache.testing.stress import HARDWARE, workload_keys

PROCS, COMMITS, KEYS = 8, 500, 20


def _writer(url: str, seed: int, commits: int, batch: int = 1) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tunecache.testing.stress", url, "--seed", str(seed), "--commits", str(commits),
         "--keys", str(KEYS), "--batch", str(batch)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _parse(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by SIGKILL was never acknowledged
    return out


@pytest.fixture(params=["sqlite-file", "postgresql"])
def persistent_url(request: pytest.FixtureRequest, tmp_path):
    if request.param == "sqlite-file":
        yield str(tmp_path / "stress.db")
    else:
        yield request.getfixturevalue("pg_url")


def test_many_writers_lose_and_duplicate_nothing(persistent_url: str) -> None:
    Store(persistent_url).close()  # schema first, as a team's store would already have
    procs = [_writer(persistent_url, seed, COMMITS) for seed in range(PROCS)]
    acked = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        assert "locked" not in err
        acked += _parse(out)
    assert len(acked) == PROCS * COMMITS
    store = Store(persistent_url)
    recs = store.records(hardware=HARDWARE)
    uids = [r.uid for r in recs]
    assert len(uids) == len(set(uids)) == PROCS * COMMITS  # 0 duplicated
    assert set(uids) == {a["uid"] for a in acked}  # 0 lost
    by_key = defaultdict(list)
    for a in acked:
        by_key[a["key"]].append((a["lat"], a["uid"]))
    for key in workload_keys(KEYS):
        expect = [u for _l, u in sorted(by_key[key.shash])[:3]]
        assert [r.uid for r in store.best_k(key, HARDWARE, 3)] == expect
    assert check_store(store).ok


@pytest.mark.parametrize("kills", [20])
def test_sigkill_mid_commit_never_damages_the_store(tmp_path, kills: int) -> None:
    url = str(tmp_path / "crash.db")
    Store(url).close()
    rng = random.Random(1234)
    acked: list[dict] = []
    for i in range(kills):
        p = _writer(url, seed=i, commits=0, batch=20)
        time.sleep(rng.uniform(0.6, 1.6))  # start-up is ~0.4 s: kill while it commits
        p.send_signal(signal.SIGKILL)
        out, _err = p.communicate(timeout=60)
        assert p.returncode == -signal.SIGKILL
        acked += _parse(out)
        rep = check_store(Store(url))
        assert rep.ok, rep.summary()
    assert len(acked) > kills  # the writers did commit between kills
    have = {r.uid for r in Store(url).records()}
    missing = [a["uid"] for a in acked if a["uid"] not in have]
    assert missing == []  # nothing acknowledged before a kill is lost
    assert len(have) >= len(acked)


def test_sigkill_on_postgresql_keeps_committed_records(pg_url: str) -> None:
    Store(pg_url).close()
    acked: list[dict] = []
    for i in range(5):
        p = _writer(pg_url, seed=100 + i, commits=0, batch=20)
        time.sleep(0.8 + 0.2 * i)
        os.kill(p.pid, signal.SIGKILL)
        out, _ = p.communicate(timeout=60)
        acked += _parse(out)
    store = Store(pg_url)
    assert check_store(store).ok
    have = {r.uid for r in store.records()}
    assert acked and all(a["uid"] in have for a in acked)
