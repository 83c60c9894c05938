"""The store contract: :class:`BaseStore`, what every store implementation guarantees.

Implementations: the SQL :class:`~tunecache.store.Store` (SQLite file, in-memory SQLite,
PostgreSQL) and :class:`~tunecache.store.overlay.OverlayStore` (a local store in front of a
read-only team store). :mod:`tunecache.testing.store_contract` is the test suite every one of
them passes.

This module imports neither SQLAlchemy nor TVM.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterable, Iterator
from types import TracebackType

from tunecache.store.keys import HardwareKey, MissExplanation, WorkloadDesc, WorkloadKey, explain_miss
from tunecache.store.records import Provenance, Record
from tunecache.store.values import QueueEntry, ReuseEntry, StoredWorkload, StoreStats

__all__ = ["DERIVED_NAME_MAX", "BaseStore", "check_derived_name", "explain_miss_from_keys"]

#: Longest name of a derived document (:meth:`BaseStore.put_derived`).
DERIVED_NAME_MAX = 56


def check_derived_name(name: str) -> str:
    """Return ``name`` if it may name a derived document; raise ``ValueError`` otherwise."""
    if not isinstance(name, str) or not name or len(name) > DERIVED_NAME_MAX:
        raise ValueError(f"a derived document's name must be 1 to {DERIVED_NAME_MAX} characters, got {name!r}")
    return name


#: Reason given when a lookup's exact hardware key has records, none of them a hit.
NO_VALID_FRESH_RECORD = "records exist but none is valid and fresh (all failed or stale)"


class BaseStore(abc.ABC):
    """A persistent store of tuning records: the contract every implementation keeps.

    **Concurrency.** Every method is thread safe: threads of one process may share one store
    object. Process safety depends on where the data lives:

    - an SQLite file (WAL journal) is shared by any number of processes on one machine (never
      put it on a network file system);
    - a PostgreSQL database is shared by any number of processes on any number of machines;
    - an in-memory store (``"memory"``) lives and dies with its process and its object.

    Committing a workload, a hardware key or a record ``uid`` that is already stored is a no-op,
    so retries and concurrent writers never duplicate anything. Transient "database is locked"
    or serialization failures are retried inside the store, never shown to the caller.

    **Values in, values out.** Methods take and return the frozen values of
    :mod:`tunecache.store.keys`, :mod:`tunecache.store.records` and
    :mod:`tunecache.store.values` (:class:`~tunecache.store.records.Record`,
    :class:`~tunecache.store.keys.HardwareKey`, :class:`~tunecache.store.values.StoredWorkload`,
    :class:`~tunecache.store.values.StoreStats`, ...), never database rows. A value, once
    returned, never changes: a later write (:meth:`set_latency`, :meth:`mark_stale`,
    :meth:`gc`) is seen by the next read only. Nothing is unpickled: traces and descriptions
    are JSON, validated when written and when read back.

    **Hits.** :meth:`best_k` returns only records whose hardware key matches the query exactly
    in every component (canonical target, host fingerprint, TVM version), whose latency is
    known (a failed measurement is never a hit) and which are not stale. It orders them by
    ``latency_s`` ascending (the re-measured latency after :meth:`set_latency`, else the mean of
    the measured run times), ties in commit order, earlier first.

    **Claims.** :meth:`claim` is atomic across every thread, process and machine sharing the
    store: of concurrent claims on one free task exactly one succeeds. A claim is a lease that
    expires unless renewed; :meth:`mark_done` records that a task's search finished, after
    which nobody can claim it.

    **Errors.** Failures of the database surface as :class:`tunecache.errors.StoreError` or one
    of its subclasses: :class:`~tunecache.errors.StoreURLError` (a location that is not one of
    :data:`tunecache.store.location.ACCEPTED_FORMS`; also a :class:`~tunecache.errors.ConfigError`),
    :class:`~tunecache.errors.SchemaVersionError` (a schema this tunecache does not understand),
    :class:`~tunecache.errors.ReadOnlyStoreError` (a write to a read-only store; an SQLite file
    this user cannot write opens read-only by itself, see :attr:`read_only`). Opening a missing
    SQLite file read-only (or with ``create=False``) raises :class:`~tunecache.errors.StoreError`
    naming it, and creates nothing.
    An invalid record or argument raises :class:`tunecache.errors.InvalidRecordError`, before
    anything is written. A missing optional driver raises
    :class:`tunecache.errors.DependencyError` when the store is opened.

    A store is a context manager: ``with open_store(url) as st: ...`` closes it at the end.
    """

    # -- identity -----------------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """Return the location new records are written to, as an SQLAlchemy URL.

        Returns
        -------
        str
            E.g. ``sqlite:////home/me/.cache/tunecache/tunecache.db`` (an absolute path after
            ``sqlite:///``) or ``sqlite://`` (memory).
        """

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """Return the database engine writes go to: ``sqlite`` or ``postgresql``.

        Returns
        -------
        str
        """

    @property
    @abc.abstractmethod
    def display_url(self) -> str:
        """Return a description of the location for messages (passwords hidden).

        Returns
        -------
        str
        """

    @property
    @abc.abstractmethod
    def read_only(self) -> bool:
        """Return whether every write raises :class:`~tunecache.errors.ReadOnlyStoreError`.

        True when read-only access was asked for, and also for an SQLite file this user cannot
        write or whose directory it cannot write (a team store on a read-only mount): such a
        store opens read-only by itself and serves reads.

        Returns
        -------
        bool
        """

    @property
    @abc.abstractmethod
    def persistent(self) -> bool:
        """Return whether records written here outlive the process.

        ``False`` for an in-memory store (``"memory"``), whose records are lost when the process
        ends: a report should say so. An overlay store is as persistent as its overlay.

        Returns
        -------
        bool
        """

    @property
    def immutable(self) -> bool:
        """Return whether the store is read as an immutable snapshot (changes made after opening unseen).

        An SQLite file opened read-only where SQLite's ``-wal``/``-shm`` files cannot or should
        not be created (see :mod:`tunecache.store._sql.engine`). Stores that have no such mode
        return ``False``.

        Returns
        -------
        bool
        """
        return False

    @property
    def read_only_reason(self) -> str:
        """Return why writes are refused, for messages and reports (``""`` when they are not).

        Returns
        -------
        str
        """
        return "opened read-only" if self.read_only else ""

    @property
    @abc.abstractmethod
    def schema_version(self) -> int:
        """Return the schema version of the database new records are written to.

        Returns
        -------
        int
        """

    # -- writes -------------------------------------------------------------------------------

    @abc.abstractmethod
    def commit_workload(self, key: WorkloadKey, desc: WorkloadDesc | None = None, mod_json: str = "") -> None:
        """Add a workload if it is missing (idempotent; a better description fills blanks).

        Parameters
        ----------
        key
            The workload key.
        desc
            A description (family, shapes, dtypes, extents); a stored family ``"other"`` is
            replaced by a more specific one.
        mod_json
            TVM's JSON of the IRModule, needed to replay or export the workload's records; a
            stored empty one is filled in.

        Raises
        ------
        ReadOnlyStoreError
            If the store refuses writes.
        StoreError
            If the database fails.
        """

    @abc.abstractmethod
    def commit_record(self, record: Record, *, desc: WorkloadDesc | None = None) -> None:
        """Add one record; its workload is created if missing. The same ``uid`` twice: no-op.

        Parameters
        ----------
        record
            The record.
        desc
            A description for the workload, used if the workload is created.

        Raises
        ------
        InvalidRecordError
            If the record's trace, run times or args info fail validation.
        ReadOnlyStoreError
            If the store refuses writes.
        StoreError
            If the database fails.
        """

    @abc.abstractmethod
    def commit_records(self, records: Iterable[Record], *, descs: dict[WorkloadKey, WorkloadDesc] | None = None) -> int:
        """Add records in one transaction: all of them or, on an error, none.

        Parameters
        ----------
        records
            The records; a ``uid`` already stored is skipped.
        descs
            Descriptions of workloads the commit creates.

        Returns
        -------
        int
            How many records were new.

        Raises
        ------
        InvalidRecordError
            If a record's trace, run times or args info fail validation (nothing is written).
        ReadOnlyStoreError
            If the store refuses writes.
        StoreError
            If the database fails.
        """

    @abc.abstractmethod
    def set_latency(self, uid: str, latency_s: float, cv: float | None = None) -> None:
        """Replace a record's ranking latency (after a trustworthy re-measurement).

        The record's measured ``run_secs`` stay as they were. An unknown ``uid`` is a no-op.

        Parameters
        ----------
        uid
            The record.
        latency_s
            The new ranking latency in seconds.
        cv
            The re-measurement's coefficient of variation.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    @abc.abstractmethod
    def mark_stale(self, uids: Iterable[str], stale: bool = True) -> None:
        """Mark records stale (never served as hits) or, with ``stale=False``, re-admit them.

        Parameters
        ----------
        uids
            The records; unknown ones are ignored.
        stale
            The new flag.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    # -- task claims (leases) -----------------------------------------------------------------

    @abc.abstractmethod
    def claim(
        self,
        workload: WorkloadKey,
        hardware: HardwareKey,
        holder: str,
        lease_s: float,
        *,
        steal_from: str | None = None,
    ) -> bool:
        """Claim tuning ``workload`` on ``hardware`` for ``lease_s`` seconds; renew if held.

        Atomic across every thread, process and machine sharing the store.

        Parameters
        ----------
        workload, hardware
            The task. Claims are per (workload, hardware key).
        holder
            Who claims (see :func:`tunecache.store.claims.default_holder`).
        lease_s
            Seconds until the claim expires unless renewed.
        steal_from
            A holder known to be dead whose live claim may be taken over.

        Returns
        -------
        bool
            ``True`` when ``holder`` now holds the claim: it was free, expired, already
            ``holder``'s, or ``steal_from``'s. ``False`` when someone else holds it or the task
            is done.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    @abc.abstractmethod
    def release(self, workload: WorkloadKey, hardware: HardwareKey, holder: str) -> None:
        """Give up ``holder``'s claim on a task (no-op if it does not hold it; done marks stay).

        Parameters
        ----------
        workload, hardware
            The task.
        holder
            The holder giving it up.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    @abc.abstractmethod
    def mark_done(self, workload: WorkloadKey, hardware: HardwareKey, holder: str = "") -> None:
        """Record that the search of a task finished (drop any lease on it, and its queue entry).

        Parameters
        ----------
        workload, hardware
            The task.
        holder
            Who finished it.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    @abc.abstractmethod
    def is_done(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Return whether a finished search of the task was recorded.

        Parameters
        ----------
        workload, hardware
            The task.

        Returns
        -------
        bool
        """

    @abc.abstractmethod
    def claim_holder(self, workload: WorkloadKey, hardware: HardwareKey) -> str | None:
        """Return who holds a live (unexpired) claim on the task.

        Parameters
        ----------
        workload, hardware
            The task.

        Returns
        -------
        str or None
            The holder, or ``None`` when nobody does.
        """

    # -- the tuning queue (schema 4) ------------------------------------------------------------

    @abc.abstractmethod
    def enqueue(self, entries: Iterable[QueueEntry]) -> int:
        """Queue tasks for ``tunecache worker``, merging each with its waiting entry.

        A task already done (:meth:`is_done`) is not queued. A task already waiting keeps one
        entry: a model not among its :attr:`~QueueEntry.models` adds its weight and priority,
        a model that asked before raises them to the larger of the two; ``requests`` counts
        every call. The workload must be stored with its module (:meth:`commit_workload`).

        Parameters
        ----------
        entries
            The tasks; ``queued_at`` and ``requests`` are set by the store.

        Returns
        -------
        int
            How many entries were new or changed (done tasks are not counted).

        Raises
        ------
        ReadOnlyStoreError, StoreError
            Also when a workload of an entry is not stored.
        """

    @abc.abstractmethod
    def queued(self, hardware: HardwareKey | None = None, *, limit: int | None = None) -> list[QueueEntry]:
        """Return the waiting tasks, highest priority first (oldest first among equals).

        Parameters
        ----------
        hardware
            Only this hardware key's (default: every hardware key's).
        limit
            At most this many.

        Returns
        -------
        list of QueueEntry
        """

    @abc.abstractmethod
    def dequeue(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Remove a task from the queue (:meth:`mark_done` does so too).

        Returns
        -------
        bool
            Whether it was waiting.

        Raises
        ------
        ReadOnlyStoreError, StoreError
        """

    # -- reads --------------------------------------------------------------------------------

    @abc.abstractmethod
    def has_workload(self, key: WorkloadKey) -> bool:
        """Return whether the workload is known (on any hardware).

        Parameters
        ----------
        key
            The workload key.

        Returns
        -------
        bool
        """

    @abc.abstractmethod
    def get_workload(self, key: WorkloadKey) -> StoredWorkload | None:
        """Return the stored workload.

        Parameters
        ----------
        key
            The workload key.

        Returns
        -------
        StoredWorkload or None
            ``None`` when it is not stored.
        """

    @abc.abstractmethod
    def workloads(self, *, family: str | None = None) -> list[StoredWorkload]:
        """Return every stored workload, in commit order.

        Parameters
        ----------
        family
            Only workloads of this operator family.

        Returns
        -------
        list of StoredWorkload
        """

    @abc.abstractmethod
    def best_k(
        self, workload: WorkloadKey, hardware: HardwareKey, k: int = 1, *, include_stale: bool = False
    ) -> list[Record]:
        """Return the ``k`` best hits of ``workload`` on ``hardware``, best first.

        Parameters
        ----------
        workload
            The workload key.
        hardware
            The hardware key; only records under an identical key are hits.
        k
            How many; ``k <= 0`` returns ``[]``.
        include_stale
            Also return stale records.

        Returns
        -------
        list of Record
            Records with a latency (failed measurements never), by ``latency_s`` ascending,
            ties in commit order.
        """

    @abc.abstractmethod
    def records(
        self,
        *,
        hardware: HardwareKey | str | None = None,
        workload: WorkloadKey | None = None,
        family: str | None = None,
        valid_only: bool = False,
        limit: int | None = None,
    ) -> list[Record]:
        """Return records, failed and stale ones included, in commit order.

        Parameters
        ----------
        hardware
            Only records under this hardware key (or hardware id).
        workload
            Only records of this workload.
        family
            Only records of workloads of this operator family.
        valid_only
            Only records with a latency.
        limit
            At most this many.

        Returns
        -------
        list of Record
        """

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
        """Yield records like :meth:`records`, a page at a time, without holding them all.

        The base implementation reads :meth:`records` in one go; the SQL store pages through
        the table ``batch`` rows per transaction (records committed meanwhile may or may not
        be seen; none is yielded twice).

        Parameters
        ----------
        hardware, workload, family, valid_only
            As :meth:`records`.
        newest_first
            Yield in reverse commit order (e.g. a bounded sample of recent records).
        batch
            Rows read per transaction.

        Yields
        ------
        Record
        """
        recs = self.records(hardware=hardware, workload=workload, family=family, valid_only=valid_only)
        yield from (reversed(recs) if newest_first else recs)

    def sample_records(self, hardware: HardwareKey, *, newest: int, per_workload: int) -> list[Record]:
        """Return a sample of recent records: of the ``newest`` newest valid records under
        ``hardware``, at most the ``per_workload`` newest of each workload, newest first.

        What a cost model is refitted on: many workloads rather than the newest few's whole
        searches, read without decoding the records left out. The base implementation reads
        :meth:`iter_records` (and decodes every record it passes); the SQL store picks the sample
        in one query.

        Parameters
        ----------
        hardware
            The hardware key.
        newest
            Records looked at, the newest first (a store of millions is never read whole).
        per_workload
            Records one workload gives at most.

        Returns
        -------
        list of Record
        """
        out: list[Record] = []
        seen: dict[WorkloadKey, int] = {}
        if newest < 1 or per_workload < 1:
            return out
        for i, r in enumerate(self.iter_records(hardware=hardware, valid_only=True, newest_first=True)):
            if i >= newest:
                break
            if seen.get(r.workload, 0) < per_workload:
                seen[r.workload] = seen.get(r.workload, 0) + 1
                out.append(r)
        return out

    @abc.abstractmethod
    def recent_provenance(self, hardware: HardwareKey, *, limit: int) -> list[Provenance]:
        """Return the provenance of the newest valid records under ``hardware``, newest first.

        Reads no trace: what the planner calibrates its cost estimates from (seconds per trial).

        Parameters
        ----------
        hardware
            The hardware key.
        limit
            At most this many.

        Returns
        -------
        list of Provenance
        """

    # -- the reuse index ------------------------------------------------------------------------

    @abc.abstractmethod
    def commit_reuse_entries(self, entries: Iterable[ReuseEntry]) -> int:
        """Add reuse-index entries; one already stored for its (workload, target) is kept.

        The entry's workload is created if missing (with its name and family).

        Parameters
        ----------
        entries
            The entries.

        Returns
        -------
        int
            How many were new.

        Raises
        ------
        ReadOnlyStoreError
            If the store refuses writes.
        """

    @abc.abstractmethod
    def reuse_entries(self, target_id: str, workloads: Iterable[WorkloadKey]) -> list[ReuseEntry]:
        """Return the stored entries of ``workloads`` for the target ``target_id`` (missing: left out).

        Parameters
        ----------
        target_id
            :attr:`HardwareKey.target_id` of the target.
        workloads
            The workloads.

        Returns
        -------
        list of ReuseEntry
        """

    @abc.abstractmethod
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
        """Return reuse sources for a task: entries of ``group`` nearest its size, with programs.

        Only workloads with a valid, fresh record under ``hardware`` exactly (a source must have a
        program to give) and an entry for its target qualify (``with_program=False``: any entry
        for the target). The store reads at most ``limit``
        entries at least as large as ``log_work`` and ``limit`` smaller ones, nearest first, so
        the cost does not grow with the store (an index on (target, group, size)).

        Parameters
        ----------
        hardware
            The hardware key the sources' records must be measured on.
        group
            The task's reuse group (:attr:`ReuseEntry.group`).
        log_work
            log2 of the task's loop-nest size.
        limit
            Most entries on each side of ``log_work``.
        exclude
            Workloads never returned (the tasks being planned).
        with_program
            Require a program under ``hardware`` in this store.

        Returns
        -------
        list of ReuseEntry
            Nearest first (by ``abs(log_work - entry.log_work)``), ties by workload key.
        """

    @abc.abstractmethod
    def unindexed_workloads(self, hardware: HardwareKey, *, limit: int | None = None) -> list[StoredWorkload]:
        """Return workloads with valid records under ``hardware`` but no entry for its target.

        These are what the reuse index still lacks (written by an older tunecache, imported,
        or committed without planning); only those with a stored module are returned.

        Parameters
        ----------
        hardware
            The hardware key.
        limit
            At most this many (in commit order).

        Returns
        -------
        list of StoredWorkload
        """

    @abc.abstractmethod
    def hardware_keys(self, workload: WorkloadKey | None = None) -> list[HardwareKey]:
        """Return the hardware keys that have records.

        Parameters
        ----------
        workload
            Only keys with records of this workload.

        Returns
        -------
        list of HardwareKey
        """

    @abc.abstractmethod
    def explain_miss(self, workload: WorkloadKey, hardware: HardwareKey) -> MissExplanation:
        """Explain why ``best_k(workload, hardware)`` found nothing.

        Parameters
        ----------
        workload, hardware
            The lookup that missed.

        Returns
        -------
        MissExplanation
            The differing components of the closest stored hardware key, or, when the exact
            key has records, that none of them is valid and fresh.
        """

    @abc.abstractmethod
    def count_records(self, hardware: HardwareKey | None = None, *, workload: WorkloadKey | None = None) -> int:
        """Return the number of records, failed and stale ones included.

        Parameters
        ----------
        hardware
            Only records under this hardware key.
        workload
            Only records of this workload.

        Returns
        -------
        int
        """

    # -- derived documents ------------------------------------------------------------------------

    @abc.abstractmethod
    def get_derived(self, name: str) -> str | None:
        """Return the JSON text kept under ``name`` by :meth:`put_derived`, or ``None``.

        A derived document is computed from the records (a cost model fitted on them) and kept
        so that readers need not compute it again; whoever reads it decides whether it is still
        fresh enough, and validates it as any untrusted JSON.

        Parameters
        ----------
        name
            At most :data:`DERIVED_NAME_MAX` characters.

        Returns
        -------
        str or None
        """

    @abc.abstractmethod
    def put_derived(self, name: str, text: str) -> None:
        """Keep the JSON text ``text`` under ``name``, replacing what was kept there.

        Parameters
        ----------
        name
            At most :data:`DERIVED_NAME_MAX` characters.
        text
            JSON text.

        Raises
        ------
        ReadOnlyStoreError
            If the store may not be written.
        ValueError
            If ``name`` is empty or too long.
        """

    @abc.abstractmethod
    def stats(self) -> StoreStats:
        """Return counts per hardware key and operator family, and the size on disk.

        Returns
        -------
        StoreStats
        """

    # -- maintenance --------------------------------------------------------------------------

    @abc.abstractmethod
    def gc(self, keep_top: int, *, dry_run: bool = False) -> int:
        """Keep the ``keep_top`` best valid fresh records per (workload, hardware); drop the rest.

        Failed measurements and stale records are dropped too. Kept records are unchanged.
        Workloads and their reuse-index entries are kept (a workload's entry serves reuse as long
        as one record is left). The cost model pre-trains on workloads with two or more records:
        ``keep_top=1`` leaves it nothing to learn from.

        Parameters
        ----------
        keep_top
            Records kept per (workload, hardware key); at least 1.
        dry_run
            Count what would be removed; change nothing (a read, allowed on a read-only store).

        Returns
        -------
        int
            How many records were (or would be) removed.

        Raises
        ------
        InvalidRecordError
            If ``keep_top < 1``.
        ReadOnlyStoreError, StoreError
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store object is not used afterwards."""

    def __enter__(self) -> BaseStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def explain_miss_from_keys(hardware: HardwareKey, stored: Iterable[HardwareKey]) -> MissExplanation:
    """Explain a miss of ``hardware`` given the hardware keys that have records of the workload.

    Like :func:`tunecache.store.keys.explain_miss`, except that an identical stored key means
    its records are all failed or stale, and the explanation says so.

    Parameters
    ----------
    hardware
        The hardware key of the lookup that missed.
    stored
        The keys with records of the same workload (:meth:`BaseStore.hardware_keys`).

    Returns
    -------
    MissExplanation
    """
    expl = explain_miss(hardware, stored)
    if expl.closest is not None and not expl.differences:
        return MissExplanation((NO_VALID_FRESH_RECORD,), expl.closest)
    return expl
