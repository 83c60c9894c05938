"""A per-user cache of built model libraries, so a compile whose programs are all known loads a ``.so``.

A warm compile (every task a hit) used to spend most of its time in LLVM generating code for
kernels that were already built the last time: tuned kernels are unrolled and vectorized, so
their codegen is slower than the untuned ones'. The built library depends only on

- the prepared model (its structure and its bound weights: TVM's structural hash covers
  constant data),
- the target, this machine's hardware key and the TVM and tunecache versions,
- the record each task's kernel was built from (its uid; ``-`` for a fallback),

so a library built for the same key is byte-for-byte what a fresh build would give. Any change
(a better record committed by a teammate, a record marked stale, a new TVM) gives a new key and
a fresh build.

The cache is a directory of the user's own files (``$XDG_CACHE_HOME/tunecache/libs``), never a
shared store: loading a library runs its code, so only libraries this user built are loaded.
Writes are atomic (a temporary file renamed into place); the oldest entries beyond
``max_entries`` are removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

__all__ = ["LibraryCache", "library_key"]

log = logging.getLogger("tunecache")

#: Libraries kept per cache directory (the least recently used beyond it are removed).
DEFAULT_MAX_ENTRIES = 32


def library_key(model_hash: str, target: str, hardware_id: str, programs: Iterable[tuple[str, str | None]]) -> str:
    """Return the cache key of a built library.

    Parameters
    ----------
    model_hash
        Structural hash of the prepared Relax module (weights included).
    target
        The canonical target string.
    hardware_id
        The hardware key's id.
    programs
        ``(workload hash, uid of the record its kernel is built from or None)`` for every task.
    """
    import tvm

    import tunecache

    doc = {
        "model": model_hash,
        "target": target,
        "hardware": hardware_id,
        "tvm": getattr(tvm, "__version__", "?"),
        "tunecache": getattr(tunecache, "__version__", "?"),
        "programs": sorted([w, u or "-"] for w, u in programs),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


class LibraryCache:
    """A directory of built model libraries, keyed by :func:`library_key`.

    Parameters
    ----------
    directory
        Where the ``.so`` files live (created on the first save).
    max_entries
        How many libraries to keep.
    """

    def __init__(self, directory: str | os.PathLike[str], max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.directory = Path(directory)
        self.max_entries = max_entries

    def path(self, key: str) -> Path:
        """Return where the library of ``key`` is (or would be) stored."""
        return self.directory / f"{key}.so"

    def load(self, key: str) -> Any | None:
        """Return the loaded library of ``key``, or ``None`` if there is none or it cannot be loaded.

        A file that does not load (truncated by a crash, written by another TVM) is removed, so
        the next compile rebuilds it.
        """
        p = self.path(key)
        if not p.is_file():
            return None
        import tvm

        try:
            lib = tvm.runtime.load_module(str(p))
        except Exception as err:  # noqa: BLE001 - any failure means: rebuild
            log.warning("tunecache: cached library %s does not load (%s); rebuilding it", p, str(err).splitlines()[0])
            p.unlink(missing_ok=True)
            return None
        try:
            os.utime(p)  # most recently used
        except OSError:
            pass
        return lib

    def save(self, key: str, executable: Any) -> Path | None:
        """Export ``executable`` as the library of ``key``; return its path (``None`` if it failed).

        A failure to write (read-only or full disk) is logged and leaves the compile unaffected.
        """
        p = self.path(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}-", suffix=".so", dir=self.directory)
            os.close(fd)
            try:
                executable.export_library(tmp)
                os.replace(tmp, p)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except Exception as err:  # noqa: BLE001 - the cache is an optimization
            log.warning("tunecache: could not cache the built library in %s: %s", self.directory, err)
            return None
        self._prune()
        return p

    def entries(self) -> list[Path]:
        """Return the cached libraries, most recently used first."""
        if not self.directory.is_dir():
            return []
        files = [f for f in self.directory.glob("*.so") if not f.name.startswith(".")]
        return sorted(files, key=lambda f: f.stat().st_mtime, reverse=True)

    def _prune(self) -> None:
        for old in self.entries()[self.max_entries:]:
            old.unlink(missing_ok=True)
