"""Frozen values a store returns besides records and keys: a stored workload and the store's counts.

Plain dataclasses with no SQL and no TVM inside, so they import anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunecache.store.keys import WorkloadDesc, WorkloadKey

__all__ = ["StoredWorkload", "StoreStats"]


@dataclass(frozen=True)
class StoredWorkload:
    """A workload as the store holds it.

    Attributes
    ----------
    key
        The workload's key.
    desc
        Its description (name, operator family, shapes, dtypes, extents).
    mod_json
        TVM's JSON of the IRModule (``""`` when only records were committed for it).
    """

    key: WorkloadKey
    desc: WorkloadDesc
    mod_json: str


@dataclass(frozen=True)
class StoreStats:
    """Counts for ``tunecache db stats``.

    Attributes
    ----------
    workloads, records, valid_records, stale_records
        Numbers of workloads, of records, of records with a latency, and of stale records.
    by_hardware
        ``(hardware id, description, records)`` per hardware key, by id.
    by_family
        ``(operator family, workloads)`` per family, by family.
    size_bytes
        Size on disk, ``None`` when unknown (an in-memory store).
    schema_version
        The schema version of the database.
    """

    workloads: int
    records: int
    valid_records: int
    stale_records: int
    by_hardware: tuple[tuple[str, str, int], ...]
    by_family: tuple[tuple[str, int], ...]
    size_bytes: int | None
    schema_version: int
