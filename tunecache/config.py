"""The one place where tunecache reads its environment.

Algorithm code never reads environment variables: it receives values from here (or from
keyword arguments, which always win).

Variables
---------
TUNECACHE_DB
    Store URL used when none is given (``sqlite:///path``, ``postgresql+psycopg://...``).
XDG_CACHE_HOME
    Base of the default store location (``$XDG_CACHE_HOME/tunecache/tunecache.db``).
TUNECACHE_USER
    Name recorded as the author of records (default: the login name).
TUNECACHE_LIB_CACHE
    Directory of built model libraries (:mod:`tunecache.libcache`; default
    ``$XDG_CACHE_HOME/tunecache/libs``), or ``off`` to always build.
"""

from __future__ import annotations

import getpass
import os
import socket
from pathlib import Path

ENV_DB = "TUNECACHE_DB"
ENV_USER = "TUNECACHE_USER"
ENV_LIB_CACHE = "TUNECACHE_LIB_CACHE"


def default_cache_dir() -> Path:
    """Return the per-user cache directory of tunecache (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tunecache"


def default_store_url() -> str:
    """Return ``TUNECACHE_DB`` if set, else an SQLite file in the user cache directory."""
    url = os.environ.get(ENV_DB, "").strip()
    if url:
        return url
    return "sqlite:///" + str(default_cache_dir() / "tunecache.db")


def default_library_cache_dir() -> Path | None:
    """Return the built-library cache directory, or ``None`` when ``TUNECACHE_LIB_CACHE=off``."""
    value = os.environ.get(ENV_LIB_CACHE, "").strip()
    if value.lower() in ("off", "0", "no", "false", "none"):
        return None
    return Path(value) if value else default_cache_dir() / "libs"


def current_user() -> str:
    """Return the name recorded as a record's author."""
    name = os.environ.get(ENV_USER, "").strip()
    if name:
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return "unknown"


def current_host() -> str:
    """Return this machine's host name (recorded in provenance, never part of a key)."""
    return socket.gethostname()
