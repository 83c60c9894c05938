"""``tunecache.compile``: a model in, a runnable compiled model out, every task from the store
when it can be, tuned when it cannot.

The driver is the ladder, step by step: import -> extract tasks -> look up the store (hit) ->
search the misses (reused / tuned) -> build with the store's best programs (fallback to TVM's
default schedule where there is none) -> report.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Collection, Sequence

from tunecache.errors import ConfigError
from tunecache.report import CompileReport, TaskReport
from tunecache.store import Store, open_store

__all__ = ["CompiledModel", "compile", "TUNE_MODES"]

log = logging.getLogger("tunecache")

#: auto: tune misses; never: only use the store (misses fall back); always: re-tune every task.
TUNE_MODES = ("auto", "never", "always")
DEFAULT_TRIALS_PER_TASK = 32


class CompiledModel:
    """A compiled model: call it like the original, read its report, export it.

    Attributes
    ----------
    report
        What happened to every task (:class:`~tunecache.report.CompileReport`).
    executable
        The TVM Relax executable.
    target
        The ``tvm.target.Target`` it was compiled for.
    """

    def __init__(self, executable: Any, imported: Any, target: Any, report: CompileReport,
                 library_path: Path | None = None) -> None:
        self.executable = executable
        self.imported = imported
        self.target = target
        self.report = report
        self._library_path = library_path  # set when the executable was loaded from the library cache
        self._vm: Any = None

    def __call__(self, *inputs: Any) -> Any:
        """Run the model: numpy arrays or torch tensors in, the same kind out."""
        from tunecache.tvm_layer import frontend

        if self._vm is None:
            self._vm = frontend.make_vm(self.executable)
        return frontend.run(self._vm, self.imported, *inputs)

    def export_library(self, path: str | os.PathLike[str]) -> Path:
        """Write a deployable shared library that ``tvm.runtime.load_module`` loads back."""
        from tunecache.tvm_layer import frontend

        if self._library_path is not None:  # loaded from the library cache: it is that file
            out = Path(path)
            shutil.copyfile(self._library_path, out)
            return out
        return frontend.export_library(self.executable, path)

    def __repr__(self) -> str:
        return f"<CompiledModel {self.report.summary()}>"


def compile(  # noqa: A001 - the product's verb
    model: Any,
    target: Any = None,
    *,
    example_inputs: Any = None,
    store: "str | os.PathLike[str] | Store | None" = None,
    overlay: "str | os.PathLike[str] | Store | None" = None,
    tune: str = "auto",
    trials_per_task: int = DEFAULT_TRIALS_PER_TASK,
    time_budget_s: float | None = None,
    seed: int | None = None,
    work_dir: "str | os.PathLike[str] | None" = None,
    progress: bool = True,
    escalate_below: float | None = None,
    library_cache: "str | os.PathLike[str] | bool | None" = None,
) -> CompiledModel:
    """Compile ``model`` for ``target`` with the store's tuned programs; tune what is missing.

    Parameters
    ----------
    model
        A ``torch.nn.Module`` (with ``example_inputs``), a ``torch.export.ExportedProgram``, an
        ONNX ``ModelProto`` or ``.onnx`` path, or a Relax ``IRModule``.
    target
        ``None`` (this host's CPU), ``"llvm"``, ``"cuda"``, a TVM tag, a dict or a
        ``tvm.target.Target``.
    example_inputs
        A tuple of example tensors (required for a ``torch.nn.Module``).
    store
        A store URL or path, a :class:`~tunecache.store.Store`, or ``None`` for the default
        (``$TUNECACHE_DB`` or ``~/.cache/tunecache/tunecache.db``).
    overlay
        A local store in front of ``store``: ``store`` is then opened read-only (e.g. a team
        PostgreSQL role with SELECT only), hits come from both, tuned programs go here.
    tune
        ``"auto"``: tune misses; ``"never"``: use only the store, misses compile with TVM's
        default schedules (reported as ``fallback``); ``"always"``: re-tune every task (the
        store's records seed the search).
    trials_per_task
        Trial budget per missed task.
    time_budget_s
        Wall-clock budget for all tuning of this call. Time the plan leaves (its narrowed
        searches stop when they stop improving) goes to more full search of the tasks it tuned
        or reused, up to ``trials_per_task`` trials a task.
    seed
        Search seed.
    work_dir
        Keep MetaSchedule's logs here (default: a temporary directory, deleted).
    progress
        Show a progress line on stderr while tuning.
    escalate_below
        A task reused from a similar program is re-tuned by full search when its throughput is
        below this fraction of its source's (default 0.7; 0 never escalates).
    library_cache
        Where built libraries are cached (:mod:`tunecache.libcache`): ``None`` for the default
        (``$TUNECACHE_LIB_CACHE`` or ``~/.cache/tunecache/libs``), a directory, or ``False`` to
        always build. A compile whose model, target and chosen records match a cached library
        loads it instead of generating code again.

    Returns
    -------
    CompiledModel

    Raises
    ------
    UnsupportedModelError, TargetError, StoreError, ConfigError

    Examples
    --------
    >>> zm = tunecache.zoo.get("small_cnn")                                     # doctest: +SKIP
    >>> cm = tunecache.compile(zm.module, example_inputs=zm.example_inputs)   # doctest: +SKIP
    >>> print(cm.report.summary())                                              # doctest: +SKIP
    5 tasks: 0 hit, 0 reused, 5 tuned (160 trials, 2m10s), 0 fallback
    """
    if tune not in TUNE_MODES:
        raise ConfigError(f"tune={tune!r} is not one of {TUNE_MODES}")
    if trials_per_task < 1:
        raise ConfigError(f"trials_per_task must be >= 1, got {trials_per_task}")
    if time_budget_s is not None and time_budget_s <= 0:
        raise ConfigError(f"time_budget_s must be positive, got {time_budget_s}")
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    imported = frontend.import_model(model, example_inputs)
    tgt = resolve_target(target)
    hw = hardware_key(tgt)
    st = open_store(store, overlay=overlay)
    budget = {"trials_per_task": trials_per_task, "time_budget_s": time_budget_s, "tune": tune}
    cache = _library_cache(library_cache)
    model_id = frontend.model_hash(imported, tgt) if cache is not None else None

    # 0. a model compiled before whose tasks are all hits: its library, without preparing it again
    if model_id is not None and tune != "always":
        t_build = time.time()
        known = _load_known(model_id, tgt, st, hw, cache)
        if known is not None:
            executable, library_path, known_tasks, found, failed = known
            report = _finish(_report(known_tasks, found, {}, st, hw, tune, failed), tgt, hw, t0, 0.0, budget,
                             "loaded from the library cache", t_build)
            return CompiledModel(executable, imported, tgt, report, library_path)

    mod = frontend.prepare_for_tuning(imported, tgt)
    tasks = frontend.extract_tasks(mod, tgt)

    # 1. look up the store
    found = {t.key: st.best_k(t.key, hw, 1) for t in tasks}
    failed_before = _failed_before(tasks, found, st, hw)
    misses = [t for t in tasks if tune == "always" or (not found[t.key] and t.key not in failed_before)]

    # 2-3. plan reuse -> narrowed search -> full search, for the misses
    searched: dict[Any, Any] = {}
    tuning_s = 0.0
    if misses and tune != "never":
        # "always" re-tunes tasks that have records: full search (seeded by those records).
        searched, tuning_s = _search(misses, tgt, st, hw, trials_per_task, time_budget_s, seed, work_dir, progress,
                                     reuse=tune != "always", escalate_below=escalate_below)

    # 4. build with the best programs the store now has (or load the library built from them)
    t_build = time.time()
    executable, library_path, build = _build(mod, tgt, st, hw, tasks, cache, model_id)
    report = _finish(_report(tasks, found, searched, st, hw, tune, failed_before), tgt, hw, t0, tuning_s, budget,
                     build, t_build)
    return CompiledModel(executable, imported, tgt, report, library_path)


def _finish(report: CompileReport, tgt: Any, hw: Any, t0: float, tuning_s: float, budget: dict[str, Any],
            build: str, t_build: float) -> CompileReport:
    """Add the compile's context and timings to ``report``; log its summary."""
    report = replace(report, target=str(tgt), hardware=hw.describe(), seconds_total=time.time() - t0,
                     seconds_tuning=tuning_s, budget=budget, build=build, seconds_build=time.time() - t_build)
    log.info(report.summary())
    return report


def _failed_before(tasks: Sequence[Any], found: dict[Any, list[Any]], st: Store, hw: Any) -> set[Any]:
    """Keys of the tasks searched before on this hardware with no candidate that built and ran
    (e.g. a gather whose random index inputs are out of bounds): searching again would fail
    the same way, every compile. They compile with TVM's default schedule; tune="always" retries."""
    return {t.key for t in tasks if not found[t.key]
            and any(r.latency_s is None and not r.stale for r in st.records(hardware=hw, workload=t.key))}


def _programs(tasks: Sequence[Any], st: Store, hw: Any) -> tuple[dict[Any, list[Any]], list[tuple[str, str | None]]]:
    """Each task's best stored record (by key), and ``(workload hash, record uid)`` pairs."""
    found = {t.key: st.best_k(t.key, hw, 1) for t in tasks}
    return found, [(t.key.shash, found[t.key][0].uid if found[t.key] else None) for t in tasks]


def _load_known(model_id: str, tgt: Any, st: Store, hw: Any,
                cache: Any) -> tuple[Any, Path, list[Any], dict[Any, Any], set[Any]] | None:
    """The cached library of a model prepared before, when nothing is left to search (every task
    is a store hit or :func:`_failed_before`): ``(library, its path, the tasks, their best
    records, the failed ones)``; else ``None``."""
    from tunecache.libcache import library_key

    known = cache.known_tasks(model_id, str(tgt))
    if known is None:
        return None
    prepared_hash, tasks = known
    found, programs = _programs(tasks, st, hw)
    failed = _failed_before(tasks, found, st, hw)
    if not all(found[t.key] or t.key in failed for t in tasks):
        return None
    key = library_key(prepared_hash, str(tgt), hw.id, programs)
    lib = cache.load(key)
    return None if lib is None else (lib, cache.path(key), tasks, found, failed)


def _build(mod: Any, tgt: Any, st: Store, hw: Any, tasks: list[Any], cache: Any,
           model_id: str | None) -> tuple[Any, Path | None, str]:
    """Build ``mod`` with the store's best programs, or load the cached library built from them.

    With a library cache, the model's tasks are remembered under ``model_id`` whenever a library
    for them is cached, so the next compile of the same model can skip preparing it.
    """
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.database import make_database

    key = None
    if cache is not None:
        import tvm_ffi

        from tunecache.libcache import library_key

        prepared_hash = str(tvm_ffi.structural_hash(mod))
        key = library_key(prepared_hash, str(tgt), hw.id, _programs(tasks, st, hw)[1])
        if model_id is not None:
            cache.remember_tasks(model_id, str(tgt), prepared_hash, tasks)
        lib = cache.load(key)
        if lib is not None:
            return lib, cache.path(key), "loaded from the library cache"
    t0 = time.time()
    executable = frontend.build(mod, tgt, database=make_database(st, hw, tgt))
    build_s = time.time() - t0
    if cache is None or key is None:
        return executable, None, "built"
    if not cache.skipped(key) and cache.save(key, executable, build_s) is not None:
        return executable, None, "built, cached"
    if cache.skipped(key):  # marked now or by an earlier compile
        return executable, None, "built (its library loads slower than it builds: not cached)"
    return executable, None, "built"


def _library_cache(setting: "str | os.PathLike[str] | bool | None") -> Any:
    from tunecache.config import default_library_cache_dir
    from tunecache.libcache import LibraryCache

    if setting is False:
        return None
    if setting is None or setting is True:
        directory = default_library_cache_dir()
        return LibraryCache(directory) if directory is not None else None
    return LibraryCache(setting)


def _search(misses: list[Any], tgt: Any, st: Store, hw: Any, trials_per_task: int, time_budget_s: float | None,
            seed: int | None, work_dir: Any, progress: bool, reuse: bool,
            escalate_below: float | None) -> tuple[dict[Any, Any], float]:
    from tunecache.progress import ProgressPrinter
    from tunecache.search.ladder import MissTask, search_misses
    from tunecache.tvm_layer.convert import describe_module

    for t in misses:  # workloads first, with the best description we can make
        desc = describe_module(t.mod, name=t.name)
        if desc.family == "other" and t.desc.family != "other":
            desc = replace(desc, family=t.desc.family)
        from tunecache.tvm_layer.convert import workload_of

        key, mod_json, _ = workload_of(t.mod)
        st.commit_workload(key, desc, mod_json)
    printer = ProgressPrinter(len(misses), trials_per_task * len(misses), time_budget_s) if progress else None
    t1 = time.time()
    try:
        out = search_misses(
            [MissTask(t.key, t.name, t.weight, t.mod) for t in misses],
            tgt, st, hw,
            trials_per_task=trials_per_task,
            reuse=reuse,
            escalate_below=escalate_below,
            time_budget_s=time_budget_s,
            seed=seed,
            work_dir=work_dir,
            progress=printer,
        )
    finally:
        if printer is not None:
            printer.close()
    return out, time.time() - t1


def _report(tasks: list[Any], found: dict[Any, Any], searched: dict[Any, Any], st: Store, hw: Any, tune: str,
            failed_before: Collection[Any] = ()) -> CompileReport:
    rows = []
    for t in tasks:
        best = st.best_k(t.key, hw, 1)
        latency = best[0].latency_s if best else None
        common = dict(name=t.name, workload=str(t.key), family=t.desc.family, shapes=t.desc.shapes, weight=int(t.weight))
        s = searched.get(t.key)
        if s is not None and s.outcome != "fallback":
            rows.append(TaskReport(**common, outcome=s.outcome, trials=s.trials, seconds=s.seconds,
                                   latency_s=latency, source=s.source, note=s.note))
        elif found[t.key] and tune != "always":
            rec = found[t.key][0]
            how = rec.provenance.kind + (f" from {rec.provenance.source_workload}" if rec.provenance.source_workload else "")
            rows.append(TaskReport(**common, outcome="hit", latency_s=latency, note=f"stored record ({how})"))
        elif best:
            rows.append(TaskReport(**common, outcome="hit", trials=s.trials if s else 0, seconds=s.seconds if s else 0.0,
                                   latency_s=latency, note="re-tune found nothing better; stored record used"))
        else:
            if s is not None:
                note = s.note
            elif t.key in failed_before and tune != "never":
                note = ("searched before on this hardware: no candidate built and ran; "
                        "TVM's default schedule (tune='always' searches again)")
            elif tune == "never":
                note = "not in store (tune='never'): " + st.explain_miss(t.key, hw).reason
            else:
                note = "not searched"
            rows.append(TaskReport(**common, outcome="fallback", trials=s.trials if s else 0,
                                   seconds=s.seconds if s else 0.0, note=note))
    for key, s in searched.items():
        if isinstance(key, str):  # a bridge operator the plan tuned so that tasks could reuse it
            rows.append(TaskReport(name=f"[bridge] {key}", workload=key, family=key.split(":")[1].split("[")[0],
                                   shapes=(), weight=0, outcome=s.outcome, trials=s.trials, seconds=s.seconds,
                                   note=s.note))
    return CompileReport(tasks=tuple(rows))
