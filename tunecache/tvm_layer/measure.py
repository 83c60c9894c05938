"""Build and measure MetaSchedule candidates without paying TVM's start-up cost per batch.

Stock ``LocalBuilder`` starts a fresh process pool on every ``build()`` call, and every worker
imports TVM plus all tensor intrinsics (~33 s here), so on this kind of machine every build times
out and tuning stores nothing (see ``shared/TVM_NOTES.md``). This module provides:

- :func:`make_builder`: a MetaSchedule ``Builder`` whose worker processes start once, call
  :func:`tunecache.tvm_layer.load_tvm` once (only the target's intrinsics, ~3 s) and then build
  candidate after candidate in parallel. ``max_workers=0`` builds in the calling process.
  A candidate that fails to build (or times out, or kills its worker) comes back as
  ``BuilderResult(None, error_msg)``; ``build()`` never raises for one candidate.
- :func:`make_runner`: a ``LocalRunner`` that times each candidate *cold* on a CPU (its
  weights and output flushed from the caches before each of :data:`COLD_REPEATS` single runs, the
  way a model's kernel meets them; :data:`COLD_REPEATS` says what that changed). Its single worker
  process is started once and kept (LocalRunner reuses it across calls); it imports TVM but not
  the tensor intrinsics, which only ``TuneContext`` and ``LocalBuilder``'s default build
  function import.
- :func:`measure_mods`: build a list of scheduled modules with such a builder (in parallel) and
  run them with such a runner, outside MetaSchedule's task loop (trivial tasks, re-measurement).
  Results are frozen :class:`Measurement` values; a candidate's failure is one of them.

Nothing here imports TVM at module import time.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunecache.errors import ConfigError, TuningError
from tunecache.tvm_layer import load_tvm

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tvm.s_tir.meta_schedule.builder import Builder, BuilderInput, BuilderResult
    from tvm.s_tir.meta_schedule.runner import Runner

__all__ = [
    "COLD_REPEATS",
    "DEFAULT_BUILD_TIMEOUT_S",
    "DEFAULT_RUN_TIMEOUT_S",
    "RUNNER_PROCESS_USES",
    "SLOW_BUILD_FACTOR",
    "SLOW_BUILD_FLOOR_S",
    "SLOW_BUILD_SAMPLES",
    "build_limit",
    "Measurement",
    "close_runner",
    "default_build_workers",
    "evaluating",
    "make_builder",
    "make_runner",
    "measure_mods",
    "rpc_runner",
]

#: Seconds one candidate may take to compile in a warm worker (a matmul takes 0.05-0.3 s).
DEFAULT_BUILD_TIMEOUT_S = 60.0
#: A candidate whose build takes over this many times its task's median build (the builder's
#: median over every task until the task has :data:`SLOW_BUILD_SAMPLES` builds), and at least
#: :data:`SLOW_BUILD_FLOOR_S`, is stopped and counted as failed. A classifier's 1 x 512 x 1,000
#: dense has candidates that unroll its 512-long reduction around a 40-wide accumulator in
#: memory: 11-29 s of LLVM each where the median candidate takes 0.10 s, 61 of the 69.5 s its
#: 64 candidates took to build; the fastest program built in 0.06 s (session 35, AMD Zen 4). A
#: model with such a program would pay it on every build too.
SLOW_BUILD_FACTOR = 50.0
#: The least a candidate may take to build before it can be stopped as too slow (BERT's softmax
#: programs that unroll 512 steps take 2.5-3 s on Zen 4, and some are its fastest).
SLOW_BUILD_FLOOR_S = 5.0
#: Builds a task needs before its own median sets its limit (before that, every task's builds).
SLOW_BUILD_SAMPLES = 8
#: Seconds one candidate may take to load, fill its inputs and run ``1 + number*repeat`` times.
DEFAULT_RUN_TIMEOUT_S = 30.0
#: Candidates a runner's worker process measures before it is replaced by a fresh one: the
#: worker's memory grows with every candidate (23 GB after ~10,000 on 1024^3 matmuls and 3x3
#: convolutions, docs/NOTES.md session 14); a restart costs ~2.5 s, ~1% of 1,000 measurements.
RUNNER_PROCESS_USES = 1000
#: Samples of one candidate measured cold (:func:`make_runner`): each is one run after TVM's
#: ``cache_flush_cpu_non_first_arg`` has flushed every argument but the first from the CPU's
#: caches. In a model the first argument is mostly the activation the previous kernel just
#: wrote, and the weights (BERT's 340 MB, ResNet-50's 100 MB: more than any last-level cache)
#: come from memory. Three runs averaged after one warm-up, the runner's setting until session
#: 34, timed weights that sat in the cache, and the programs so picked were slower in models:
#: BERT at 64 tokens searched cold from scratch ran 0.92x the latency of the same search timed
#: warm, and its narrowed searches from a warm store 0.84-0.92x (at 256 tokens 0.92-0.95x; one
#: process each, alternating rounds, AMD Zen 4; docs/NOTES.md session 34).
COLD_REPEATS = 3

_ARTIFACT_NAME = "tvm_tmp_mod.tar"
_BUILDER_CLASS: Any = None
_BUILDER_CLASS_LOCK = threading.Lock()


def default_build_workers() -> int:
    """Return the default number of build worker processes: one per logical CPU (at least 1)."""
    return max(1, os.cpu_count() or 1)


def _worker_bootstrap_code(target_kind: str) -> str:
    """Python source run once in each build worker: make tunecache importable, load TVM.

    The popen worker is a fresh interpreter that does not inherit ``sys.path`` (tunecache may be
    used from a checkout that is not installed), so the path of this checkout is passed in.
    """
    root = str(Path(__file__).resolve().parents[2])
    return (
        "import sys\n"
        f"if {root!r} not in sys.path:\n"
        f"    sys.path.insert(0, {root!r})\n"
        "from tunecache.tvm_layer import load_tvm\n"
        f"load_tvm({target_kind!r})\n"
    )


#: What a torchless worker runs: TVM's popen worker, with ``import torch`` failing first.
#: ``tvm_ffi/__init__.py`` imports torch unconditionally when it can (a Windows-only symbol clash
#: workaround): 3.1 of a worker's 4.8 s start here (AMD Zen 3), and builders and runners never
#: use it. ``sys.modules['torch'] = None`` makes that ``import torch`` raise ``ImportError``,
#: which tvm_ffi catches.
_TORCHLESS_MAIN = (
    "import sys; sys.modules.setdefault('torch', None); import runpy; "
    "runpy.run_module('tvm.exec.popen_worker', run_name='__main__', alter_sys=True)"
)
_POPEN_SWAP_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _torchless_classes() -> tuple[Any, Any]:
    """``(PopenWorker, PopenPoolExecutor)`` subclasses whose worker processes skip torch.

    Only ``PopenWorker._start`` changes (the command; POSIX: Windows keeps TVM's) and the pool's
    ``_worker_run``, which makes its workers by the module's global name, makes ours. Both are
    TVM 0.27's code with one line changed; a TVM whose classes lack these methods keeps its own
    classes (workers that import torch: slower to start, nothing else).
    """
    load_tvm()
    import subprocess

    from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker

    if not all(callable(getattr(cls, name, None))
               for cls, name in ((PopenWorker, "_start"), (PopenPoolExecutor, "_worker_run"))):
        return PopenWorker, PopenPoolExecutor

    class TorchlessWorker(PopenWorker):
        def _start(self) -> None:
            if sys.platform == "win32":
                super()._start()
                return
            if getattr(self, "_proc", None) is not None:
                return
            main_read, worker_write = os.pipe()
            worker_read, main_write = os.pipe()
            cmd = [sys.executable, "-c", _TORCHLESS_MAIN, str(worker_read), str(worker_write)]
            self._proc = subprocess.Popen(cmd, pass_fds=(worker_read, worker_write), stdout=self._stdout,
                                          stderr=self._stderr)
            os.close(worker_read)
            os.close(worker_write)
            self._reader = os.fdopen(main_read, "rb")
            self._writer = os.fdopen(main_write, "wb")

    class TorchlessPool(PopenPoolExecutor):
        def _worker_run(self, fn: Any, args: Any, kwargs: Any, timeout: float | None = None) -> Any:
            with self._lock:
                tid = threading.get_ident()
                proc = self._worker_map.get(tid)
                if proc is None:
                    proc = TorchlessWorker(self._initializer, self._initargs, self._maximum_process_uses,
                                           self._stdout, self._stderr)
                    self._worker_map[tid] = proc
            proc.send(fn, args, kwargs, self._timeout if timeout is None else timeout)
            return proc.recv()

        def map_within(self, fn: Any, items: Any, timeout: float) -> Any:
            """``map_with_error_catching`` with ``timeout`` seconds for each item."""
            from tvm.support.popen_pool import MapResult, StatusKind

            def one(x: Any) -> Any:
                try:
                    return MapResult(status=StatusKind.COMPLETE, value=self._worker_run(fn, (x,), None, timeout))
                except TimeoutError as err:
                    return MapResult(status=StatusKind.TIMEOUT, value=err)
                except Exception as err:  # noqa: BLE001 - as TVM's map_with_error_catching
                    return MapResult(status=StatusKind.EXCEPTION, value=err)

            return self._threadpool.map(one, items)

    return TorchlessWorker, TorchlessPool


@contextlib.contextmanager
def _torchless_popen_workers() -> Iterator[None]:
    """TVM pools made in the block (``LocalRunner`` makes its own, and starts its one worker in
    its constructor) start torchless workers: ``tvm.support.popen_pool.PopenWorker`` is ours for
    the block only, under a lock."""
    from tvm.support import popen_pool

    worker, _pool = _torchless_classes()
    with _POPEN_SWAP_LOCK:
        before = popen_pool.PopenWorker
        popen_pool.PopenWorker = worker
        try:
            yield
        finally:
            popen_pool.PopenWorker = before


def _artifact_dir(artifact_root: str | None) -> str:
    """A fresh directory for one candidate's artifact (under ``artifact_root``, made if missing)."""
    if artifact_root is not None:
        os.makedirs(artifact_root, exist_ok=True)
    return tempfile.mkdtemp(prefix="tc-build-", dir=artifact_root)


def _build_and_export(mod: Any, target: Any, out_dir: str) -> str:
    """Compile one candidate and export it as a tar for ``LocalRunner`` into ``out_dir``
    (:func:`_artifact_dir`); return its path.

    Runs in a build worker (or in-process). Mirrors MetaSchedule's ``default_build`` and
    ``default_export``: each artifact gets its own directory because the ``RemoveBuildArtifact``
    measure callback deletes the artifact's whole directory. LLVM's object files are written
    inside it too, so a worker stopped in the middle of an export leaves nothing elsewhere: the
    builder, which made ``out_dir``, removes it. A build that fails removes it here.
    """
    tvm = load_tvm(str(target.kind.name))
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
    from tvm.support.tar import tar

    path = os.path.join(out_dir, _ARTIFACT_NAME)
    work = os.path.join(out_dir, "work")
    try:
        rt_mod = tvm.tirx.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target)
        os.makedirs(work, exist_ok=True)
        rt_mod.export_library(path, fcompile=tar, workspace_dir=work)
        shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return path


