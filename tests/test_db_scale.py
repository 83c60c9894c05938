"""``tunecache db`` on a store of thousands of records (issue 18): ``ls`` pages and streams,
``gc --dry-run`` counts what ``gc`` removes, ``check`` reads a page at a time and reports what
it always did, and none of them loads every record at once (asserted on the store methods they
call, never on time or memory).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunecache.cli import main
from tunecache.store import HardwareKey, Provenance, Record, Store, WorkloadDesc, WorkloadKey, check_store

TRACE = [
    [["GetSBlock", [], ["C", "main"], ["b0"]], ["GetLoops", ["b0"], [], ["l1", "l2", "l3"]],
     ["SamplePerfectTile", ["l1"], [4, 64], ["v4", "v5", "v6", "v7"]]],
    [[2, [4, 2, 8, 4]]],
]
HWS = [HardwareKey('{"kind":"llvm","mcpu":"a"}'), HardwareKey('{"kind":"llvm","mcpu":"b"}')]
WORKLOADS = 30
PER = 50  # records per workload and hardware key: 3000 in all
LONG_NAME = "fused_conv2d_add_relu_with_a_name_longer_than_its_column"


def _name(w: int) -> str:
    return LONG_NAME if w == WORKLOADS - 1 else f"task{w}"


def _build(path: Path) -> None:
    """WORKLOADS x HWS x PER records; every 10th failed, every 7th valid one stale; latencies
    not in commit order, with ties."""
    store = Store(str(path))
    stale = []
    for w in range(WORKLOADS):
        key = WorkloadKey(f"{w:010d}")
        store.commit_workload(key, WorkloadDesc(name=_name(w), family="conv2d" if w % 2 else "matmul"))
        recs = []
        for h, hw in enumerate(HWS):
            for i in range(PER):
                failed = i % 10 == 3
                lat = 1e-3 * (1 + (i * 7919 + w * 31 + h) % 23)
                recs.append(Record(key, hw, TRACE, run_secs=() if failed else (lat,), latency_s=None if failed else lat,
                                   provenance=Provenance(kind="tuned", trials=i), uid=f"{w:03d}{h}{i:03d}" + "0" * 25))
                if not failed and i % 7 == 0:
                    stale.append(recs[-1].uid)
        store.commit_records(recs)
    store.mark_stale(stale)
    store.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scale") / "built.db"
    _build(path)
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path) -> Path:
    """A private copy of the built store (tests may change it)."""
    path = tmp_path / "s.db"
    shutil.copy(built, path)
    return path


@pytest.fixture
def paged_only(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Make the methods that load everything fail; return the calls of the paginated one."""
    calls: list[dict[str, Any]] = []
    real = Store.iter_records

    def spy(self: Store, **kw: Any) -> Iterator[Record]:
        calls.append(kw)
        return real(self, **kw)

    def loads_all(self: Store, *a: Any, **kw: Any) -> Any:
        raise AssertionError("loads every row")

    monkeypatch.setattr(Store, "iter_records", spy)
    monkeypatch.setattr(Store, "records", loads_all)
    monkeypatch.setattr(Store, "workloads", loads_all)
    return calls


def _ls(capfd: pytest.CaptureFixture[str], db: Path, *args: str) -> str:
    assert main(["db", "ls", "--db", str(db), *args]) == 0
    return capfd.readouterr().out


def _table_rows(out: str) -> list[str]:
    """The data lines of a ``db ls`` table: between the rule and the count line."""
    lines = out.splitlines()
    assert lines[0].startswith("uid") and set(lines[1]) <= {"-", " "}, out[:500]
    return lines[2:-1]


def _all_uids(db: Path, valid_only: bool) -> list[str]:
    with sqlite3.connect(db) as con:
        where = " WHERE latency_s IS NOT NULL" if valid_only else ""
        return [u for (u,) in con.execute(f"SELECT uid FROM tc_record{where} ORDER BY id")]


