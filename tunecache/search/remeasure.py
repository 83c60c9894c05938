"""Re-measure tuned programs so that the store's best is a trustworthy figure.

During search every candidate is measured once (on a CPU: three single runs, each after a cache
flush, :func:`~tunecache.tvm_layer.measure.make_runner`) and the runner's best-so-far
is the minimum over many such single measurements: on this 2-core machine it sometimes picks a
lucky one (6.84 ms that re-measures at 4.16 ms; see ``shared/TVM_NOTES.md``). This module builds
a record's program again and times it with more repeats, in the runner's own worker process
(the same route, argument filling and cache behaviour as during tuning):

- :func:`remeasure`: one trace on one module -> a frozen :class:`Remeasurement`
  (median, mean, coefficient of variation, the samples).
- :func:`remeasure_best`: the top records of one workload in a :class:`~tunecache.store.Store`;
  each re-measured median replaces the record's ranking latency through
  :meth:`Store.set_latency` (its raw ``run_secs`` stay as they were measured). It repeats until
  the top ``k`` are all re-measured, so a lucky record that falls back lets the next one be
  checked too; the records of a pass are measured in interleaved rounds.
- :func:`measure_side_by_side`: programs of different workloads in the same interleaved rounds,
  nothing stored: what an escalation compares a reused program with its source by.
- :func:`remeasure_bests`: every task a search just tuned or reused, heaviest first, with the
  search's own runner: what ``compile`` and ``warm`` (each Ray worker too) do after searching,
  so that a store's ranking, which replays and narrowed searches pick their source program
  by, is a re-measured one.
- :func:`rerank_store`: every workload of a store, its top records side by side in many
  interleaved rounds, on the machine that serves them (``tunecache db rerank``). Records
  measured at different times are ranked by figures from different loads of the machine: on a
  VM whose speed changes with its host's load, a store's best can be 1.1-1.5x slower than
  another of its records measured beside it (docs/NOTES.md, session 42).

Re-measure only on the machine the records' hardware key describes.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.config import RERANK_ROUNDS, RERANK_TOP
from tunecache.errors import ConfigError, Interrupted, InvalidRecordError, TuningError
from tunecache.interrupt import stop_requested
from tunecache.store.contract import BaseStore
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.measure import COLD_REPEATS, close_runner, evaluating, make_builder, make_runner, measure_mods

__all__ = ["RemeasuredRecord", "Remeasurement", "Reranked", "measure_side_by_side", "remeasure", "remeasure_best",
           "remeasure_bests", "remeasure_plan", "rerank_store"]

#: Default evaluator settings of a re-measurement: 10 samples, each the mean of 3 runs (one run
#: where the runner times cold, as :func:`~tunecache.tvm_layer.measure.make_runner`'s do on a CPU).
DEFAULT_REPEATS = 10
DEFAULT_NUMBER = 3
#: The samples of programs re-measured together are taken in this many interleaved rounds: the
#: store's top programs of a task are often within 1-2% of each other, and on a shared machine
#: a burst of load elsewhere during one program's consecutive samples decided their order.
DEFAULT_ROUNDS = 5


def per_round(repeats: int, rounds: int) -> int:
    """The evaluator's ``repeat`` that gives at least ``repeats`` samples in ``rounds`` rounds."""
    return max(1, math.ceil(repeats / rounds))


@dataclass(frozen=True)
class Remeasurement:
    """A program timed with many repeats.

    Attributes
    ----------
    median_s, mean_s
        Median and mean of the samples, in seconds.
    cv
        Coefficient of variation of the samples (standard deviation / mean; 0 for one sample).
    samples
        One run time per repeat, each the mean of ``number`` runs.
    """

    median_s: float
    mean_s: float
    cv: float
    samples: tuple[float, ...]

    @classmethod
    def from_samples(cls, samples: Sequence[float]) -> Remeasurement:
        """Summarize run times (at least one)."""
        xs = tuple(float(x) for x in samples)
        if not xs:
            raise ValueError("a re-measurement needs at least one sample")
        mean = statistics.fmean(xs)
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return cls(float(statistics.median(xs)), mean, sd / mean if mean > 0 else 0.0, xs)


