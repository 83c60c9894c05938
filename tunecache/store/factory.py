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
) -> BaseStore:
    """Open a store, or pass an open one through.

    Parameters
    ----------
    url
        A store URL or path (see :func:`~tunecache.store.normalize_url`), ``None`` for the
        default location, or an open store, returned as it is (``read_only`` is then ignored).
    read_only
        Open the store without write access.
    overlay
        A local store in front of ``url``: ``url`` is opened read-only and both are wrapped in
        an :class:`~tunecache.store.overlay.OverlayStore`, hits coming from both and new
        records going to the overlay (``tunecache db push`` copies them to the team store).

    Returns
    -------
    BaseStore
        The SQL :class:`~tunecache.store.Store`, or an ``OverlayStore``.

    Raises
    ------
    StoreURLError, SchemaVersionError, StoreError, DependencyError
        As :class:`~tunecache.store.Store`.

    Examples
    --------
    >>> s = open_store("memory")
    >>> s.backend
    'sqlite'
    """
    from tunecache.store._sql.store import Store

    if overlay is not None:
        from tunecache.store.overlay import OverlayStore

        base = url if isinstance(url, BaseStore) else Store(url, read_only=True)
        return OverlayStore(base, overlay if isinstance(overlay, BaseStore) else Store(overlay))
    if isinstance(url, BaseStore):
        return url
    return Store(url, read_only=read_only)
