"""The store contract as a reusable pytest suite: every :class:`BaseStore` implementation runs it.

Subclass :class:`StoreContract` in a test module and give it a ``store`` fixture yielding an
empty store (parametrise it to cover several implementations)::

    class TestMyStore(StoreContract):
        @pytest.fixture
        def store(self) -> Iterator[BaseStore]:
            with MyStore() as s:
                yield s

Every test uses the keys of :data:`SUITE_WORKLOADS` (``wk`` is the first) and the hardware key
:data:`HARDWARE`.
"""

from __future__ import annotations

import threading
from dataclasses import FrozenInstanceError, fields, replace
from typing import Any

import pytest

from tunecache.errors import InvalidRecordError, StoreError
from tunecache.store.contract import DERIVED_NAME_MAX, BaseStore
from tunecache.store.keys import HardwareKey, HostFingerprint, WorkloadDesc, WorkloadKey
from tunecache.store.records import Provenance, Record
from tunecache.store.values import QueueEntry, ReuseEntry

__all__ = ["HARDWARE", "SUITE_WORKLOADS", "TRACE", "StoreContract", "entry", "rec"]

#: A small valid MetaSchedule trace (two instructions, one decision).
TRACE = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["SampleCategorical", [], [[0, 16], [0.5, 0.5]], ["v1"]]], [[1, 0]]]

#: The hardware key the suite's records are measured on.
HARDWARE = HardwareKey(
    target='{"keys":["cpu"],"kind":"llvm","mcpu":"znver3","num-cores":2}',
    fingerprint=HostFingerprint("AMD EPYC 7B13", ("avx2", "fma"), 2),
    tvm_version="0.27.0.post1",
)

#: Every workload the suite looks records up for; the first is the ``wk`` fixture.
SUITE_WORKLOADS = (WorkloadKey("1234567890"), WorkloadKey("a"), WorkloadKey("b"))


def rec(wk: WorkloadKey, hw: HardwareKey, lat: float | None, **prov: Any) -> Record:
    """Return a validated record of ``wk`` on ``hw`` measured at ``lat`` seconds.

    Parameters
    ----------
    wk, hw
        The record's keys.
    lat
        Its latency; ``None`` makes a failed measurement.
    **prov
        Fields of its :class:`~tunecache.store.records.Provenance`.

    Returns
    -------
    Record
    """
    secs = (lat,) if lat is not None else (1e10,)
    return Record.from_measurement(wk, hw, TRACE, secs, [["TENSOR", "float32", [4, 4]]], Provenance(**prov))


def entry(wk: WorkloadKey, group: str, log_work: float, target_id: str = HARDWARE.target_id) -> ReuseEntry:
    """Return a reuse-index entry of ``wk`` in ``group`` of size ``2 ** log_work``.

    Parameters
    ----------
    wk
        The workload.
    group
        Its reuse group.
    log_work
        log2 of its size.
    target_id
        The target it was made for (default: :data:`HARDWARE`'s).

    Returns
    -------
    ReuseEntry
    """
    return ReuseEntry(wk, target_id, f"task_{wk.shash}", "matmul", group, log_work, '{"n":1}', "sk", False)


