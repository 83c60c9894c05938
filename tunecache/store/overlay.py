"""A read-only team store with a local overlay in front of it.

Lookups consult both (the overlay first: its records win ties); every write goes to the overlay.
``push`` copies the overlay's records to the team store once the user has write access; record
uids make pushing twice harmless.
"""

from __future__ import annotations

from typing import Any, Iterable

from tunecache.store.keys import HardwareKey, MissExplanation, WorkloadDesc, WorkloadKey, explain_miss
from tunecache.store.records import Record
from tunecache.store.store import Store, StoredWorkload, StoreStats

__all__ = ["OverlayStore", "push"]


class OverlayStore:
    """Serve hits from ``base`` (typically read-only) and ``overlay``; write to ``overlay`` only.

    It offers the read and write methods of :class:`Store` that compile, the MetaSchedule
    adapter and the planner use.
    """

    def __init__(self, base: Store, overlay: Store) -> None:
        self.base = base
        self.overlay = overlay
        self.read_only = False
        self.url = overlay.url

    @property
    def backend(self) -> str:
        return self.overlay.backend

    @property
    def display_url(self) -> str:
        return f"{self.overlay.display_url} over {self.base.display_url}"

    # writes: overlay only
    def commit_workload(self, key: WorkloadKey, desc: WorkloadDesc | None = None, mod_json: str = "") -> None:
        if not mod_json or desc is None:
            sw = self.base.get_workload(key)
            if sw is not None:
                desc = desc or sw.desc
                mod_json = mod_json or sw.mod_json
        self.overlay.commit_workload(key, desc, mod_json)

    def commit_record(self, record: Record, *, desc: WorkloadDesc | None = None) -> None:
        self.overlay.commit_record(record, desc=desc)

    def commit_records(self, records: Iterable[Record], **kw: Any) -> int:
        return self.overlay.commit_records(records, **kw)

    def set_latency(self, uid: str, latency_s: float, cv: float | None = None) -> None:
        self.overlay.set_latency(uid, latency_s, cv)

    def mark_stale(self, uids: Iterable[str], stale: bool = True) -> None:
        self.overlay.mark_stale(uids, stale)

    def claim(self, workload: WorkloadKey, hardware: HardwareKey, holder: str, lease_s: float, **kw: Any) -> bool:
        return self.overlay.claim(workload, hardware, holder, lease_s, **kw)

    def release(self, workload: WorkloadKey, hardware: HardwareKey, holder: str) -> None:
        self.overlay.release(workload, hardware, holder)

    def mark_done(self, workload: WorkloadKey, hardware: HardwareKey, holder: str = "") -> None:
        self.overlay.mark_done(workload, hardware, holder)

    def is_done(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        return self.overlay.is_done(workload, hardware) or self.base.is_done(workload, hardware)

    def claim_holder(self, workload: WorkloadKey, hardware: HardwareKey) -> str | None:
        return self.overlay.claim_holder(workload, hardware)

    # reads: both
    def has_workload(self, key: WorkloadKey) -> bool:
        return self.overlay.has_workload(key) or self.base.has_workload(key)

    def get_workload(self, key: WorkloadKey) -> StoredWorkload | None:
        mine = self.overlay.get_workload(key)
        if mine is not None and mine.mod_json:
            return mine
        return self.base.get_workload(key) or mine

    def workloads(self, *, family: str | None = None) -> list[StoredWorkload]:
        seen = {w.key: w for w in self.base.workloads(family=family)}
        seen.update({w.key: w for w in self.overlay.workloads(family=family)})
        return list(seen.values())

    def best_k(self, workload: WorkloadKey, hardware: HardwareKey, k: int = 1, *, include_stale: bool = False) -> list[Record]:
        mine = self.overlay.best_k(workload, hardware, k, include_stale=include_stale)
        theirs = self.base.best_k(workload, hardware, k, include_stale=include_stale)
        merged: dict[str, tuple[int, Record]] = {}
        for rank, r in enumerate(mine + theirs):
            merged.setdefault(r.uid, (0 if rank < len(mine) else 1, r))
        ordered = sorted(merged.values(), key=lambda t: (t[1].latency_s, t[0]))
        return [r for _o, r in ordered[:k]]

    def records(self, **kw: Any) -> list[Record]:
        mine = self.overlay.records(**kw)
        uids = {r.uid for r in mine}
        return mine + [r for r in self.base.records(**kw) if r.uid not in uids]

    def hardware_keys(self, workload: WorkloadKey | None = None) -> list[HardwareKey]:
        keys = {k.id: k for k in self.base.hardware_keys(workload)}
        keys.update({k.id: k for k in self.overlay.hardware_keys(workload)})
        return list(keys.values())

    def explain_miss(self, workload: WorkloadKey, hardware: HardwareKey) -> MissExplanation:
        return explain_miss(hardware, self.hardware_keys(workload))

    def count_records(self, hardware: HardwareKey | None = None, *, workload: WorkloadKey | None = None) -> int:
        return self.overlay.count_records(hardware, workload=workload) + self.base.count_records(hardware, workload=workload)

    def stats(self) -> StoreStats:
        return self.overlay.stats()

    def close(self) -> None:
        self.overlay.close()
        self.base.close()

    def __repr__(self) -> str:
        return f"OverlayStore({self.display_url!r})"


def push(overlay: Store, team: Store) -> tuple[int, int]:
    """Copy every workload and record of ``overlay`` into ``team``; return (records, new).

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