@dataclass(frozen=True)
class RemeasuredRecord:
    """What :func:`remeasure_best` did to one record.

    Attributes
    ----------
    uid
        The record.
    tuned_latency_s
        Its ranking latency before (the mean of the run times measured during search, or an
        earlier re-measurement).
    remeasurement
        The new measurement, or ``None`` if the program no longer builds or runs.
    error
        Why it could not be re-measured (the record is left as it was).
    """

    uid: str
    tuned_latency_s: float | None
    remeasurement: Remeasurement | None
    error: str | None = None


def _check(repeats: int, number: int, rounds: int = 1) -> None:
    if repeats < 1 or number < 1 or rounds < 1:
        raise ConfigError(f"repeats, number and rounds must be >= 1, got repeats={repeats!r}, "
                          f"number={number!r}, rounds={rounds!r}")


def _scheduled(mod: Any, trace_json: Any) -> Any:
    """Replay ``trace_json`` (postprocessing included) on ``mod``; return the scheduled module."""
    tvm = load_tvm()
    from tvm.s_tir.schedule import Schedule, Trace

    if isinstance(mod, tvm.tirx.PrimFunc):
        mod = tvm.IRModule({"main": mod})
    sch = Schedule(mod)
    try:
        Trace.apply_json_to_schedule(decode_trace(trace_json), sch)
    except InvalidRecordError:
        raise
    except Exception as err:  # TVM's own errors: the trace does not hold on this module
        raise InvalidRecordError(f"trace does not replay on this module: {err}") from err
    return sch.mod


@contextlib.contextmanager
def _runner_and_builder(runner: Any, builder: Any, new_runner: Callable[[], Any]) -> Iterator[tuple[Any, Any]]:
    """``(runner, builder)``: the ones lent, or new ones (``new_runner()``, an in-process
    builder) closed on leaving."""
    own_runner, own_builder = runner is None, builder is None
    run = new_runner() if own_runner else runner
    build = make_builder(max_workers=0, warm_up_for=None) if own_builder else builder
    try:
        yield run, build
    finally:
        if own_runner:
            close_runner(run)
        if own_builder:
            build.close()


def _new_runner(repeats: int, number: int, rounds: int) -> Callable[[], Any]:
    """A factory of the runner a re-measurement makes when none is lent."""
    return lambda: make_runner(number=number, repeat=per_round(repeats, rounds), min_repeat_ms=0)


def _measure(mods: list[Any], target: Any, repeats: int, number: int, runner: Any, builder: Any,
             rounds: int = 1) -> list[Any]:
    with _runner_and_builder(runner, builder, _new_runner(repeats, number, rounds)) as (run, build):
        return measure_mods(mods, target, builder=build, runner=run, rounds=rounds)


def remeasure(
    mod: Any,
    trace_json: Any,
    target: Any,
    *,
    repeats: int = DEFAULT_REPEATS,
    number: int = DEFAULT_NUMBER,
    runner: Any = None,
    builder: Any = None,
) -> Remeasurement:
    """Build ``trace_json`` applied to ``mod`` afresh and time it with ``repeats`` samples.

    Parameters
    ----------
    mod
        The task's ``IRModule`` (or ``PrimFunc``), unscheduled.
    trace_json
        A record's trace (``Record.trace`` or ``TuningRecord.as_json()[0]``), postprocessing
        included.
    target
        The ``tvm.target.Target`` to build for.
    repeats, number
        Samples, and runs averaged per sample (the runner's ``EvaluatorConfig``).
    runner, builder
        Reuse a runner (its own evaluator settings then apply, not ``repeats``/``number``) or a
        builder; by default a ``LocalRunner`` with ``repeat=repeats`` (one worker process,
        ~2.5 s to start) and an in-process builder are made and shut down.

    Returns
    -------
    Remeasurement

    Raises
    ------
    InvalidRecordError
        If the trace does not replay on ``mod``.
    TuningError
        If the program fails to build or run.

    Examples
    --------
    >>> r = remeasure(mod, record.trace, target)        # doctest: +SKIP
    >>> r.median_s, r.cv                                # doctest: +SKIP
    (3.1e-05, 0.04)
    """
    _check(repeats, number)
    [result] = _measure([_scheduled(mod, trace_json)], target, repeats, number, runner, builder)
    if not result.ok:
        raise TuningError(f"re-measurement failed: {result.error}")
    return Remeasurement.from_samples(result.run_secs)


