"""Exceptions raised by tunecache: one root, a few narrow subclasses.

Every message says what went wrong *and* what to do next. Failures of a single candidate
(a tiling that does not build, a measurement that crashes) are never exceptions: they are
returned as data by the search layer.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    "Interrupted",
    "did_you_mean",
]


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """A hint for an error message: ``"did you mean 'a'?"`` (or ``'a', 'b'`` up to ``n``), naming
    the ``choices`` ``word`` most likely misspells (:func:`difflib.get_close_matches` at
    ``cutoff``), or ``""`` when none is close.

    Parameters
    ----------
    word
        What the user wrote.
    choices
        What they could have written.
    n, cutoff
        Most guesses, and how close (0-1) a guess must be.

    Returns
    -------
    str
        The hint, without surrounding punctuation or spaces; ``""`` for no guess.
    """
    import difflib  # an error path: not on every import of tunecache

    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else ""


class TunecacheError(Exception):
    """Root of every error tunecache raises on purpose."""


class ConfigError(TunecacheError):
    """A setting (argument or environment variable) has an invalid value."""


class StoreError(TunecacheError):
    """The store could not be opened, read or written."""


class StoreURLError(StoreError, ConfigError):
    """A store URL or path is not one of the accepted forms (a setting, hence also a ConfigError)."""


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


class Interrupted(KeyboardInterrupt):
    """A search stopped at a Ctrl-C (:mod:`tunecache.interrupt`), after committing what it measured.

    A ``KeyboardInterrupt``, so that ``except Exception`` never swallows it. Run the same compile
    or warm again to resume: committed records are kept and tasks not marked done are searched
    with what is left of their budget.

    Attributes
    ----------
    trials
        Trials measured (and committed) by the interrupted call before it stopped.
    records
        Records the store holds for the call's tasks on this hardware (what a rerun resumes
        from); ``None`` when unknown.
    """

    def __init__(self, trials: int = 0, records: int | None = None) -> None:
        super().__init__(trials, records)
        self.trials = trials
        self.records = records

    def __str__(self) -> str:
        kept = "" if self.records is None else f"; {self.records} record{'' if self.records == 1 else 's'} kept"
        return (f"interrupted after {self.trials} trial{'' if self.trials == 1 else 's'}{kept}; "
                "run the same command to resume")
