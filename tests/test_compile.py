"""tunecache.compile end to end: real tuning (a handful of trials), real SQLite store, real runs.

A small CNN compiled twice against a fresh store tunes the first time and is all hits the
second (in a new process), with identical outputs; the same through ONNX and a Relax IRModule;
``tune="never"``; hardware isolation; bad input.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tunecache
from tunecache import zoo
from tunecache.errors import ConfigError, TargetError, UnsupportedModelError
from tunecache.store import open_store

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.tvm

TRIALS = 4


@pytest.fixture(scope="module")
def cnn():
    return zoo.get("small_cnn")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cnn):
    """The small CNN compiled once against a fresh SQLite store."""
    db = tmp_path_factory.mktemp("store") / "tc.db"
    cm = tunecache.compile(cnn.module, example_inputs=cnn.example_inputs, store=str(db),
                           trials_per_task=TRIALS, seed=7, progress=False)
    return db, cm


def test_first_compile_tunes_and_matches_pytorch(tuned, cnn) -> None:
    _db, cm = tuned
    rep = cm.report
    assert rep.count("tuned") >= 1 and rep.trials > 0
    assert rep.count("hit") == 0
    tuned_tasks = [t for t in rep.tasks if t.outcome == "tuned"]
    for t in rep.tasks:
        assert t.outcome in ("tuned", "fallback")
    for t in tuned_tasks:
        assert t.trials > 0 and t.latency_s is not None and t.latency_s > 0
    # The engine moves trials from converged tasks to others: the total is what is capped
    # (the last round may overshoot by less than one round).
    assert rep.trials <= TRIALS * len(rep.tasks) + TRIALS
    # Stored bests were re-measured (a coefficient of variation is recorded) before serving;
    # a task of one program (one trial: nothing to rank) keeps its one measurement.
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.target import hardware_key

    store, hw = open_store(str(_db)), hardware_key(None)
    assert any(t.trials > 1 for t in tuned_tasks)
    for t in tuned_tasks:
        best = store.best_k(WorkloadKey(t.workload.split(":", 1)[1]), hw, 1)[0]
        assert (best.cv is not None) == (t.trials > 1) and best.latency_s == pytest.approx(t.latency_s)
    out = cm(*cnn.example_inputs)
    assert isinstance(out, torch.Tensor)
    with torch.no_grad():
        ref = cnn.module(*cnn.example_inputs)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    js = json.loads(rep.to_json())
    for t in js["tasks"]:
        assert {"name", "outcome", "trials", "seconds", "latency_s"} <= set(t)
    assert rep.summary().startswith(f"{len(rep.tasks)} tasks: 0 hit")


def test_second_compile_in_a_new_process_is_all_hits(tuned, cnn, tmp_path) -> None:
    db, cm = tuned
    x = cnn.example_inputs[0]
    first = cm(x).numpy()
    script = textwrap.dedent(
        f"""
        import json, sys, numpy as np, tunecache
        from tunecache import zoo
        cnn = zoo.get("small_cnn")
        cm = tunecache.compile(cnn.module, example_inputs=cnn.example_inputs, store={str(db)!r},
                               trials_per_task={TRIALS}, progress=False)
        np.save({str(tmp_path / "out.npy")!r}, cm(*cnn.example_inputs).numpy())
        print(cm.report.to_json())
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads(proc.stdout[proc.stdout.index("{"):])
    tuned_tasks = {t.name for t in cm.report.tasks if t.outcome == "tuned"}
    assert rep["trials"] == 0
    for t in rep["tasks"]:
        assert t["trials"] == 0
        if t["name"] in tuned_tasks:
            assert t["outcome"] == "hit", t
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), first)