def measure_side_by_side(
    programs: Sequence[tuple[Any, Any]],
    target: Any,
    *,
    runner: Any = None,
    builder: Any = None,
    repeats: int = DEFAULT_REPEATS,
    number: int = DEFAULT_NUMBER,
    rounds: int = DEFAULT_ROUNDS,
) -> list[Remeasurement | str]:
    """Time programs of different workloads in the same interleaved rounds; store nothing.

    Two figures measured minutes, or machines, apart differ by this machine's load as much as
    by their programs (a store's latency may come from a colleague's machine of the same
    hardware key): measured side by side, in interleaved rounds, both are sampled through the
    same minutes.

    Parameters
    ----------
    programs
        ``(mod, trace_json)`` pairs: an unscheduled task module and a record's trace for it.
    target
        The ``tvm.target.Target`` to build for.
    runner, builder
        A runner to lend with ``ceil(repeats / rounds)`` repeats a round
        (:func:`~tunecache.tvm_layer.measure.evaluating`; ``None``: a new one, closed after)
        and a builder (``None``: an in-process one).
    repeats, number, rounds
        Samples per program in all, runs averaged per sample, and interleaved rounds.

    Returns
    -------
    list of Remeasurement or str
        Per program, in order: its measurement, or why it has none (the trace does not replay
        on the module, or the program failed to build or run).
    """
    _check(repeats, number, rounds)
    if runner is None:  # _measure starts one only if a program replays
        return _measure_traces(programs, target, repeats, number, None, builder, rounds)
    with evaluating(runner, repeat=per_round(repeats, rounds), number=number) as run:
        return _measure_traces(programs, target, repeats, number, run, builder, rounds)


def _measure_traces(programs: Sequence[tuple[Any, Any]], target: Any, repeats: int, number: int, runner: Any,
                    builder: Any, rounds: int) -> list[Remeasurement | str]:
    """Replay each ``(mod, trace_json)`` and measure the ones that replay together
    (:func:`_measure`); per program its :class:`Remeasurement`, or why it has none."""
    out: list[Remeasurement | str] = []
    replayed: list[int] = []  # indexes of the programs that replayed, in the order measured
    mods: list[Any] = []
    for mod, trace_json in programs:
        try:
            mods.append(_scheduled(mod, trace_json))
            replayed.append(len(out))
            out.append("not measured")
        except InvalidRecordError as err:
            out.append(str(err))
    if mods:
        for i, res in zip(replayed, _measure(mods, target, repeats, number, runner, builder, rounds), strict=True):
            out[i] = (Remeasurement.from_samples(res.run_secs) if res.ok
                      else res.error or "the runner returned no run time")
    return out


