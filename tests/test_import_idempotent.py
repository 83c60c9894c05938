"""Idempotent imports of JSONDatabase directories written by stock MetaSchedule (no sidecar).

A record without a tunecache sidecar uid gets a uid derived from its content (workload,
hardware key, trace, measured times, args info), so importing the same directory twice, or from
eight processes at once, leaves exactly one copy of each record, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tunecache.store import Store, check_store
from tunecache.tvm_layer.jsondb import RECORD_FILE, SIDECAR_FILE, content_uid, export_jsondb, import_jsondb

pytestmark = pytest.mark.tvm

PROCS = 4
# (workload, split factor of the outer loop, run_secs): the same trace measured twice is two records.
RECORDS = [
    ("matmul", 2, [1.0e-4, 1.1e-4]),
    ("matmul", 4, [2.0e-4]),
    ("matmul", 8, [3.0e-4]),
    ("matmul", 8, [3.5e-4]),  # differs from the line above only in run_secs
    ("matmul", 16, [1e10]),  # a failed measurement
    ("add", 2, [5.0e-5]),
    ("add", 4, [6.0e-5]),
]
N = len(RECORDS)


def _modules(tvm: Any) -> dict[str, Any]:
    from tvm import te

    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    x = te.placeholder((16, 16), name="X")
    y = te.compute((16, 16), lambda i, j: x[i, j] + 1.0, name="Y")
    return {
        "matmul": tvm.IRModule({"main": te.create_prim_func([a, b, c])}),
        "add": tvm.IRModule({"main": te.create_prim_func([x, y])}),
    }


def _write_stock_jsondb(tvm: Any, target: Any, directory: Path, records: list[tuple[str, int, list[float]]]) -> None:
    """Write ``records`` with MetaSchedule's own JSONDatabase (no tunecache code involved)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    mods = _modules(tvm)
    directory.mkdir(parents=True, exist_ok=True)
    db = ms.database.JSONDatabase(work_dir=str(directory))
    for name, factor, secs in records:
        mod = mods[name]
        sch = Schedule(mod)
        block = sch.get_sblock("C" if name == "matmul" else "Y")
        sch.split(sch.get_loops(block)[0], [None, factor])
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        db.commit_tuning_record(ms.database.TuningRecord(sch.trace, db.commit_workload(mod), secs, target, args))


@pytest.fixture(scope="module")
def stock_dir(tmp_path_factory: pytest.TempPathFactory, tvm: Any, target: Any) -> Path:
    """A JSONDatabase directory of N records over two workloads, as stock MetaSchedule writes it."""
    d = tmp_path_factory.mktemp("stock") / "jdb"
    _write_stock_jsondb(tvm, target, d, RECORDS)
    assert not (d / SIDECAR_FILE).exists()
    assert len((d / RECORD_FILE).read_text().splitlines()) == N
    return d


@pytest.fixture(params=["sqlite-file", pytest.param("postgresql", marks=pytest.mark.postgres)])
def persistent_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite-file":
        yield str(tmp_path / "import.db")
    else:
        yield request.getfixturevalue("pg_url")


def test_importing_a_stock_jsondatabase_twice_adds_nothing_the_second_time(store_url: str, stock_dir: Path) -> None:
    store = Store(store_url)
    first = import_jsondb(store, stock_dir)
    assert first.errors == () and first.workloads == 2
    assert (first.records, first.new_records, first.existing, first.duplicates) == (N, N, 0, 0)
    uids = {r.uid for r in store.records(valid_only=False)}
    second = import_jsondb(store, stock_dir)
    assert (second.records, second.new_records, second.existing) == (N, 0, N)
    assert f"0 new, {N} already in the store" in second.summary()
    assert store.count_records() == N  # not 2N
    assert {r.uid for r in store.records(valid_only=False)} == uids
    # A fresh process's view (a second Store on the same URL) agrees.
    if store_url != "memory":
        assert Store(store_url).count_records() == N
    assert check_store(store).ok
    store.close()


