"""MetaSchedule database backed by the store, bound to one hardware key.

``ms.tune_tir(..., database=db)`` and ``relax.transform.MetaScheduleApplyDatabase`` read and
write the store through it, and never see records measured on other hardware (TVM's own
databases ignore the target: tvm issue 15549).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tunecache import config
from tunecache.errors import InvalidRecordError, ReadOnlyStoreError, TunecacheError
from tunecache.store.contract import BaseStore
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance, Record, mean_latency
from tunecache.tvm_layer import load_tvm, scheduled

__all__ = ["make_database", "CommitEvent", "measured_for_tvm", "reraise_store_error"]


def reraise_store_error(database: Any, err: BaseException) -> None:
    """Raise the tunecache error a database callback hit, if ``err`` is TVM's wrapping of it."""
    inner = getattr(database, "last_error", None)
    if inner is not None:
        raise inner from err


@dataclass(frozen=True)
class CommitEvent:
    """What the adapter tells a listener after each committed measurement."""

    workload: WorkloadKey
    record: Record


_CLASS: Any = None
_CLASS_LOCK = threading.Lock()


def _shash(mod: Any) -> str:
    """MetaSchedule's workload hash of ``mod`` (``Workload(mod).as_json()[0]``) without the JSON."""
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod))


def measured_for_tvm(record: Record) -> Record:
    """Return ``record`` as MetaSchedule is handed it: with every repeat it was measured with.

    The store keeps every measured repeat (``run_secs``) and ranks by their mean
    (``latency_s``). :func:`~tunecache.tvm_layer.convert.record_to_tvm` hands MetaSchedule
    ``[latency_s]`` for a record with a latency, which collapsed ``[1.5, 2.5, 1.8]`` into
    ``[1.933]``; for a record whose ranking latency *is* the mean of its repeats, the repeats are
    handed over instead, so MetaSchedule sees what was measured and still ranks it (by mean, as
    ``UnionDatabase`` does) where the store does. A record re-measured since
    (:meth:`~tunecache.store.contract.BaseStore.set_latency`: its latency is no longer the mean
    of its repeats) is handed ``[latency_s]``, the re-measurement, so MetaSchedule's ranking
    keeps agreeing with the store's.

    Parameters
    ----------
    record
        A record read from the store.

    Returns
    -------
    Record
        ``record`` itself, or a copy without ``latency_s`` (which makes ``record_to_tvm`` pass
        its ``run_secs``).
    """
    if record.latency_s is None or not record.run_secs or record.cv is not None:
        return record
    mean = mean_latency(record.run_secs)
    if mean is None or not math.isclose(mean, record.latency_s, rel_tol=1e-9, abs_tol=0.0):
        return record
    return replace(record, latency_s=None)