def remeasure_best(
    store: BaseStore,
    hardware: HardwareKey,
    key: WorkloadKey,
    mod: Any,
    target: Any,
    k: int = 3,
    *,
    repeats: int = DEFAULT_REPEATS,
    number: int = DEFAULT_NUMBER,
    force: bool = False,
    time_limit_s: float | None = None,
    runner: Any = None,
    builder: Any = None,
    rounds: int = DEFAULT_ROUNDS,
) -> list[RemeasuredRecord]:
    """Re-measure the ``k`` best records of ``key`` on ``hardware`` and store what was measured.

    Each re-measured median becomes the record's ranking latency (``Store.set_latency(uid,
    median, cv)``); ``run_secs`` keep the raw tuning measurement. A record that turns out slower
    drops down the ranking and the next one moves up, so this repeats until the current top ``k``
    have all been re-measured (or failed to be): each pass measures the top ``k`` records not
    measured yet, so it ends after at most as many passes as the task has records.

    Parameters
    ----------
    store, hardware, key
        Where the records are: the workload's records measured on ``hardware`` (this machine).
    mod
        The workload's ``IRModule`` (the task's module, unscheduled).
    target
        The ``tvm.target.Target`` matching ``hardware``.
    k
        How many of the best records to make trustworthy.
    repeats, number
        Evaluator settings of each re-measurement (:func:`remeasure`): ``repeats`` samples in
        all, taken in ``rounds``.
    force
        Also re-measure records that were re-measured before (``cv`` set); by default they are
        trusted and skipped.
    time_limit_s
        Start no new pass after this many seconds (``None``: no limit). A pass cut off this way
        leaves promoted records un-re-measured; without a limit the top ``k`` always are.
    runner, builder
        As in :func:`remeasure`; one runner serves every pass (its own ``repeat`` is then
        the samples a round).
    rounds
        The records of a pass are measured in this many interleaved rounds
        (:func:`~tunecache.tvm_layer.measure.measure_mods`), so that load from elsewhere
        during one record's samples does not decide which of two near-tied programs ranks first.

    Returns
    -------
    list of RemeasuredRecord
        Every record re-measured (or that failed to be), in the order measured.

    Raises
    ------
    ConfigError
        If ``k``, ``repeats`` or ``number`` is below 1, or ``time_limit_s`` is not positive.

    Examples
    --------
    >>> remeasure_best(store, hw, task.key, task.mod, target, k=3)   # doctest: +SKIP
    [RemeasuredRecord(uid='9f..', tuned_latency_s=2.79e-3, remeasurement=Remeasurement(3.55e-3, ...))]
    """
    _check(repeats, number, rounds)
    if k < 1:
        raise ConfigError(f"k must be >= 1, got k={k!r}")
    if time_limit_s is not None and time_limit_s <= 0:
        raise ConfigError(f"time_limit_s must be positive, got {time_limit_s!r}")
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    done: dict[str, RemeasuredRecord] = {}
    with _runner_and_builder(runner, builder, _new_runner(repeats, number, rounds)) as (run, build):
        while deadline is None or time.perf_counter() < deadline:
            top = store.best_k(key, hardware, k)
            todo = [r for r in top if r.uid not in done and (force or r.cv is None)]
            if not todo:
                break
            got = _measure_traces([(mod, rec.trace) for rec in todo], target, repeats, number, run, build, rounds)
            for rec, rm in zip(todo, got, strict=True):
                if isinstance(rm, str):
                    done[rec.uid] = RemeasuredRecord(rec.uid, rec.latency_s, None, rm)
                    continue
                store.set_latency(rec.uid, rm.median_s, rm.cv)
                done[rec.uid] = RemeasuredRecord(rec.uid, rec.latency_s, rm)
    return list(done.values())


@dataclass(frozen=True)
class Reranked:
    """What :func:`rerank_store` did to one workload.

    Attributes
    ----------
    workload, name
        The workload's key and name.
    records
        Records re-measured (or that failed to be).
    failed
        Those that could not be (they keep their ranking latency).
    before_uid, after_uid
        The best record before and after.
    stored_s
        The old best's ranking latency before.
    before_s, after_s
        The old best's re-measured median (``None`` if it failed) and the new best's ranking
        latency: ``before_s / after_s`` is what the re-rank gained for this workload.
    """

    workload: WorkloadKey
    name: str
    records: int
    failed: int
    before_uid: str
    after_uid: str
    stored_s: float | None
    before_s: float | None
    after_s: float | None

    @property
    def changed(self) -> bool:
        """Whether another record is now the best."""
        return self.before_uid != self.after_uid

    @property
    def gain(self) -> float | None:
        """The old best's re-measured time over the new best's (1.0 when unchanged)."""
        if not self.changed:
            return 1.0
        if self.before_s is None or not self.after_s:
            return None
        return self.before_s / self.after_s