def test_never_with_an_empty_store_predicts_programs_and_runs(tmp_path, cnn) -> None:
    cm = tunecache.compile(cnn.module, example_inputs=cnn.example_inputs, store=str(tmp_path / "empty.db"),
                           tune="never", progress=False)
    assert gc.isenabled()  # paused during the compile only (tunecache.gcpause)
    assert cm.report.trials == 0 and cm.report.count("predicted") >= 1
    assert all(t.outcome in ("predicted", "fallback") and t.latency_s is None for t in cm.report.tasks)
    assert all("0 measurements" in t.note for t in cm.report.tasks if t.outcome == "predicted")
    assert all("not in store" in t.note for t in cm.report.tasks if t.outcome == "fallback")
    with torch.no_grad():
        ref = cnn.module(*cnn.example_inputs)
    np.testing.assert_allclose(cm(*cnn.example_inputs).numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
    assert open_store(str(tmp_path / "empty.db")).count_records() == 0


def test_a_task_whose_candidates_all_failed_is_not_searched_again(tmp_path) -> None:
    """Every compile would otherwise spend a search on a task no candidate of which runs."""
    from _models import relax_matmul_relu

    from tunecache.store.records import Provenance, Record
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    mod = relax_matmul_relu(16, 32, 24)
    db = str(tmp_path / "failed.db")
    tgt = resolve_target(None)
    (task,) = frontend.extract_tasks(frontend.prepare_for_tuning(frontend.import_model(mod, None), tgt), tgt)
    st = open_store(db)
    st.commit_workload(task.key, task.desc, workload_of(task.mod)[1])
    # What a search leaves when its only candidate failed to run: a record without latency.
    st.commit_record(Record(task.key, hardware_key(tgt), [[], []], provenance=Provenance(kind="tuned", trials=1)))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 32)).astype("float32"), rng.standard_normal((32, 24)).astype("float32")

    cm = tunecache.compile(mod, store=db, trials_per_task=TRIALS, seed=1, progress=False)
    (t,) = cm.report.tasks
    assert (t.outcome, t.trials) == ("predicted", 0)  # served without measuring, not searched again
    assert "searched before" in t.note and "tune='always'" in t.note
    np.testing.assert_allclose(cm(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)

    again = tunecache.compile(mod, store=db, trials_per_task=TRIALS, seed=1, progress=False, tune="always")
    (t,) = again.report.tasks
    assert t.trials > 0 and t.outcome in ("tuned", "hit")


def test_store_of_one_hardware_gives_no_hits_for_another(tuned, cnn) -> None:
    db, _cm = tuned
    other = {"kind": "llvm", "num-cores": 2, "mcpu": "skylake"}
    cm = tunecache.compile(cnn.module, other, example_inputs=cnn.example_inputs, store=str(db),
                           tune="never", progress=False)
    assert cm.report.count("hit") == 0
    assert any("target.mcpu" in t.note for t in cm.report.tasks)


def test_onnx_model_tunes_then_hits(tmp_path) -> None:
    from _models import onnx_cnn

    model = onnx_cnn()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    db = str(tmp_path / "onnx.db")
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    first = tunecache.compile(model, store=db, trials_per_task=TRIALS, seed=3, progress=False)
    assert first.report.trials > 0
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(first(x), ref, rtol=1e-4, atol=1e-4)
    second = tunecache.compile(str(path), store=db, trials_per_task=TRIALS, progress=False)
    assert second.report.trials == 0
    assert second.report.count("hit") == first.report.count("tuned")
    np.testing.assert_array_equal(second(x), first(x))


def test_relax_module_tunes_then_hits(tmp_path) -> None:
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    from tvm import relax
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((16, 32), "float32"), w: R.Tensor((32, 24), "float32")) -> R.Tensor((16, 24), "float32"):
            with R.dataflow():
                y = R.nn.relu(R.matmul(x, w))
                R.output(y)
            return y

    del relax
    db = str(tmp_path / "relax.db")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((16, 32)).astype("float32"), rng.standard_normal((32, 24)).astype("float32")
    first = tunecache.compile(Mod, store=db, trials_per_task=TRIALS, seed=5, progress=False)
    assert first.report.count("tuned") >= 1
    np.testing.assert_allclose(first(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)
    second = tunecache.compile(Mod, store=db, progress=False)
    assert second.report.trials == 0 and second.report.count("hit") == first.report.count("tuned")
    np.testing.assert_array_equal(second(x, w), first(x, w))


def test_export_library_loads_back(tuned, cnn, tmp_path) -> None:
    _db, cm = tuned
    path = cm.export_library(tmp_path / "m.so")
    from tunecache.tvm_layer import frontend

    lib = frontend.load_library(path)
    out = frontend.run(lib, cm.imported, *cnn.example_inputs)
    np.testing.assert_array_equal(out.numpy(), cm(*cnn.example_inputs).numpy())


def test_bad_input_gives_clear_errors(tmp_path, cnn) -> None:
    from _models import onnx_cnn

    with pytest.raises(UnsupportedModelError, match="example_inputs"):
        tunecache.compile(cnn.module, store="memory", tune="never")
    with pytest.raises(UnsupportedModelError, match="FooBarOp"):
        tunecache.compile(onnx_cnn(extra_node="FooBarOp"), store="memory", tune="never")
    with pytest.raises(UnsupportedModelError, match="accepted|Accepted|accepts"):
        tunecache.compile(object(), store="memory")
    with pytest.raises(TargetError, match="unknown target"):
        tunecache.compile(cnn.module, "tpu-v9000", example_inputs=cnn.example_inputs, store="memory")
    with pytest.raises(ConfigError, match="tune="):
        tunecache.compile(cnn.module, example_inputs=cnn.example_inputs, tune="sometimes")


def test_retuning_everything_remeasures_the_bests_like_any_search(tmp_path) -> None:
    """tune="always" took a search path of its own that stored bests ranked by one (possibly
    lucky) measurement; it now goes through the one search path, which re-measures them."""
    from _models import relax_matmul_relu

    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.target import hardware_key

    db = str(tmp_path / "always.db")
    first = tunecache.compile(relax_matmul_relu(32, 64, 32), store=db, trials_per_task=4, seed=1,
                              progress=False, library_cache=False)
    assert first.report.count("tuned") >= 1
    store, hw = open_store(db), hardware_key(None)
    keys = [WorkloadKey(t.workload.split(":", 1)[1]) for t in first.report.tasks if t.outcome == "tuned"]
    for key in keys:  # forget the re-measurements: only a new search can set them again
        for r in store.records(hardware=hw, workload=key):
            if r.latency_s is not None:
                store.set_latency(r.uid, r.latency_s, None)
    again = tunecache.compile(relax_matmul_relu(32, 64, 32), store=db, trials_per_task=4, seed=2,
                              progress=False, library_cache=False, tune="always")
    searched = [t for t in again.report.tasks if t.trials > 0]
    assert searched, again.report
    for t in searched:
        best = store.best_k(WorkloadKey(t.workload.split(":", 1)[1]), hw, 1)[0]
        assert best.cv is not None, f"{t.name}: best record not re-measured after tune='always'"