def _run_threads(n: int, fn: Any) -> list[BaseException]:
    """Run ``fn(i)`` in ``n`` threads released together; return what they raised."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            fn(i)
        except BaseException as err:  # noqa: BLE001 - handed to the test, which fails on it
            errors.append(err)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


class StoreContract:
    """Tests every :class:`~tunecache.store.contract.BaseStore` passes.

    A subclass provides the ``store`` fixture (an empty store). The ``hw`` and ``wk`` fixtures
    are :data:`HARDWARE` and ``SUITE_WORKLOADS[0]``.
    """

    @pytest.fixture
    def hw(self) -> HardwareKey:
        return HARDWARE

    @pytest.fixture
    def wk(self) -> WorkloadKey:
        return SUITE_WORKLOADS[0]

    # -- workloads ----------------------------------------------------------------------------

    def test_commit_workload_is_idempotent(self, store: BaseStore, wk: WorkloadKey) -> None:
        desc = WorkloadDesc("mm", "matmul", ((4, 4),), ("float32",), (4, 4, 4))
        store.commit_workload(wk, desc, "MODJSON")
        store.commit_workload(wk, WorkloadDesc(), "")
        got = store.get_workload(wk)
        assert got is not None and got.desc == desc and got.mod_json == "MODJSON"
        assert len(store.workloads()) == 1
        assert store.has_workload(wk) and not store.has_workload(WorkloadKey("other"))

    def test_a_better_description_fills_blanks(self, store: BaseStore, wk: WorkloadKey) -> None:
        store.commit_workload(wk)
        assert store.get_workload(wk) == store.workloads()[0]
        store.commit_workload(wk, WorkloadDesc("mm", "matmul"), "MODJSON")
        got = store.get_workload(wk)
        assert got is not None and got.desc.family == "matmul" and got.mod_json == "MODJSON"
        assert [w.key for w in store.workloads(family="matmul")] == [wk]
        assert store.workloads(family="conv2d") == []

    # -- hits ---------------------------------------------------------------------------------

    def test_best_k_orders_by_latency_and_skips_failed(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
        for lat in (3e-3, None, 1e-3, 2e-3):
            store.commit_record(rec(wk, hw, lat))
        best = store.best_k(wk, hw, 2)
        assert [r.latency_s for r in best] == [1e-3, 2e-3]
        assert len(store.best_k(wk, hw, 10)) == 3
        assert store.count_records(hw) == 4  # failed measurements are kept (cost-model data)

    def test_best_k_ties_keep_commit_order(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        first, second, best = rec(wk, hw, 2e-3), rec(wk, hw, 2e-3), rec(wk, hw, 1e-3)
        store.commit_records([first, second])
        store.commit_record(best)
        assert [r.uid for r in store.best_k(wk, hw, 3)] == [best.uid, first.uid, second.uid]
        assert store.best_k(wk, hw, 0) == [] and store.best_k(wk, hw, -1) == []
        assert store.best_k(WorkloadKey("unknown"), hw, 1) == []

    def test_record_round_trip_keeps_provenance(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        r = rec(wk, hw, 1e-3, kind="reused", source_workload="structural:99", trials=12, seconds=3.5, user="ana")
        store.commit_record(r)
        (got,) = store.best_k(wk, hw, 1)
        assert got == r  # every field, trace JSON included

    def test_same_uid_twice_is_a_noop(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        r = rec(wk, hw, 1e-3)
        assert store.commit_records([r]) == 1
        assert store.commit_records([r]) == 0
        assert store.count_records() == 1

    def test_other_hardware_is_invisible_and_explained(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
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

    def test_same_cpu_model_shares_records(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        store.commit_record(rec(wk, hw, 1e-3, host="machine-a"))
        twin = HardwareKey.from_dict(hw.to_dict())  # a teammate's machine: same CPU, target, TVM
        assert [r.provenance.host for r in store.best_k(wk, twin, 1)] == ["machine-a"]

    def test_stale_records_are_not_hits(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        r = rec(wk, hw, 1e-3)
        store.commit_record(r)
        store.mark_stale([r.uid])
        assert store.best_k(wk, hw, 1) == []
        assert [x.uid for x in store.best_k(wk, hw, 1, include_stale=True)] == [r.uid]
        assert "stale" in store.explain_miss(wk, hw).reason
        store.mark_stale([r.uid], stale=False)
        assert store.best_k(wk, hw, 1)[0].uid == r.uid

    def test_set_latency_reorders(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        r1, r2 = rec(wk, hw, 1e-3), rec(wk, hw, 2e-3)
        store.commit_records([r1, r2])
        store.set_latency(r1.uid, 3e-3, cv=0.02)
        best = store.best_k(wk, hw, 2)
        assert [r.uid for r in best] == [r2.uid, r1.uid] and best[1].cv == 0.02
        assert best[1].run_secs == r1.run_secs  # the measurements stay as measured

    # -- values -------------------------------------------------------------------------------

    def test_reads_return_frozen_values_that_never_change(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
        store.commit_workload(wk, WorkloadDesc("mm", "matmul"), "MODJSON")
        r = rec(wk, hw, 1e-3)
        store.commit_record(r)
        (got,) = store.best_k(wk, hw, 1)
        (listed,) = store.records()
        workload = store.get_workload(wk)
        assert workload is not None
        (key,) = store.hardware_keys(wk)
        stats = store.stats()
        miss = store.explain_miss(wk, replace(hw, tvm_version="0.1"))
        for value in (got, listed, got.provenance, workload, key, key.fingerprint, stats, miss):
            with pytest.raises(FrozenInstanceError):
                setattr(value, fields(value)[0].name, None)
        store.set_latency(r.uid, 5e-3, cv=0.1)
        store.mark_stale([r.uid])
        assert (got.latency_s, got.cv, got.stale) == (1e-3, None, False)
        assert (listed.latency_s, listed.stale) == (1e-3, False)
        assert stats.valid_records == 1 and stats.stale_records == 0
        (now,) = store.records()
        assert (now.latency_s, now.cv, now.stale) == (5e-3, 0.1, True)

    # -- listing and counting -----------------------------------------------------------------

    def test_records_filters_and_stats(self, store: BaseStore, hw: HardwareKey) -> None:
        a, b = SUITE_WORKLOADS[1], SUITE_WORKLOADS[2]
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

    def test_records_in_commit_order_with_limit_and_filters(self, store: BaseStore, hw: HardwareKey) -> None:
        a, b = SUITE_WORKLOADS[1], SUITE_WORKLOADS[2]
        other = replace(hw, tvm_version="0.26")
        recs = [rec(a, hw, 3e-3), rec(b, hw, 1e-3), rec(a, other, 2e-3), rec(a, hw, None)]
        store.commit_records(recs)
        assert [r.uid for r in store.records()] == [r.uid for r in recs]
        assert [r.uid for r in store.records(limit=2)] == [r.uid for r in recs[:2]]
        assert [r.uid for r in store.records(workload=a)] == [recs[0].uid, recs[2].uid, recs[3].uid]
        assert [r.uid for r in store.records(hardware=other.id)] == [recs[2].uid]  # a hardware id works too
        assert store.count_records(workload=a) == 3 and store.count_records(hw, workload=a) == 2
        assert store.count_records(workload=WorkloadKey("unknown")) == 0
        assert {k.id for k in store.hardware_keys()} == {hw.id, other.id}

    # -- maintenance --------------------------------------------------------------------------

    def test_gc_keeps_best_k_per_key(self, store: BaseStore, hw: HardwareKey) -> None:
        a, b = SUITE_WORKLOADS[1], SUITE_WORKLOADS[2]
        recs = [rec(a, hw, x * 1e-3, trials=i) for i, x in enumerate((5, 1, 4, 2, 3))] + [
            rec(b, hw, 7e-3),
            rec(b, hw, None),
        ]
        store.commit_records(recs)
        store.commit_reuse_entries([entry(a, "g", 1.0)])
        assert store.gc(keep_top=2, dry_run=True) == 4 and store.count_records() == len(recs)
        removed = store.gc(keep_top=2)
        assert removed == 4
        assert len(store.reuse_entries(hw.target_id, [a])) == 1  # the index entry is kept
        assert [r.latency_s for r in store.best_k(a, hw, 10)] == [1e-3, 2e-3]
        assert [r.provenance.trials for r in store.best_k(a, hw, 10)] == [1, 3]
        assert len(store.best_k(b, hw, 10)) == 1
        with pytest.raises(InvalidRecordError):
            store.gc(0)

    def test_invalid_record_is_rejected_and_nothing_written(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
        good = rec(wk, hw, 1e-3)
        bad = replace(good, trace=[["not an instruction"], []], uid="x" * 32)
        with pytest.raises(InvalidRecordError):
            store.commit_records([good, bad])
        assert store.count_records() == 0

    # -- claims -------------------------------------------------------------------------------

    def test_claims_are_exclusive_until_released_or_expired(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
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

    def test_done_marks_survive_release_and_block_claims(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
        assert not store.is_done(wk, hw)
        assert store.claim(wk, hw, "alice", 60)
        store.mark_done(wk, hw, "alice")
        store.release(wk, hw, "alice")
        assert store.is_done(wk, hw)
        assert not store.claim(wk, hw, "bob", 60)  # nothing left to tune

    def test_a_dead_holders_claim_can_be_taken_over(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        assert store.claim(wk, hw, "ghost", 600)
        assert not store.claim(wk, hw, "me", 600)
        assert store.claim(wk, hw, "me", 600, steal_from="ghost")
        assert store.claim_holder(wk, hw) == "me"
        assert not store.claim(wk, hw, "third", 600, steal_from="ghost")  # only from that holder

    # -- the tuning queue ---------------------------------------------------------------------

    def test_queue_merges_models_orders_by_priority_and_empties_when_done(
        self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey
    ) -> None:
        a, b = SUITE_WORKLOADS[1], SUITE_WORKLOADS[2]
        for k in (wk, a, b):
            store.commit_workload(k, WorkloadDesc(name=f"task_{k.shash}", family="dense"), mod_json="{}")

        def q(k: WorkloadKey, weight: int, priority: float, model: str) -> QueueEntry:
            return QueueEntry(k, hw, f"task_{k.shash}", weight, priority, served="predicted", models=(model,))

        assert store.queued() == []
        assert store.enqueue([q(wk, 2, 1.0, "m1"), q(a, 1, 5.0, "m1")]) == 2
        assert store.enqueue([q(wk, 2, 1.5, "m1")]) == 1  # the same model again: the larger, not the sum
        assert store.enqueue([q(wk, 3, 3.0, "m2")]) == 1  # another model: added up
        got = store.queued(hw)
        assert [(e.workload, e.weight, e.priority) for e in got] == [(wk, 5, 4.5), (a, 1, 5.0)][::-1]
        first = got[1]
        assert first.models == ("m1", "m2") and first.requests == 3 and first.served == "predicted"
        assert first.name == f"task_{wk.shash}" and first.hardware == hw and first.queued_at > 0
        assert store.queued(hw, limit=1)[0].workload == a
        assert store.queued(replace(hw, tvm_version="0.1")) == []
        store.mark_done(a, hw, "worker")  # done: out of the queue, and never queued again
        assert [e.workload for e in store.queued()] == [wk]
        assert store.enqueue([q(a, 1, 5.0, "m3")]) == 0 and len(store.queued()) == 1
        assert store.dequeue(wk, hw) and not store.dequeue(wk, hw) and store.queued() == []
        with pytest.raises(StoreError, match="not stored"):
            store.enqueue([QueueEntry(WorkloadKey("unknown"), hw, "x", 1, 1.0)])
        assert store.enqueue([q(b, 1, 0.5, "m1")]) == 1  # the failed call wrote nothing else

    # -- iteration and the reuse index ---------------------------------------------------------

    def test_iter_records_pages_in_either_order(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        recs = [rec(SUITE_WORKLOADS[i % 2], hw, (i + 1) * 1e-4 if i != 3 else None, trials=i) for i in range(7)]
        store.commit_records(recs)
        assert [r.uid for r in store.iter_records(batch=2)] == [r.uid for r in recs]
        assert [r.uid for r in store.iter_records(newest_first=True, batch=3)] == [r.uid for r in reversed(recs)]
        assert [r.uid for r in store.iter_records(workload=wk, valid_only=True, batch=1)] == [
            r.uid for r in recs if r.workload == wk and r.latency_s is not None]
        assert list(store.iter_records(hardware="nope")) == []

    def test_sample_records_keeps_each_workloads_newest_among_the_newest(
        self, store: BaseStore, hw: HardwareKey
    ) -> None:
        a, b, c = SUITE_WORKLOADS[:3]
        order = [c, a, a, b, a, a, b, a, b, a]  # commit order: c is the oldest
        recs = [rec(w, hw, None if i == 8 else (i + 1) * 1e-4, trials=i) for i, w in enumerate(order)]
        store.commit_records(recs)
        store.commit_record(rec(a, replace(hw, tvm_version="other"), 1e-3, trials=99))
        got = store.sample_records(hw, newest=8, per_workload=2)
        # The 8 newest valid ones are all but c's (8 failed); of them a's newest 2 (9, 7) and b's (6, 3).
        assert [r.provenance.trials for r in got] == [9, 7, 6, 3]
        assert [r.provenance.trials for r in store.sample_records(hw, newest=100, per_workload=1)] == [9, 6, 0]
        assert [r.provenance.trials for r in store.sample_records(hw, newest=2, per_workload=5)] == [9, 7]
        assert store.sample_records(hw, newest=0, per_workload=3) == []
        assert store.sample_records(hw, newest=5, per_workload=0) == []
        assert all(r.trace == recs[r.provenance.trials].trace for r in got)

    def test_recent_provenance_is_newest_valid_first(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        store.commit_records([rec(wk, hw, 1e-3 if i != 2 else None, trials=i) for i in range(5)])
        store.commit_record(rec(wk, replace(hw, tvm_version="other"), 1e-3, trials=99))
        assert [p.trials for p in store.recent_provenance(hw, limit=3)] == [4, 3, 1]
        assert store.recent_provenance(hw, limit=0) == []

    def test_reuse_entries_are_committed_once_per_target(self, store: BaseStore, wk: WorkloadKey) -> None:
        e = entry(wk, "g", 10.0)
        assert store.commit_reuse_entries([e, e]) == 1
        assert store.commit_reuse_entries([replace(e, group="other")]) == 0  # the first one stays
        assert store.commit_reuse_entries([replace(e, target_id="t2")]) == 1
        assert store.reuse_entries(HARDWARE.target_id, [wk, SUITE_WORKLOADS[1]]) == [e]
        assert store.has_workload(wk)  # the entry's workload is created

    def test_reuse_candidates_need_a_program_and_are_nearest(self, store: BaseStore, hw: HardwareKey) -> None:
        keys = [WorkloadKey(f"cand{i}") for i in range(8)]
        store.commit_reuse_entries([entry(k, "g", float(i)) for i, k in enumerate(keys)]
                                   + [entry(WorkloadKey("othergroup"), "h", 3.0)])
        for i, k in enumerate(keys):
            if i != 4:  # cand4 has only a failed record: it has no program to give
                store.commit_record(rec(k, hw, 1e-3))
            else:
                store.commit_record(rec(k, hw, None))
        store.commit_record(rec(WorkloadKey("othergroup"), hw, 1e-3))
        got = store.reuse_candidates(hw, "g", 3.5, limit=2)
        assert [e.workload.shash for e in got] == ["cand3", "cand2", "cand5", "cand6"]  # ties by key
        got = store.reuse_candidates(hw, "g", 3.5, limit=2, exclude=[keys[5]])
        assert [e.workload.shash for e in got] == ["cand3", "cand2", "cand6", "cand7"]
        other_hw = replace(hw, tvm_version="9.9")
        assert store.reuse_candidates(other_hw, "g", 3.5, limit=2) == []  # no record under that key
        assert store.reuse_candidates(hw, "nogroup", 3.5, limit=2) == []

    def test_unindexed_workloads_have_programs_and_modules(self, store: BaseStore, hw: HardwareKey) -> None:
        a, b, c = SUITE_WORKLOADS
        for k in (a, b, c):
            store.commit_workload(k, WorkloadDesc(name=k.shash), mod_json='{"mod": 1}')
        store.commit_record(rec(a, hw, 1e-3))
        store.commit_record(rec(b, hw, 1e-3))
        store.commit_record(rec(WorkloadKey("nomodule"), hw, 1e-3))
        assert sorted(w.key.shash for w in store.unindexed_workloads(hw)) == sorted([a.shash, b.shash])
        store.commit_reuse_entries([entry(a, "g", 1.0)])
        assert [w.key for w in store.unindexed_workloads(hw)] == [b]
        assert len(store.unindexed_workloads(hw, limit=0)) == 0
        assert store.unindexed_workloads(replace(hw, target='{"kind":"cuda"}')) == []

    # -- threads ------------------------------------------------------------------------------

    def test_concurrent_claims_have_one_winner(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        won: list[int] = []
        errors = _run_threads(8, lambda i: won.append(i) if store.claim(wk, hw, f"holder{i}", 60) else None)
        assert errors == []
        assert len(won) == 1 and store.claim_holder(wk, hw) == f"holder{won[0]}"

    def test_threads_share_one_store(self, store: BaseStore, wk: WorkloadKey, hw: HardwareKey) -> None:
        per_thread = 10

        def work(i: int) -> None:
            for j in range(per_thread):
                store.commit_record(rec(wk, hw, (1 + i * per_thread + j) * 1e-4, trials=j))
                store.best_k(wk, hw, 3)
                store.claim(SUITE_WORKLOADS[1], hw, f"holder{i}", 60)
                store.count_records(hw)

        assert _run_threads(4, work) == []
        assert store.count_records(hw) == 4 * per_thread
        assert [r.latency_s for r in store.best_k(wk, hw, 2)] == [1e-4, 2e-4]

    # -- derived documents --------------------------------------------------------------------

    def test_derived_documents_are_kept_replaced_and_named_within_bounds(self, store: BaseStore) -> None:
        name = "cost_model/" + HARDWARE.id
        assert store.get_derived(name) is None
        store.put_derived(name, '{"v": 1}')
        store.put_derived("other", "[]")
        assert store.get_derived(name) == '{"v": 1}'
        store.put_derived(name, '{"v": 2}')  # replaced, not added beside
        assert store.get_derived(name) == '{"v": 2}' and store.get_derived("other") == "[]"
        long = "x" * DERIVED_NAME_MAX
        store.put_derived(long, "{}")
        assert store.get_derived(long) == "{}"
        for bad in ("", long + "x"):
            with pytest.raises(ValueError, match="derived document's name"):
                store.put_derived(bad, "{}")
            with pytest.raises(ValueError, match="derived document's name"):
                store.get_derived(bad)
        assert store.count_records() == 0 and store.schema_version >= 1  # no record, the schema row kept

    # -- lifetime -----------------------------------------------------------------------------

    def test_identity_and_context_manager(self, store: BaseStore) -> None:
        assert store.backend in ("sqlite", "postgresql")
        assert "://" in store.url and store.display_url
        assert store.schema_version >= 1 and store.stats().schema_version == store.schema_version
        assert not store.read_only and store.read_only_reason == "" and not store.immutable
        assert isinstance(store.persistent, bool)
        with store as entered:
            assert entered is store
