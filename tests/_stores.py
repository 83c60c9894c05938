"""Helpers for tests that start from a store another fixture filled."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def copy_sqlite(db: str | Path, to: str | Path) -> str:
    """Copy the SQLite store at ``db`` to ``to`` (the path of the copy, as a string).

    SQLite's backup API, not a file copy: a file copy would miss what is still in the ``-wal``
    file. A module-scoped fixture tunes once and each test works on its own copy.
    """
    with sqlite3.connect(str(db)) as src, sqlite3.connect(str(to)) as dst:
        src.backup(dst)
    return str(to)
