"""SQLAlchemy 2.0 tables of the store, the schema version they make, and creating them.

Bump :data:`SCHEMA_VERSION` with every change and add a migration to
``tunecache/store/_sql/migrations.py``; ``tunecache db upgrade`` runs them.
"""

from __future__ import annotations

import time

from sqlalchemy import (
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tunecache.errors import SchemaVersionError, StoreError
from tunecache.store._sql.engine import Database

__all__ = [
    "SCHEMA_VERSION",
    "Base",
    "MetaRow",
    "WorkloadRow",
    "HardwareRow",
    "RecordRow",
    "ClaimRow",
    "ReuseRow",
    "QueueRow",
    "ensure_schema",
    "read_version",
]

#: Version of the tables below. 1 is the first released schema; 2 added ``tc_claim``; 3 added
#: ``tc_reuse`` (the reuse index); 4 added ``tc_queue`` (tasks waiting for ``tunecache worker``).
SCHEMA_VERSION = 4


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""


class MetaRow(Base):
    """Settings persisted in the database (``schema_version`` among them)."""

    __tablename__ = "tc_meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class WorkloadRow(Base):
    """A workload: structural hash, the serialized IRModule, and a description."""

    __tablename__ = "tc_workload"
    __table_args__ = (UniqueConstraint("shash", "mod_eq", name="uq_workload_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    shash: Mapped[str] = mapped_column(String(64))
    mod_eq: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(256), default="")
    family: Mapped[str] = mapped_column(String(64), default="other", index=True)
    desc_json: Mapped[str] = mapped_column(Text, default="{}")
    #: TVM's JSON of the IRModule (MetaSchedule ``Workload.as_json()[1]``), used to rebuild the
    #: workload for replay and export. Never unpickled.
    mod_json: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)


class HardwareRow(Base):
    """A hardware key: canonical target, host fingerprint and TVM version."""

    __tablename__ = "tc_hardware"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    target: Mapped[str] = mapped_column(Text)
    target_kind: Mapped[str] = mapped_column(String(32), index=True)
    cpu_model: Mapped[str] = mapped_column(String(256), default="")
    fingerprint_json: Mapped[str] = mapped_column(Text)
    tvm_version: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float)


