"""The SQL implementation of the store contract (private: use :mod:`tunecache.store`).

- :mod:`.engine`: URL normalisation, engine settings (SQLite WAL and busy timeout), the
  transaction scope and its retries;
- :mod:`.schema`: the tables, :data:`~.schema.SCHEMA_VERSION`, creating and checking them;
- :mod:`.migrations`: ``tunecache db upgrade``;
- :mod:`.rows`: rows to frozen values and back;
- :mod:`.store`: :class:`~.store.Store`, the :class:`~tunecache.store.contract.BaseStore` over all
  of the above.
"""