def _build_packed(args: tuple[Any, Any, str]) -> tuple[str, float]:
    """``_build_and_export`` taking one tuple (the pool's ``map`` passes one argument), and the
    seconds it took."""
    t0 = time.perf_counter()
    return _build_and_export(*args), time.perf_counter() - t0


def build_limit(own: Sequence[float], every: Sequence[float], timeout_s: float, *,
                factor: float = SLOW_BUILD_FACTOR, floor_s: float = SLOW_BUILD_FLOOR_S,
                samples: int = SLOW_BUILD_SAMPLES) -> float:
    """Seconds a task's next candidates may take to build.

    Parameters
    ----------
    own, every
        Build seconds of the task's candidates so far, and of every task's (a build stopped at
        its limit counts as that limit, so a task whose every program builds slowly raises its
        own limit after one batch).
    timeout_s
        The builder's limit, never exceeded.
    factor, floor_s, samples
        :data:`SLOW_BUILD_FACTOR`, :data:`SLOW_BUILD_FLOOR_S`, :data:`SLOW_BUILD_SAMPLES`.

    Returns
    -------
    float
        ``factor`` times the median of ``own`` (of ``every`` while ``own`` has fewer than
        ``samples``), at least ``floor_s`` and at most ``timeout_s``; ``timeout_s`` while
        ``every`` has fewer than ``samples`` either.

    >>> build_limit([], [0.1] * 8, 60.0)
    5.0
    >>> build_limit([0.5] * 8, [0.1] * 100, 60.0)
    25.0
    >>> build_limit([], [0.1] * 3, 60.0)
    60.0
    """
    seen = own if len(own) >= samples else every
    if len(seen) < samples:
        return float(timeout_s)
    return float(min(timeout_s, max(floor_s, factor * statistics.median(seen))))