class RecordRow(Base):
    """One measured program."""

    __tablename__ = "tc_record"
    __table_args__ = (
        Index("ix_record_lookup", "workload_id", "hardware_id", "latency_s"),
        Index("ix_record_hardware", "hardware_id"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tc_workload.id", ondelete="CASCADE"))
    hardware_id: Mapped[str] = mapped_column(ForeignKey("tc_hardware.id", ondelete="CASCADE"))
    trace_json: Mapped[str] = mapped_column(Text)
    run_secs_json: Mapped[str] = mapped_column(Text, default="[]")
    latency_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    cv: Mapped[float | None] = mapped_column(Float, nullable=True)
    args_info_json: Mapped[str] = mapped_column(Text, default="null")
    kind: Mapped[str] = mapped_column(String(16))
    source_workload: Mapped[str | None] = mapped_column(String(128), nullable=True)
    source_record: Mapped[str | None] = mapped_column(String(32), nullable=True)
    trials: Mapped[int] = mapped_column(Integer, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    host: Mapped[str] = mapped_column(String(256), default="")
    user: Mapped[str] = mapped_column(String(128), default="")
    tunecache_version: Mapped[str] = mapped_column(String(32), default="")
    tvm_version: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Float)
    stale: Mapped[bool] = mapped_column(Boolean, default=False)


class ClaimRow(Base):
    """A lease on tuning one workload on one hardware key (schema 2).

    A warmer claims a task before tuning it; another warmer skips it while the lease is live.
    A holder that dies stops renewing, and the lease expires.
    """

    __tablename__ = "tc_claim"
    key: Mapped[str] = mapped_column(String(128), primary_key=True)  # "<hardware id>:<shash>"
    holder: Mapped[str] = mapped_column(String(256))
    claimed_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    #: The task's search finished (its budget was spent or it converged): a resumed warm treats
    #: it as a hit; a task with records but no done mark was interrupted and is resumed.
    done: Mapped[bool] = mapped_column(Boolean, default=False)


class ReuseRow(Base):
    """A reuse-index entry: a workload as the planner sees it, for one target (schema 3).

    One per (workload, canonical target). The planner reads the entries of one reuse group
    nearest a task's size through ``ix_reuse_group`` instead of decoding every stored workload.
    """

    __tablename__ = "tc_reuse"
    __table_args__ = (Index("ix_reuse_group", "target_id", "group_key", "log_work"),)
    workload_id: Mapped[int] = mapped_column(ForeignKey("tc_workload.id", ondelete="CASCADE"), primary_key=True)
    target_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    group_key: Mapped[str] = mapped_column(String(64))
    family: Mapped[str] = mapped_column(String(64))
    log_work: Mapped[float] = mapped_column(Float)
    nest_json: Mapped[str] = mapped_column(Text)
    sketch: Mapped[str] = mapped_column(Text)
    trivial: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class QueueRow(Base):
    """A task waiting for ``tunecache worker`` (schema 4).

    One per (hardware key, workload), keyed like a claim; deleted when the task is marked done.
    """

    __tablename__ = "tc_queue"
    __table_args__ = (Index("ix_queue_priority", "hardware_id", "priority"),)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)  # "<hardware id>:<shash>"
    workload_id: Mapped[int] = mapped_column(ForeignKey("tc_workload.id", ondelete="CASCADE"))
    hardware_id: Mapped[str] = mapped_column(ForeignKey("tc_hardware.id", ondelete="CASCADE"))
    weight: Mapped[int] = mapped_column(Integer, default=1)
    priority: Mapped[float] = mapped_column(Float, default=0.0)
    served: Mapped[str] = mapped_column(String(16), default="")
    models_json: Mapped[str] = mapped_column(Text, default="[]")
    requests: Mapped[int] = mapped_column(Integer, default=1)
    queued_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


def read_version(sess: Session) -> int | None:
    """Return the schema version row's value, or ``None`` when there is none (yet).

    Parameters
    ----------
    sess
        A session on the store's database.

    Returns
    -------
    int or None
    """
    row = sess.get(MetaRow, "schema_version")
    return int(row.value) if row else None


def ensure_schema(db: Database, *, create: bool) -> None:
    """Check the schema version of ``db``; create the tables in an empty database.

    Parameters
    ----------
    db
        The database.
    create
        Create the tables when the database has none (never for a read-only one).

    Raises
    ------
    StoreError
        If the database cannot be read, or has no tables and may not create them.
    SchemaVersionError
        If the schema is newer or older than :data:`SCHEMA_VERSION`.
    """

    def probe(sess: Session) -> int | None:
        if not db.engine.dialect.has_table(sess.connection(), MetaRow.__tablename__):
            return None
        # Tables without a version row: another process is creating the schema right now
        # (SQLite commits each CREATE TABLE on its own); create it too, idempotently.
        return read_version(sess)

    try:
        version = db.run(probe, write=False)
    except StoreError as err:  # its message names the store already: said once
        raise StoreError(f"cannot open store {db.display_url}: "
                         f"{str(err).removeprefix(f'store {db.display_url}: ')}") from err
    if version is None and db.read_only and not db.immutable:
        for _ in range(50):  # a writer may be creating it: give it a moment
            time.sleep(0.1)
            version = db.run(probe, write=False)
            if version is not None:
                break
    if version is None:
        if db.read_only or not create:
            raise StoreError(
                f"store {db.display_url} has no tunecache tables; open it writable once "
                "(e.g. `tunecache db stats --db URL`) to create them"
            )
        _create_schema(db)
        return
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store {db.display_url} has schema version {version}, newer than this "
            f"tunecache understands ({SCHEMA_VERSION}): upgrade tunecache "
            "(`pip install -U tunecache`)"
        )
    if version < SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store {db.display_url} has schema version {version}, older than "
            f"{SCHEMA_VERSION}: run `tunecache db upgrade --db {db.display_url}`"
        )


def _create_schema(db: Database) -> None:
    def create(sess: Session) -> None:
        Base.metadata.create_all(sess.connection())
        if sess.get(MetaRow, "schema_version") is None:
            sess.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
            sess.add(MetaRow(key="created_at", value=str(time.time())))

    for attempt in range(20):
        try:
            db.run(create, write=True)
            return
        except StoreError:
            # Another process is creating the schema at the same moment (SQLite commits each
            # CREATE TABLE on its own): wait for its version row, or try again.
            time.sleep(0.1 * (attempt + 1))
            if db.run(read_version, write=False) is not None:
                return
    db.run(create, write=True)
