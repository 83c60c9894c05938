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

The weights are inside the library (bound constants), so loading it costs time in proportion to
its size: BERT-base's 440 MB library loaded in ~2.3 s here while building it took ~1 s, ResNet-18's
45 MB in ~0.2 s against ~4.7 s of code generation. A library whose estimated load time
(:data:`LOAD_BYTES_PER_S`) is not clearly below its build time is not kept; a small ``.skip`` file
remembers that, so later compiles build without exporting again.

A warm compile also skips preparing the model (``FoldConstant`` over all weights: ~4 s of
BERT-base's compile, more than building it): next to each library the cache keeps the tasks the
model was prepared into (:meth:`LibraryCache.remember_tasks`), keyed by
:func:`tunecache.tvm_layer.frontend.model_hash` (the imported model, weights included, and the
preparation settings), with the prepared module's hash. A compile of the same model whose tasks
are all store hits then computes the library key from them and loads the library without
preparing anything (``tunecache.api``).

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunecache.store.keys import WorkloadDesc, WorkloadKey

__all__ = ["KnownTask", "LibraryCache", "library_key"]

log = logging.getLogger("tunecache")

#: Libraries kept per cache directory (the least recently used beyond it are removed).
DEFAULT_MAX_ENTRIES = 32
#: Bytes of library loaded per second (measured ~190 MB/s here, BERT-base's 440 MB library).
LOAD_BYTES_PER_S = 200e6
#: Keep a library only when its estimated load time is below this share of its build time.
KEEP_BELOW = 0.5


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
    return _digest({"model": model_hash, "target": target, "hardware": hardware_id,
                    "programs": sorted([w, u or "-"] for w, u in programs)})


def _digest(doc: dict[str, Any]) -> str:
    """Digest of ``doc`` with the TVM and tunecache versions added."""
    import tvm

    import tunecache

    doc = {**doc, "tvm": getattr(tvm, "__version__", "?"), "tunecache": getattr(tunecache, "__version__", "?")}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class KnownTask:
    """A task of a model prepared before: what a report and a library key need, no TVM object."""

    name: str
    weight: int
    key: WorkloadKey
    desc: WorkloadDesc


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
        from tunecache.tvm_layer import load_tvm

        tvm = load_tvm()

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

    def _skip_path(self, key: str) -> Path:
        return self.directory / f"{key}.skip"

    def skipped(self, key: str) -> bool:
        """Whether the library of ``key`` was found not worth keeping (see the module docstring)."""
        return self._skip_path(key).is_file()

    def save(self, key: str, executable: Any, build_s: float | None = None) -> Path | None:
        """Export ``executable`` as the library of ``key``; return its path, or ``None``.

        ``None`` when the library would load slower than ``build_s`` (how long building it
        took; then a ``.skip`` marker is left) or could not be written (read-only or full
        disk: logged, the compile is unaffected).
        """
        p = self.path(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{key}-", suffix=".so", dir=self.directory)
            os.close(fd)
            try:
                executable.export_library(tmp)
                size = Path(tmp).stat().st_size
                if build_s is not None and size / LOAD_BYTES_PER_S > KEEP_BELOW * build_s:
                    self._skip_path(key).write_text(
                        json.dumps({"bytes": size, "build_s": round(build_s, 3)}))
                    self._prune()
                    return None
                os.replace(tmp, p)
            finally:
                Path(tmp).unlink(missing_ok=True)
        except Exception as err:  # noqa: BLE001 - the cache is an optimization
            log.warning("tunecache: could not cache the built library in %s: %s", self.directory, err)
            return None
        self._prune()
        return p

    def _tasks_path(self, model: str, target: str) -> Path:
        return self.directory / f"{_digest({'model': model, 'target': target})}.tasks.json"

    def remember_tasks(self, model: str, target: str, prepared_hash: str, tasks: Sequence[Any]) -> None:
        """Remember that ``model`` (:func:`tunecache.tvm_layer.frontend.model_hash`) prepared for ``target``
        gives the module hashed ``prepared_hash`` and these tasks (``TaskInfo`` or
        :class:`KnownTask`). Written atomically; a failure is logged and ignored."""
        doc = {"prepared": prepared_hash,
               "tasks": [{"name": t.name, "weight": int(t.weight), "shash": t.key.shash, "mod_eq": t.key.mod_eq,
                          "desc": t.desc.to_dict()} for t in tasks]}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tasks-", suffix=".json", dir=self.directory)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self._tasks_path(model, target))
        except OSError as err:
            log.warning("tunecache: could not remember the tasks of a model in %s: %s", self.directory, err)

    def known_tasks(self, model: str, target: str) -> tuple[str, list[KnownTask]] | None:
        """Return ``(prepared module hash, tasks)`` remembered for ``model`` on ``target``, or ``None``."""
        p = self._tasks_path(model, target)
        try:
            doc = json.loads(p.read_text())
            tasks = [KnownTask(str(t["name"]), int(t["weight"]), WorkloadKey(str(t["shash"]), str(t["mod_eq"])),
                               WorkloadDesc.from_dict(t["desc"])) for t in doc["tasks"]]
            return str(doc["prepared"]), tasks
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:  # a damaged file: prepare again
            log.warning("tunecache: ignoring %s (%s)", p, err)
            return None

    def entries(self) -> list[Path]:
        """Return the cached libraries, most recently used first."""
        if not self.directory.is_dir():
            return []
        files = [f for f in self.directory.glob("*.so") if not f.name.startswith(".")]
        return sorted(files, key=lambda f: f.stat().st_mtime, reverse=True)

    def _prune(self) -> None:
        for old in self.entries()[self.max_entries:]:
            old.unlink(missing_ok=True)
        for pattern in ("*.skip", "*.tasks.json"):
            files = sorted(self.directory.glob(pattern), key=lambda f: f.stat().st_mtime, reverse=True)
            for old in files[4 * self.max_entries:]:
                old.unlink(missing_ok=True)
