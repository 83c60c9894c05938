"""tunecache db verify: records of another TVM version are re-admitted when their traces still
replay (optionally re-measured) and marked stale when they do not; never served before that."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
from _models import te_matmul

from tunecache.search.verify import verify_store
from tunecache.store import Store
from tunecache.tvm_layer.database import make_database

pytestmark = pytest.mark.tvm


def test_verify_readmits_replaying_records_and_stales_the_rest(tmp_path) -> None:
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    tvm = load_tvm()
    target = resolve_target(None)
    hw = hardware_key(target)
    old = replace(hw, tvm_version="0.26.0")  # what an older TVM on this machine committed
    db = str(tmp_path / "v.db")
    store = Store(db)
    mod = te_matmul(tvm, 64, 64, 64)
    tune_tasks([FullSearchTask("mm", mod)], target, make_database(store, old, target), trials_per_task=4,
               seed=3, work_dir=str(tmp_path / "w"))
    key = workload_of(mod)[0]
    assert store.best_k(key, old, 1) and not store.best_k(key, hw, 1)  # another version: no hit
    good = store.best_k(key, old, 1)[0]
    broken = replace(good, uid="broken" + good.uid[6:],
                     trace=[[["GetSBlock", [], ["no_such_block", "main"], ["b0"]]], []])
    store.commit_record(broken)
    n_valid = len(store.records(hardware=old, valid_only=True))

    rep = verify_store(store, hw, target, remeasure=1)
    assert rep.checked == n_valid and rep.stale == 1 and rep.readmitted == n_valid - 1 and rep.remeasured == 1
    assert any("broken" in p for p in rep.problems)
    best = store.best_k(key, hw, 10)
    assert len(best) == n_valid - 1 and all(r.provenance.kind == "verified" for r in best)
    assert sum(1 for r in best if r.cv is not None) == 1  # the re-measured one
    assert [r.uid for r in store.best_k(key, old, 10) if r.uid == broken.uid] == []  # stale: never served

    # Verifying again adds nothing (same derived uids); the CLI says what it did.
    again = subprocess.run([sys.executable, "-m", "tunecache.cli.main", "db", "verify", "--db", db],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "re-admitted" in again.stdout
    assert len(store.best_k(key, hw, 10)) == n_valid - 1