def _database_class() -> Any:
    global _CLASS
    with _CLASS_LOCK:
        if _CLASS is not None:
            return _CLASS
        load_tvm()
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.database import PyDatabase

        from tunecache.tvm_layer.convert import (
            describe_module,
            record_from_tvm,
            record_to_tvm,
            workload_from_json,
            workload_of,
        )

        @derived_object
        class StoreDatabase(PyDatabase):
            """A MetaSchedule ``PyDatabase`` over a tunecache :class:`Store`, for one hardware key."""

            def __init__(
                self,
                store: BaseStore,
                hardware: HardwareKey,
                target: Any,
                provenance: Provenance,
                on_commit: Callable[[CommitEvent], None] | None = None,
                names: dict[str, str] | None = None,
                extra: Mapping[WorkloadKey, Record] | None = None,
            ) -> None:
                super().__init__()
                self.extra = dict(extra or {})
                self.store = store
                self.hardware = hardware
                self.target = target
                self.provenance = provenance
                self.on_commit = on_commit
                self.names = dict(names or {})
                self._workloads: dict[str, tuple[WorkloadKey, Any]] = {}
                self._committed: set[str] = set()
                self._trials: dict[str, int] = {}
                self._started: dict[str, float] = {}
                self._lock = threading.Lock()
                self.last_error: TunecacheError | None = None

            # MetaSchedule's Workload objects carry the hash; reuse them per structural hash. The
            # hash alone is cheap; a Workload serializes the whole module (workload_of).
            def _key(self, mod: Any) -> tuple[WorkloadKey, Any]:
                with self._lock:
                    cached = self._workloads.get(_shash(mod))
                if cached is not None:
                    return cached
                key, mod_json, wl = workload_of(mod)
                with self._lock:
                    cached = self._workloads.get(key.shash)
                    if cached is not None:
                        return cached
                    self._workloads[key.shash] = (key, wl)
                if key.shash not in self._committed:
                    desc = describe_module(mod)
                    name = self.names.get(key.shash)
                    if name:
                        desc = replace(desc, name=name)
                    try:
                        self.store.commit_workload(key, desc, mod_json)
                    except ReadOnlyStoreError:
                        pass  # reading a read-only store needs no workload row of ours
                    self._committed.add(key.shash)
                return key, wl

            def has_workload(self, mod: Any) -> bool:
                key = WorkloadKey(_shash(mod))
                return key in self.extra or bool(self.store.best_k(key, self.hardware, 1))

            def commit_workload(self, mod: Any) -> Any:
                return self._key(mod)[1]

            def commit_tuning_record(self, record: Any) -> None:
                try:
                    self._commit_tuning_record(record)
                except TunecacheError as err:
                    self.last_error = err  # TVM re-raises it as a RuntimeError: see reraise_store_error
                    raise

            def _commit_tuning_record(self, record: Any) -> None:
                wl = record.workload
                key, _wl = self._key(wl.mod)
                with self._lock:
                    n = self._trials.get(key.shash, 0) + 1
                    self._trials[key.shash] = n
                    start = self._started.setdefault(key.shash, time.time())
                prov = replace(
                    self.provenance,
                    trials=n,
                    seconds=time.time() - start,
                    created_at=time.time(),
                )
                rec = record_from_tvm(record, key, self.hardware, prov)
                self.store.commit_record(rec)
                if self.on_commit is not None:
                    self.on_commit(CommitEvent(key, rec))

            def get_top_k(self, workload: Any, top_k: int) -> list[Any]:
                # The store's order (mean of the repeats, or the re-measurement), every repeat kept.
                wkey = WorkloadKey(str(workload.as_json()[0]))
                out = []
                recs = self.store.best_k(wkey, self.hardware, top_k)
                if not recs and wkey in self.extra:
                    recs = [self.extra[wkey]]
                for rec in recs:
                    try:
                        out.append(record_to_tvm(measured_for_tvm(rec), workload, self.target))
                    except InvalidRecordError:
                        continue  # a record that no longer loads is skipped, like MetaSchedule does
                return out

            def scheduled_kernel(self, mod: Any) -> Any | None:
                """The scheduled ``IRModule`` this process already made from the best record of
                workload ``mod`` (a normalized one-function module), or ``None``.

                ``MetaScheduleApplyDatabase`` would replay the record's trace again; a replayed
                or predicted program was scheduled moments before (:mod:`tunecache.tvm_layer.scheduled`).
                """
                key = WorkloadKey(_shash(mod))
                rec = self.extra.get(key)  # only a replay or prediction was scheduled in-process
                if rec is None or self.store.best_k(key, self.hardware, 1):  # the store's wins, as in get_top_k
                    return None
                return scheduled.recall(key.shash, rec.trace, self.target)

            def get_all_tuning_records(self) -> list[Any]:
                out = []
                wls: dict[str, Any] = {}
                for rec in self.store.records(hardware=self.hardware, valid_only=True):
                    wl = wls.get(rec.workload.shash)
                    if wl is None:
                        sw = self.store.get_workload(rec.workload)
                        if sw is None or not sw.mod_json:
                            continue
                        try:
                            wl = workload_from_json(sw.key, sw.mod_json)
                        except InvalidRecordError:
                            continue
                        wls[rec.workload.shash] = wl
                    try:
                        out.append(record_to_tvm(measured_for_tvm(rec), wl, self.target))
                    except InvalidRecordError:
                        continue
                return out

            def __len__(self) -> int:
                return self.store.count_records(self.hardware)

            def trials_committed(self, key: WorkloadKey) -> int:
                """Return how many measurements of ``key`` this adapter committed."""
                return self._trials.get(key.shash, 0)

        _CLASS = StoreDatabase
        return _CLASS


def make_database(
    store: BaseStore,
    hardware: HardwareKey,
    target: Any,
    *,
    provenance: Provenance | None = None,
    on_commit: Callable[[CommitEvent], None] | None = None,
    names: dict[str, str] | None = None,
    extra: Mapping[WorkloadKey, Record] | None = None,
) -> Any:
    """Return a MetaSchedule database over ``store`` that only sees ``hardware``'s records.

    Parameters
    ----------
    store
        The store to read and write.
    hardware
        The hardware key every committed record gets and every query is filtered by.
    target
        The ``tvm.target.Target`` records are handed to MetaSchedule with.
    provenance
        Template for committed records (kind, source); ``trials``/``seconds`` are filled per
        workload as measurements arrive.
    on_commit
        Called after each committed measurement (progress reporting).
    names
        Task names by workload hash, used to describe new workloads.
    extra
        Programs served for workloads the store has no record of, never stored (the zero-trial
        replays of ``tune="never"``).

    Examples
    --------
    >>> db = make_database(open_store("memory"), hw, target)          # doctest: +SKIP
    >>> ms.tune_tir(mod, target, work_dir, 16, database=db)            # doctest: +SKIP
    """
    import tunecache

    prov = provenance or Provenance(
        kind="tuned",
        host=config.current_host(),
        user=config.current_user(),
        tunecache_version=tunecache.__version__,
        tvm_version=hardware.tvm_version,
    )
    return _database_class()(store, hardware, target, prov, on_commit, names, extra)
