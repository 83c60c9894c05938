"""The store: one SQLAlchemy-backed implementation for SQLite and PostgreSQL.

Contract (what every backend guarantees, and what ``tests/test_store_contract.py`` checks):

- Thread- and process-safe: any number of processes may commit concurrently; committing a
  workload or a hardware key twice is a no-op, committing the same record ``uid`` twice is a
  no-op, and a transient "database is locked" or serialization failure is retried inside one
  session scope with backoff, never shown to the user.
- Values in, values out: methods take and return the frozen values of
  :mod:`tunecache.store.keys` and :mod:`tunecache.store.records`, never ORM rows, and a value
  returned never changes afterwards.
- Nothing is unpickled: traces and descriptions are JSON, validated when read back.
- Exact hits require every component of the hardware key to match; stale records are never hits.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import Engine, create_engine, delete, event, func, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from tunecache import config
from tunecache.errors import (
    DependencyError,
    InvalidRecordError,
    ReadOnlyStoreError,
    SchemaVersionError,
    StoreError,
    StoreURLError,
)
from tunecache.store.keys import (
    HardwareKey,
    HostFingerprint,
    MissExplanation,
    WorkloadDesc,
    WorkloadKey,
    canonical_json,
    explain_miss,
)
from tunecache.store.records import (
    Provenance,
    Record,
    decode_args_info,
    decode_json_text,
    decode_run_secs,
    decode_trace,
)
from tunecache.store.schema import SCHEMA_VERSION, Base, ClaimRow, HardwareRow, MetaRow, RecordRow, WorkloadRow

__all__ = ["Store", "StoredWorkload", "StoreStats", "open_store", "normalize_url"]

_RETRIES = 12


@dataclass(frozen=True)
class StoredWorkload:
    """A workload as the store holds it."""

    key: WorkloadKey
    desc: WorkloadDesc
    mod_json: str


@dataclass(frozen=True)
class StoreStats:
    """Counts for ``tunecache db stats``."""

    workloads: int
    records: int
    valid_records: int
    stale_records: int
    by_hardware: tuple[tuple[str, str, int], ...]  # (hardware id, description, records)
    by_family: tuple[tuple[str, int], ...]  # (family, workloads)
    size_bytes: int | None
    schema_version: int


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    """Turn a user-given store location into an SQLAlchemy URL.

    ``None`` means the default (``TUNECACHE_DB`` or the user cache file); a plain path means an
    SQLite file; ``memory`` / ``sqlite://`` an in-memory SQLite store; ``postgresql://`` gets the
    psycopg 3 driver.

    Raises
    ------
    StoreURLError
        For an unknown scheme.
    """
    if url is None:
        url = config.default_store_url()
    url = os.fspath(url)
    if url in ("memory", ":memory:", "sqlite://", "sqlite:///:memory:"):
        return "sqlite://"
    if "://" not in url:
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    scheme = url.split("://", 1)[0]
    if scheme in ("postgres", "postgresql"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if scheme in ("sqlite", "postgresql+psycopg"):
        return url
    raise StoreURLError(
        f"unknown store URL scheme {scheme!r} in {url!r}: use a file path, 'sqlite:///path/to.db', "
        "'memory', or 'postgresql://user@host/dbname'"
    )


def _is_transient(err: BaseException) -> bool:
    msg = str(err).lower()
    return any(
        s in msg
        for s in (
            "database is locked",
            "database is busy",
            "could not serialize",
            "deadlock detected",
            "database table is locked",
        )
    )


class Store:
    """A persistent store of tuning records (SQLite or PostgreSQL).

    Parameters
    ----------
    url
        Where the store lives (see :func:`normalize_url`); ``None`` for the default.
    read_only
        Open without write access: writes raise :class:`ReadOnlyStoreError`, the schema is
        never created or upgraded.
    create
        Create the tables when the database is empty.

    Raises
    ------
    StoreURLError, SchemaVersionError, StoreError, DependencyError
    """

    def __init__(self, url: str | os.PathLike[str] | None = None, *, read_only: bool = False, create: bool = True) -> None:
        self.url = normalize_url(url)
        self.read_only = read_only
        self._engine = self._make_engine()
        self._sessions = sessionmaker(self._engine, expire_on_commit=False)
        self._hw_known: set[str] = set()
        self._wl_ids: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._init_schema(create)

    # -- connection -------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """Return ``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    @property
    def display_url(self) -> str:
        """Return the URL with any password hidden."""
        return make_url(self.url).render_as_string(hide_password=True)

    def _make_engine(self) -> Engine:
        try:
            u = make_url(self.url)
        except ArgumentError as err:
            raise StoreURLError(f"cannot parse store URL {self.url!r}: {err}") from err
        if u.get_backend_name() == "sqlite":
            return self._sqlite_engine(u.database)
        try:
            import psycopg  # noqa: F401
        except ImportError as err:
            raise DependencyError(
                "PostgreSQL stores need psycopg 3: `pip install 'tunecache[postgres]'`"
            ) from err
        args: dict[str, Any] = {"connect_timeout": 10}
        if self.read_only:
            args["options"] = "-c default_transaction_read_only=on"
        return create_engine(self.url, pool_pre_ping=True, connect_args=args)

    def _sqlite_engine(self, database: str | None) -> Engine:
        if not database or database == ":memory:":
            engine = create_engine(
                "sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        else:
            path = Path(database)
            if self.read_only:
                if not path.exists():
                    raise StoreError(f"store file {path} does not exist (opened read-only)")
                url = f"sqlite:///file:{path}?mode=ro&uri=true"
            else:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as err:
                    raise StoreError(f"cannot create the directory of store {path}: {err}") from err
                url = f"sqlite:///{path}"
            engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        wal = database not in (None, "", ":memory:") and not self.read_only

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - trivial
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            if wal:
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine

    @contextlib.contextmanager
    def session(self, write: bool = False) -> Iterator[Session]:
        """One transaction: commit on success, roll back on error, database errors as StoreError.

        Transient lock and serialization failures are retried (with jittered backoff) by
        :meth:`_run`; callers that need retries pass a function there instead.
        """
        if write and self.read_only:
            raise ReadOnlyStoreError(
                f"store {self.display_url} is open read-only: write to a local overlay "
                "(`--overlay PATH`) and `tunecache db push` it later"
            )
        sess = self._sessions()
        try:
            yield sess
            if write:
                sess.commit()
            else:
                sess.rollback()
        except BaseException:
            sess.rollback()
            raise
        finally:
            sess.close()

    def _run(self, fn: Any, *, write: bool) -> Any:
        delay = 0.01
        for attempt in range(_RETRIES):
            try:
                with self.session(write=write) as sess:
                    return fn(sess)
            except (OperationalError, DBAPIError) as err:
                if _is_transient(err) and attempt < _RETRIES - 1:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                low = str(err).lower()
                if "read-only" in low or "readonly" in low or "permission denied" in low:
                    raise ReadOnlyStoreError(
                        f"store {self.display_url} refused a write (read-only): "
                        "use a local overlay store for new records"
                    ) from err
                raise StoreError(f"store {self.display_url}: {err.__class__.__name__}: {err.orig if hasattr(err, 'orig') else err}") from err
            except SQLAlchemyError as err:
                raise StoreError(f"store {self.display_url}: {err}") from err
        raise AssertionError("unreachable")  # pragma: no cover

    # -- schema ---------------------------------------------------------------------------

    def _init_schema(self, create: bool) -> None:
        def probe(sess: Session) -> int | None:
            insp_tables = self._engine.dialect.has_table(sess.connection(), MetaRow.__tablename__)
            if not insp_tables:
                return None
            # Tables without a version row: another process is creating the schema right now
            # (SQLite commits each CREATE TABLE on its own); create it too, idempotently.
            return _read_version(sess)

        try:
            version = self._run(probe, write=False)
        except StoreError as err:
            raise StoreError(f"cannot open store {self.display_url}: {err}") from err
        if version is None and self.read_only:
            for _ in range(50):  # a writer may be creating it: give it a moment
                time.sleep(0.1)
                version = self._run(probe, write=False)
                if version is not None:
                    break
        if version is None:
            if self.read_only or not create:
                raise StoreError(
                    f"store {self.display_url} has no tunecache tables; open it writable once "
                    "(e.g. `tunecache db stats --db URL`) to create them"
                )
            self._create_schema()
            return
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store {self.display_url} has schema version {version}, newer than this "
                f"tunecache understands ({SCHEMA_VERSION}): upgrade tunecache "
                "(`pip install -U tunecache`)"
            )
        if version < SCHEMA_VERSION:
            raise SchemaVersionError(
                f"store {self.display_url} has schema version {version}, older than "
                f"{SCHEMA_VERSION}: run `tunecache db upgrade --db {self.display_url}`"
            )

    def _create_schema(self) -> None:
        def create(sess: Session) -> None:
            Base.metadata.create_all(sess.connection())
            if sess.get(MetaRow, "schema_version") is None:
                sess.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
                sess.add(MetaRow(key="created_at", value=str(time.time())))

        for attempt in range(20):
            try:
                self._run(create, write=True)
                return
            except StoreError:
                # Another process is creating the schema at the same moment (SQLite commits each
                # CREATE TABLE on its own): wait for its version row, or try again.
                time.sleep(0.1 * (attempt + 1))
                if self._run(_read_version, write=False) is not None:
                    return
        self._run(create, write=True)

    @property
    def schema_version(self) -> int:
        """Return the schema version recorded in the database."""
        return self._run(_read_version, write=False) or 0

    # -- writes -----------------------------------------------------------------------------

    def _insert_ignore(self, sess: Session, model: Any, values: dict[str, Any], index: list[str]) -> int:
        """INSERT ... ON CONFLICT DO NOTHING; return 1 if a row was inserted, else 0."""
        if self.backend == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
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
            self._insert_ignore(
                sess,
                HardwareRow,
                dict(
                    id=hid,
                    target=hw.target,
                    target_kind=hw.target_kind,
                    cpu_model=hw.fingerprint.cpu_model,
                    fingerprint_json=canonical_json(hw.fingerprint.to_dict()),
                    tvm_version=hw.tvm_version,
                    created_at=time.time(),
                ),
                ["id"],
            )
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

    def commit_workload(self, key: WorkloadKey, desc: WorkloadDesc | None = None, mod_json: str = "") -> None:
        """Add a workload if it is missing (idempotent; a better description fills blanks).

        Parameters
        ----------
        key
            The workload key.
        desc
            A description (family, shapes, dtypes, extents).
        mod_json
            TVM's JSON of the IRModule, needed to replay or export the workload's records.
        """
        desc = desc or WorkloadDesc()

        def do(sess: Session) -> None:
            self._insert_ignore(
                sess,
                WorkloadRow,
                dict(
                    shash=key.shash,
                    mod_eq=key.mod_eq,
                    name=desc.name[:256],
                    family=desc.family,
                    desc_json=canonical_json(desc.to_dict()),
                    mod_json=mod_json,
                    created_at=time.time(),
                ),
                ["shash", "mod_eq"],
            )
            if mod_json:
                sess.execute(
                    update(WorkloadRow)
                    .where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq, WorkloadRow.mod_json == "")
                    .values(mod_json=mod_json)
                )
            if desc.family != "other" or desc.extents:
                sess.execute(
                    update(WorkloadRow)
                    .where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq, WorkloadRow.family == "other")
                    .values(family=desc.family, desc_json=canonical_json(desc.to_dict()))
                )

        self._run(do, write=True)

    def commit_record(self, record: Record, *, desc: WorkloadDesc | None = None) -> None:
        """Add one record (its workload is created if missing). Same ``uid`` twice: no-op."""
        self.commit_records([record], descs={record.workload: desc} if desc else None)

    def commit_records(self, records: Iterable[Record], *, descs: dict[WorkloadKey, WorkloadDesc] | None = None) -> int:
        """Add records in one transaction; return how many were new.

        Raises
        ------
        InvalidRecordError
            If a record's trace, run times or args info fail validation (nothing is written).
        """
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
                    self._insert_ignore(
                        sess,
                        WorkloadRow,
                        dict(
                            shash=r.workload.shash,
                            mod_eq=r.workload.mod_eq,
                            name=d.name[:256],
                            family=d.family,
                            desc_json=canonical_json(d.to_dict()),
                            mod_json="",
                            created_at=time.time(),
                        ),
                        ["shash", "mod_eq"],
                    )
                    wid = self._workload_id(sess, r.workload)
                    assert wid is not None
                hid = self._hardware_id(sess, r.hardware)
                p = r.provenance
                values = dict(
                    uid=r.uid,
                    workload_id=wid,
                    hardware_id=hid,
                    trace_json=json.dumps(r.trace, separators=(",", ":")),
                    run_secs_json=json.dumps(list(r.run_secs)),
                    latency_s=r.latency_s,
                    cv=r.cv,
                    args_info_json=json.dumps(r.args_info, separators=(",", ":")),
                    kind=p.kind,
                    source_workload=p.source_workload,
                    source_record=p.source_record,
                    trials=p.trials,
                    seconds=p.seconds,
                    host=p.host[:256],
                    user=p.user[:128],
                    tunecache_version=p.tunecache_version,
                    tvm_version=p.tvm_version,
                    created_at=p.created_at,
                    stale=r.stale,
                )
                new += self._insert_ignore(sess, RecordRow, values, ["uid"])
            return new

        try:
            n = self._run(do, write=True)
        except StoreError:
            self._wl_ids.clear()  # ids may belong to a rolled-back transaction
            raise
        for r in records:
            self._hw_known.add(r.hardware.id)
        return n

    def set_latency(self, uid: str, latency_s: float, cv: float | None = None) -> None:
        """Replace a record's ranking latency (after a trustworthy re-measurement)."""
        self._run(
            lambda s: s.execute(update(RecordRow).where(RecordRow.uid == uid).values(latency_s=latency_s, cv=cv)),
            write=True,
        )

    def mark_stale(self, uids: Iterable[str], stale: bool = True) -> None:
        """Mark records stale (never served as hits) or re-admit them."""
        uids = list(uids)
        self._run(
            lambda s: s.execute(update(RecordRow).where(RecordRow.uid.in_(uids)).values(stale=stale)),
            write=True,
        )

    # -- task claims (leases) -----------------------------------------------------------------

    def claim(
        self, workload: WorkloadKey, hardware: HardwareKey, holder: str, lease_s: float, *, steal_from: str | None = None
    ) -> bool:
        """Claim tuning ``workload`` on ``hardware`` for ``lease_s`` seconds; renew if held.

        Returns ``True`` when ``holder`` now holds the lease: it was free, expired, already
        ``holder``'s, or held by ``steal_from`` (a holder known to be dead). Atomic across
        processes and machines sharing the store.
        """
        key = f"{hardware.id}:{workload.shash}"

        def do(sess: Session) -> bool:
            now = time.time()
            got = self._insert_ignore(
                sess, ClaimRow, dict(key=key, holder=holder, claimed_at=now, expires_at=now + lease_s), ["key"]
            )
            if got:
                return True
            res = sess.execute(
                update(ClaimRow)
                .where(ClaimRow.key == key, ClaimRow.done.is_(False),
                       (ClaimRow.expires_at < now) | (ClaimRow.holder == holder)
                       | (ClaimRow.holder == (steal_from if steal_from is not None else holder)))
                .values(holder=holder, claimed_at=now, expires_at=now + lease_s)
            )
            return bool(res.rowcount)

        return bool(self._run(do, write=True))

    def release(self, workload: WorkloadKey, hardware: HardwareKey, holder: str) -> None:
        """Give up ``holder``'s claim (no-op if it does not hold it)."""
        key = f"{hardware.id}:{workload.shash}"
        self._run(
            lambda s: s.execute(
                delete(ClaimRow).where(ClaimRow.key == key, ClaimRow.holder == holder, ClaimRow.done.is_(False))
            ),
            write=True,
        )

    def mark_done(self, workload: WorkloadKey, hardware: HardwareKey, holder: str = "") -> None:
        """Record that the search of ``workload`` on ``hardware`` finished (and drop any lease)."""
        key = f"{hardware.id}:{workload.shash}"

        def do(sess: Session) -> None:
            now = time.time()
            if not self._insert_ignore(
                sess, ClaimRow, dict(key=key, holder=holder, claimed_at=now, expires_at=now, done=True), ["key"]
            ):
                sess.execute(update(ClaimRow).where(ClaimRow.key == key).values(done=True, expires_at=now))

        self._run(do, write=True)

    def is_done(self, workload: WorkloadKey, hardware: HardwareKey) -> bool:
        """Return whether a finished search of the task was recorded."""
        key = f"{hardware.id}:{workload.shash}"
        return bool(self._run(lambda s: (r := s.get(ClaimRow, key)) is not None and r.done, write=False))

    def claim_holder(self, workload: WorkloadKey, hardware: HardwareKey) -> str | None:
        """Return who holds a live claim on the task, or ``None``."""
        key = f"{hardware.id}:{workload.shash}"

        def do(sess: Session) -> str | None:
            row = sess.get(ClaimRow, key)
            return row.holder if row is not None and row.expires_at >= time.time() else None

        return self._run(do, write=False)

    # -- reads ------------------------------------------------------------------------------

    def has_workload(self, key: WorkloadKey) -> bool:
        """Return whether the workload is known (on any hardware)."""
        return self._run(lambda s: self._workload_id(s, key) is not None, write=False)

    def get_workload(self, key: WorkloadKey) -> StoredWorkload | None:
        """Return the stored workload, or ``None``."""

        def do(sess: Session) -> StoredWorkload | None:
            row = sess.scalar(
                select(WorkloadRow).where(WorkloadRow.shash == key.shash, WorkloadRow.mod_eq == key.mod_eq)
            )
            return None if row is None else _workload_value(row)

        return self._run(do, write=False)

    def workloads(self, *, family: str | None = None) -> list[StoredWorkload]:
        """Return every stored workload (optionally of one operator family)."""

        def do(sess: Session) -> list[StoredWorkload]:
            q = select(WorkloadRow).order_by(WorkloadRow.id)
            if family:
                q = q.where(WorkloadRow.family == family)
            return [_workload_value(r) for r in sess.scalars(q)]

        return self._run(do, write=False)

    def best_k(self, workload: WorkloadKey, hardware: HardwareKey, k: int = 1, *, include_stale: bool = False) -> list[Record]:
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
            return [_record_value(r, workload, hardware) for r in sess.scalars(q)]

        return self._run(do, write=False)

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
            q = (
                select(RecordRow, WorkloadRow, HardwareRow)
                .join(WorkloadRow, RecordRow.workload_id == WorkloadRow.id)
                .join(HardwareRow, RecordRow.hardware_id == HardwareRow.id)
                .order_by(RecordRow.id)
            )
            if hardware is not None:
                q = q.where(RecordRow.hardware_id == (hardware if isinstance(hardware, str) else hardware.id))
            if workload is not None:
                q = q.where(WorkloadRow.shash == workload.shash, WorkloadRow.mod_eq == workload.mod_eq)
            if family:
                q = q.where(WorkloadRow.family == family)
            if valid_only:
                q = q.where(RecordRow.latency_s.is_not(None))
            if limit is not None:
                q = q.limit(limit)
            return [
                _record_value(r, WorkloadKey(w.shash, w.mod_eq), _hardware_value(h))
                for r, w, h in sess.execute(q)
            ]

        return self._run(do, write=False)

    def hardware_keys(self, workload: WorkloadKey | None = None) -> list[HardwareKey]:
        """Return the hardware keys that have records (of ``workload``, if given)."""

        def do(sess: Session) -> list[HardwareKey]:
            q = select(HardwareRow)
            if workload is not None:
                q = q.where(
                    HardwareRow.id.in_(
                        select(RecordRow.hardware_id)
                        .join(WorkloadRow, RecordRow.workload_id == WorkloadRow.id)
                        .where(WorkloadRow.shash == workload.shash, WorkloadRow.mod_eq == workload.mod_eq)
                    )
                )
            return [_hardware_value(h) for h in sess.scalars(q.order_by(HardwareRow.id))]

        return self._run(do, write=False)

    def explain_miss(self, workload: WorkloadKey, hardware: HardwareKey) -> MissExplanation:
        """Explain why ``best_k(workload, hardware)`` found nothing."""
        expl = explain_miss(hardware, self.hardware_keys(workload))
        if expl.closest is not None and not expl.differences:
            return MissExplanation(("records exist but none is valid and fresh (all failed or stale)",), expl.closest)
        return expl

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

        return self._run(do, write=False)

    def stats(self) -> StoreStats:
        """Return counts per hardware key and operator family, and the size on disk."""

        def do(sess: Session) -> StoreStats:
            by_hw = []
            for hid, n in sess.execute(
                select(RecordRow.hardware_id, func.count()).group_by(RecordRow.hardware_id).order_by(RecordRow.hardware_id)
            ):
                h = sess.get(HardwareRow, hid)
                by_hw.append((hid, _hardware_value(h).describe() if h else "?", int(n)))
            by_fam = [
                (fam, int(n))
                for fam, n in sess.execute(
                    select(WorkloadRow.family, func.count()).group_by(WorkloadRow.family).order_by(WorkloadRow.family)
                )
            ]
            count = lambda q: int(sess.scalar(q) or 0)  # noqa: E731
            return StoreStats(
                workloads=count(select(func.count()).select_from(WorkloadRow)),
                records=count(select(func.count()).select_from(RecordRow)),
                valid_records=count(select(func.count()).select_from(RecordRow).where(RecordRow.latency_s.is_not(None))),
                stale_records=count(select(func.count()).select_from(RecordRow).where(RecordRow.stale.is_(True))),
                by_hardware=tuple(by_hw),
                by_family=tuple(by_fam),
                size_bytes=self._size_bytes(sess),
                schema_version=self.schema_version,
            )

        return self._run(do, write=False)

    def _size_bytes(self, sess: Session) -> int | None:
        if self.backend == "sqlite":
            db = make_url(self.url).database
            if not db or db == ":memory:":
                return None
            return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
        try:
            return int(sess.scalar(text("SELECT pg_database_size(current_database())")) or 0)
        except SQLAlchemyError:
            return None

    # -- maintenance ------------------------------------------------------------------------

    def gc(self, keep_top: int) -> int:
        """Keep the ``keep_top`` best valid records per (workload, hardware); return removed count.

        Failed measurements are removed too. Kept records keep their provenance unchanged.
        """
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
            res = sess.execute(delete(RecordRow).where(RecordRow.id.not_in(keep)))
            return int(res.rowcount or 0)

        return self._run(do, write=True)

    def close(self) -> None:
        """Release the connection pool."""
        self._engine.dispose()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.display_url!r}{', read_only=True' if self.read_only else ''})"


