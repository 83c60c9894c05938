"""The store contract, run against every backend: in-memory SQLite, SQLite file, PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tunecache.errors import InvalidRecordError, ReadOnlyStoreError, SchemaVersionError, StoreURLError
from tunecache.store import (
    HardwareKey,
    HostFingerprint,
    Provenance,
    Record,
    Store,
    WorkloadDesc,
    WorkloadKey,
    normalize_url,
)

TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SampleCategorical", [], [[0, 16], [0.5, 0.5]], ["v1"]]], [[1, 0]]]


def rec(wk: WorkloadKey, hw: HardwareKey, lat: float | None, **prov: object) -> Record:
    secs = (lat,) if lat is not None else (1e10,)
    return Record.from_measurement(wk, hw, TRACE, secs, [["TENSOR", "float32", [4, 4]]], Provenance(**prov))


def test_commit_workload_is_idempotent(store: Store, wk: WorkloadKey) -> None:
    desc = WorkloadDesc("mm", "matmul", ((4, 4),), ("float32",), (4, 4, 4))
    store.commit_workload(wk, desc, "MODJSON")
    store.commit_workload(wk, WorkloadDesc(), "")
    got = store.get_workload(wk)
    assert got is not None and got.desc == desc and got.mod_json == "MODJSON"
    assert len(store.workloads()) == 1
    assert store.has_workload(wk) and not store.has_workload(WorkloadKey("other"))


def test_best_k_orders_by_latency_and_skips_failed(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    for lat in (3e-3, None, 1e-3, 2e-3):
        store.commit_record(rec(wk, hw, lat))
    best = store.best_k(wk, hw, 2)
    assert [r.latency_s for r in best] == [1e-3, 2e-3]
    assert len(store.best_k(wk, hw, 10)) == 3
    assert store.count_records(hw) == 4  # failed measurements are kept (cost-model data)


def test_record_round_trip_keeps_provenance(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    r = rec(wk, hw, 1e-3, kind="reused", source_workload="structural:99", trials=12, seconds=3.5, user="ana")
    store.commit_record(r)
    (got,) = store.best_k(wk, hw, 1)
    assert got == r  # every field, trace JSON included


def test_same_uid_twice_is_a_noop(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    r = rec(wk, hw, 1e-3)
    assert store.commit_records([r]) == 1
    assert store.commit_records([r]) == 0
    assert store.count_records() == 1


def test_other_hardware_is_invisible_and_explained(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    store.commit_record(rec(wk, hw, 1e-3))
    other_cpu = replace(hw, fingerprint=HostFingerprint("Intel Xeon", ("avx2", "avx512f", "fma"), 2))
    other_tvm = replace(hw, tvm_version="0.28.0")
    other_target = replace(hw, target=hw.target.replace("znver3", "skylake"))
    for q in (other_cpu, other_tvm, other_target):
        assert store.best_k(wk, q, 1) == []
    assert "host.cpu_model" in store.explain_miss(wk, other_cpu).reason
    assert "avx512f" in store.explain_miss(wk, other_cpu).reason
    assert "tvm_version" in store.explain_miss(wk, other_tvm).reason
    assert "target.mcpu" in store.explain_miss(wk, other_target).reason
    assert store.explain_miss(WorkloadKey("nope"), hw).closest is None


def test_same_cpu_model_shares_records(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    store.commit_record(rec(wk, hw, 1e-3, host="machine-a"))
    twin = HardwareKey.from_dict(hw.to_dict())  # a teammate's machine: same CPU, target, TVM
    assert [r.provenance.host for r in store.best_k(wk, twin, 1)] == ["machine-a"]


def test_records_filters_and_stats(store: Store, hw: HardwareKey) -> None:
    a, b = WorkloadKey("a"), WorkloadKey("b")
    store.commit_workload(a, WorkloadDesc("conv", "conv2d"))
    store.commit_workload(b, WorkloadDesc("mm", "matmul"))
    other = replace(hw, tvm_version="0.26")
    store.commit_records([rec(a, hw, 1e-3), rec(b, hw, 2e-3), rec(b, other, 3e-3), rec(b, hw, None)])
    assert len(store.records(hardware=hw)) == 3
    assert len(store.records(hardware=hw, valid_only=True)) == 2
    assert [r.workload for r in store.records(family="conv2d")] == [a]
    st = store.stats()
    assert (st.workloads, st.records, st.valid_records) == (2, 4, 3)
    assert dict(st.by_family) == {"conv2d": 1, "matmul": 1}
    assert sorted(n for _h, _d, n in st.by_hardware) == [1, 3]
    assert {k.id for k in store.hardware_keys(b)} == {hw.id, other.id}


def test_gc_keeps_best_k_per_key(store: Store, hw: HardwareKey) -> None:
    a, b = WorkloadKey("a"), WorkloadKey("b")
    recs = [rec(a, hw, x * 1e-3, trials=i) for i, x in enumerate((5, 1, 4, 2, 3))] + [rec(b, hw, 7e-3), rec(b, hw, None)]
    store.commit_records(recs)
    removed = store.gc(keep_top=2)
    assert removed == 4
    assert [r.latency_s for r in store.best_k(a, hw, 10)] == [1e-3, 2e-3]
    assert [r.provenance.trials for r in store.best_k(a, hw, 10)] == [1, 3]
    assert len(store.best_k(b, hw, 10)) == 1
    with pytest.raises(InvalidRecordError):
        store.gc(0)


def test_stale_records_are_not_hits(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    r = rec(wk, hw, 1e-3)
    store.commit_record(r)
    store.mark_stale([r.uid])
    assert store.best_k(wk, hw, 1) == []
    assert "stale" in store.explain_miss(wk, hw).reason
    store.mark_stale([r.uid], stale=False)
    assert store.best_k(wk, hw, 1)[0].uid == r.uid


def test_set_latency_reorders(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    r1, r2 = rec(wk, hw, 1e-3), rec(wk, hw, 2e-3)
    store.commit_records([r1, r2])
    store.set_latency(r1.uid, 3e-3, cv=0.02)
    best = store.best_k(wk, hw, 2)
    assert [r.uid for r in best] == [r2.uid, r1.uid] and best[1].cv == 0.02


def test_invalid_record_is_rejected_and_nothing_written(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    good = rec(wk, hw, 1e-3)
    bad = replace(good, trace=[["not an instruction"], []], uid="x" * 32)
    with pytest.raises(InvalidRecordError):
        store.commit_records([good, bad])
    assert store.count_records() == 0


def test_reopen_sees_committed_records(store_url: str, wk: WorkloadKey, hw: HardwareKey) -> None:
    if store_url == "memory":
        pytest.skip("an in-memory store ends with its process")
    s1 = Store(store_url)
    s1.commit_record(rec(wk, hw, 1e-3))
    s1.close()
    s2 = Store(store_url)
    assert len(s2.best_k(wk, hw, 1)) == 1
    s2.close()


def test_read_only_store_serves_but_refuses_writes(store_url: str, wk: WorkloadKey, hw: HardwareKey) -> None:
    if store_url == "memory":
        pytest.skip("read-only needs a persistent store")
    Store(store_url).commit_record(rec(wk, hw, 1e-3))
    ro = Store(store_url, read_only=True)
    assert len(ro.best_k(wk, hw, 1)) == 1
    with pytest.raises(ReadOnlyStoreError):
        ro.commit_record(rec(wk, hw, 2e-3))


def test_newer_schema_is_refused_with_upgrade_hint(store_url: str) -> None:
    if store_url == "memory":
        pytest.skip("needs a persistent store")
    from sqlalchemy import create_engine, text

    Store(store_url).close()
    eng = create_engine(normalize_url(store_url))
    with eng.begin() as c:
        c.execute(text("UPDATE tc_meta SET value='99' WHERE key='schema_version'"))
    eng.dispose()
    with pytest.raises(SchemaVersionError, match="newer"):
        Store(store_url)


def test_older_schema_names_the_upgrade_command(store_url: str) -> None:
    if store_url == "memory":
        pytest.skip("needs a persistent store")
    from sqlalchemy import create_engine, text

    Store(store_url).close()
    eng = create_engine(normalize_url(store_url))
    with eng.begin() as c:
        c.execute(text("UPDATE tc_meta SET value='0' WHERE key='schema_version'"))
    eng.dispose()
    with pytest.raises(SchemaVersionError, match="tunecache db upgrade"):
        Store(store_url)


def test_unknown_url_scheme() -> None:
    with pytest.raises(StoreURLError, match="unknown store URL scheme 'mysql'"):
        Store("mysql://localhost/db")


def test_default_url_comes_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TUNECACHE_DB", str(tmp_path / "x.db"))
    assert normalize_url(None) == "sqlite:///" + str(tmp_path / "x.db")
    monkeypatch.delenv("TUNECACHE_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert normalize_url(None) == "sqlite:///" + str(tmp_path / "cache" / "tunecache" / "tunecache.db")


def test_claims_are_exclusive_until_released_or_expired(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    assert store.claim(wk, hw, "alice", lease_s=60)
    assert not store.claim(wk, hw, "bob", lease_s=60)
    assert store.claim(wk, hw, "alice", lease_s=60)  # renewal
    assert store.claim_holder(wk, hw) == "alice"
    store.release(wk, hw, "alice")
    assert store.claim_holder(wk, hw) is None
    assert store.claim(wk, hw, "bob", lease_s=-1)  # an already expired lease...
    assert store.claim_holder(wk, hw) is None
    assert store.claim(wk, hw, "carol", lease_s=60)  # ...is taken over
    assert store.claim_holder(wk, hw) == "carol"
    other = replace(hw, tvm_version="0.1")
    assert store.claim(wk, other, "bob", lease_s=60)  # claims are per hardware key


def test_first_released_schema_upgrades_with_its_records(tmp_path) -> None:
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "old.db"
    shutil.copy(Path(__file__).parent / "data" / "store_v1.sqlite", path)
    with pytest.raises(SchemaVersionError, match="tunecache db upgrade"):
        Store(str(path))
    proc = subprocess.run([sys.executable, "-m", "tunecache.cli.main", "db", "upgrade", "--db", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "schema v1 -> v2" in proc.stdout
    s = Store(str(path))
    assert s.schema_version == 2 and s.count_records() == 6
    hw = HardwareKey.from_dict({"target": '{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":2}',
                                "fingerprint": {"cpu_model": "AMD EPYC 7B13", "isa": ["avx2", "fma"], "cores": 2},
                                "tvm_version": "0.27.0.post1"})
    assert [r.uid for r in s.best_k(WorkloadKey("old1"), hw, 2)] == ["v1rec10", "v1rec11"]
    assert s.claim(WorkloadKey("old1"), hw, "me", 10)
    from tunecache.store.integrity import check_store

    assert check_store(s).ok


def test_done_marks_survive_release_and_block_claims(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    assert not store.is_done(wk, hw)
    assert store.claim(wk, hw, "alice", 60)
    store.mark_done(wk, hw, "alice")
    store.release(wk, hw, "alice")
    assert store.is_done(wk, hw)
    assert not store.claim(wk, hw, "bob", 60)  # nothing left to tune


def test_a_dead_holders_claim_can_be_taken_over(store: Store, wk: WorkloadKey, hw: HardwareKey) -> None:
    assert store.claim(wk, hw, "ghost", 600)
    assert not store.claim(wk, hw, "me", 600)
    assert store.claim(wk, hw, "me", 600, steal_from="ghost")
    assert store.claim_holder(wk, hw) == "me"
    assert not store.claim(wk, hw, "third", 600, steal_from="ghost")  # only from that holder
