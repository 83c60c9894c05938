"""The persistent store of tuned programs: keys, records, SQL backends, MetaSchedule adapter."""

from tunecache.store.keys import (
    HardwareKey,
    HostFingerprint,
    MissExplanation,
    WorkloadDesc,
    WorkloadKey,
    explain_miss,
)
from tunecache.store.records import Provenance, Record
from tunecache.store.store import Store, StoreStats, StoredWorkload, normalize_url, open_store

__all__ = [
    "HardwareKey",
    "HostFingerprint",
    "MissExplanation",
    "Provenance",
    "Record",
    "Store",
    "StoreStats",
    "StoredWorkload",
    "WorkloadDesc",
    "WorkloadKey",
    "explain_miss",
    "normalize_url",
    "open_store",
]
