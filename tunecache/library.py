"""Rung 4 of the ladder: the model's library, built with the store's best programs or loaded
from the library cache (:mod:`tunecache.libcache`) when nothing it was built from changed."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Record

__all__ = ["Known", "build", "commit_workloads", "load_known"]


@dataclass(frozen=True)
class Known:
    """A library cached for a model whose tasks are all served by the store."""

    executable: Any
    path: Path
    tasks: list[Any]
    lookup: Any  # tunecache.pipeline.Lookup
    how: str = "loaded from the library cache"


def _programs(tasks: Sequence[Any], best: dict[WorkloadKey, Record | None]) -> list[tuple[str, str | None]]:
    """``(workload hash, best record uid)`` of every task: what a library is built from."""
    return [(t.key.shash, best[t.key].uid if best.get(t.key) is not None else None) for t in tasks]  # type: ignore[union-attr]


def _with_replays(best: dict[WorkloadKey, Record | None],
                  replayed: Mapping[WorkloadKey, Record] | None) -> dict[WorkloadKey, Record | None]:
    """Each task's program: the stored best, else its replay."""
    out = dict(best)
    for k, r in (replayed or {}).items():
        if out.get(k) is None:
            out[k] = r
    return out


def load_known(model_id: str, target: Any, store: Any, hw: HardwareKey, cache: Any,
               lookup: Callable[[Sequence[Any], Any, HardwareKey], Any]) -> Known | None:
    """The cached library of a model prepared before, when nothing is left to search (every task
    is a store hit or failed before); else ``None``. ``lookup`` is the ladder's first rung."""
    from tunecache.libcache import library_key

    known = cache.known_tasks(model_id, str(target))
    if known is None:
        return None
    prepared_hash, tasks = known
    found = lookup(tasks, store, hw)
    if found.misses(tasks, "auto"):
        return None
    key = library_key(prepared_hash, str(target), hw.id, _programs(tasks, found.best))
    lib = cache.load(key)
    return None if lib is None else Known(lib, cache.path(key), tasks, found)


def commit_workloads(tasks: Sequence[Any], store: Any) -> None:
    """Commit the tasks' workloads before searching them, with the best description we can make."""
    from tunecache.tvm_layer.convert import describe_module, workload_of

    for t in tasks:
        desc = describe_module(t.mod, name=t.name)
        if desc.family == "other" and t.desc.family != "other":
            desc = replace(desc, family=t.desc.family)
        key, mod_json, _ = workload_of(t.mod)
        store.commit_workload(key, desc, mod_json)


def build(mod: Any, target: Any, store: Any, hw: HardwareKey, tasks: list[Any],
          best: dict[WorkloadKey, Record | None], cache: Any, model_id: str | None,
          replayed: Mapping[WorkloadKey, Record] | None = None) -> tuple[Any, Path | None, str]:
    """Build ``mod`` with the store's best programs, or load the cached library built from them.

    ``best`` is each task's best record now (what the library is built from), ``replayed`` the
    programs of misses replayed from other workloads (used where the store has none, never stored). With a library
    cache, the model's tasks are remembered under ``model_id`` whenever a library for them is
    cached, so the next compile of the same model can skip preparing it. Returns ``(executable,
    path of the cached library it was loaded from or None, how it was made)``.
    """
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.database import make_database

    key = None
    if cache is not None:
        import tvm_ffi

        from tunecache.libcache import library_key

        prepared_hash = str(tvm_ffi.structural_hash(mod))
        key = library_key(prepared_hash, str(target), hw.id, _programs(tasks, _with_replays(best, replayed)))
        if model_id is not None:
            cache.remember_tasks(model_id, str(target), prepared_hash, tasks)
        lib = cache.load(key)
        if lib is not None:
            return lib, cache.path(key), "loaded from the library cache"
    t0 = time.time()
    # The tasks' names: a workload the database describes anew is not called "main" in the store.
    names = {t.key.shash: t.name for t in tasks}
    database = make_database(store, hw, target, names=names, extra=replayed)
    executable = frontend.build(mod, target, database=database)
    build_s = time.time() - t0
    if cache is None or key is None:
        return executable, None, "built"
    if not cache.skipped(key) and cache.save(key, executable, build_s) is not None:
        return executable, None, "built, cached"
    if cache.skipped(key):  # marked now or by an earlier compile
        return executable, None, "built (its library loads slower than it builds: not cached)"
    return executable, None, "built"
