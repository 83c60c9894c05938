"""The SQL implementation of the store contract (private: use :mod:`tunecache.store`).

- :mod:`.engine`: connection settings (SQLite WAL and busy timeout), how an SQLite file is
  opened (read-write, or read-only with SQLite's ``mode=ro`` or ``immutable=1``, detected from
  what this user may write), the transaction scope and its retries;
- :mod:`.schema`: the tables, :data:`~.schema.SCHEMA_VERSION`, creating and checking them;
- :mod:`.migrations`: ``tunecache db upgrade``;
- :mod:`.rows`: rows to frozen values and back;
- :mod:`.store`: :class:`~.store.Store`, the :class:`~tunecache.store.contract.BaseStore` over all
  of the above.
"""
