"""A read-only team store with a local overlay in front of it.

Lookups consult both (the overlay first: its records win ties); every write goes to the overlay.
:func:`push` copies the overlay's records to the team store once the user has write access;
record uids make pushing twice harmless.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator

from tunecache.store.contract import BaseStore, explain_miss_from_keys
from tunecache.store.keys import HardwareKey, MissExplanation, WorkloadDesc, WorkloadKey
from tunecache.store.records import Provenance, Record
from tunecache.store.values import QueueEntry, ReuseEntry, StoredWorkload, StoreStats

__all__ = ["OverlayStore", "push"]


class OverlayStore(BaseStore):
    """Serve hits from ``base`` (typically read-only) and ``overlay``; write to ``overlay`` only.

    It keeps the :class:`~tunecache.store.contract.BaseStore` contract, reading the union of
    both stores, with these differences by design:

    - every write (records, workloads, latencies, stale marks, claims, done marks, the tuning
      queue, ``gc``) goes to the overlay; ``base`` is never written; the queue is the
      overlay's alone (a worker on this overlay drains it);
    - a claim lives in the overlay, so it keeps out the users of this overlay only; a task is
      done when it is done in either store;
    - :meth:`count_records` adds both stores' counts (a record pushed to ``base`` and still in
      the overlay counts twice); :meth:`stats`, :attr:`schema_version` and :attr:`backend` are
      the overlay's;
    - :meth:`records` lists the overlay's records first, then ``base``'s that the overlay lacks;
    - reuse-index entries written here go to the overlay, also those of the team store's
      workloads (when the team store lacks them); :meth:`reuse_candidates` finds them there.

    Parameters
    ----------
    base
        The team store.
    overlay
        The local store that takes every write.
    """

    def __init__(self, base: BaseStore, overlay: BaseStore) -> None:
        self.base = base
        self.overlay = overlay

    # -- identity -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Return the overlay's URL (where new records go)."""
        return self.overlay.url

    @property
    def backend(self) -> str:
        """Return the overlay's database engine."""
        return self.overlay.backend

    @property
    def display_url(self) -> str:
        """Return ``"<overlay> over <base>"``."""
        return f"{self.overlay.display_url} over {self.base.display_url}"

    @property
    def read_only(self) -> bool:
        """Return whether the overlay refuses writes."""
        return self.overlay.read_only

    @property
    def persistent(self) -> bool:
        """Return whether the overlay (where new records go) outlives the process."""
        return self.overlay.persistent

    @property
    def immutable(self) -> bool:
        """Return whether either store is read as an immutable snapshot (typically ``base``, on a read-only mount)."""
        return self.overlay.immutable or self.base.immutable

    @property
    def read_only_reason(self) -> str:
        """Return why the overlay refuses writes (``""`` when it does not)."""
        return self.overlay.read_only_reason

    @property
    def schema_version(self) -> int:
        """Return the overlay's schema version."""
        return self.overlay.schema_version

    # -- writes: overlay only -----------------------------------------------------------------

    def commit_workload(self, key: WorkloadKey, desc: WorkloadDesc | None = None, mod_json: str = "") -> None:
        """Add a workload to the overlay, completing its description and module from ``base``."""
        if not mod_json or desc is None:
            sw = self.base.get_workload(key)
            if sw is not None:
                desc = desc or sw.desc
                mod_json = mod_json or sw.mod_json
        self.overlay.commit_workload(key, desc, mod_json)

    def commit_record(self, record: Record, *, desc: WorkloadDesc | None = None) -> None:
        """Add one record to the overlay."""
        self.overlay.commit_record(record, desc=desc)

    def commit_records(self, records: Iterable[Record], *, descs: dict[WorkloadKey, WorkloadDesc] | None = None) -> int:
        """Add records to the overlay; return how many were new there."""
        return self.overlay.commit_records(records, descs=descs)

    def set_latency(self, uid: str, latency_s: float, cv: float | None = None) -> None:
        """Replace the ranking latency of an overlay record."""
        self.overlay.set_latency(uid, latency_s, cv)

    def mark_stale(self, uids: Iterable[str], stale: bool = True) -> None:
        """Mark overlay records stale (or re-admit them)."""
        self.overlay.mark_stale(uids, stale)

    def claim(
        self,
        workload: WorkloadKey,
        hardware: HardwareKey,
        holder: str,
        lease_s: float,
        *,
        steal_from: str | None = None,
    ) -> bool:
        """Claim a task in the overlay."""
        return self.overlay.claim(workload, hardware, holder, lease_s, steal_from=steal_from)

    def release(self, workload: WorkloadKey, hardware: HardwareKey, holder: str) -> None:
        """Give up a claim in the overlay."""
        self.overlay.release(workload, hardware, holder)

    def mark_done(self, workload: WorkloadKey, hardware: HardwareKey, holder: str = "") -> None:
        """Mark a task done in the overlay."""
        self.overlay.mark_done(workload, hardware, holder)

    def enqueue(self, entries: Iterable[QueueEntry]) -> int:
        """Queue tasks in the overlay (tasks done in ``base`` are not queued)."""
        return self.overlay.enqueue(e for e in entries if not self.base.is_done(e.workload, e.hardware))

    def queued(self, hardware: HardwareKey | None = None, *, limit: int | None = None) -> list[QueueEntry]:
        """Return the overlay's waiting tasks (a worker of this overlay drains them)."""
        return self.overlay.queued(hardware, limit=limit)

    def dequeue(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Remove a task from the overlay's queue."""
        return self.overlay.dequeue(workload, hardware)

    def gc(self, keep_top: int, *, dry_run: bool = False) -> int:
        """Prune the overlay (``base`` is left alone); return how many records were removed."""
        return self.overlay.gc(keep_top, dry_run=dry_run)

    # -- reads: both --------------------------------------------------------------------------

    def is_done(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Return whether the task is done in the overlay or in ``base``."""
        return self.overlay.is_done(workload, hardware) or self.base.is_done(workload, hardware)

    def claim_holder(self, workload: WorkloadKey, hardware: HardwareKey) -> str | None:
        """Return the holder of a live claim in the overlay."""
        return self.overlay.claim_holder(workload, hardware)

    def has_workload(self, key: WorkloadKey) -> bool:
        """Return whether either store knows the workload."""
        return self.overlay.has_workload(key) or self.base.has_workload(key)

    def get_workload(self, key: WorkloadKey) -> StoredWorkload | None:
        """Return the overlay's workload if it has the module, else ``base``'s, else the overlay's."""
        mine = self.overlay.get_workload(key)
        if mine is not None and mine.mod_json:
            return mine
        return self.base.get_workload(key) or mine

    def workloads(self, *, family: str | None = None) -> list[StoredWorkload]:
        """Return the workloads of both stores (the overlay's version of one in both)."""
        seen = {w.key: w for w in self.base.workloads(family=family)}
        seen.update({w.key: w for w in self.overlay.workloads(family=family)})
        return list(seen.values())

    def best_k(
        self, workload: WorkloadKey, hardware: HardwareKey, k: int = 1, *, include_stale: bool = False
    ) -> list[Record]:
        """Return the ``k`` best hits of both stores; on equal latency the overlay's first."""
        mine = self.overlay.best_k(workload, hardware, k, include_stale=include_stale)
        theirs = self.base.best_k(workload, hardware, k, include_stale=include_stale)
        merged: dict[str, tuple[int, Record]] = {}
        for rank, r in enumerate(mine + theirs):
            merged.setdefault(r.uid, (0 if rank < len(mine) else 1, r))
        ordered = sorted(merged.values(), key=lambda t: (_latency(t[1]), t[0]))
        return [r for _o, r in ordered[:k]]

    def records(
        self,
        *,
        hardware: HardwareKey | str | None = None,
        workload: WorkloadKey | None = None,
        family: str | None = None,
        valid_only: bool = False,
        limit: int | None = None,
    ) -> list[Record]:
        """Return the overlay's records, then ``base``'s with other uids (at most ``limit``)."""
        mine = self.overlay.records(
            hardware=hardware, workload=workload, family=family, valid_only=valid_only, limit=limit
        )
        theirs = self.base.records(
            hardware=hardware, workload=workload, family=family, valid_only=valid_only, limit=limit
        )
        uids = {r.uid for r in mine}
        out = mine + [r for r in theirs if r.uid not in uids]
        return out if limit is None else out[:limit]

    def iter_records(
        self,
        *,
        hardware: HardwareKey | str | None = None,
        workload: WorkloadKey | None = None,
        family: str | None = None,
        valid_only: bool = False,
        newest_first: bool = False,
        batch: int = 1000,
    ) -> Iterator[Record]:
        """Yield the overlay's records, then ``base``'s (a record in both is yielded twice)."""
        for st in (self.overlay, self.base):
            yield from st.iter_records(hardware=hardware, workload=workload, family=family,
                                       valid_only=valid_only, newest_first=newest_first, batch=batch)

    def sample_records(self, hardware: HardwareKey, *, newest: int, per_workload: int) -> list[Record]:
        """Return the overlay's sample, then ``base``'s records of other uids, at most
        ``per_workload`` of a workload across both and ``newest`` in all."""
        out: list[Record] = []
        seen: dict[WorkloadKey, int] = {}
        uids: set[str] = set()
        for st in (self.overlay, self.base):
            for r in st.sample_records(hardware, newest=newest, per_workload=per_workload):
                if len(out) >= newest:
                    return out
                if r.uid in uids or seen.get(r.workload, 0) >= per_workload:
                    continue
                uids.add(r.uid)
                seen[r.workload] = seen.get(r.workload, 0) + 1
                out.append(r)
        return out

    def recent_provenance(self, hardware: HardwareKey, *, limit: int) -> list[Provenance]:
        """Return the overlay's newest, then ``base``'s, up to ``limit``."""
        mine = self.overlay.recent_provenance(hardware, limit=limit)
        return mine + self.base.recent_provenance(hardware, limit=limit - len(mine)) if len(mine) < limit else mine

    def commit_reuse_entries(self, entries: Iterable[ReuseEntry]) -> int:
        """Add entries to the overlay."""
        return self.overlay.commit_reuse_entries(entries)

    def reuse_entries(self, target_id: str, workloads: Iterable[WorkloadKey]) -> list[ReuseEntry]:
        """Return the overlay's entries, then ``base``'s for the workloads the overlay lacks."""
        keys = list(workloads)
        mine = self.overlay.reuse_entries(target_id, keys)
        have = {e.workload for e in mine}
        return mine + self.base.reuse_entries(target_id, [k for k in keys if k not in have])

    def reuse_candidates(
        self,
        hardware: HardwareKey,
        group: str,
        log_work: float,
        *,
        limit: int,
        exclude: Collection[WorkloadKey] = (),
        with_program: bool = True,
    ) -> list[ReuseEntry]:
        """Return the nearest candidates of both stores (the overlay's entry of a workload in both).

        An entry the overlay holds for a workload whose program is in ``base`` (a team store
        indexed by this user) qualifies: the overlay's entries are read without the program
        condition (``4 * limit`` a side) and checked against both stores.
        """
        merged: dict[WorkloadKey, ReuseEntry] = {}
        for e in self.overlay.reuse_candidates(hardware, group, log_work, limit=4 * limit, exclude=exclude,
                                               with_program=False):
            if not with_program or self.best_k(e.workload, hardware, 1):
                merged.setdefault(e.workload, e)
        for e in self.base.reuse_candidates(hardware, group, log_work, limit=limit, exclude=exclude,
                                            with_program=with_program):
            merged.setdefault(e.workload, e)
        ordered = sorted(merged.values(), key=lambda e: (abs(e.log_work - log_work), str(e.workload)))
        up = [e for e in ordered if e.log_work >= log_work][:limit]
        down = [e for e in ordered if e.log_work < log_work][:limit]
        return sorted(up + down, key=lambda e: (abs(e.log_work - log_work), str(e.workload)))

    def unindexed_workloads(self, hardware: HardwareKey, *, limit: int | None = None) -> list[StoredWorkload]:
        """Return the overlay's unindexed workloads, then ``base``'s that have no entry in the overlay."""
        mine = self.overlay.unindexed_workloads(hardware, limit=limit)
        have = {w.key for w in mine}
        theirs = [w for w in self.base.unindexed_workloads(hardware) if w.key not in have]
        indexed = {e.workload for e in self.overlay.reuse_entries(hardware.target_id, [w.key for w in theirs])}
        out = mine + [w for w in theirs if w.key not in indexed]
        return out if limit is None else out[:limit]

    def hardware_keys(self, workload: WorkloadKey | None = None) -> list[HardwareKey]:
        """Return the hardware keys with records in either store."""
        keys = {k.id: k for k in self.base.hardware_keys(workload)}
        keys.update({k.id: k for k in self.overlay.hardware_keys(workload)})
        return list(keys.values())

    def explain_miss(self, workload: WorkloadKey, hardware: HardwareKey) -> MissExplanation:
        """Explain a miss against the hardware keys of both stores."""
        return explain_miss_from_keys(hardware, self.hardware_keys(workload))

    def get_derived(self, name: str) -> str | None:
        """Return the overlay's document, else ``base``'s."""
        mine = self.overlay.get_derived(name)
        return mine if mine is not None else self.base.get_derived(name)

    def put_derived(self, name: str, text: str) -> None:
        """Keep the document in the overlay."""
        self.overlay.put_derived(name, text)

    def count_records(self, hardware: HardwareKey | None = None, *, workload: WorkloadKey | None = None) -> int:
        """Return the overlay's count plus ``base``'s."""
        return self.overlay.count_records(hardware, workload=workload) + self.base.count_records(
            hardware, workload=workload
        )

    def stats(self) -> StoreStats:
        """Return the overlay's counts."""
        return self.overlay.stats()

    def close(self) -> None:
        """Close both stores."""
        self.overlay.close()
        self.base.close()

    def __repr__(self) -> str:
        return f"OverlayStore({self.display_url!r})"


def _latency(r: Record) -> float:
    return math.inf if r.latency_s is None else r.latency_s


def push(overlay: BaseStore, team: BaseStore) -> tuple[int, int]:
    """Copy every workload and record of ``overlay`` into ``team``.

    Parameters
    ----------
    overlay
        The local store.
    team
        The team store (writable).

    Returns
    -------
    tuple of int
        The number of records copied, and how many of them were new in ``team``.

    Raises
    ------
    ReadOnlyStoreError
        If ``team`` refuses writes.
    """
    for w in overlay.workloads():
        team.commit_workload(w.key, w.desc, w.mod_json)
    recs = overlay.records()
    new = 0
    for i in range(0, len(recs), 500):
        new += team.commit_records(recs[i : i + 500])
    return len(recs), new