def rerank_store(
    store: BaseStore,
    hardware: HardwareKey,
    target: Any,
    *,
    top: int = RERANK_TOP,
    rounds: int = RERANK_ROUNDS,
    names: Sequence[str] | None = None,
    family: str | None = None,
    time_limit_s: float | None = None,
    runner: Any = None,
    builder: Any = None,
    on_workload: Any = None,
) -> list[Reranked]:
    """Re-measure the ``top`` best records of every workload of ``store`` on ``hardware``, side
    by side in ``rounds`` interleaved rounds, and rank them by the new medians.

    A search measures each candidate once, at its own moment; two candidates measured minutes
    (or machines) apart are compared through whatever else the machine was doing then. Measured
    beside each other, in rounds that interleave them, they share the same minutes. Run it on
    the machine that serves the store's hardware key (the records of other keys are not
    touched), where nothing else is measuring. Each workload's new ranking is stored as soon as
    it is measured (:meth:`~tunecache.store.Store.set_latency`; raw run times stay as measured).

    Parameters
    ----------
    store
        A writable store.
    hardware
        This machine's hardware key (:func:`~tunecache.tvm_layer.target.hardware_key`).
    target
        The ``tvm.target.Target`` matching ``hardware``.
    top, rounds
        Records re-measured a workload (from its best down), and interleaved rounds. Workloads
        with fewer than two valid records are skipped: nothing to rank.
    names
        Only the workloads of these names (task names, as ``tunecache db ls`` shows them).
    family
        Only the workloads of this operator family.
    time_limit_s
        Start no workload after this many seconds.
    runner, builder
        A runner to lend (:func:`~tunecache.tvm_layer.measure.evaluating`) and a builder;
        ``None``: new ones, closed at the end.
    on_workload
        Called with ``(index, total, Reranked)`` after each workload.

    Returns
    -------
    list of Reranked
        One per workload re-ranked, slowest best first (the order they were measured in).
        Stops early (fewer entries) at ``time_limit_s`` or a stop request
        (:mod:`tunecache.interrupt`).

    Raises
    ------
    ConfigError
        If ``top`` is below 2, ``rounds`` below 1, a name in ``names`` is not a workload of the
        store with records on ``hardware``, or ``time_limit_s`` is not positive.
    """
    from tunecache.errors import did_you_mean
    from tunecache.tvm_layer.convert import workload_from_json

    if top < 2 or rounds < 1:
        raise ConfigError(f"top must be >= 2 (records to rank) and rounds >= 1, got top={top!r}, rounds={rounds!r}")
    if time_limit_s is not None and time_limit_s <= 0:
        raise ConfigError(f"time_limit_s must be positive, got {time_limit_s!r}")
    deadline = None if time_limit_s is None else time.perf_counter() + time_limit_s
    every = store.workloads(family=family)
    stored = every
    if names is not None:  # checked before any record is read: a store may hold many workloads
        wanted = set(names)
        stored = [sw for sw in every if sw.desc.name in wanted]
    todo = [(sw, store.best_k(sw.key, hardware, top)) for sw in stored]
    if names is not None:
        known = {sw.desc.name for sw, best in todo if best}
        missing = [n for n in names if n not in known]
        if missing:
            hint = did_you_mean(missing[0], {sw.desc.name for sw in every})
            raise ConfigError(f"no workload named {missing[0]!r} has records for this hardware in the store"
                              f"{'; ' + hint if hint else ''} (`tunecache db ls` lists them)")
    todo = [(sw, best) for sw, best in todo if len(best) >= 2 and sw.mod_json]
    todo.sort(key=lambda t: -(t[1][0].latency_s or 0.0))
    out: list[Reranked] = []
    with _runner_and_builder(runner, builder, make_runner) as (run, build):
        # A round is the search's unit: three single runs where the runner times cold, else one
        # sample of DEFAULT_NUMBER runs.
        cold = getattr(getattr(run, "evaluator_config", None), "enable_cpu_cache_flush", False)
        samples = COLD_REPEATS if cold else 1
        with evaluating(run, repeat=samples, number=DEFAULT_NUMBER) as lent:
            for i, (sw, best) in enumerate(todo):
                if (deadline is not None and time.perf_counter() >= deadline) or stop_requested():
                    break
                mod = workload_from_json(sw.key, sw.mod_json).mod
                done = remeasure_best(store, hardware, sw.key, mod, target, top, repeats=samples * rounds,
                                      number=DEFAULT_NUMBER, force=True, runner=lent, builder=build, rounds=rounds)
                by_uid = {d.uid: d for d in done}
                old = by_uid.get(best[0].uid)
                now = store.best_k(sw.key, hardware, 1)
                res = Reranked(sw.key, sw.desc.name, len(done), sum(d.remeasurement is None for d in done),
                               best[0].uid, now[0].uid if now else best[0].uid, best[0].latency_s,
                               None if old is None or old.remeasurement is None else old.remeasurement.median_s,
                               now[0].latency_s if now else None)
                out.append(res)
                if on_workload is not None:
                    on_workload(i, len(todo), res)
    return out


