"""The MetaSchedule adapter and JSONDatabase import/export, on a real tuned matmul.

A real ``ms.tune_tir`` (a few trials, the fixed pipeline) writes through the adapter into an
SQLite file; a second process sees the records; ``compile_tir`` applies the best one; export
and re-import round-trip; bad import input is reported per entry.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tunecache.errors import ImportFormatError
from tunecache.store import Store, WorkloadKey
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.database import make_database
from tunecache.tvm_layer.jsondb import RECORD_FILE, SIDECAR_FILE, WORKLOAD_FILE, export_jsondb, import_jsondb

pytestmark = pytest.mark.tvm
TRIALS = 8


def matmul(n: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Tune a 64^3 matmul with ms.tune_tir through the adapter into a fresh SQLite file."""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.search import make_builder, make_runner, search_sizing
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    tmp = tmp_path_factory.mktemp("adapter")
    target = resolve_target(None)
    hw = hardware_key(target)
    store = Store(str(tmp / "store.db"))
    db = make_database(store, hw, target)
    mod = matmul(64)
    sz = search_sizing(TRIALS)
    builder = make_builder()
    try:
        ms.tune_tir(
            mod, target, str(tmp / "work"), TRIALS, num_trials_per_iter=sz.num_trials_per_iter,
            builder=builder, runner=make_runner(), database=db,
            strategy=ms.search_strategy.EvolutionarySearch(
                population_size=sz.population_size, init_min_unmeasured=sz.init_min_unmeasured,
                genetic_num_iters=sz.genetic_num_iters),
            seed=11,
        )
    finally:
        builder.close()
    key, _mj, _wl = workload_of(mod)
    return {"tmp": tmp, "store": store, "hw": hw, "target": target, "mod": mod, "key": key, "db": db}


def test_records_land_with_provenance(tuned: dict[str, Any]) -> None:
    store, hw, key = tuned["store"], tuned["hw"], tuned["key"]
    recs = store.records(hardware=hw, workload=key)
    assert 0 < len(recs) <= TRIALS
    assert any(r.is_valid for r in recs)
    for r in recs:
        p = r.provenance
        assert p.kind == "tuned" and p.trials >= 1 and p.host and p.user and p.tvm_version == hw.tvm_version
    assert sorted(r.provenance.trials for r in recs) == list(range(1, len(recs) + 1))
    wl = store.get_workload(key)
    assert wl is not None and wl.mod_json and wl.desc.shapes == ((64, 64),) * 3


