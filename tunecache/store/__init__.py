"""The persistent store of tuned programs: keys, records, the store contract and its implementations.

Importing this package imports neither SQLAlchemy nor TVM: the values (:mod:`.keys`,
:mod:`.records`, :mod:`.values`), the contract (:class:`BaseStore`), :func:`open_store`,
:func:`parse_store_url`, :class:`OverlayStore` load eagerly; the SQL implementation (:class:`Store`,
:func:`normalize_url`, :data:`SCHEMA_VERSION`, :func:`upgrade_store`) loads on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tunecache.store.contract import BaseStore
from tunecache.store.factory import open_store
from tunecache.store.keys import (
    HardwareKey,
    HostFingerprint,
    MissExplanation,
    WorkloadDesc,
    WorkloadKey,
    explain_miss,
)
from tunecache.store.location import ACCEPTED_FORMS, StoreLocation, parse_store_url
from tunecache.store.overlay import OverlayStore
from tunecache.store.records import Provenance, Record
from tunecache.store.values import StoredWorkload, StoreStats

if TYPE_CHECKING:
    from tunecache.store._sql.engine import normalize_url
    from tunecache.store._sql.integrity import IntegrityReport, TraceReplayer, check_store
    from tunecache.store._sql.migrations import upgrade as upgrade_store
    from tunecache.store._sql.schema import SCHEMA_VERSION
    from tunecache.store._sql.store import Store

__all__ = [
    "ACCEPTED_FORMS",
    "SCHEMA_VERSION",
    "BaseStore",
    "HardwareKey",
    "HostFingerprint",
    "IntegrityReport",
    "MissExplanation",
    "OverlayStore",
    "Provenance",
    "Record",
    "Store",
    "StoreLocation",
    "StoreStats",
    "StoredWorkload",
    "TraceReplayer",
    "WorkloadDesc",
    "WorkloadKey",
    "check_store",
    "explain_miss",
    "normalize_url",
    "open_store",
    "parse_store_url",
    "upgrade_store",
]

#: Names served by :func:`__getattr__`: (module, attribute), imported on first use.
_LAZY: dict[str, tuple[str, str]] = {
    "Store": ("tunecache.store._sql.store", "Store"),
    "normalize_url": ("tunecache.store._sql.engine", "normalize_url"),
    "SCHEMA_VERSION": ("tunecache.store._sql.schema", "SCHEMA_VERSION"),
    "upgrade_store": ("tunecache.store._sql.migrations", "upgrade"),
    "check_store": ("tunecache.store._sql.integrity", "check_store"),
    "IntegrityReport": ("tunecache.store._sql.integrity", "IntegrityReport"),
    "TraceReplayer": ("tunecache.store._sql.integrity", "TraceReplayer"),
}


def __getattr__(name: str) -> Any:
    """Import the SQL implementation's public names on first use (PEP 562)."""
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'tunecache.store' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
