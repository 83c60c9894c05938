"""Schema migrations: one function per version step, run by ``tunecache db upgrade``.

Schema 1 is the first released schema. A migration takes an open SQLAlchemy connection at
version ``n`` and leaves it at ``n + 1``; all steps of one upgrade run in one transaction.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from sqlalchemy import Connection, text
from sqlalchemy.exc import SQLAlchemyError

from tunecache.errors import ReadOnlyStoreError, SchemaVersionError, StoreError
from tunecache.store._sql.engine import Database
from tunecache.store._sql.schema import SCHEMA_VERSION, Base, ClaimRow, QueueRow, ReuseRow

__all__ = ["MIGRATIONS", "upgrade"]


def _v1_to_v2(conn: Connection) -> None:
    """Schema 2 adds the task-claim table used by ``tunecache warm``."""
    Base.metadata.tables[ClaimRow.__tablename__].create(conn, checkfirst=True)


def _v2_to_v3(conn: Connection) -> None:
    """Schema 3 adds the reuse index (``tc_reuse``); ``tunecache db upgrade`` then fills it."""
    Base.metadata.tables[ReuseRow.__tablename__].create(conn, checkfirst=True)


def _v3_to_v4(conn: Connection) -> None:
    """Schema 4 adds the tuning queue (``tc_queue``) of ``tune="background"``."""
    Base.metadata.tables[QueueRow.__tablename__].create(conn, checkfirst=True)


#: version n -> function upgrading n to n + 1
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}


def upgrade(url: str | os.PathLike[str] | None) -> tuple[int, int]:
    """Upgrade the store at ``url`` to :data:`SCHEMA_VERSION`.

    An empty database gets a fresh schema.

    Parameters
    ----------
    url
        The store's location (see :func:`~tunecache.store.location.parse_store_url`); a
        missing SQLite file is created with a fresh schema.

    Returns
    -------
    tuple of int
        The schema versions before and after.

    Raises
    ------
    StoreURLError
        If ``url`` is not an accepted store location.
    SchemaVersionError
        If the store is newer than this tunecache, or a step is missing.
    ReadOnlyStoreError
        If this user cannot write the store.
    StoreError
        If the database fails (nothing was changed).
    """
    from tunecache.store._sql.store import Store

    db = Database(url)
    if db.read_only:
        db.dispose()
        raise ReadOnlyStoreError(
            f"cannot upgrade store {db.display_url}: {db.read_only_reason}; ask its owner to run "
            "`tunecache db upgrade`"
        )
    engine = db.engine
    try:
        with engine.begin() as conn:
            if not engine.dialect.has_table(conn, "tc_meta"):
                conn.close()
                Store(db.location).close()  # creates a fresh schema
                return SCHEMA_VERSION, SCHEMA_VERSION
            row = conn.execute(text("SELECT value FROM tc_meta WHERE key = 'schema_version'")).first()
            old = int(row[0]) if row else 0
            if old > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"store has schema v{old}, newer than this tunecache (v{SCHEMA_VERSION}): upgrade tunecache"
                )
            v = old
            while v < SCHEMA_VERSION:
                step = MIGRATIONS.get(v)
                if step is None:
                    raise SchemaVersionError(f"no migration from schema v{v}; this store cannot be upgraded")
                step(conn)
                v += 1
            conn.execute(text("UPDATE tc_meta SET value = :v WHERE key = 'schema_version'"), {"v": str(v)})
            return old, v
    except (SchemaVersionError, ReadOnlyStoreError):
        raise
    except (StoreError, SQLAlchemyError, OSError, ValueError) as err:
        # A database error, or a version row that is not a number.
        raise StoreError(f"upgrade of {db.display_url} failed (nothing was changed): {err}") from err
    finally:
        engine.dispose()
