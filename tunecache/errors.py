"""Exceptions raised by tunecache: one root, a few narrow subclasses.

Every message says what went wrong *and* what to do next. Failures of a single candidate
(a tiling that does not build, a measurement that crashes) are never exceptions: they are
returned as data by the search layer.
"""

from __future__ import annotations

__all__ = [
    "TunecacheError",
    "ConfigError",
    "StoreError",
    "StoreURLError",
    "SchemaVersionError",
    "ReadOnlyStoreError",
    "InvalidRecordError",
    "ImportFormatError",
    "TargetError",
    "UnsupportedModelError",
    "TuningError",
    "DependencyError",
]


class TunecacheError(Exception):
    """Root of every error tunecache raises on purpose."""


class ConfigError(TunecacheError):
    """A setting (argument or environment variable) has an invalid value."""


class StoreError(TunecacheError):
    """The store could not be opened, read or written."""


class StoreURLError(StoreError):
    """A store URL has an unknown scheme or cannot be parsed."""


class SchemaVersionError(StoreError):
    """The store's schema version is not the one this tunecache understands."""


class ReadOnlyStoreError(StoreError):
    """A write was attempted on a store opened read-only."""


class InvalidRecordError(TunecacheError):
    """A tuning record or workload failed validation (wrong types, bad trace, absurd values)."""


class ImportFormatError(TunecacheError):
    """A file or directory given to import is not in the expected format."""


class TargetError(TunecacheError):
    """A compilation target is unknown or malformed."""


class UnsupportedModelError(TunecacheError):
    """A model cannot be imported (wrong type, missing example inputs, unsupported operator)."""


class TuningError(TunecacheError):
    """Tuning could not run at all (an infrastructure failure, not a bad candidate)."""


class DependencyError(TunecacheError):
    """An optional dependency is missing; the message names the extra to install."""
