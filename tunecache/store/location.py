"""Where a store lives: the one parser of store URLs and paths.

Every store location a user gives (``--db``, ``--overlay``, ``TUNECACHE_DB``, ``store=``) goes
through :func:`parse_store_url` exactly once; what it returns, a :class:`StoreLocation`, is what
the SQL store opens. The accepted forms are :data:`ACCEPTED_FORMS`; anything else is refused with
a :class:`~tunecache.errors.StoreURLError` (a :class:`~tunecache.errors.ConfigError`) that lists
them, never guessed at: ``sqlite://lost.db`` used to open an in-memory store (and lose every
record tuned into it), ``sqlite:rel.db`` a file literally named so.

This module imports neither SQLAlchemy nor TVM.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tunecache import config
from tunecache.errors import StoreURLError

__all__ = ["ACCEPTED_FORMS", "MEMORY_URL", "StoreLocation", "parse_store_url"]

#: The store locations :func:`parse_store_url` accepts, one line each, for messages and docs.
ACCEPTED_FORMS: tuple[str, ...] = (
    "a file path ('tunecache.db', './team.db', '~/x.db', '/mnt/team/tunecache.db'): an SQLite file",
    "'sqlite:///relative/path.db' (three slashes: relative to the current directory)",
    "'sqlite:////absolute/path.db' (four slashes)",
    "'postgresql://user@host/dbname' or 'postgresql+psycopg://user@host/dbname' (alias 'postgres://')",
    "'memory': an in-memory store, lost when the process ends",
)

#: The normalised URL of an in-memory store (what :attr:`StoreLocation.url` is for ``memory``).
MEMORY_URL = "sqlite://"

#: Schemes whose ``scheme//...`` (a ``:`` forgotten) would otherwise be read as a folder tree.
_KNOWN_SCHEMES = ("sqlite", "postgres", "postgresql", "postgresql+psycopg", "memory")
#: ``word:`` or ``word//`` at the start: the text is meant as a URL, not a path.
_SCHEME_COLON = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_SCHEME_SLASHES = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)//")


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store location.

    Attributes
    ----------
    kind
        ``"sqlite"`` (a file), ``"memory"`` (in-memory SQLite) or ``"postgresql"``.
    url
        The normalised SQLAlchemy URL: ``sqlite:////absolute/path.db``, ``sqlite://`` (memory)
        or ``postgresql+psycopg://...``. Parsing a file's or a server's URL again gives the same
        location; ``sqlite://`` is refused as input (write ``memory``).
    path
        The SQLite file, absolute (``None`` for the other kinds).
    given
        What the user wrote (``None``: the default location); not compared: two locations
        are equal when they name the same store.
    """

    kind: Literal["sqlite", "memory", "postgresql"]
    url: str
    path: Path | None = None
    given: str | None = field(default=None, compare=False)

    @property
    def persistent(self) -> bool:
        """Return whether what is written there outlives the process (``False`` for ``memory``)."""
        return self.kind != "memory"


def _refuse(given: str, why: str, source: str) -> StoreURLError:
    forms = "\n".join(f"  - {f}" for f in ACCEPTED_FORMS)
    return StoreURLError(f"store location {given!r}{source} is not accepted: {why}. Accepted forms:\n{forms}")