def test_a_second_process_sees_the_records(tuned: dict[str, Any]) -> None:
    store, key = tuned["store"], tuned["key"]
    best = store.best_k(key, tuned["hw"], 1)[0]
    script = textwrap.dedent(
        f"""
        from tunecache.store import Store, WorkloadKey
        from tunecache.tvm_layer.target import hardware_key
        s = Store({store.url!r})
        print(s.best_k(WorkloadKey({key.shash!r}), hardware_key(None), 1)[0].uid)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == best.uid


def test_compile_tir_applies_the_best_record(tuned: dict[str, Any]) -> None:
    from tvm.s_tir import meta_schedule as ms

    db, mod, target = tuned["db"], tuned["mod"], tuned["target"]
    sch = ms.tir_integration.compile_tir(db, mod, target)
    assert sch is not None
    best = tuned["store"].best_k(tuned["key"], tuned["hw"], 1)[0]
    (top,) = db.get_top_k(db.commit_workload(mod), 1)
    # MetaSchedule ranks by the mean of what it is handed: the repeats measured (or the
    # re-measured latency alone), whose mean is the store's ranking latency.
    assert sum(float(x) for x in top.run_secs) / len(top.run_secs) == pytest.approx(best.latency_s)
    # The applied schedule is the best record's: same sampled decisions.
    decisions = [d for _i, d in best.trace[1]]
    applied = [d for _i, d in decode_trace(sch.trace.as_json())[1]]
    assert applied[: len(decisions)] == decisions


def test_other_hardware_sees_nothing_through_the_adapter(tuned: dict[str, Any]) -> None:
    other = replace(tuned["hw"], tvm_version="0.0-other")
    db = make_database(tuned["store"], other, tuned["target"])
    assert not db.has_workload(tuned["mod"])
    assert db.get_top_k(db.commit_workload(tuned["mod"]), 5) == []
    assert len(db) == 0
    assert "tvm_version" in tuned["store"].explain_miss(tuned["key"], other).reason


def test_export_then_import_round_trips(tuned: dict[str, Any], tmp_path: Path) -> None:
    store, hw, key = tuned["store"], tuned["hw"], tuned["key"]
    n = export_jsondb(store, tmp_path / "jdb", hardware=hw)
    assert n == len(store.records(hardware=hw, valid_only=True))
    # A stock MetaSchedule JSONDatabase reads the export.
    from tvm.s_tir import meta_schedule as ms

    jdb = ms.database.JSONDatabase(work_dir=str(tmp_path / "jdb"), allow_missing=False)
    assert len(jdb) == n
    fresh = Store("memory")
    rep = import_jsondb(fresh, tmp_path / "jdb")
    assert rep.errors == () and rep.new_records == n
    assert [w.key for w in fresh.workloads()] == [key]
    assert fresh.best_k(key, hw, 1)[0].latency_s == store.best_k(key, hw, 1)[0].latency_s
    assert fresh.best_k(key, hw, 1)[0].uid == store.best_k(key, hw, 1)[0].uid
    # Importing again adds nothing (same uids).
    assert import_jsondb(fresh, tmp_path / "jdb").new_records == 0


def test_import_without_sidecar_uses_record_targets(tuned: dict[str, Any], tmp_path: Path) -> None:
    export_jsondb(tuned["store"], tmp_path / "jdb", hardware=tuned["hw"])
    (tmp_path / "jdb" / SIDECAR_FILE).unlink()
    fresh = Store("memory")
    rep = import_jsondb(fresh, tmp_path / "jdb")
    assert rep.errors == () and rep.records > 0
    # Attributed to this host's fingerprint and TVM: the same hardware key.
    assert fresh.best_k(tuned["key"], tuned["hw"], 1)
    assert all(r.provenance.kind == "imported" for r in fresh.records())


def test_truncated_and_hostile_lines_are_reported_and_skipped(tuned: dict[str, Any], tmp_path: Path) -> None:
    d = tmp_path / "jdb"
    n = export_jsondb(tuned["store"], d, hardware=tuned["hw"])
    lines = (d / RECORD_FILE).read_text().splitlines()
    good = lines[0]
    bad_instr = json.loads(good)
    bad_instr[1][0][0][0][0] = "NoSuchInstruction"
    lines += [
        good[: len(good) // 2],  # truncated
        json.dumps([0, [[[], []], "fast", {"kind": "llvm"}, None]]),  # wrong types
        json.dumps([7, json.loads(good)[1]]),  # missing workload
        "[" * 5000 + "]" * 5000,  # deeply nested
        json.dumps(bad_instr),  # unknown instruction kind
    ]
    (d / RECORD_FILE).write_text("\n".join(lines) + "\n")
    (d / SIDECAR_FILE).unlink()
    fresh = Store("memory")
    rep = import_jsondb(fresh, d)
    assert rep.records == n
    assert len(rep.errors) == 5
    expected = ("not valid JSON", "run_secs", "workload line 8", "nested", "replay")
    for msg, what in zip(rep.errors, expected, strict=False):
        assert RECORD_FILE in msg and what in msg, msg
    assert fresh.count_records() == n


def test_import_rejects_a_directory_that_is_not_a_jsondatabase(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ImportFormatError, match=WORKLOAD_FILE):
        import_jsondb(Store("memory"), tmp_path)
    with pytest.raises(ImportFormatError, match="not a directory"):
        import_jsondb(Store("memory"), tmp_path / "x.txt")


def test_cli_db_commands(tuned: dict[str, Any], tmp_path: Path) -> None:
    url = tuned["store"].url
    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tunecache.cli", *a], capture_output=True, text=True, timeout=300)
    st = run("db", "stats", "--db", url, "--json")
    assert st.returncode == 0, st.stderr
    assert json.loads(st.stdout)["records"] == tuned["store"].count_records()
    ls = run("db", "ls", "--db", url, "--best", "--json")
    assert [r["workload"] for r in json.loads(ls.stdout)] == [str(tuned["key"])]
    ex = run("db", "export", "--db", url, str(tmp_path / "out"))
    assert ex.returncode == 0 and (tmp_path / "out" / RECORD_FILE).exists()
    im = run("db", "import", "--db", str(tmp_path / "new.db"), str(tmp_path / "out"))
    assert im.returncode == 0 and "imported" in im.stdout, im.stderr
    bad = run("db", "import", "--db", str(tmp_path / "new.db"), str(tmp_path))
    assert bad.returncode == 1 and "not a MetaSchedule JSONDatabase" in bad.stderr and "Traceback" not in bad.stderr
    up = run("db", "upgrade", "--db", str(tmp_path / "new.db"))
    from tunecache.store import SCHEMA_VERSION

    assert up.returncode == 0 and f"already at v{SCHEMA_VERSION}" in up.stdout
    gc = run("db", "gc", "--db", str(tmp_path / "new.db"), "--keep-top", "1")
    assert gc.returncode == 0
    assert Store(str(tmp_path / "new.db")).count_records() == 1
    assert WorkloadKey(tuned["key"].shash) == tuned["key"]


# -- every measured repeat, and MetaSchedule's database contract -------------------------------

A_SECS, B_SECS = [1.5, 2.5, 1.8], [1.0, 3.0, 2.9]  # means 1.933 and 2.3: A first, though B has the minimum


@pytest.fixture
def repeats(tuned: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """A fresh SQLite file with two records of three repeats each and a failed one, through the adapter."""
    from tvm.s_tir import meta_schedule as ms

    target, hw, mod = tuned["target"], tuned["hw"], tuned["mod"]
    source = tuned["db"]
    traces = source.get_top_k(source.commit_workload(mod), 3)
    assert len(traces) >= 2
    path = tmp_path / "repeats.db"
    store = Store(path)
    db = make_database(store, hw, target)
    wl = db.commit_workload(mod)
    made = {}
    for name, trec, secs in (("a", traces[0], A_SECS), ("b", traces[1], B_SECS), ("failed", traces[-1], [1e10])):
        db.commit_tuning_record(ms.database.TuningRecord(trec.trace, wl, secs, target, trec.args_info))
        made[name] = store.records()[-1]
    return {**tuned, "path": path, "store": store, "db": db, "wl": wl, "made": made}


def _secs(tvm_record: Any) -> list[float]:
    return [float(x) for x in tvm_record.run_secs]


def test_every_measured_repeat_is_kept_and_given_back(repeats: dict[str, Any], tmp_path: Path) -> None:
    store, db, wl, made = repeats["store"], repeats["db"], repeats["wl"], repeats["made"]
    # The store keeps each repeat and ranks by their mean.
    assert list(made["a"].run_secs) == A_SECS and made["a"].latency_s == pytest.approx(sum(A_SECS) / 3)
    assert list(made["b"].run_secs) == B_SECS and made["failed"].latency_s is None
    # MetaSchedule gets every repeat back, best mean first, the failed record skipped.
    assert [_secs(r) for r in db.get_top_k(wl, 5)] == [A_SECS, B_SECS]
    assert sorted(_secs(r) for r in db.get_all_tuning_records()) == sorted([A_SECS, B_SECS])
    # So does a JSONDatabase export, which a stock JSONDatabase ranks the same way.
    from tvm.s_tir import meta_schedule as ms

    assert export_jsondb(store, tmp_path / "jdb", hardware=repeats["hw"]) == 2
    lines = [json.loads(x) for x in (tmp_path / "jdb" / RECORD_FILE).read_text().splitlines()]
    assert [body[1] for _i, body in lines] == [A_SECS, B_SECS]
    jdb = ms.database.JSONDatabase(work_dir=str(tmp_path / "jdb"), allow_missing=False)
    assert [_secs(r) for r in jdb.get_top_k(jdb.commit_workload(repeats["mod"]), 5)] == [A_SECS, B_SECS]


def test_a_second_adapter_over_the_same_file_sees_the_repeats(repeats: dict[str, Any]) -> None:
    other = make_database(Store(repeats["path"]), repeats["hw"], repeats["target"])
    assert other.has_workload(repeats["mod"]) and len(other) == 3
    assert [_secs(r) for r in other.get_top_k(other.commit_workload(repeats["mod"]), 5)] == [A_SECS, B_SECS]


def test_a_remeasured_record_is_handed_over_at_its_remeasured_latency(repeats: dict[str, Any]) -> None:
    store, db, wl, made = repeats["store"], repeats["db"], repeats["wl"], repeats["made"]
    store.set_latency(made["a"].uid, 5.0, cv=0.01)
    assert [_secs(r) for r in db.get_top_k(wl, 5)] == [B_SECS, [5.0]]
    assert list(store.records(workload=repeats["key"])[0].run_secs) == A_SECS  # still as measured


def test_metaschedule_database_contract(repeats: dict[str, Any]) -> None:
    from tvm.s_tir import meta_schedule as ms

    db, mod, target, wl = repeats["db"], repeats["mod"], repeats["target"], repeats["wl"]
    rec = db.query(mod, target, kind="record")
    assert _secs(rec) == A_SECS
    assert db.query(mod, target, kind="schedule") is not None
    assert db.query(mod, target, kind="ir_module") is not None
    with db:
        assert ms.database.Database.current().same_as(db)
    # UnionDatabase picks the best mean of its databases; OrderedUnionDatabase the first that has one.
    better, worse = ms.database.MemoryDatabase(), ms.database.MemoryDatabase()
    for mem, secs in ((better, [1.7, 1.7, 1.7]), (worse, [2.0, 2.0, 2.0])):
        mem.commit_tuning_record(ms.database.TuningRecord(rec.trace, mem.commit_workload(mod), secs, target,
                                                          rec.args_info))
    assert _secs(ms.database.UnionDatabase(db, better).query(mod, target, kind="record")) == [1.7, 1.7, 1.7]
    assert _secs(ms.database.UnionDatabase(worse, db).query(mod, target, kind="record")) == A_SECS
    assert _secs(ms.database.OrderedUnionDatabase(db, better).query(mod, target, kind="record")) == A_SECS
    assert _secs(ms.database.OrderedUnionDatabase(better, db).query(mod, target, kind="record")) == [1.7] * 3
    assert len(db.get_top_k(wl, 1)) == 1