def _task_signature(mod: Any) -> str:
    """What tells one task's candidates from another's in a builder: the shapes and dtypes of
    its function's parameters (every candidate of a task has the same)."""
    from tunecache.tvm_layer.tir import first_primfunc

    try:  # TVM 0.27: a PrimFunc's parameter is its buffer (tir.argument_bytes)
        return repr([(str(list(p.shape)), str(p.dtype)) for p in first_primfunc(mod).params if hasattr(p, "shape")])
    except Exception:  # noqa: BLE001 - a module this cannot read shares one history
        return ""


def _describe(err: BaseException) -> str:
    text = str(err).strip()
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _builder_class() -> Any:
    """Define the ``PyBuilder`` subclass on first use (``derived_object`` needs TVM loaded)."""
    global _BUILDER_CLASS
    with _BUILDER_CLASS_LOCK:
        if _BUILDER_CLASS is not None:
            return _BUILDER_CLASS
        load_tvm()
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder
        from tvm.support.popen_pool import StatusKind

        @derived_object
        class WarmBuilder(PyBuilder):
            """Builds candidates in long-lived processes that imported TVM once.

            Use :func:`make_builder` to create one. ``close()`` stops the worker processes
            (they also stop when the builder is garbage-collected).
            """

            def __init__(
                self,
                max_workers: int,
                timeout_s: float,
                artifact_dir: str | None,
                slow_factor: float | None = SLOW_BUILD_FACTOR,
            ) -> None:
                super().__init__()
                self.max_workers = max_workers
                self.timeout_s = timeout_s
                self.slow_factor = slow_factor
                self.artifact_dir = artifact_dir
                self._pool: Any = None
                self._pool_kind: str | None = None
                self._lock = threading.Lock()
                # Build seconds per task (:func:`_task_signature`) and of every task: the limits
                # of :func:`build_limit`.
                self._seconds: dict[str, deque[float]] = {}
                self._every: deque[float] = deque(maxlen=256)

            # -- the MetaSchedule protocol ------------------------------------------------
            def build(self, build_inputs: Sequence[BuilderInput]) -> list[BuilderResult]:
                if not build_inputs:
                    return []
                if self.max_workers == 0:
                    return [self._build_here(inp) for inp in build_inputs]
                return self._build_in_pool(build_inputs)

            # -- helpers ------------------------------------------------------------------
            def _build_here(self, inp: BuilderInput) -> BuilderResult:
                try:  # never stopped here: no limit to keep a history for
                    return BuilderResult(_build_and_export(inp.mod, inp.target, _artifact_dir(self.artifact_dir)), None)
                except Exception as err:  # noqa: BLE001 - one candidate's failure is data
                    return BuilderResult(None, f"tunecache builder: build failed: {_describe(err)}")

            def _took(self, task: str, seconds: Sequence[float]) -> None:
                with self._lock:
                    self._seconds.setdefault(task, deque(maxlen=64)).extend(seconds)
                    self._every.extend(seconds)

            def limit(self, task: str) -> float:
                """Seconds the next candidate of ``task`` may take to build (:func:`build_limit`)."""
                if self.slow_factor is None:
                    return float(self.timeout_s)
                with self._lock:
                    own, every = list(self._seconds.get(task, ())), list(self._every)
                return build_limit(own, every, self.timeout_s, factor=self.slow_factor,
                                   floor_s=SLOW_BUILD_FLOOR_S, samples=SLOW_BUILD_SAMPLES)

            def _get_pool(self, target_kind: str) -> Any:
                with self._lock:
                    if self._pool is not None and self._pool_kind != target_kind:
                        self._pool.shutdown(wait=True)
                        self._pool = None
                    if self._pool is None:
                        _worker, pool_class = _torchless_classes()
                        self._pool = pool_class(
                            max_workers=self.max_workers,
                            timeout=self.timeout_s,
                            initializer=exec,
                            initargs=(_worker_bootstrap_code(target_kind),),
                        )
                        self._pool_kind = target_kind
                    return self._pool

            def _build_in_pool(self, build_inputs: Sequence[BuilderInput]) -> list[BuilderResult]:
                kind = str(build_inputs[0].target.kind.name)
                pool = self._get_pool(kind)
                # Each candidate's directory is made here, so that a build stopped in its worker
                # (whose files are all in it) is removed here.
                dirs = [_artifact_dir(self.artifact_dir) for _ in build_inputs]
                args = [(inp.mod, inp.target, d) for inp, d in zip(build_inputs, dirs, strict=True)]
                task = _task_signature(build_inputs[0].mod)  # a search builds one task a batch
                within = getattr(pool, "map_within", None)  # TVM's own pool: the fixed timeout
                limit = self.limit(task) if within is not None else self.timeout_s
                outcomes = (within(_build_packed, args, limit) if within is not None
                            else pool.map_with_error_catching(_build_packed, args))
                results: list[BuilderResult] = []
                took: list[float] = []
                try:
                    self._collect(outcomes, dirs, limit, results, took)
                except BaseException:  # interrupted: the directories no result names go too
                    for out_dir in dirs[len(results):]:
                        shutil.rmtree(out_dir, ignore_errors=True)
                    raise
                self._took(task, took)
                return results

            def _collect(self, outcomes: Any, dirs: Sequence[str], limit: float, results: list[BuilderResult],
                         took: list[float]) -> None:
                """Append each outcome's result to ``results`` and its build seconds to ``took``."""
                for outcome, out_dir in zip(outcomes, dirs, strict=True):
                    if outcome.status != StatusKind.COMPLETE:
                        shutil.rmtree(out_dir, ignore_errors=True)
                    if outcome.status == StatusKind.COMPLETE:
                        path, secs = outcome.value
                        took.append(float(secs))
                        results.append(BuilderResult(str(path), None))
                    elif outcome.status == StatusKind.TIMEOUT and limit < self.timeout_s:
                        took.append(limit)
                        results.append(BuilderResult(
                            None,
                            f"tunecache builder: stopped after {limit:.1f} s, over {self.slow_factor:g}x the "
                            "median build of its task (of every task before its "
                            f"{SLOW_BUILD_SAMPLES}th): too slow to compile; a model with this program would pay "
                            "that on every build (make_builder(slow_factor=None) waits up to timeout_s)",
                        ))
                    elif outcome.status == StatusKind.TIMEOUT:
                        took.append(limit)
                        results.append(
                            BuilderResult(
                                None,
                                f"tunecache builder: timeout, killed after {self.timeout_s} s "
                                "(raise timeout_s in make_builder if candidates are this slow)",
                            )
                        )
                    else:
                        results.append(
                            BuilderResult(
                                None,
                                "tunecache builder: build failed: " + _describe(outcome.value),
                            )
                        )

            def warm_up(self, target_kind: str = "llvm") -> None:
                """Start the worker processes now, in the background (returns at once)."""
                if self.max_workers == 0:
                    return
                pool = self._get_pool(target_kind)
                for _ in range(self.max_workers):
                    pool.submit(int)  # a no-op that makes each pool thread start its worker

            def close(self) -> None:
                """Stop the worker processes (a later ``build()`` starts new ones)."""
                with self._lock:
                    if self._pool is not None:
                        self._pool.shutdown(wait=True)
                        self._pool = None

        _BUILDER_CLASS = WarmBuilder
        return _BUILDER_CLASS


