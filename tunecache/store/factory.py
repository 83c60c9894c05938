""":func:`open_store`: a store from a URL, a path, ``None`` (the default location) or a store.

SQLAlchemy is imported when a store is opened, not when this module is.
"""

from __future__ import annotations

import os

from tunecache.store.contract import BaseStore

__all__ = ["open_store"]


def open_store(
    url: str | os.PathLike[str] | BaseStore | None = None,
    *,
    read_only: bool = False,
    overlay: str | os.PathLike[str] | BaseStore | None = None,
    create: bool = True,
) -> BaseStore:
    """Open a store, or pass an open one through.

    Parameters
    ----------
    url
        A store location (one of :data:`tunecache.store.location.ACCEPTED_FORMS`: a file path,
        ``sqlite:///relative``, ``sqlite:////absolute``, ``postgresql://...``, ``memory``),
        ``None`` for the default location, or an open store, returned as it is (``read_only``
        and ``create`` are then ignored).
    read_only
        Open ``url`` without write access; nothing is created. An SQLite file this user cannot
        write, or in a directory it cannot write, opens read-only even without it (check
        :attr:`~tunecache.store.contract.BaseStore.read_only`).
    overlay
        A local store in front of ``url``: ``url`` is opened read-only (it must exist) and both
        are wrapped in an :class:`~tunecache.store.overlay.OverlayStore`, hits coming from both
        and new records going to the overlay (``tunecache db push`` copies them to the team
        store). The overlay is created if missing.
    create
        Create ``url`` if it is missing (an SQLite file with its directory, the tables of an
        empty database). Commands that only read a store pass ``False`` (or ``read_only=True``):
        a missing SQLite file then raises :class:`~tunecache.errors.StoreError` naming it, and
        no file or directory is created.

    Returns
    -------
    BaseStore
        The SQL :class:`~tunecache.store.Store`, or an ``OverlayStore``.

    Raises
    ------
    StoreURLError
        If a location is not one of the accepted forms (the message lists them); it is also a
        :class:`~tunecache.errors.ConfigError`.
    StoreError
        If ``url`` is missing and may not be created (read-only, ``create=False``, or as the
        base of an overlay), or cannot be opened.
    SchemaVersionError, DependencyError
        As :class:`~tunecache.store.Store`.

    Examples
    --------
    >>> s = open_store("memory")
    >>> s.backend, s.persistent
    ('sqlite', False)
    """
    from tunecache.store._sql.store import Store

    if overlay is not None:
        from tunecache.store.overlay import OverlayStore

        base = url if isinstance(url, BaseStore) else Store(url, read_only=True)
        try:
            mine = overlay if isinstance(overlay, BaseStore) else Store(overlay)
        except BaseException:
            if base is not url:
                base.close()
            raise
        return OverlayStore(base, mine)
    if isinstance(url, BaseStore):
        return url
    return Store(url, read_only=read_only, create=create)
