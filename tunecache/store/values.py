"""Frozen values a store returns besides records and keys: a stored workload and the store's counts.

Plain dataclasses with no SQL and no TVM inside, so they import anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from tunecache.store.keys import HardwareKey, WorkloadDesc, WorkloadKey

__all__ = ["QueueEntry", "ReuseEntry", "StoredWorkload", "StoreStats"]


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
class ReuseEntry:
    """What the planner needs to choose a stored workload as a reuse source, for one target.

    The reuse index holds one per (workload, canonical target): the planner asks the store for
    the entries of a reuse group nearest a task's size and never decodes a workload it does not
    use. The store treats :attr:`nest_json` and :attr:`sketch` as opaque text; they are written
    and read by :mod:`tunecache.planning`.

    Attributes
    ----------
    workload
        The workload's key.
    target_id
        :attr:`tunecache.store.keys.HardwareKey.target_id` of the target the entry was made for
        (the sketch set depends on the target).
    name
        The workload's name, for plans and reports.
    family
        Operator family of its major loop nest.
    group
        Digest of what two reuse partners must share (family, loop-nest structure, dtype,
        layout, decision signature): only entries of one group can be reuse pairs.
    log_work
        log2 of the product of the loop-nest extents (the size the nearest candidates are
        chosen by).
    nest_json
        The loop nest, as JSON.
    sketch
        The decision signature.
    trivial
        The design space is one program that samples nothing.
    """

    workload: WorkloadKey
    target_id: str
    name: str
    family: str
    group: str
    log_work: float
    nest_json: str
    sketch: str
    trivial: bool = False


@dataclass(frozen=True)
class QueueEntry:
    """A task waiting to be tuned by ``tunecache worker`` (queued by ``tune="background"``).

    One entry per (workload, hardware key): models and users asking for the same task share it
    (:meth:`~tunecache.store.contract.BaseStore.enqueue` merges them). An entry leaves the queue
    when the task's search is marked done, by whoever searched it.

    Attributes
    ----------
    workload
        The task's workload (stored with its module, so a worker can rebuild it).
    hardware
        The hardware key to tune it for.
    name
        The task's name.
    weight
        Calls per model run, summed over the models that asked.
    priority
        Estimated seconds per model run that tuning may win (weight x latency left to win,
        summed over the models): the worker takes the highest first.
    served
        What the task was served with while it waits (``replayed``, ``predicted`` or
        ``fallback``).
    models
        The models that asked (names, the first 16).
    requests
        How many compiles asked for it.
    queued_at
        When it was first queued (Unix time).
    """

    workload: WorkloadKey
    hardware: HardwareKey
    name: str
    weight: int
    priority: float
    served: str = ""
    models: tuple[str, ...] = ()
    requests: int = 1
    queued_at: float = 0.0


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