def make_builder(
    *,
    max_workers: int | None = None,
    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    artifact_dir: str | os.PathLike[str] | None = None,
    warm_up_for: str | None = "llvm",
    slow_factor: float | None = SLOW_BUILD_FACTOR,
) -> Builder:
    """Create a MetaSchedule builder that builds in processes which imported TVM once.

    Parameters
    ----------
    max_workers
        Number of build worker processes; default :func:`default_build_workers`. ``0`` builds
        in the calling process (no parallelism, no timeout, and a crash in LLVM takes the caller
        down; useful for debugging).
    timeout_s
        Seconds one candidate may take to compile before its worker is killed and the candidate
        is reported as failed. The workers' one-time start (~3 s) does not count.
    artifact_dir
        Directory under which each built candidate gets its own sub-directory; default the
        system temporary directory. MetaSchedule's default ``RemoveBuildArtifact`` callback
        deletes each sub-directory once the candidate is measured.
    warm_up_for
        Target kind whose workers to start right away, in the background, so their start-up
        (~3 s each) overlaps with the runner's and the search's set-up; ``None`` starts them at
        the first ``build()``. Workers started for another kind are replaced on first use.
    slow_factor
        A candidate that takes over this many times its task's median build, and at least
        :data:`SLOW_BUILD_FLOOR_S`, is stopped and reported as failed (:func:`build_limit`;
        :data:`SLOW_BUILD_FACTOR` says why). ``None``: only ``timeout_s`` stops a build. Builds in
        the calling process (``max_workers=0``) are never stopped.

    Returns
    -------
    Builder
        A ``tvm.s_tir.meta_schedule.builder.Builder``. Its ``build(inputs)`` returns one
        ``BuilderResult`` per input: ``(artifact_path, None)`` or ``(None, error_msg)``; it only
        raises for infrastructure failures. ``builder.close()`` stops the workers.

    Raises
    ------
    ConfigError
        If ``max_workers`` is negative or ``timeout_s`` is not positive.

    Examples
    --------
    >>> builder = make_builder(max_workers=2)            # doctest: +SKIP
    >>> results = builder.build([BuilderInput(mod, target)])  # doctest: +SKIP
    >>> results[0].error_msg is None                       # doctest: +SKIP
    True
    """
    workers = default_build_workers() if max_workers is None else int(max_workers)
    if workers < 0:
        raise ConfigError(f"max_workers must be >= 0 (0 builds in-process), got {max_workers!r}")
    if not timeout_s > 0:
        raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    cls = _builder_class()
    root = None if artifact_dir is None else str(Path(artifact_dir).resolve())
    if slow_factor is not None and not slow_factor > 0:
        raise ConfigError(f"slow_factor must be a positive number or None, got {slow_factor!r}")
    builder: Builder = cls(workers, float(timeout_s), root, None if slow_factor is None else float(slow_factor))
    if warm_up_for is not None:
        builder.warm_up(warm_up_for)
    return builder


