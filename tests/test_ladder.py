"""The search ladder through compile: a miss similar to a stored program is reused in few trials,
committed with provenance; a reused program far below its source's throughput escalates."""

from __future__ import annotations

import numpy as np
import pytest

import tunecache
from _models import relax_matmul_relu
from tunecache.store import Store

pytestmark = pytest.mark.tvm
TRIALS = 16


@pytest.fixture
def tuned_source(tmp_path):
    db = str(tmp_path / "ladder.db")
    first = tunecache.compile(relax_matmul_relu(64, 128, 64), store=db, trials_per_task=TRIALS, seed=1, progress=False)
    (task,) = [t for t in first.report.tasks if t.family == "matmul"]
    assert task.outcome == "tuned" and task.trials > 0
    return db, first, task


def test_a_similar_shape_is_reused_in_fewer_trials(tuned_source) -> None:
    db, _first, src = tuned_source
    # escalate_below=0: keep the reused program whatever the (noisy) throughput comparison says.
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=1, progress=False,
                           escalate_below=0.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload
    assert 0 < t.trials < src.trials
    recs = Store(db).records(family="matmul")
    reused = [r for r in recs if r.provenance.kind == "reused"]
    assert reused and all(r.provenance.source_workload == src.workload and r.provenance.source_record for r in reused)
    x = np.random.default_rng(0).standard_normal((128, 128)).astype("float32")
    w = np.random.default_rng(1).standard_normal((128, 64)).astype("float32")
    np.testing.assert_allclose(cm(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_a_reused_program_far_below_its_source_escalates(tuned_source) -> None:
    db, _first, src = tuned_source
    store = Store(db)
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.target import hardware_key

    hw = hardware_key(None)
    key = WorkloadKey(src.workload.split(":", 1)[1])
    for r in store.best_k(key, hw, 10):  # a source that claims an impossible speed
        store.set_latency(r.uid, 1e-9, cv=0.0)
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=2, progress=False)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "tuned" and "escalated" in t.note
    assert t.trials > 0
