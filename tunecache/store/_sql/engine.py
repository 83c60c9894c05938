"""Connections of the SQL store: URL normalisation, engine settings, transactions and retries.

SQLite files run in WAL mode with a 30 s busy timeout (many processes of one machine write
concurrently); an in-memory SQLite store is one shared connection, so its transactions take
turns under a lock; PostgreSQL goes through psycopg 3.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

from tunecache import config
from tunecache.errors import DependencyError, ReadOnlyStoreError, StoreError, StoreURLError

__all__ = ["Database", "is_transient", "normalize_url"]

T = TypeVar("T")

#: Attempts of one transaction that meets transient lock or serialization failures.
RETRIES = 12

_MEMORY_NAMES = ("memory", ":memory:", "sqlite://", "sqlite:///:memory:")
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
        ``None`` means the default (``TUNECACHE_DB`` or the user cache file); a plain path an
        SQLite file; ``memory`` / ``sqlite://`` an in-memory SQLite store; ``postgresql://``
        gets the psycopg 3 driver.

    Returns
    -------
    str
        The SQLAlchemy URL.

    Raises
    ------
    StoreURLError
        For an unknown scheme.

    Examples
    --------
    >>> normalize_url("memory")
    'sqlite://'
    >>> normalize_url("postgresql://me@db.example/tc")
    'postgresql+psycopg://me@db.example/tc'
    """
    if url is None:
        url = config.default_store_url()
    url = os.fspath(url)
    if url in _MEMORY_NAMES:
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


def make_engine(url: str, *, read_only: bool) -> Engine:
    """Create the SQLAlchemy engine of a normalised store URL.

    Parameters
    ----------
    url
        A URL from :func:`normalize_url`.
    read_only
        Open without write access (SQLite ``mode=ro``; a PostgreSQL read-only transaction).

    Returns
    -------
    Engine

    Raises
    ------
    StoreURLError
        If the URL cannot be parsed.
    StoreError
        If a read-only SQLite file does not exist or a file's directory cannot be created.
    DependencyError
        For PostgreSQL without psycopg 3.
    """
    try:
        u = make_url(url)
    except ArgumentError as err:
        raise StoreURLError(f"cannot parse store URL {url!r}: {err}") from err
    if u.get_backend_name() == "sqlite":
        return _sqlite_engine(u.database, read_only=read_only)
    try:
        import psycopg  # noqa: F401
    except ImportError as err:
        raise DependencyError("PostgreSQL stores need psycopg 3: `pip install 'tunecache[postgres]'`") from err
    args: dict[str, Any] = {"connect_timeout": 10}
    if read_only:
        args["options"] = "-c default_transaction_read_only=on"
    return create_engine(url, pool_pre_ping=True, connect_args=args)


def _sqlite_engine(database: str | None, *, read_only: bool) -> Engine:
    if not database or database == ":memory:":
        engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    else:
        path = Path(database)
        if read_only:
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
    wal = database not in (None, "", ":memory:") and not read_only

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


class Database:
    """An engine with the store's settings, and its transactions.

    Parameters
    ----------
    url
        A URL from :func:`normalize_url`.
    read_only
        Open without write access: a write transaction raises
        :class:`~tunecache.errors.ReadOnlyStoreError`.

    Raises
    ------
    StoreURLError, StoreError, DependencyError
        As :func:`make_engine`.
    """

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        self.url = url
        self.read_only = read_only
        self.engine = make_engine(url, read_only=read_only)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # In-memory SQLite is one connection shared by every thread: one transaction at a time
        # (re-entrant: a read may run inside another session of the same thread).
        self._lock: threading.RLock | None = threading.RLock() if isinstance(self.engine.pool, StaticPool) else None

    @property
    def backend(self) -> str:
        """Return ``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @property
    def parsed_url(self) -> URL:
        """Return the parsed URL."""
        return make_url(self.url)

    @property
    def display_url(self) -> str:
        """Return the URL with any password hidden."""
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
                f"store {self.display_url} is open read-only: write to a local overlay "
                "(`--overlay PATH`) and `tunecache db push` it later"
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
