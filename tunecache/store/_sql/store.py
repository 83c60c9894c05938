"""The SQL store: :class:`Store`, the SQLAlchemy implementation of the store contract.

One class for SQLite (a file, or in memory) and PostgreSQL; :mod:`.engine` holds the
connection settings and the retry loop, :mod:`.schema` the tables, :mod:`.rows` the conversions
between rows and values. Every method runs as one transaction through :meth:`Database.run`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, aliased

from tunecache.errors import InvalidRecordError, StoreError
from tunecache.gcpause import gc_paused
from tunecache.store._sql.engine import Database
from tunecache.store._sql.rows import (
    hardware_columns,
    hardware_value,
    provenance_value,
    record_columns,
    record_value,
    reuse_columns,
    reuse_value,
    workload_columns,
    workload_value,
)
from tunecache.store._sql.schema import (
    ClaimRow,
    HardwareRow,
    MetaRow,
    QueueRow,
    RecordRow,
    ReuseRow,
    WorkloadRow,
    ensure_schema,
    read_version,
)
from tunecache.store.contract import BaseStore, check_derived_name, explain_miss_from_keys
from tunecache.store.keys import HardwareKey, MissExplanation, WorkloadDesc, WorkloadKey, canonical_json
from tunecache.store.location import StoreLocation
from tunecache.store.records import Provenance, Record, decode_args_info, decode_run_secs, decode_trace
from tunecache.store.values import QueueEntry, ReuseEntry, StoredWorkload, StoreStats

__all__ = ["Store"]


def _workload_id_of(workload: WorkloadKey) -> Any:
    """The workload's row id as a scalar subquery.

    Filtering records by ``workload_id = (subquery)`` lets the database use ``ix_record_lookup``
    (workload, hardware); a filter on the joined workload row's hash left SQLite without
    statistics scanning every record of the hardware key (0.9 s a lookup at 1M records).
    """
    w = aliased(WorkloadRow)
    return select(w.id).where(w.shash == workload.shash, w.mod_eq == workload.mod_eq).scalar_subquery()


def _records_query(hardware: HardwareKey | str | None, workload: WorkloadKey | None, family: str | None,
                   valid_only: bool) -> Any:
    """SELECT records with their workload and hardware rows, filtered (unordered, unlimited)."""
    q = (
        select(RecordRow, WorkloadRow, HardwareRow)
        .join(WorkloadRow, RecordRow.workload_id == WorkloadRow.id)
        .join(HardwareRow, RecordRow.hardware_id == HardwareRow.id)
    )
    if hardware is not None:
        q = q.where(RecordRow.hardware_id == (hardware if isinstance(hardware, str) else hardware.id))
    if workload is not None:
        q = q.where(RecordRow.workload_id == _workload_id_of(workload))
    if family:
        q = q.where(WorkloadRow.family == family)
    if valid_only:
        q = q.where(RecordRow.latency_s.is_not(None))
    return q


#: A queue entry names at most this many of the models that asked for it.
_QUEUE_MODELS = 16


def _claim_key(workload: WorkloadKey, hardware: HardwareKey) -> str:
    return f"{hardware.id}:{workload.shash}"


#: The prefix of derived documents' keys in ``tc_meta`` (``schema_version`` and the like have none).
_DERIVED = "derived:"


class Store(BaseStore):
    """A persistent store of tuning records in SQLite or PostgreSQL.

    See :class:`~tunecache.store.contract.BaseStore` for what every method guarantees.

    Parameters
    ----------
    url
        Where the store lives (see :func:`~tunecache.store.location.parse_store_url`): a file
        path, ``"memory"``, ``sqlite:///relative``, ``sqlite:////absolute`` or
        ``postgresql://...``; ``None`` for the default. Anything else raises
        :class:`~tunecache.errors.StoreURLError`.
    read_only
        Open without write access: writes raise :class:`~tunecache.errors.ReadOnlyStoreError`,
        nothing is created, the schema is never created or upgraded. An SQLite file this user
        cannot write, or in a directory it cannot write, opens read-only without being asked
        (:attr:`read_only` says so, :attr:`immutable` how).
    create
        Create what is missing: an SQLite file and its directory, the tables of an empty
        database. With ``False`` a missing SQLite file raises
        :class:`~tunecache.errors.StoreError` naming it, and nothing is created.

    Raises
    ------
    StoreURLError, SchemaVersionError, StoreError, DependencyError

    Examples
    --------
    >>> with Store("memory") as st:
    ...     st.count_records()
    0
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | StoreLocation | None = None,
        *,
        read_only: bool = False,
        create: bool = True,
    ) -> None:
        self._db = Database(url, read_only=read_only, create=create and not read_only)
        self._hw_known: set[str] = set()
        self._wl_ids: dict[tuple[str, str], int] = {}
        try:
            ensure_schema(self._db, create=create)
        except BaseException:
            self._db.dispose()
            raise

    # -- identity -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Return the normalised SQLAlchemy URL."""
        return self._db.url

    @property
    def backend(self) -> str:
        """Return ``sqlite`` or ``postgresql``."""
        return self._db.backend

    @property
    def display_url(self) -> str:
        """Return the URL with any password hidden."""
        return self._db.display_url

    @property
    def read_only(self) -> bool:
        """Return whether writes are refused (asked for, or the file or its directory is not writable)."""
        return self._db.read_only

    @property
    def persistent(self) -> bool:
        """Return whether records outlive the process (``False`` for ``memory``)."""
        return self._db.location.persistent

    @property
    def immutable(self) -> bool:
        """Return whether an SQLite file is read as an immutable snapshot.

        SQLite's ``immutable=1``: used for a read-only WAL file whose ``-wal``/``-shm`` files this
        user cannot (or should not) create. No locks and no change detection: changes written to
        the file after it was opened are not seen.

        Returns
        -------
        bool
        """
        return self._db.immutable

    @property
    def read_only_reason(self) -> str:
        """Return why writes are refused (``""`` when they are not), for messages and reports."""
        return self._db.read_only_reason

    @property
    def schema_version(self) -> int:
        """Return the schema version recorded in the database."""
        return self._db.run(read_version, write=False) or 0

    @contextmanager
    def session(self, write: bool = False) -> Iterator[Session]:
        """Open one raw SQLAlchemy transaction (for :mod:`tunecache.store._sql.integrity`).

        Parameters
        ----------
        write
            Commit at the end.

        Yields
        ------
        Session
        """
        with self._db.session(write=write) as sess:
            yield sess

    # -- row helpers --------------------------------------------------------------------------

    def _insert_ignore(self, sess: Session, model: Any, values: dict[str, Any], index: list[str]) -> int:
        """INSERT ... ON CONFLICT DO NOTHING; return 1 if a row was inserted, else 0."""
        if self.backend == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        stmt = (
            insert(model)
            .values(**values)
            .on_conflict_do_nothing(index_elements=index)
            .returning(*model.__table__.primary_key.columns)
        )
        # rowcount is -1 for this statement on some drivers: count the returned keys instead.
        return len(sess.execute(stmt).fetchall())

    def _hardware_id(self, sess: Session, hw: HardwareKey) -> str:
        hid = hw.id
        if hid not in self._hw_known:
            self._insert_ignore(sess, HardwareRow, hardware_columns(hw), ["id"])
        return hid

    def _workload_id(self, sess: Session, key: WorkloadKey) -> int | None:
        k = (key.shash, key.mod_eq)
        wid = self._wl_ids.get(k)
        if wid is None:
            wid = sess.scalar(
                select(WorkloadRow.id).where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq)
            )
            if wid is not None:
                self._wl_ids[k] = wid
        return wid

    # -- writes -------------------------------------------------------------------------------

    def commit_workload(self, key: WorkloadKey, desc: WorkloadDesc | None = None, mod_json: str = "") -> None:
        """Add a workload if it is missing (idempotent; a better description fills blanks)."""
        desc = desc or WorkloadDesc()

        def do(sess: Session) -> None:
            self._insert_ignore(sess, WorkloadRow, workload_columns(key, desc, mod_json), ["shash", "mod_eq"])
            if mod_json:
                sess.execute(
                    update(WorkloadRow)
                    .where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq, WorkloadRow.mod_json == "")
                    .values(mod_json=mod_json)
                )
            if desc.family != "other" or desc.extents:
                sess.execute(
                    update(WorkloadRow)
                    .where(
                        WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq, WorkloadRow.family == "other"
                    )
                    .values(family=desc.family, desc_json=canonical_json(desc.to_dict()))
                )

        self._db.run(do, write=True)

    def commit_record(self, record: Record, *, desc: WorkloadDesc | None = None) -> None:
        """Add one record (its workload is created if missing). Same ``uid`` twice: no-op."""
        self.commit_records([record], descs={record.workload: desc} if desc else None)

    def commit_records(self, records: Iterable[Record], *, descs: dict[WorkloadKey, WorkloadDesc] | None = None) -> int:
        """Add records in one transaction; return how many were new."""
        records = list(records)
        for r in records:
            decode_trace(r.trace)
            decode_run_secs(list(r.run_secs))
            decode_args_info(r.args_info)
        descs = descs or {}

        def do(sess: Session) -> int:
            new = 0
            for r in records:
                wid = self._workload_id(sess, r.workload)
                if wid is None:
                    d = descs.get(r.workload, WorkloadDesc())
                    self._insert_ignore(sess, WorkloadRow, workload_columns(r.workload, d, ""), ["shash", "mod_eq"])
                    wid = self._workload_id(sess, r.workload)
                    assert wid is not None
                hid = self._hardware_id(sess, r.hardware)
                new += self._insert_ignore(sess, RecordRow, record_columns(r, wid, hid), ["uid"])
            return new

        try:
            n = self._db.run(do, write=True)
        except StoreError:
            self._wl_ids.clear()  # ids may belong to a rolled-back transaction
            raise
        for r in records:
            self._hw_known.add(r.hardware.id)
        return n

    def set_latency(self, uid: str, latency_s: float, cv: float | None = None) -> None:
        """Replace a record's ranking latency (after a trustworthy re-measurement)."""
        self._db.run(
            lambda s: s.execute(update(RecordRow).where(RecordRow.uid == uid).values(latency_s=latency_s, cv=cv)),
            write=True,
        )

    def mark_stale(self, uids: Iterable[str], stale: bool = True) -> None:
        """Mark records stale (never served as hits) or re-admit them."""
        uid_list = list(uids)
        self._db.run(
            lambda s: s.execute(update(RecordRow).where(RecordRow.uid.in_(uid_list)).values(stale=stale)),
            write=True,
        )

    # -- task claims (leases) -----------------------------------------------------------------

    def claim(
        self,
        workload: WorkloadKey,
        hardware: HardwareKey,
        holder: str,
        lease_s: float,
        *,
        steal_from: str | None = None,
    ) -> bool:
        """Claim a task for ``lease_s`` seconds; renew if held (atomic: one INSERT or UPDATE)."""
        key = _claim_key(workload, hardware)

        def do(sess: Session) -> bool:
            now = time.time()
            got = self._insert_ignore(
                sess, ClaimRow, dict(key=key, holder=holder, claimed_at=now, expires_at=now + lease_s), ["key"]
            )
            if got:
                return True
            res = sess.execute(
                update(ClaimRow)
                .where(
                    ClaimRow.key == key,
                    ClaimRow.done.is_(False),
                    (ClaimRow.expires_at < now)
                    | (ClaimRow.holder == holder)
                    | (ClaimRow.holder == (steal_from if steal_from is not None else holder)),
                )
                .values(holder=holder, claimed_at=now, expires_at=now + lease_s)
            )
            return bool(res.rowcount)  # type: ignore[attr-defined]

        return bool(self._db.run(do, write=True))

    def release(self, workload: WorkloadKey, hardware: HardwareKey, holder: str) -> None:
        """Give up ``holder``'s claim (no-op if it does not hold it)."""
        key = _claim_key(workload, hardware)
        self._db.run(
            lambda s: s.execute(
                delete(ClaimRow).where(ClaimRow.key == key, ClaimRow.holder == holder, ClaimRow.done.is_(False))
            ),
            write=True,
        )

    def mark_done(self, workload: WorkloadKey, hardware: HardwareKey, holder: str = "") -> None:
        """Record that the search of a task finished (and drop any lease)."""
        key = _claim_key(workload, hardware)

        def do(sess: Session) -> None:
            now = time.time()
            if not self._insert_ignore(
                sess, ClaimRow, dict(key=key, holder=holder, claimed_at=now, expires_at=now, done=True), ["key"]
            ):
                sess.execute(update(ClaimRow).where(ClaimRow.key == key).values(done=True, expires_at=now))
            sess.execute(delete(QueueRow).where(QueueRow.key == key))

        self._db.run(do, write=True)

    def is_done(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Return whether a finished search of the task was recorded."""
        key = _claim_key(workload, hardware)

        def do(sess: Session) -> bool:
            row = sess.get(ClaimRow, key)
            return row is not None and bool(row.done)

        return self._db.run(do, write=False)

    def claim_holder(self, workload: WorkloadKey, hardware: HardwareKey) -> str | None:
        """Return who holds a live claim on the task, or ``None``."""
        key = _claim_key(workload, hardware)

        def do(sess: Session) -> str | None:
            row = sess.get(ClaimRow, key)
            return row.holder if row is not None and row.expires_at >= time.time() else None

        return self._db.run(do, write=False)

    # -- the tuning queue ---------------------------------------------------------------------

    def enqueue(self, entries: Iterable[QueueEntry]) -> int:
        """Queue tasks, merging each with its waiting entry (one transaction)."""
        todo = list(entries)

        def do(sess: Session) -> int:
            changed = 0
            now = time.time()
            for e in todo:
                key = _claim_key(e.workload, e.hardware)
                claim = sess.get(ClaimRow, key)
                if claim is not None and claim.done:
                    continue
                wid = self._workload_id(sess, e.workload)
                if wid is None:
                    raise StoreError(f"cannot queue task {e.name}: its workload is not stored (commit it first)")
                hid = self._hardware_id(sess, e.hardware)
                models = list(dict.fromkeys(e.models))[:_QUEUE_MODELS]
                if self._insert_ignore(sess, QueueRow, dict(
                        key=key, workload_id=wid, hardware_id=hid, weight=e.weight, priority=e.priority,
                        served=e.served[:16], models_json=json.dumps(models), requests=1, queued_at=now,
                        updated_at=now), ["key"]):
                    changed += 1
                    continue
                q = select(QueueRow).where(QueueRow.key == key)
                row = sess.scalar(q.with_for_update() if self.backend == "postgresql" else q)
                if row is None:  # done and removed in between
                    continue
                try:
                    known = [str(m) for m in json.loads(row.models_json)]
                except (ValueError, TypeError):
                    known = []
                new = [m for m in models if m not in known]
                if new or not models:
                    row.weight, row.priority = row.weight + e.weight, row.priority + e.priority
                else:
                    row.weight, row.priority = max(row.weight, e.weight), max(row.priority, e.priority)
                row.models_json = json.dumps((known + new)[:_QUEUE_MODELS])
                row.served = e.served[:16] or row.served
                row.requests += 1
                row.updated_at = now
                changed += 1
            return changed

        return int(self._db.run(do, write=True)) if todo else 0

    def queued(self, hardware: HardwareKey | None = None, *, limit: int | None = None) -> list[QueueEntry]:
        """Return the waiting tasks, highest priority first."""

        def do(sess: Session) -> list[QueueEntry]:
            q = (select(QueueRow, WorkloadRow, HardwareRow)
                 .join(WorkloadRow, QueueRow.workload_id == WorkloadRow.id)
                 .join(HardwareRow, QueueRow.hardware_id == HardwareRow.id)
                 .order_by(QueueRow.priority.desc(), QueueRow.queued_at, QueueRow.key))
            if hardware is not None:
                q = q.where(QueueRow.hardware_id == hardware.id)
            if limit is not None:
                q = q.limit(limit)
            out = []
            keys: dict[str, HardwareKey] = {}
            for row, wl, hw_row in sess.execute(q):
                hw = keys.get(hw_row.id)
                if hw is None:
                    hw = keys[hw_row.id] = hardware_value(hw_row)
                try:
                    models = tuple(str(m) for m in json.loads(row.models_json))
                except (ValueError, TypeError):
                    models = ()
                out.append(QueueEntry(workload=WorkloadKey(wl.shash, wl.mod_eq), hardware=hw, name=wl.name,
                                      weight=row.weight, priority=row.priority, served=row.served,
                                      models=models, requests=row.requests, queued_at=row.queued_at))
            return out

        return self._db.run(do, write=False)

    def dequeue(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Remove a task from the queue; return whether it was waiting."""
        key = _claim_key(workload, hardware)
        res = self._db.run(lambda s: s.execute(delete(QueueRow).where(QueueRow.key == key)), write=True)
        return bool(getattr(res, "rowcount", 0))

    # -- reads --------------------------------------------------------------------------------

    def has_workload(self, key: WorkloadKey) -> bool:
        """Return whether the workload is known (on any hardware)."""
        return self._db.run(lambda s: self._workload_id(s, key) is not None, write=False)

    def get_workload(self, key: WorkloadKey) -> StoredWorkload | None:
        """Return the stored workload, or ``None``."""

        def do(sess: Session) -> StoredWorkload | None:
            row = sess.scalar(
                select(WorkloadRow).where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq)
            )
            return None if row is None else workload_value(row)

        return self._db.run(do, write=False)

    def workloads(self, *, family: str | None = None) -> list[StoredWorkload]:
        """Return every stored workload (optionally of one operator family)."""

        def do(sess: Session) -> list[StoredWorkload]:
            q = select(WorkloadRow).order_by(WorkloadRow.id)
            if family:
                q = q.where(WorkloadRow.family == family)
            return [workload_value(r) for r in sess.scalars(q)]

        return self._db.run(do, write=False)

    def best_k(
        self, workload: WorkloadKey, hardware: HardwareKey, k: int = 1, *, include_stale: bool = False
    ) -> list[Record]:
        """Return the ``k`` best valid records of ``workload`` on ``hardware``, best first."""
        if k <= 0:
            return []
        hid = hardware.id

        def do(sess: Session) -> list[Record]:
            wid = self._workload_id(sess, workload)
            if wid is None:
                return []
            q = (
                select(RecordRow)
                .where(
                    RecordRow.workload_id == wid,
                    RecordRow.hardware_id == hid,
                    RecordRow.latency_s.is_not(None),
                )
                .order_by(RecordRow.latency_s, RecordRow.id)
                .limit(k)
            )
            if not include_stale:
                q = q.where(RecordRow.stale.is_(False))
            return [record_value(r, workload, hardware) for r in sess.scalars(q)]

        return self._db.run(do, write=False)

    def records(
        self,
        *,
        hardware: HardwareKey | str | None = None,
        workload: WorkloadKey | None = None,
        family: str | None = None,
        valid_only: bool = False,
        limit: int | None = None,
    ) -> list[Record]:
        """Return records filtered by hardware key (or its id), workload and family."""

        def do(sess: Session) -> list[Record]:
            q = _records_query(hardware, workload, family, valid_only).order_by(RecordRow.id)
            if limit is not None:
                q = q.limit(limit)
            # A trace decodes into a list per instruction: the cyclic collector, left running, traced
            # the growing page again and again (674 BERT records: 0.44 s, paused 0.10 s; Zen 4).
            with gc_paused():
                return [record_value(r, WorkloadKey(w.shash, w.mod_eq), hardware_value(h))
                        for r, w, h in sess.execute(q)]

        return self._db.run(do, write=False)

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
        """Yield records a page of ``batch`` at a time (keyset pagination on the record id)."""
        if batch < 1:
            raise InvalidRecordError(f"batch must be >= 1, got {batch}")
        after: int | None = None

        def page(sess: Session) -> list[tuple[int, Record]]:
            q = (_records_query(hardware, workload, family, valid_only)
                 .order_by(RecordRow.id.desc() if newest_first else RecordRow.id).limit(batch))
            if after is not None:
                q = q.where(RecordRow.id < after if newest_first else RecordRow.id > after)
            with gc_paused():  # as in records()
                return [(r.id, record_value(r, WorkloadKey(w.shash, w.mod_eq), hardware_value(h)))
                        for r, w, h in sess.execute(q)]

        while True:
            rows = self._db.run(page, write=False)
            for _, rec in rows:
                yield rec
            if len(rows) < batch:
                return
            after = rows[-1][0]

    def sample_records(self, hardware: HardwareKey, *, newest: int, per_workload: int) -> list[Record]:
        """Return a sample of recent records (the contract's), picked in one query: a window over
        the ``newest`` record ids ranks each workload's, and only the rows kept are decoded."""
        if newest < 1 or per_workload < 1:
            return []

        def do(sess: Session) -> list[Record]:
            recent = (select(RecordRow.id.label("id"), RecordRow.workload_id.label("wid"))
                      .where(RecordRow.hardware_id == hardware.id, RecordRow.latency_s.is_not(None))
                      .order_by(RecordRow.id.desc()).limit(newest).subquery())
            rank = func.row_number().over(partition_by=recent.c.wid, order_by=recent.c.id.desc()).label("rank")
            ranked = select(recent.c.id, rank).subquery()
            q = (_records_query(hardware, None, None, True)
                 .where(RecordRow.id.in_(select(ranked.c.id).where(ranked.c.rank <= per_workload)))
                 .order_by(RecordRow.id.desc()))
            with gc_paused():  # as in records()
                return [record_value(r, WorkloadKey(w.shash, w.mod_eq), hardware_value(h))
                        for r, w, h in sess.execute(q)]

        return self._db.run(do, write=False)

    def recent_provenance(self, hardware: HardwareKey, *, limit: int) -> list[Provenance]:
        """Return the provenance of the newest valid records under ``hardware`` (no trace read)."""
        cols = (RecordRow.kind, RecordRow.source_workload, RecordRow.source_record, RecordRow.trials,
                RecordRow.seconds, RecordRow.host, RecordRow.user, RecordRow.tunecache_version,
                RecordRow.tvm_version, RecordRow.created_at)

        def do(sess: Session) -> list[Provenance]:
            q = (select(*cols).where(RecordRow.hardware_id == hardware.id, RecordRow.latency_s.is_not(None))
                 .order_by(RecordRow.id.desc()).limit(limit))
            out = []
            for row in sess.execute(q):
                try:
                    out.append(provenance_value(row))
                except InvalidRecordError:
                    continue  # a provenance that does not validate says nothing about costs
            return out

        return self._db.run(do, write=False)

    # -- the reuse index ----------------------------------------------------------------------

    def commit_reuse_entries(self, entries: Iterable[ReuseEntry]) -> int:
        """Add reuse-index entries (an existing (workload, target) entry is kept); return how many were new."""
        entries = list(entries)

        def do(sess: Session) -> int:
            new = 0
            for e in entries:
                wid = self._workload_id(sess, e.workload)
                if wid is None:
                    desc = WorkloadDesc(name=e.name, family=e.family)
                    self._insert_ignore(sess, WorkloadRow, workload_columns(e.workload, desc, ""), ["shash", "mod_eq"])
                    wid = self._workload_id(sess, e.workload)
                    assert wid is not None
                new += self._insert_ignore(sess, ReuseRow, reuse_columns(e, wid), ["workload_id", "target_id"])
            return new

        try:
            return int(self._db.run(do, write=True))
        except StoreError:
            self._wl_ids.clear()
            raise

    def reuse_entries(self, target_id: str, workloads: Iterable[WorkloadKey]) -> list[ReuseEntry]:
        """Return the stored entries of ``workloads`` for ``target_id``."""
        keys = list(workloads)

        def do(sess: Session) -> list[ReuseEntry]:
            out = []
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                q = (
                    select(ReuseRow, WorkloadRow)
                    .join(WorkloadRow, ReuseRow.workload_id == WorkloadRow.id)
                    .where(ReuseRow.target_id == target_id, WorkloadRow.shash.in_([k.shash for k in chunk]))
                )
                want = set(chunk)
                out += [e for e in (reuse_value(r, w) for r, w in sess.execute(q)) if e.workload in want]
            return out

        return self._db.run(do, write=False)

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
        """Return the entries of ``group`` nearest ``log_work`` whose workload has a hit under ``hardware``."""
        skip = set(exclude)
        has_program = (
            select(RecordRow.id)
            .where(
                RecordRow.workload_id == ReuseRow.workload_id,
                RecordRow.hardware_id == hardware.id,
                RecordRow.latency_s.is_not(None),
                RecordRow.stale.is_(False),
            )
            .exists()
        )

        def do(sess: Session) -> list[ReuseEntry]:
            base = (
                select(ReuseRow, WorkloadRow)
                .join(WorkloadRow, ReuseRow.workload_id == WorkloadRow.id)
                .where(ReuseRow.target_id == hardware.target_id, ReuseRow.group_key == group)
                .limit(limit + len(skip))
            )
            if with_program:
                base = base.where(has_program)
            up = base.where(ReuseRow.log_work >= log_work).order_by(ReuseRow.log_work, WorkloadRow.shash)
            down = base.where(ReuseRow.log_work < log_work).order_by(ReuseRow.log_work.desc(), WorkloadRow.shash)
            out = []
            for q in (up, down):
                side = [e for e in (reuse_value(r, w) for r, w in sess.execute(q)) if e.workload not in skip]
                out += side[:limit]
            return out

        found = self._db.run(do, write=False)
        return sorted(found, key=lambda e: (abs(e.log_work - log_work), str(e.workload)))

    def unindexed_workloads(self, hardware: HardwareKey, *, limit: int | None = None) -> list[StoredWorkload]:
        """Return workloads with valid records under ``hardware`` and no entry for its target."""
        has_program = (
            select(RecordRow.id)
            .where(
                RecordRow.workload_id == WorkloadRow.id,
                RecordRow.hardware_id == hardware.id,
                RecordRow.latency_s.is_not(None),
            )
            .exists()
        )
        indexed = (
            select(ReuseRow.workload_id)
            .where(ReuseRow.workload_id == WorkloadRow.id, ReuseRow.target_id == hardware.target_id)
            .exists()
        )

        def do(sess: Session) -> list[StoredWorkload]:
            # Ids first (the workload key index and two index probes a row, no module read),
            # then the rows of those ids that have a module, a page at a time.
            out: list[StoredWorkload] = []
            after = 0
            page = 500 if limit is None else max(1, min(limit, 500))
            while limit is None or len(out) < limit:
                ids = list(sess.scalars(select(WorkloadRow.id).where(WorkloadRow.id > after, ~indexed, has_program)
                                        .order_by(WorkloadRow.id).limit(page)))
                if not ids:
                    break
                rows = sess.scalars(select(WorkloadRow).where(WorkloadRow.id.in_(ids), WorkloadRow.mod_json != "")
                                    .order_by(WorkloadRow.id))
                out += [workload_value(w) for w in rows]
                after = ids[-1]
            return out if limit is None else out[:limit]

        return self._db.run(do, write=False)

    def hardware_keys(self, workload: WorkloadKey | None = None) -> list[HardwareKey]:
        """Return the hardware keys that have records (of ``workload``, if given)."""

        def do(sess: Session) -> list[HardwareKey]:
            q = select(HardwareRow)
            if workload is not None:
                q = q.where(HardwareRow.id.in_(
                    select(RecordRow.hardware_id).where(RecordRow.workload_id == _workload_id_of(workload))))
            return [hardware_value(h) for h in sess.scalars(q.order_by(HardwareRow.id))]

        return self._db.run(do, write=False)

    def explain_miss(self, workload: WorkloadKey, hardware: HardwareKey) -> MissExplanation:
        """Explain why ``best_k(workload, hardware)`` found nothing."""
        return explain_miss_from_keys(hardware, self.hardware_keys(workload))

    def get_derived(self, name: str) -> str | None:
        """Return the document kept under ``name`` (a ``tc_meta`` row, ``derived:`` + ``name``)."""
        key = _DERIVED + check_derived_name(name)

        def do(sess: Session) -> str | None:
            row = sess.get(MetaRow, key)
            return None if row is None else row.value

        return self._db.run(do, write=False)

    def put_derived(self, name: str, text: str) -> None:
        """Keep ``text`` under ``name``: insert the row, or replace its value (one transaction)."""
        key = _DERIVED + check_derived_name(name)

        def do(sess: Session) -> None:
            if not self._insert_ignore(sess, MetaRow, {"key": key, "value": text}, ["key"]):
                sess.execute(update(MetaRow).where(MetaRow.key == key).values(value=text))

        self._db.run(do, write=True)

    def count_records(self, hardware: HardwareKey | None = None, *, workload: WorkloadKey | None = None) -> int:
        """Return the number of records (for one hardware key and/or workload, if given)."""

        def do(sess: Session) -> int:
            q = select(func.count()).select_from(RecordRow)
            if hardware is not None:
                q = q.where(RecordRow.hardware_id == hardware.id)
            if workload is not None:
                wid = self._workload_id(sess, workload)
                if wid is None:
                    return 0
                q = q.where(RecordRow.workload_id == wid)
            return int(sess.scalar(q) or 0)

        return self._db.run(do, write=False)

    def stats(self) -> StoreStats:
        """Return counts per hardware key and operator family, and the size on disk."""

        def do(sess: Session) -> StoreStats:
            by_hw = []
            for hid, n in sess.execute(
                select(RecordRow.hardware_id, func.count())
                .group_by(RecordRow.hardware_id)
                .order_by(RecordRow.hardware_id)
            ):
                h = sess.get(HardwareRow, hid)
                by_hw.append((hid, hardware_value(h).describe() if h else "?", int(n)))
            by_fam = [
                (fam, int(n))
                for fam, n in sess.execute(
                    select(WorkloadRow.family, func.count()).group_by(WorkloadRow.family).order_by(WorkloadRow.family)
                )
            ]

            def count(q: Any) -> int:
                return int(sess.scalar(q) or 0)

            records = select(func.count()).select_from(RecordRow)
            return StoreStats(
                workloads=count(select(func.count()).select_from(WorkloadRow)),
                records=count(records),
                valid_records=count(records.where(RecordRow.latency_s.is_not(None))),
                stale_records=count(records.where(RecordRow.stale.is_(True))),
                by_hardware=tuple(by_hw),
                by_family=tuple(by_fam),
                size_bytes=self._size_bytes(sess),
                schema_version=read_version(sess) or 0,
            )

        return self._db.run(do, write=False)

    def _size_bytes(self, sess: Session) -> int | None:
        if self.backend == "sqlite":
            path = self._db.location.path
            if path is None:
                return None
            return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))
        try:
            return int(sess.scalar(text("SELECT pg_database_size(current_database())")) or 0)
        except SQLAlchemyError:
            return None

    # -- maintenance --------------------------------------------------------------------------

    def gc(self, keep_top: int, *, dry_run: bool = False) -> int:
        """Keep the ``keep_top`` best valid fresh records per (workload, hardware); return removed count."""
        if keep_top < 1:
            raise InvalidRecordError(f"keep_top must be >= 1, got {keep_top}")

        def do(sess: Session) -> int:
            ranked = (
                select(
                    RecordRow.id,
                    func.row_number()
                    .over(
                        partition_by=(RecordRow.workload_id, RecordRow.hardware_id),
                        order_by=(RecordRow.latency_s, RecordRow.id),
                    )
                    .label("rank"),
                )
                .where(RecordRow.latency_s.is_not(None), RecordRow.stale.is_(False))
                .subquery()
            )
            keep = select(ranked.c.id).where(ranked.c.rank <= keep_top)
            if dry_run:
                return int(sess.scalar(select(func.count()).select_from(RecordRow).where(RecordRow.id.not_in(keep)))
                           or 0)
            res = sess.execute(delete(RecordRow).where(RecordRow.id.not_in(keep)))
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

        return self._db.run(do, write=not dry_run)

    def close(self) -> None:
        """Release the connection pool."""
        self._db.dispose()

    def __enter__(self) -> Store:
        return self

    def __repr__(self) -> str:
        return f"Store({self.display_url!r}{', read_only=True' if self.read_only else ''})"