# -- db ls ------------------------------------------------------------------------------------------


def test_ls_prints_the_first_page_and_says_there_are_more(db: Path, capfd, paged_only) -> None:
    out = _ls(capfd, db)
    rows = _table_rows(out)
    assert len(rows) == 50
    assert [r.split()[0] for r in rows] == [u[:8] for u in _all_uids(db, valid_only=True)[:50]]
    assert out.splitlines()[-1] == "first 50 records shown; there are more (--limit N for more, --limit 0 for all)"
    assert paged_only and all(c["batch"] <= 51 for c in paged_only)  # one short page, not the table
    out = _ls(capfd, db, "--limit", "7", "--family", "conv2d")
    assert len(_table_rows(out)) == 7 and all(" conv2d " in r for r in _table_rows(out))


def test_ls_limit_0_prints_every_record_in_aligned_chunks(db: Path, capfd, paged_only) -> None:
    for args, valid_only in ((["--limit", "0"], True), (["--limit", "0", "--all"], False)):
        out = _ls(capfd, db, *args)
        rows = _table_rows(out)
        uids = _all_uids(db, valid_only)
        assert len(uids) > 2000 and [r.split()[0] for r in rows] == [u[:8] for u in uids]
        assert out.splitlines()[-1] == f"{len(uids)} records"
        # Every chunk keeps the first one's columns: the hardware id starts where its header does.
        col = out.splitlines()[0].index("hardware")
        ids = [h.id for h in HWS]
        assert {next(r.index(i) for i in ids if i in r) for r in rows if LONG_NAME not in r} == {col}
        long = [r for r in rows if LONG_NAME in r]
        assert long and all(LONG_NAME in r for r in long)  # printed whole, never cut
    assert "failed" in out and "(stale)" in out
    out = _ls(capfd, db, "--limit", str(WORKLOADS * len(HWS) * PER), "--all")  # the limit is the end: no "more"
    assert out.splitlines()[-1] == f"{WORKLOADS * len(HWS) * PER} records" and paged_only


def test_ls_json_streams_the_array_it_always_printed(db: Path, capfd, paged_only, monkeypatch) -> None:
    out = _ls(capfd, db, "--json", "--all")  # --json: every record, no default page
    monkeypatch.undo()
    store = Store(str(db), read_only=True)
    names = {w.key: w.desc for w in store.workloads()}
    before = json.dumps([{  # what db ls --json printed before it streamed
        "uid": r.uid, "workload": str(r.workload), "name": names[r.workload].name,
        "family": names[r.workload].family,
        "hardware": r.hardware.id, "latency_s": r.latency_s, "kind": r.provenance.kind,
        "source": r.provenance.source_workload, "trials": r.provenance.trials, "stale": r.stale,
    } for r in store.records(valid_only=False)], indent=2)
    assert out == before + "\n"
    assert _ls(capfd, db, "--json", "--hardware", "nope") == "[]\n"
    assert len(json.loads(_ls(capfd, db, "--json", "--limit", "5"))) == 5


def test_ls_best_is_one_row_per_workload_and_hardware(db: Path, capfd, paged_only) -> None:
    out = _ls(capfd, db, "--best")
    assert len(_table_rows(out)) == 50
    assert out.splitlines()[-1] == f"50 of {WORKLOADS * len(HWS)} records shown (--limit N for more, --limit 0 for all)"
    best = json.loads(_ls(capfd, db, "--best", "--json"))
    assert len(best) == WORKLOADS * len(HWS)
    with sqlite3.connect(db) as con:
        fastest = dict(con.execute("SELECT workload_id || hardware_id, MIN(latency_s) FROM tc_record GROUP BY 1"))
    assert len(fastest) == len(best)
    assert sorted(r["latency_s"] for r in best) == sorted(fastest.values())
    assert len({(r["workload"], r["hardware"]) for r in best}) == len(best)