def remeasure_bests(done: Sequence[tuple[Any, Any]], ctx: Any, *, k: int = 2,
                    deadline: float | None = None) -> None:
    """Re-measure the best records of every searched task before they serve as its stored best.

    A single tuning measurement is sometimes a lucky one (``shared/TVM_NOTES.md``): the store's
    ranking latency becomes the median of a fresh, repeated measurement (raw run times stay in
    the record for the cost model). Tasks go heaviest first (weight x latency); none starts
    after ``deadline`` (a ``time.time()``), so a time budget covers re-measuring too.

    Parameters
    ----------
    done
        ``(task, outcome)`` pairs: a task (``key``, ``weight``, ``mod``) and its
        :class:`~tunecache.values.TaskOutcome`; only ``tuned`` and ``reused`` outcomes that
        spent more than one trial are re-measured (one trial is one program: nothing to rank),
        and records re-measured before (``cv`` set, as a narrowed search leaves its fastest)
        are skipped.
    ctx
        The :class:`~tunecache.values.SearchContext` the tasks were searched with (its store,
        hardware, target, builder, and runner, lent with the repeats of a round:
        :func:`~tunecache.tvm_layer.measure.evaluating`).
    k
        How many of each task's best records to re-measure.
    deadline
        A ``time.time()`` after which no task starts; neither does one after a stop request
        (:mod:`tunecache.interrupt`).
    """
    # One trial is one program: nothing to rank (BERT's reshapes, ten of a compile's tasks).
    todo = [(t, o) for t, o in done if o.outcome in ("tuned", "reused") and o.trials > 1]
    todo.sort(key=lambda to: -to[0].weight * (to[1].latency_s or 0.0))
    if not todo or (deadline is not None and time.time() >= deadline):
        return
    # The search's worker process; DEFAULT_REPEATS samples a record, in DEFAULT_ROUNDS rounds.
    with evaluating(ctx.runner, repeat=per_round(DEFAULT_REPEATS, DEFAULT_ROUNDS)) as runner:
        for t, _o in todo:
            if (deadline is not None and time.time() >= deadline) or stop_requested():
                break
            remeasure_best(ctx.store, ctx.hardware, t.key, t.mod, ctx.target, k, runner=runner, builder=ctx.builder,
                           rounds=DEFAULT_ROUNDS)


def remeasure_plan(mp: Any, tasks: Sequence[Any], outcomes: dict[str, Any], ctx: Any, *,
                   deadline: float | None = None) -> None:
    """:func:`remeasure_bests` for the tasks of an executed plan, what ``compile`` and the local
    ``warm`` do after :func:`~tunecache.search.execute.execute_plan`.

    ``mp`` is the plan (its ``tasks``: node -> planned task with a ``key``), ``tasks`` the
    tasks it was made of, ``outcomes`` the plan's outcome per node. A stop request during the
    re-measurements (every search done and committed) raises
    :class:`~tunecache.errors.Interrupted` with the plan's trials.
    """
    by_key = {t.key: t for t in tasks}
    remeasure_bests([(by_key[pt.key], outcomes[n]) for n, pt in mp.tasks.items() if n in outcomes], ctx,
                    deadline=deadline)
    if stop_requested():
        raise Interrupted(sum(o.trials for o in outcomes.values()))
