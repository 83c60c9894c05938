"""``tunecache.compile``: a model in, a runnable compiled model out, every task from the store
when it can be, tuned when it cannot.

The ladder itself (look up -> plan -> search -> build -> report) is
:func:`tunecache.pipeline.compile_model`; this module checks the arguments, imports the model and
wraps the result.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from tunecache.config import (
    DEFAULT_SEARCH,
    DEFAULT_TRIALS_PER_TASK,
    TUNE_MODES,
    check_search,
    check_seconds,
    check_trials,
)
from tunecache.dynamic import DEFAULT_MAX_VARIANTS, DynamicModel, check_dynamic_model
from tunecache.errors import ConfigError
from tunecache.report import CompileReport
from tunecache.store import open_store

if TYPE_CHECKING:
    from tunecache.store.contract import BaseStore

__all__ = ["CompiledModel", "compile", "check_output_path", "DEFAULT_TRIALS_PER_TASK", "TUNE_MODES"]

#: Suffixes :meth:`CompiledModel.export_library` writes: a shared library, or a tar of object files.
LIBRARY_SUFFIXES = (".so", ".tar")


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
                 library_path: Path | None = None, recompile: Callable[[], CompiledModel] | None = None,
                 store: BaseStore | None = None, hardware: Any = None) -> None:
        self.executable = executable
        self.imported = imported
        self.target = target
        self.report = report
        self._library_path = library_path  # set when the executable was loaded from the library cache
        self._vm: Any = None
        self._call: Any = None  # frontend.caller(self._vm, ...), made at the first call
        self._recompile = recompile  # the same compile again, measuring nothing (refresh)
        self._store, self._hardware = store, hardware

    def improvable(self) -> list[str]:
        """Return the tasks for which the store now holds a program other than the one this model
        was built with (tuned since, e.g. by ``tunecache worker``).

        Raises
        ------
        ConfigError
            If this model was not made by :func:`compile` (nothing to compare with).
        """
        from tunecache.store.keys import WorkloadKey

        if self._store is None or self._hardware is None:
            raise ConfigError("this CompiledModel was not made by tunecache.compile: it cannot be refreshed")
        out = []
        for t in self.report.tasks:
            if t.name.startswith("[bridge]"):
                continue
            mod_eq, _, shash = t.workload.partition(":")
            best = next(iter(self._store.best_k(WorkloadKey(shash, mod_eq), self._hardware, 1)), None)
            if best is not None and best.uid != t.record:
                out.append(t.name)
        return out

    def refresh(self) -> CompiledModel:
        """Return this model rebuilt with the store's better programs, or ``self`` when it has none.

        For a model compiled with ``tune="background"``: once ``tunecache worker`` has tuned
        some of its tasks, ``cm = cm.refresh()`` serves them, without importing the model
        again. The rebuild measures nothing (tasks still missing are served as before, and a
        background model's are queued again). Cheap when nothing changed: one store lookup a task.

        Returns
        -------
        CompiledModel

        Raises
        ------
        ConfigError
            If this model was not made by :func:`compile`.
        """
        if not self.improvable() or self._recompile is None:
            return self
        return self._recompile()

    def __call__(self, *inputs: Any) -> Any:
        """Run the model: numpy arrays or torch tensors in, the same kind out."""
        from tunecache.tvm_layer import frontend

        if self._call is None:
            if self._vm is None:
                self._vm = frontend.make_vm(self.executable)
            self._call = frontend.caller(self._vm, self.imported)
        return self._call(*inputs)

    def export_library(self, path: str | os.PathLike[str]) -> Path:
        """Write the compiled model as its suffix says: ``.so`` a shared library that
        ``tvm.runtime.load_module`` loads back, ``.tar`` its object files (to link elsewhere).

        Raises
        ------
        ConfigError
            If the suffix is neither, the directory does not exist, or a ``.tar`` is asked of a
            model loaded from the library cache (that is a ``.so`` already: compile with
            ``library_cache=False`` to export its object files).
        """
        from tunecache.tvm_layer import frontend

        out = check_output_path(path)
        if self._library_path is not None:  # loaded from the library cache: it is that file
            if out.suffix != ".so":
                raise ConfigError(
                    f"{out}: this model was loaded from the library cache, which holds a shared library "
                    "(.so); write it to a .so path, or compile with library_cache=False (--no-library-cache) "
                    "to export a .tar of its object files")
            shutil.copyfile(self._library_path, out)
            return out
        return frontend.export_library(self.executable, out)

    def __repr__(self) -> str:
        return f"<CompiledModel {self.report.summary()}>"


@overload
def compile(model: Any, target: Any = ..., *, example_inputs: Any = ..., store: Any = ..., overlay: Any = ...,
            tune: str = ..., trials_per_task: int = ..., reuse_trials: int | None = ...,
            time_budget_s: float | None = ..., seed: int | None = ..., work_dir: Any = ..., progress: bool = ...,
            escalate_below: float | None = ..., library_cache: Any = ..., name: str | None = ...,
            dynamic: Literal[False] = ..., max_variants: int = ..., search: str = ...) -> CompiledModel: ...


@overload
def compile(model: Any, target: Any = ..., *, example_inputs: Any = ..., store: Any = ..., overlay: Any = ...,
            tune: str = ..., trials_per_task: int = ..., reuse_trials: int | None = ...,
            time_budget_s: float | None = ..., seed: int | None = ..., work_dir: Any = ..., progress: bool = ...,
            escalate_below: float | None = ..., library_cache: Any = ..., name: str | None = ...,
            dynamic: Literal[True], max_variants: int = ..., search: str = ...) -> DynamicModel: ...


def compile(  # noqa: A001 - the product's verb
    model: Any,
    target: Any = None,
    *,
    example_inputs: Any = None,
    store: str | os.PathLike[str] | BaseStore | None = None,
    overlay: str | os.PathLike[str] | BaseStore | None = None,
    tune: str = "auto",
    trials_per_task: int = DEFAULT_TRIALS_PER_TASK,
    reuse_trials: int | None = None,
    time_budget_s: float | None = None,
    seed: int | None = None,
    work_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    escalate_below: float | None = None,
    library_cache: str | os.PathLike[str] | bool | None = None,
    name: str | None = None,
    dynamic: bool = False,
    max_variants: int = DEFAULT_MAX_VARIANTS,
    search: str = DEFAULT_SEARCH,
) -> CompiledModel | DynamicModel:
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
        ``"auto"``: tune misses; ``"never"``: measure nothing: a miss is served by replaying the
        most similar stored program (same operator and sketch at another size, reported as
        ``replayed`` with its source), else by a program predicted from its design space
        (``predicted``), else TVM's default schedule (``fallback``);
        ``"background"``: as ``"never"``, and every miss is queued in the store for
        ``tunecache worker``, which tunes it later (:meth:`CompiledModel.refresh` then picks the
        tuned programs up); ``"always"``: re-tune every task (the store's records seed the
        search).
    trials_per_task
        Trial budget per missed task.
    reuse_trials
        Most trials of one narrowed search (a task ``reused`` from a similar program); default a
        quarter of ``trials_per_task``, at most 8 or a tenth of it, at least 4
        (:func:`tunecache.config.default_reuse_trials`).
        A search that escalates to full search still stops at ``trials_per_task``.
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
        below this fraction of its source's, the two programs measured side by side (default
        0.7; 0 never escalates).
    library_cache
        Where built libraries are cached (:mod:`tunecache.libcache`): ``None`` for the default
        (``$TUNECACHE_LIB_CACHE`` or ``~/.cache/tunecache/libs``), a directory, or ``False`` to
        always build. A compile whose model, target and chosen records match a cached library
        loads it instead of generating code again.
    name
        The model's name in the tuning queue (``tune="background"``; default: the class name of
        a ``torch.nn.Module``, the file name of an ONNX file).
    dynamic
        Return a :class:`~tunecache.dynamic.DynamicModel`: called with inputs of a shape it has
        not seen, it compiles a variant for them the same way (same store, tuning mode and
        budget: with ``tune="background"`` served at once and the misses queued). The
        ``example_inputs`` variant is compiled now. A ``torch.nn.Module`` only.
    max_variants
        With ``dynamic=True``: how many shapes are kept compiled (least recently used evicted).
    search
        The search of tasks with nothing to reuse: ``"gradient"`` (the default,
        :mod:`tunecache.search.gradient`: descent on a cost model the store trains; tasks without
        a multi-level tiling still get the evolutionary search) or ``"evolutionary"``
        (MetaSchedule's, for every task).
        The report's notes say which ran.

    Returns
    -------
    CompiledModel, or DynamicModel when ``dynamic=True``

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
    check_trials("trials_per_task", trials_per_task)
    if reuse_trials is not None:
        check_trials("reuse_trials", reuse_trials)
    search = check_search("search", search)
    time_budget_s = check_seconds("time_budget_s", time_budget_s)
    if dynamic:
        check_dynamic_model(model)
        shared = open_store(store, overlay=overlay)  # one store for every variant ("memory" included)

        def compile_variant(inputs: tuple[Any, ...]) -> CompiledModel:
            return compile(model, target, example_inputs=inputs, store=shared, tune=tune,
                           trials_per_task=trials_per_task, reuse_trials=reuse_trials, time_budget_s=time_budget_s,
                           seed=seed,
                           work_dir=work_dir, progress=progress, escalate_below=escalate_below,
                           library_cache=library_cache, name=name, search=search)

        dm = DynamicModel(model, compile_variant, max_variants)
        if example_inputs is not None:  # compiled now: errors surface here, the first call is fast
            dm.variant(*(example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)))
        return dm
    from tunecache.gcpause import gc_paused
    from tunecache.pipeline import compile_model
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    tgt = resolve_target(target)  # a bad target is an error before the model is imported
    with gc_paused():  # torch.export's allocations (tunecache.gcpause)
        imported = frontend.import_model(model, example_inputs)
    hw = hardware_key(tgt)
    st = open_store(store, overlay=overlay)
    cache = _library_cache(library_cache)
    label = name if name is not None else _model_name(model)

    def run(mode: str) -> CompiledModel:
        executable, library_path, report = compile_model(
            imported, tgt, hw, st, tune=mode, trials_per_task=trials_per_task, reuse_trials=reuse_trials,
            time_budget_s=time_budget_s, seed=seed, work_dir=work_dir, progress=progress,
            escalate_below=escalate_below, cache=cache, model_name=label, search=search)
        again = "background" if mode == "background" else "never"
        return CompiledModel(executable, imported, tgt, report, library_path, recompile=lambda: run(again),
                             store=st, hardware=hw)

    return run(tune)


def _model_name(model: Any) -> str:
    """A name for the tuning queue: a module's class name, a file's stem, else the type's name."""
    if isinstance(model, (str, os.PathLike)):
        return Path(model).stem
    return type(model).__name__


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a :class:`~pathlib.Path` when a library can be written there.

    Checked before compiling, so that a typo does not cost a whole compile.

    Raises
    ------
    ConfigError
        If the suffix is not one of :data:`LIBRARY_SUFFIXES`, the directory does not exist or
        is not writable, or the path is a directory.
    """
    out = Path(path)
    if out.suffix not in LIBRARY_SUFFIXES:
        raise ConfigError(f"{out}: name the library .so (a shared library) or .tar (its object files)")
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise ConfigError(f"{out} is a directory: give a file name ending in .so or .tar")
    if not parent.is_dir():
        raise ConfigError(f"{out}: directory {parent} does not exist; create it or write elsewhere")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{out}: directory {parent} is not writable; write elsewhere")
    return out


def _library_cache(setting: str | os.PathLike[str] | bool | None) -> Any:
    from tunecache.config import default_library_cache_dir
    from tunecache.libcache import LibraryCache

    if setting is False:
        return None
    if setting is None or setting is True:
        directory = default_library_cache_dir()
        return LibraryCache(directory) if directory is not None else None
    return LibraryCache(setting)
