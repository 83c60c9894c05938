"""Connections of the SQL store: URL normalisation, engine settings, transactions and retries.

SQLite files run in WAL mode with a 30 s busy timeout (many processes of one machine write
concurrently); an in-memory SQLite store is one shared connection, so its transactions take
turns under a lock; PostgreSQL goes through psycopg 3.

**How an SQLite file is opened** (:func:`sqlite_access`). Read-write when that was asked and
this user can write both the file and its directory (WAL mode creates ``-wal`` and ``-shm``
files beside it). Otherwise read-only, with one of SQLite's URI modes:

- ``mode=ro`` when the file has a ``-wal`` with content (changes not yet checkpointed into the
  file, which only this mode reads), when the file is in rollback-journal mode, or when the
  user owns the file and may write its directory. It takes SQLite's locks and sees what
  concurrent writers commit. On a WAL file it needs the ``-shm`` file: it opens an existing one
  read-only, or creates one (and an empty ``-wal``) owned by this user;
- ``mode=ro&immutable=1`` for a WAL file with no ``-wal`` content whose ``-wal``/``-shm`` this
  user cannot or should not create: its directory is not writable (a read-only mount), or the
  file belongs to someone else (the files a ``mode=ro`` reader creates belong to the reader,
  and the file's owner then fails every write with "attempt to write a readonly database"
  until they are deleted: measured on SQLite 3.40). Immutable creates nothing and takes no
  locks, and that is its cost: SQLite assumes the file never changes, so a concurrent writer's
  commits are not seen by this store object, and a checkpoint rewriting pages while it reads
  can surface as a read error (SQLITE_CORRUPT, raised as :class:`StoreError`): reopen the store.

A file with un-checkpointed changes in its ``-wal``, no ``-shm`` and a directory this user
cannot write cannot be read at all (``mode=ro`` needs the ``-shm``; immutable would silently
skip the ``-wal``'s records): that is a :class:`StoreError` that says so.
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool, StaticPool

from tunecache.errors import DependencyError, ReadOnlyStoreError, StoreError, StoreURLError
from tunecache.store.location import StoreLocation, parse_store_url

__all__ = ["Database", "SQLiteAccess", "is_transient", "normalize_url", "sqlite_access"]

T = TypeVar("T")

#: Attempts of one transaction that meets transient lock or serialization failures.
RETRIES = 12

_TRANSIENT = (
    "database is locked",
    "database is busy",
    "could not serialize",
    "deadlock detected",
    "database table is locked",
)


def normalize_url(url: str | os.PathLike[str] | None) -> str:
    """Turn a user-given store location into an SQLAlchemy URL.

    Parameters
    ----------
    url
        See :func:`tunecache.store.location.parse_store_url`: ``None`` means the default
        (``TUNECACHE_DB`` or the user cache file); a path or ``sqlite:///`` URL an SQLite file
        (made absolute); ``memory`` an in-memory SQLite store; ``postgresql://`` gets the
        psycopg 3 driver.

    Returns
    -------
    str
        The SQLAlchemy URL.

    Raises
    ------
    StoreURLError
        For anything but the accepted forms (it lists them).

    Examples
    --------
    >>> normalize_url("memory")
    'sqlite://'
    >>> normalize_url("postgresql://me@db.example/tc")
    'postgresql+psycopg://me@db.example/tc'
    """
    return parse_store_url(url).url


def is_transient(err: BaseException) -> bool:
    """Return whether a database error is a lock or serialization failure worth retrying.

    Parameters
    ----------
    err
        The error.

    Returns
    -------
    bool
    """
    msg = str(err).lower()
    return any(s in msg for s in _TRANSIENT)


@dataclass(frozen=True)
class SQLiteAccess:
    """How an SQLite file is opened (see the module docstring).

    Attributes
    ----------
    mode
        ``"rw"`` (read-write, WAL), ``"ro"`` (SQLite ``mode=ro``) or ``"immutable"``
        (``mode=ro&immutable=1``).
    reason
        Why it is read-only (``""`` for ``"rw"``), for messages.
    """

    mode: Literal["rw", "ro", "immutable"]
    reason: str = ""


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


def _wal_mode(path: Path) -> bool:
    """Return whether the SQLite file's header says WAL (file format bytes 18-19 are 2)."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError as err:
        raise StoreError(f"cannot read store file {path}: {err}; check its permissions") from err
    if len(head) < 20:
        return False  # empty or not SQLite: SQLite itself says so when it is opened
    return head[18] == 2 and head[19] == 2