def parse_store_url(url: str | os.PathLike[str] | None) -> StoreLocation:
    """Parse a user-given store location, strictly.

    Parameters
    ----------
    url
        ``None`` for the default (``TUNECACHE_DB``, else ``~/.cache/tunecache/tunecache.db``);
        otherwise one of :data:`ACCEPTED_FORMS`. A relative path (plain or ``sqlite:///``) is
        made absolute against the current directory now, so the location means the same file
        in any process it is handed to.

    Returns
    -------
    StoreLocation

    Raises
    ------
    StoreURLError
        (a :class:`~tunecache.errors.StoreError` and a :class:`~tunecache.errors.ConfigError`)
        for anything else, with the accepted forms: an unknown scheme, ``sqlite://host`` (two
        slashes), ``sqlite:path`` or ``sqlite:/path``, ``postgres//host`` (a ``:`` forgotten),
        ``sqlite:///`` with no path, ``:memory:`` and other spellings of ``memory``, query
        parameters on an SQLite URL, an empty string.

    Examples
    --------
    >>> parse_store_url("memory").url
    'sqlite://'
    >>> parse_store_url("postgresql://me@db.example/tc").url
    'postgresql+psycopg://me@db.example/tc'
    >>> parse_store_url("sqlite:////srv/tc.db").path
    PosixPath('/srv/tc.db')
    >>> parse_store_url("sqlite://lost.db")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tunecache.errors.StoreURLError: store location 'sqlite://lost.db' is not accepted: ...
    """
    source = ""
    if url is None:
        url = config.default_store_url()
        if os.environ.get(config.ENV_DB, "").strip():
            source = f" (from ${config.ENV_DB})"
    given = os.fspath(url)
    if not isinstance(given, str):
        raise StoreURLError(f"store location {given!r} must be text, not {type(given).__name__}")
    text = given.strip()
    if not text:
        raise _refuse(given, "it is empty", source)
    if text == "memory":
        return StoreLocation("memory", MEMORY_URL, None, given)
    if text.lower() in (":memory:", "sqlite://", "sqlite:///:memory:"):
        raise _refuse(given, "write 'memory' for an in-memory store", source)

    m = _SCHEME_COLON.match(text)
    if m is None:
        s = _SCHEME_SLASHES.match(text)
        if s is not None and s.group(1).lower() in _KNOWN_SCHEMES:
            raise _refuse(given, f"it looks like a {s.group(1)}:// URL with its ':' missing "
                          f"(write './{text}' if you mean a folder named {s.group(1)!r})", source)
        return _sqlite_file(given, text, source)

    scheme, rest = m.group(1).lower(), text[m.end():]
    if scheme == "sqlite":
        if not rest.startswith("//"):
            raise _refuse(given, "an SQLite URL starts 'sqlite:///' (a relative path) or 'sqlite:////' "
                          "(an absolute one)", source)
        if not rest.startswith("///"):
            host = rest[2:].split("/", 1)[0]
            raise _refuse(given, f"'sqlite://' is followed by a host ({host!r}), which SQLite does not have; "
                          f"write 'sqlite:///{rest[2:]}' (relative) or 'sqlite:////abs/{rest[2:]}'", source)
        path = rest[3:]
        if not path or path == "/":
            raise _refuse(given, "it names no file", source)
        if "?" in path or "#" in path:
            raise _refuse(given, "SQLite store URLs take no query parameters (tunecache sets the connection's "
                          "options itself); give the file as a path if its name has '?' or '#'", source)
        return _sqlite_file(given, path, source)
    if scheme in ("postgres", "postgresql", "postgresql+psycopg"):
        if not rest.startswith("//") or not rest[2:].strip("/"):
            raise _refuse(given, "a PostgreSQL URL is 'postgresql://user@host/dbname'", source)
        return StoreLocation("postgresql", "postgresql+psycopg:" + rest, None, given)
    if scheme == "memory":
        raise _refuse(given, "write 'memory' (nothing after it) for an in-memory store", source)
    hint = "" if rest.startswith("//") else f" (write './{text}' if you mean a file path)"
    raise _refuse(given, f"unknown store URL scheme {scheme!r}{hint}", source)


def _sqlite_file(given: str, path: str, source: str) -> StoreLocation:
    p = Path(path).expanduser()
    try:
        p = p.resolve()
    except (OSError, RuntimeError) as err:  # a symlink loop
        raise _refuse(given, f"the path does not resolve ({err})", source) from err
    if p == Path(p.anchor):
        raise _refuse(given, "it names the root directory, not a file", source)
    return StoreLocation("sqlite", "sqlite:///" + str(p), p, given)
