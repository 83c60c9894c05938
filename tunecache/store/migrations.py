"""Schema migrations: one function per version step, run by ``tunecache db upgrade``.

Schema 1 is the first released schema. A migration takes an open SQLAlchemy connection at
version ``n`` and leaves it at ``n + 1``; all steps of one upgrade run in one transaction.
"""

from __future__ import annotations

import os
from typing import Callable

from sqlalchemy import Connection, text

from tunecache.errors import SchemaVersionError, StoreError
from tunecache.store.schema import SCHEMA_VERSION

__all__ = ["MIGRATIONS", "upgrade"]

def _v1_to_v2(conn: Connection) -> None:
    """Schema 2 adds the task-claim table used by ``tunecache warm``."""
    from tunecache.store.schema import ClaimRow

    ClaimRow.__table__.create(conn, checkfirst=True)


#: version n -> function upgrading n to n + 1
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2}


def upgrade(url: "str | os.PathLike[str] | None") -> tuple[int, int]:
    """Upgrade the store at ``url`` to :data:`SCHEMA_VERSION`; return (old, new) versions.

    Raises
    ------
    SchemaVersionError
        If the store is newer than this tunecache, or a step is missing.
    """
    from tunecache.store.store import Store, normalize_url

    from sqlalchemy import create_engine

    engine = create_engine(normalize_url(url))
    try:
        with engine.begin() as conn:
            has = engine.dialect.has_table(conn, "tc_meta")
            if not has:
                conn.close()
                Store(url).close()  # creates a fresh schema
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
    except SchemaVersionError:
        raise
    except Exception as err:  # noqa: BLE001 - any database error becomes a StoreError
        raise StoreError(f"upgrade of {url} failed (nothing was changed): {err}") from err
    finally:
        engine.dispose()