def _read_version(sess: Session) -> int | None:
    row = sess.get(MetaRow, "schema_version")
    return int(row.value) if row else None


def _workload_value(row: WorkloadRow) -> StoredWorkload:
    try:
        desc = WorkloadDesc.from_dict(decode_json_text(row.desc_json, "workload description"))
    except (InvalidRecordError, TypeError, ValueError):
        desc = WorkloadDesc(name=row.name, family=row.family)
    return StoredWorkload(WorkloadKey(row.shash, row.mod_eq), desc, row.mod_json)


def _hardware_value(row: HardwareRow) -> HardwareKey:
    fp = decode_json_text(row.fingerprint_json, "hardware fingerprint")
    return HardwareKey(target=row.target, fingerprint=HostFingerprint.from_dict(fp), tvm_version=row.tvm_version)


def _record_value(row: RecordRow, workload: WorkloadKey, hardware: HardwareKey) -> Record:
    return Record(
        workload=workload,
        hardware=hardware,
        trace=decode_trace(decode_json_text(row.trace_json, "trace")),
        run_secs=decode_run_secs(decode_json_text(row.run_secs_json, "run_secs")),
        latency_s=row.latency_s,
        args_info=decode_args_info(decode_json_text(row.args_info_json, "args_info")),
        provenance=Provenance(
            kind=row.kind,
            source_workload=row.source_workload,
            source_record=row.source_record,
            trials=row.trials,
            seconds=row.seconds,
            host=row.host,
            user=row.user,
            tunecache_version=row.tunecache_version,
            tvm_version=row.tvm_version,
            created_at=row.created_at,
        ),
        uid=row.uid,
        stale=bool(row.stale),
        cv=row.cv,
    )


def open_store(
    url: "str | os.PathLike[str] | Store | None" = None,
    *,
    read_only: bool = False,
    overlay: "str | os.PathLike[str] | Store | None" = None,
) -> Any:
    """Open a store from a URL, a path, ``None`` (the default location) or pass a Store through.

    With ``overlay``, the store at ``url`` is opened read-only and wrapped in an
    :class:`~tunecache.store.overlay.OverlayStore`: hits come from both, new records go to the
    overlay (``tunecache db push`` copies them to the team store later).

    Examples
    --------
    >>> s = open_store("memory")
    >>> s.backend
    'sqlite'
    """
    if overlay is not None:
        from tunecache.store.overlay import OverlayStore

        base = url if isinstance(url, Store) else Store(url, read_only=True)
        return OverlayStore(base, overlay if isinstance(overlay, Store) else Store(overlay))
    if isinstance(url, Store) or hasattr(url, "overlay"):
        return url
    return Store(url, read_only=read_only)