def test_stats_counts_in_the_database(db: Path, capfd, paged_only) -> None:
    assert main(["db", "stats", "--db", str(db), "--json"]) == 0
    st = json.loads(capfd.readouterr().out)
    assert st["records"] == WORKLOADS * len(HWS) * PER and st["workloads"] == WORKLOADS
    assert paged_only == []  # no record was read


def test_limit_must_be_a_count(db: Path, capfd) -> None:
    assert main(["db", "ls", "--db", str(db), "--limit", "-1"]) == 2
    assert "must be at least 0" in capfd.readouterr().err


# -- db gc --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_top", [1, 3, PER])
def test_gc_dry_run_counts_what_gc_removes(db: Path, capfd, paged_only, keep_top: int) -> None:
    before = Store(str(db)).count_records()
    assert main(["db", "gc", "--keep-top", str(keep_top), "--dry-run", "--db", str(db)]) == 0
    m = re.search(r"would remove (\d+) records?", capfd.readouterr().out)
    assert m, "no count"
    would = int(m.group(1))
    assert paged_only == []  # counted by the database: no record is read
    assert Store(str(db)).count_records() == before  # nothing changed
    assert main(["db", "gc", "--keep-top", str(keep_top), "--db", str(db)]) == 0
    removed = int(re.search(r"removed (\d+) records?", capfd.readouterr().out).group(1))  # type: ignore[union-attr]
    assert would == removed == before - Store(str(db)).count_records() > 0
    assert main(["db", "gc", "--keep-top", str(keep_top), "--dry-run", "--db", str(db)]) == 0
    assert "would remove 0 records" in capfd.readouterr().out


# -- db check -----------------------------------------------------------------------------------------


def _corrupt(db: Path) -> dict[str, str]:
    """One undecodable record, one orphan, one inconsistent ranking; return their uids."""
    uids = _all_uids(db, valid_only=True)
    which = {"undecodable": uids[10], "orphan": uids[500], "inconsistent": uids[2500]}
    con = sqlite3.connect(db)
    con.execute("PRAGMA foreign_keys=OFF")
    con.execute("UPDATE tc_record SET trace_json = '[[[\"Get' WHERE uid = ?", (which["undecodable"],))
    con.execute("UPDATE tc_record SET hardware_id = 'gone' WHERE uid = ?", (which["orphan"],))
    con.execute("UPDATE tc_record SET latency_s = latency_s * 2 WHERE uid = ?", (which["inconsistent"],))
    con.commit()
    con.close()
    return which


class _Refuser:
    """A replayer that knows every workload and replays no trace: each replayed uid is a finding."""

    def workload(self, key: WorkloadKey, mod_json: str) -> Any:
        return key

    def replays(self, record: Any, mod: Any) -> str | None:
        return "refused"


def test_check_reads_pages_and_reports_what_it_always_did(db: Path, capfd, paged_only) -> None:
    which = _corrupt(db)
    store = Store(str(db), read_only=True)
    rep = check_store(store)
    n = WORKLOADS * len(HWS) * PER
    assert (rep.engine_ok, rep.records, rep.ok) == (True, n, False)
    assert rep.orphans == (f"record {which['orphan']}: missing hardware row",)
    assert len(rep.undecodable) == 1 and rep.undecodable[0].startswith(f"record {which['undecodable']}: ")
    assert len(rep.inconsistent) == 1
    assert re.fullmatch(rf"record {which['inconsistent']}: ranking latency \S+ differs from measured \S+ "
                        "with no re-measurement", rep.inconsistent[0])
    for page in (1, 7, 999, 1000, 5000):  # page boundaries change nothing
        assert check_store(store, page=page) == rep
    assert main(["db", "check", "--db", str(db)]) == 4
    out = capfd.readouterr().out
    assert f"records: {n}\norphans: 1\nundecodable records: 1\ninconsistent rankings: 1\n" in out
    assert out.rstrip().endswith("PROBLEMS FOUND")
    assert paged_only == []  # check reads its own pages of columns, not Records