def make_runner(
    *,
    timeout_s: float = DEFAULT_RUN_TIMEOUT_S,
    cold: bool = True,
    number: int = 3,
    repeat: int | None = None,
    min_repeat_ms: int = 0,
    process_uses: int | None = RUNNER_PROCESS_USES,
) -> Runner:
    """Create MetaSchedule's ``LocalRunner`` with a short, steady evaluator configuration.

    Parameters
    ----------
    timeout_s
        Seconds one candidate may take to load and run before it counts as failed.
    cold
        Time each sample as one run after every argument but the first was flushed from the
        CPU's caches (:data:`COLD_REPEATS` says why): ``number`` is then 1, ``repeat`` (default
        :data:`COLD_REPEATS`) the samples. Candidates run on another device (a GPU) are timed
        warm, as ``cold=False`` times them: the flush only knows host memory.
    number, repeat, min_repeat_ms
        ``EvaluatorConfig`` fields (``number`` only for ``cold=False``, whose ``repeat`` defaults
        to 1: 3 runs averaged after a warm-up). Without a minimum duration a candidate costs
        ~0.05 s here, and was less noisy on a 2-core machine than with MetaSchedule's default
        ``min_repeat_ms=100`` (0.2 s per candidate).
    process_uses
        Candidates the worker process measures before a fresh one replaces it (``None``: never).

    Returns
    -------
    Runner
        A ``LocalRunner``. It starts its one worker process now (1.4 s on an AMD Zen 3: an
        ``import tvm`` without tensor intrinsics and without torch, :func:`_torchless_classes`;
        3.9 s with torch) and reuses it for the next ``process_uses`` candidates. Candidates that fail
        to run come back as ``RunnerResult(None, error_msg)``.

    Raises
    ------
    ConfigError
        If a count or timeout is out of range.
    TuningError
        If the runner's worker process cannot be started.
    """
    if not timeout_s > 0:
        raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if repeat is None:
        repeat = COLD_REPEATS if cold else 1
    if cold:
        number = 1
    if number < 1 or repeat < 1 or min_repeat_ms < 0:
        raise ConfigError(
            "evaluator settings must satisfy number >= 1, repeat >= 1, min_repeat_ms >= 0; "
            f"got number={number!r}, repeat={repeat!r}, min_repeat_ms={min_repeat_ms!r}"
        )
    load_tvm()
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner

    config = EvaluatorConfig(
        number=number,
        repeat=repeat,
        min_repeat_ms=min_repeat_ms,
        enable_cpu_cache_flush=cold,
    )
    try:
        with _torchless_popen_workers():
            runner: Runner = LocalRunner(timeout_sec=float(timeout_s), evaluator_config=config)
    except Exception as err:  # its worker process failed to start or to import TVM
        raise TuningError(
            f"could not start MetaSchedule's LocalRunner worker process: {err}. Check that "
            f"`{sys.executable} -m tvm.exec.popen_worker` can start (TVM installed, memory free)"
        ) from err
    if process_uses is not None:
        _recycle_after(runner, max(1, int(process_uses)))
    if cold:
        _warm_off_host(runner)
    return runner