def sqlite_access(path: Path, *, read_only: bool, create: bool) -> SQLiteAccess:
    """Decide how to open an SQLite store file, creating nothing unless it will be written.

    Parameters
    ----------
    path
        The absolute path of the file.
    read_only
        The caller asked for read-only access.
    create
        A missing file may be created (with its directory); ignored when ``read_only``.

    Returns
    -------
    SQLiteAccess

    Raises
    ------
    StoreError
        If the file does not exist and may not be created (the message names it), is a
        directory, cannot be read, or has un-checkpointed ``-wal`` changes that cannot be read
        (see the module docstring).
    """
    if not path.exists():
        if read_only or not create:
            raise StoreError(
                f"store file {path} does not exist (nothing was created: this command does not create a store); "
                "check the path, or create the store with a command that writes it "
                f"(e.g. `tunecache compile MODEL --db {path}` or `tunecache db import DIR --db {path}`)"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create the directory of store {path}: {err}") from err
        return SQLiteAccess("rw")
    if path.is_dir():
        raise StoreError(
            f"store location {path} is a directory: give the path of a file in it (e.g. {path}/tunecache.db)"
        )
    if not os.access(path, os.R_OK):
        raise StoreError(f"cannot read store file {path} (permission denied): ask its owner for read access")
    directory = path.parent
    dir_writable = _writable(directory)
    if not read_only and _writable(path) and dir_writable:
        return SQLiteAccess("rw")
    if read_only:
        reason = "opened read-only"
    elif not _writable(path):
        reason = f"this user cannot write {path}"
    else:
        reason = f"this user cannot write its directory {directory} (SQLite needs it for its -wal and -shm files)"
    if not _wal_mode(path):
        return SQLiteAccess("ro", reason)
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    wal_content = wal.exists() and wal.stat().st_size > 0
    if wal_content or (wal.exists() and shm.exists()):
        if shm.exists() or dir_writable:
            return SQLiteAccess("ro", reason)
        raise StoreError(
            f"store file {path} has changes in {wal} that SQLite cannot read without creating {shm}, and "
            f"this user cannot write {directory}: ask the store's owner to checkpoint it "
            f"(`sqlite3 {path} 'PRAGMA wal_checkpoint(TRUNCATE)'`, or close every process writing it), "
            "or copy the store and its -wal file somewhere writable"
        )
    if dir_writable and path.stat().st_uid == os.geteuid():
        return SQLiteAccess("ro", reason)
    return SQLiteAccess(
        "immutable",
        reason + "; read as an immutable snapshot: changes written to it after opening are not seen",
    )


def _sqlite_creator(path: Path, mode: str) -> Callable[[], sqlite3.Connection]:
    """Return a function connecting to ``path``; the path never goes through URL parsing."""
    if mode == "rw":
        target, uri = str(path), False
    else:
        query = "mode=ro" if mode == "ro" else "mode=ro&immutable=1"
        target, uri = f"file:{quote(str(path), safe='/')}?{query}", True

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(target, uri=uri, timeout=30, check_same_thread=False)

    return connect


def make_engine(location: StoreLocation, *, read_only: bool, access: SQLiteAccess | None = None) -> Engine:
    """Create the SQLAlchemy engine of a parsed store location.

    Parameters
    ----------
    location
        From :func:`~tunecache.store.location.parse_store_url`.
    read_only
        Open without write access (a PostgreSQL read-only transaction).
    access
        For an SQLite file: how to open it (:func:`sqlite_access`); required there.

    Returns
    -------
    Engine

    Raises
    ------
    StoreURLError
        If a PostgreSQL URL cannot be parsed.
    DependencyError
        For PostgreSQL without psycopg 3.
    """
    if location.kind == "memory":
        engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
        _sqlite_pragmas(engine, wal=False)
        return engine
    if location.kind == "sqlite":
        assert location.path is not None and access is not None
        engine = create_engine(
            "sqlite://", creator=_sqlite_creator(location.path, access.mode), poolclass=QueuePool
        )
        _sqlite_pragmas(engine, wal=access.mode == "rw")
        return engine
    try:
        make_url(location.url)
    except ArgumentError as err:
        raise StoreURLError(f"cannot parse store URL {location.given!r}: {err}") from err
    try:
        import psycopg  # noqa: F401
    except ImportError as err:
        raise DependencyError("PostgreSQL stores need psycopg 3: `pip install 'tunecache[postgres]'`") from err
    args: dict[str, Any] = {"connect_timeout": 10}
    if read_only:
        args["options"] = "-c default_transaction_read_only=on"
    return create_engine(location.url, pool_pre_ping=True, connect_args=args)


def _sqlite_pragmas(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:  # pragma: no cover - trivial
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        if wal:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()


class Database:
    """An engine with the store's settings, and its transactions.

    Parameters
    ----------
    location
        Where the store lives: a :class:`~tunecache.store.location.StoreLocation`, or a URL
        or path that :func:`~tunecache.store.location.parse_store_url` parses.
    read_only
        Open without write access: a write transaction raises
        :class:`~tunecache.errors.ReadOnlyStoreError`. An SQLite file this user cannot write
        (or whose directory it cannot write) opens read-only even without it.
    create
        A missing SQLite file may be created (with its directory); with ``False`` (or
        ``read_only``) a missing file raises :class:`~tunecache.errors.StoreError` and nothing
        is created.

    Raises
    ------
    StoreURLError, StoreError, DependencyError
        As :func:`~tunecache.store.location.parse_store_url`, :func:`sqlite_access` and
        :func:`make_engine`.
    """

    def __init__(
        self, location: StoreLocation | str | os.PathLike[str] | None, *, read_only: bool = False, create: bool = True
    ) -> None:
        self.location = location if isinstance(location, StoreLocation) else parse_store_url(location)
        self.url = self.location.url
        self.access: SQLiteAccess | None = None
        if self.location.kind == "sqlite":
            assert self.location.path is not None
            self.access = sqlite_access(self.location.path, read_only=read_only, create=create)
            read_only = self.access.mode != "rw"
        #: Why writes are refused ("" when they are not).
        self.read_only_reason = (self.access.reason if self.access else "opened read-only") if read_only else ""
        self.read_only = read_only
        self.engine = make_engine(self.location, read_only=read_only, access=self.access)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # In-memory SQLite is one connection shared by every thread: one transaction at a time
        # (re-entrant: a read may run inside another session of the same thread).
        self._lock: threading.RLock | None = threading.RLock() if isinstance(self.engine.pool, StaticPool) else None

    @property
    def immutable(self) -> bool:
        """Return whether an SQLite file is read as an immutable snapshot (see the module docstring)."""
        return self.access is not None and self.access.mode == "immutable"

    @property
    def backend(self) -> str:
        """Return ``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @property
    def parsed_url(self) -> URL:
        """Return the parsed URL (for PostgreSQL; an SQLite file's path is ``location.path``)."""
        return make_url(self.url)

    @property
    def display_url(self) -> str:
        """Return the URL with any password hidden."""
        if self.location.kind != "postgresql":
            return self.url
        return self.parsed_url.render_as_string(hide_password=True)

    @contextlib.contextmanager
    def session(self, write: bool = False) -> Iterator[Session]:
        """Open one transaction: commit on success (``write``), else roll back.

        Errors pass through unchanged; :meth:`run` retries transient ones and turns database
        errors into :class:`~tunecache.errors.StoreError`.

        Parameters
        ----------
        write
            Commit at the end (a read-only database refuses at once).

        Yields
        ------
        Session

        Raises
        ------
        ReadOnlyStoreError
            For ``write`` on a read-only database.
        """
        if write and self.read_only:
            raise ReadOnlyStoreError(
                f"store {self.display_url} is open read-only ({self.read_only_reason}): write to a local "
                "overlay (`--overlay PATH`) and `tunecache db push` it later"
            )
        with self._lock if self._lock is not None else contextlib.nullcontext():
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

    def run(self, fn: Callable[[Session], T], *, write: bool) -> T:
        """Run ``fn`` in one transaction, retrying transient failures with jittered backoff.

        Parameters
        ----------
        fn
            The transaction's body; it may run several times, so it must not have effects
            outside the session.
        write
            Commit at the end.

        Returns
        -------
        T
            What ``fn`` returned.

        Raises
        ------
        ReadOnlyStoreError
            If the database refuses the write.
        StoreError
            For any other database error.
        """
        delay = 0.01
        for attempt in range(RETRIES):
            try:
                with self.session(write=write) as sess:
                    return fn(sess)
            except DBAPIError as err:  # OperationalError among them
                if is_transient(err) and attempt < RETRIES - 1:
                    time.sleep(delay * (1 + random.random()))
                    delay = min(delay * 2, 1.0)
                    continue
                low = str(err).lower()
                if "read-only" in low or "readonly" in low or "permission denied" in low:
                    raise ReadOnlyStoreError(
                        f"store {self.display_url} refused a write (read-only): "
                        "use a local overlay store for new records"
                    ) from err
                raise StoreError(f"store {self.display_url}: {err.__class__.__name__}: {err.orig}") from err
            except SQLAlchemyError as err:
                raise StoreError(f"store {self.display_url}: {err}") from err
        raise AssertionError("unreachable")  # pragma: no cover

    def dispose(self) -> None:
        """Close the connection pool."""
        self.engine.dispose()