def test_the_same_line_twice_in_one_file_is_one_record(stock_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "jdb"
    shutil.copytree(stock_dir, d)
    lines = (d / RECORD_FILE).read_text().splitlines()
    (d / RECORD_FILE).write_text("\n".join([*lines, lines[0], lines[3]]) + "\n")
    store = Store("memory")
    rep = import_jsondb(store, d)
    assert rep.errors == ()
    assert (rep.records, rep.duplicates, rep.new_records, rep.existing) == (N + 2, 2, N, 0)
    assert "2 repeated lines counted once" in rep.summary()
    assert store.count_records() == N


def test_records_differing_only_in_run_secs_get_different_uids(
    tvm: Any, target: Any, tmp_path: Path, stock_dir: Path
) -> None:
    d = tmp_path / "jdb"
    _write_stock_jsondb(tvm, target, d, [("matmul", 8, [3.0e-4]), ("matmul", 8, [3.0e-4, 3.0e-4]),
                                         ("matmul", 8, [3.0000000000000003e-4])])
    store = Store("memory")
    rep = import_jsondb(store, d)
    assert rep.errors == () and rep.new_records == 3 and rep.duplicates == 0
    recs = store.records(valid_only=False)
    assert len({r.uid for r in recs}) == 3
    assert len({json.dumps(r.trace, sort_keys=True) for r in recs}) == 1  # the same trace each time
    # content_uid itself: 32 hex characters, stable, and every measured value is part of it.
    r = recs[0]
    uid = content_uid(r)
    assert uid == r.uid and len(uid) == 32 and int(uid, 16) >= 0
    assert content_uid(replace(r, uid="x", provenance=replace(r.provenance, host="elsewhere"))) == uid
    assert content_uid(replace(r, run_secs=(r.run_secs[0] * 2,))) != uid
    assert content_uid(replace(r, hardware=replace(r.hardware, tvm_version="0.0-other"))) != uid
    # The same trace and times in the other test directory get the same uid there.
    other = Store("memory")
    import_jsondb(other, stock_dir)
    assert uid in {x.uid for x in other.records(valid_only=False)}


def test_a_sidecar_uid_still_wins(stock_dir: Path, tmp_path: Path) -> None:
    src = Store("memory")
    import_jsondb(src, stock_dir)
    uids = {r.uid for r in src.records(valid_only=False)}
    # Records tunecache made itself carry random uids; an export keeps them in its sidecar.
    renamed = [replace(r, uid=f"own{i:029d}") for i, r in enumerate(src.records(valid_only=False))]
    team = Store("memory")
    for w in src.workloads():
        team.commit_workload(w.key, w.desc, w.mod_json)
    team.commit_records(renamed)
    assert export_jsondb(team, tmp_path / "out", valid_only=False) == N
    back = Store("memory")
    rep = import_jsondb(back, tmp_path / "out")
    assert rep.errors == () and rep.new_records == N
    assert {r.uid for r in back.records(valid_only=False)} == {r.uid for r in renamed}
    assert not uids & {r.uid for r in back.records(valid_only=False)}


_WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from tunecache.tvm_layer import load_tvm
    load_tvm("llvm")
    from tunecache.store import Store
    from tunecache.tvm_layer.jsondb import import_jsondb
    url, directory, go = sys.argv[1:4]
    store = Store(url)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.005)
    rep = import_jsondb(store, directory)
    print(json.dumps({"new": rep.new_records, "records": rep.records, "existing": rep.existing,
                      "errors": list(rep.errors)}), flush=True)
    """
)


def test_many_processes_importing_at_once_leave_one_copy_of_each_record(
    persistent_url: str, stock_dir: Path, tmp_path: Path
) -> None:
    Store(persistent_url).close()  # schema first, as a team's store would already have
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, persistent_url, str(stock_dir), str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCS)
    ]
    try:
        for p in procs:  # every worker has TVM loaded and the store open: start them together
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read()[-2000:] if p.stderr else line
        go.touch()
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-2000:]
            assert "locked" not in err
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(r["errors"] == [] and r["records"] == N for r in reports)
    assert sum(r["new"] for r in reports) == N  # each record was new to exactly one process
    assert all(r["new"] + r["existing"] == N for r in reports)
    store = Store(persistent_url)
    recs = store.records(valid_only=False)
    assert len(recs) == len({r.uid for r in recs}) == N  # one copy of each record
    assert len(store.workloads()) == 2
    assert check_store(store).ok


def test_import_cli_says_when_nothing_was_new(stock_dir: Path, tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tunecache.cli", "db", "import", "--db", db, str(stock_dir)],
                              capture_output=True, text=True, timeout=300)

    t0 = time.time()
    first, second = run(), run()
    assert first.returncode == 0 and second.returncode == 0, second.stderr[-2000:]
    assert f"{N} new, 0 already in the store" in first.stdout
    assert f"0 new, {N} already in the store" in second.stdout
    assert Store(db).count_records() == N
    assert time.time() - t0 < 120