def _warm_off_host(runner: Any) -> None:
    """Make a cold ``runner`` time candidates of a device other than the CPU warm: TVM's cache
    flush reads every argument as host memory (a GPU's would crash the worker). ``LocalRunner``
    reads its evaluator settings when a batch is submitted, so they are swapped for that call."""
    from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

    # A derived TVM object looks its methods up on its ``_inst`` at each call: the class's own
    # ``run``, bound to that instance, is what the wrapper below hands the batch to.
    inst = getattr(runner, "_inst", runner)
    submit = type(inst).run.__get__(inst)

    def run(runner_inputs: Any) -> Any:
        before = runner.evaluator_config
        if not before.enable_cpu_cache_flush or all(str(i.device_type) == "cpu" for i in runner_inputs):
            return submit(runner_inputs)
        runner.evaluator_config = EvaluatorConfig._normalized(EvaluatorConfig(
            number=3, repeat=before.repeat, min_repeat_ms=before.min_repeat_ms, enable_cpu_cache_flush=False))
        try:
            return submit(runner_inputs)
        finally:
            runner.evaluator_config = before

    inst.run = run


@contextlib.contextmanager
def evaluating(runner: Any, *, repeat: int, number: int = 3) -> Iterator[Any]:
    """A runner that measures ``repeat`` samples of ``number`` runs each, for the block (of one
    run each where ``runner`` times cold: :func:`make_runner`).

    A ``LocalRunner`` (:func:`make_runner`) reads its evaluator settings on each ``run``, so it
    is lent with other settings and its worker process is kept: a new runner would start a
    process of its own (an ``import tvm``: 2.5 s on an AMD Zen 5, 4.4 s on a Zen 3, each time a
    compile re-measures its bests). MetaSchedule's ``RPCRunner`` reads them the same way and is
    lent too, so a warm that measured on an RPC device re-measures there. A runner without
    ``evaluator_config`` and ``pool`` (a Python runner of a test) gets a new ``LocalRunner``,
    closed on exit. Not for a runner that another thread measures with meanwhile.

    Parameters
    ----------
    runner
        The runner to lend, or ``None`` for a new one.
    repeat, number
        ``EvaluatorConfig`` fields for the block.

    Yields
    ------
    Runner
        The runner to measure with inside the block.
    """
    if runner is not None and hasattr(runner, "evaluator_config") and hasattr(runner, "pool"):
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

        before = runner.evaluator_config
        runner.evaluator_config = EvaluatorConfig._normalized(EvaluatorConfig(
            number=1 if before.enable_cpu_cache_flush else number, repeat=repeat,
            min_repeat_ms=before.min_repeat_ms, enable_cpu_cache_flush=before.enable_cpu_cache_flush))
        try:
            yield runner
        finally:
            runner.evaluator_config = before
        return
    own = make_runner(number=number, repeat=repeat)
    try:
        yield own
    finally:
        close_runner(own)