def test_check_replays_fastest_first_per_workload_a_page_at_a_time(db: Path) -> None:
    which = _corrupt(db)
    store = Store(str(db), read_only=True)
    with sqlite3.connect(db) as con:
        expect = [u for (u,) in con.execute(
            "SELECT uid FROM tc_record WHERE latency_s IS NOT NULL AND hardware_id != 'gone' "
            "ORDER BY workload_id, latency_s, id") if u != which["undecodable"]]
    full = check_store(store, replay=_Refuser(), page=64)
    assert full.not_replaying == tuple(f"record {u}: refused" for u in expect)
    some = check_store(store, replay=_Refuser(), replay_limit=130, page=64)
    assert some.not_replaying == full.not_replaying[:130]
    assert check_store(Store(str(db)), replay=_Refuser(), replay_limit=0).not_replaying == ()


# -- every backend --------------------------------------------------------------------------------


def test_pages_agree_with_one_read_on_every_backend(store_url: str, capsys) -> None:
    """Keyset pages (tied latencies included) on memory, SQLite and PostgreSQL: check replays
    in the order one sorted read gives, the dry run counts what gc removes, ls prints all."""
    import argparse

    from tunecache.cli import db as cli_db

    store = Store(store_url)
    keys = [WorkloadKey(f"{w:010d}") for w in range(3)]
    for w, key in enumerate(keys):
        store.commit_workload(key, WorkloadDesc(name=f"task{w}"))
        store.commit_records([Record(key, HWS[0], TRACE, run_secs=(1e-3 * (i % 4 + 1),) if i % 5 else (),
                                     latency_s=1e-3 * (i % 4 + 1) if i % 5 else None) for i in range(40)])
    recs = store.records(valid_only=False)
    expect = [r.uid for k in keys for r in sorted((r for r in recs if r.workload == k and r.latency_s is not None),
                                                  key=lambda r: r.latency_s or 0.0)]
    rep = check_store(store, replay=_Refuser(), page=7)
    assert rep.ok is False and rep.records == 120 and not (rep.orphans or rep.undecodable or rep.inconsistent)
    assert rep.not_replaying == tuple(f"record {u}: refused" for u in expect)
    assert check_store(store, replay=_Refuser(), page=1000) == rep
    ns = argparse.Namespace(db=store, hardware=None, family=None, best=False, all=True, limit=0, json=True)
    assert cli_db._cmd_db_ls(ns) == 0
    assert [r["uid"] for r in json.loads(capsys.readouterr().out)] == [r.uid for r in recs]
    would = store.gc(2, dry_run=True)
    assert would == store.gc(2) == 120 - 6
    store.close()


# -- db import ----------------------------------------------------------------------------------------


@pytest.mark.tvm
def test_import_indexes_the_workloads_it_added(tvm: Any, target: Any, tmp_path: Path, capfd) -> None:
    from tvm import te
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    a = te.placeholder((16, 16), name="A")
    b = te.placeholder((16, 16), name="B")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((16, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    (tmp_path / "jdb").mkdir()
    jdb = ms.database.JSONDatabase(work_dir=str(tmp_path / "jdb"))
    for factor in (2, 4):
        sch = Schedule(mod)
        sch.split(sch.get_loops(sch.get_sblock("C"))[0], [None, factor])
        args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])
        jdb.commit_tuning_record(ms.database.TuningRecord(sch.trace, jdb.commit_workload(mod), [1e-4 * factor],
                                                          target, args))
    path = tmp_path / "i.db"
    assert main(["db", "import", "--db", str(path), str(tmp_path / "jdb")]) == 0
    assert "reuse index: 1 workloads indexed" in capfd.readouterr().out
    store = Store(str(path))
    (hw,) = store.hardware_keys()
    assert store.unindexed_workloads(hw) == []
    assert main(["db", "import", "--db", str(path), str(tmp_path / "jdb")]) == 0
    assert "reuse index" not in capfd.readouterr().out  # nothing new, nothing to index