def close_runner(runner: Any) -> None:
    """Stop ``runner``'s worker process: a :func:`make_runner` ``LocalRunner`` keeps one alive
    until its pool is shut down. A runner without a pool (RPC, a test's Python runner) has none."""
    pool = getattr(runner, "pool", None)
    if pool is not None:
        pool.shutdown(wait=True)


def _recycle_after(runner: Any, uses: int) -> None:
    """Make ``runner``'s pool replace its worker process every ``uses`` candidates.

    ``PopenPoolExecutor(maximum_process_uses=...)`` does this, but ``LocalRunner`` makes its pool
    without it and starts the worker at once (its sanity check), so the bound is set on the pool
    and on the worker already started. A TVM whose pool has other fields is left as it is.
    """
    pool = getattr(runner, "pool", None)
    if pool is None or not hasattr(pool, "_maximum_process_uses"):
        return
    pool._maximum_process_uses = uses
    for worker in list(getattr(pool, "_worker_map", {}).values()):
        if hasattr(worker, "_maximum_uses") and hasattr(worker, "_remaining_uses"):
            worker._maximum_uses = uses
            worker._remaining_uses = uses


@dataclass(frozen=True)
class Measurement:
    """One candidate built and run outside MetaSchedule's task loop.

    Attributes
    ----------
    run_secs
        The runner's run times (one per evaluator repeat, each averaged over ``number`` runs);
        empty when the candidate failed.
    error
        Why it failed to build or run, else ``None``.
    """

    run_secs: tuple[float, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the candidate built and ran."""
        return self.error is None and bool(self.run_secs)


def measure_mods(mods: Sequence[Any], target: Any, *, builder: Any, runner: Any,
                 rounds: int = 1) -> list[Measurement]:
    """Build ``mods`` with ``builder`` (all at once: in parallel in its workers) and run the ones
    that built with ``runner``; return one :class:`Measurement` per module, in order.

    Parameters
    ----------
    mods
        Scheduled ``IRModule`` values (a ``Schedule``'s ``mod`` after its postprocessors).
    target
        The ``tvm.target.Target`` to build for.
    builder, runner
        A MetaSchedule ``Builder`` and ``Runner`` (:func:`make_builder`, :func:`make_runner`).
        Build artifacts are deleted once measured.
    rounds
        Run the built modules this many times, interleaved (each round in the order of the one
        before, rotated by one), and return every round's run times together: a burst of load
        from elsewhere on a shared machine then slows every module a little, not one of them a
        lot. A module that fails in any round fails.

    Returns
    -------
    list of Measurement
    """
    load_tvm(str(target.kind.name))
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds!r}")
    if not mods:
        return []
    device_type = {"llvm": "cpu"}.get(str(target.kind.name), str(target.kind.name))
    built = builder.build([BuilderInput(m, target) for m in mods])
    out: list[Measurement] = [Measurement((), None if b.error_msg is None else str(b.error_msg)) for b in built]
    ran: list[int] = []
    inputs = []
    for i, (mod, result) in enumerate(zip(mods, built, strict=True)):
        if result.error_msg is None:
            ran.append(i)
            args_info = ArgInfo.from_entry_func(mod, remove_preproc=True)
            inputs.append(RunnerInput(str(result.artifact_path), device_type, args_info))
    secs: dict[int, list[float]] = {i: [] for i in ran}
    try:
        for r in range(rounds):
            order = [j for j in range(len(ran)) if out[ran[j]].error is None]
            if not order:
                break
            order = order[r % len(order):] + order[: r % len(order)]
            futures = runner.run([inputs[j] for j in order])
            for j, future in zip(order, futures, strict=True):
                i = ran[j]
                res = future.result()
                if res.error_msg is not None or res.run_secs is None:
                    out[i] = Measurement((), str(res.error_msg or "runner returned no run time"))
                else:
                    secs[i].extend(float(x) for x in res.run_secs)
        for i in ran:
            if out[i].error is None:
                out[i] = Measurement(tuple(secs[i]), None)
    finally:
        for result in built:
            if result.artifact_path is not None:
                shutil.rmtree(os.path.dirname(str(result.artifact_path)), ignore_errors=True)
    return out


def rpc_runner(url: str) -> Any:
    """Build MetaSchedule's RPC runner from ``rpc://HOST:PORT/KEY``.

    Each candidate gets its own session: the builder's ``.tar`` is uploaded, linked into a
    shared library by the server (its ``load_module`` untars and links, so the server's machine
    needs a C compiler), run, and removed. A tracker that cannot be reached or has no server
    under KEY is a :class:`ConfigError` here, not a hang later.
    """
    import socket
    from urllib.parse import urlparse

    u = urlparse(url)
    if u.scheme != "rpc" or not u.hostname or not u.port or not u.path.strip("/"):
        raise ConfigError(f"--runner {url!r}: expected rpc://HOST:PORT/KEY (a TVM RPC tracker and device key)")
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    key = u.path.strip("/")
    # One session per candidate; the server kills a session that lasts longer than this.
    cfg = ms.runner.RPCConfig(tracker_host=u.hostname, tracker_port=u.port, tracker_key=key, session_timeout_sec=120)
    # Without a server registered under the key, the tracker queues every request forever: check first.
    probe = ms.runner.RPCConfig(tracker_host=u.hostname, tracker_port=u.port, tracker_key=key, session_timeout_sec=10)
    try:
        socket.create_connection((u.hostname, u.port), timeout=5).close()
        servers = probe.count_num_servers(allow_missing=True)
    except (ValueError, OSError, RuntimeError) as err:
        raise ConfigError(f"--runner {url}: cannot reach the TVM RPC tracker at {u.hostname}:{u.port} ({err}); start "
                          f"one with `python -m tvm.exec.rpc_tracker --host {u.hostname} --port {u.port}`") from err
    if servers == 0:
        raise ConfigError(f"--runner {url}: the tracker at {u.hostname}:{u.port} has no RPC server with key {key!r}; "
                          f"start one on the device with `python -m tvm.exec.rpc_server --tracker "
                          f"{u.hostname}:{u.port} --key {key}`")
    # One worker (session) per registered server, so several devices measure a batch in parallel.
    return ms.runner.RPCRunner(cfg, evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=1, min_repeat_ms=0),
                               max_workers=servers)
