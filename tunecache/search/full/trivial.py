"""Trivial tasks: a fixed design space's distinct programs, measured once outside the search.

A task whose design space has no sampling instruction (elementwise ops, reshapes, transposes)
has one or a few fixed programs; the evolutionary search could only re-propose them, in empty
rounds. :func:`fixed_programs` finds them and :func:`measure_fixed` builds and measures every
one once, commits it and fills the task's tally.
"""

from __future__ import annotations

import time
from typing import Any

from tunecache.search.full.allocator import STOP_STORED, STOP_TRIVIAL, TaskTally
from tunecache.search.full.results import FAILED_RUN_SECS, median_secs
from tunecache.tvm_layer import load_tvm

__all__ = ["fixed_programs", "measure_fixed"]


def fixed_programs(context: Any) -> list[Any] | None:
    """Return the distinct programs of a task whose design space is fixed, else ``None``.

    A design space is fixed when none of its schedules holds a sampling instruction
    (``Sample*``): then the evolutionary search can only ever propose the design spaces
    themselves. Each is post-processed (as MetaSchedule does before building) and duplicates
    are dropped by structural hash.

    Parameters
    ----------
    context
        A ``TuneContext`` with a space generator (``"post-order-apply"``).

    Returns
    -------
    list of tvm.s_tir.Schedule or None
        The post-processed schedules, one per distinct program; ``None`` if the space samples
        or no schedule survives its postprocessors (left to the search, which reports it).
    """
    load_tvm()
    import tvm_ffi

    spaces = list(context.space_generator.generate_design_space(context.mod))
    if not spaces:
        return None
    for sch in spaces:
        if any(inst.kind.name.startswith("Sample") for inst in sch.trace.insts):
            return None
    postprocs = list(context.space_generator.postprocs or [])
    programs: list[Any] = []
    seen: set[int] = set()
    for space in spaces:
        sch = space.copy()
        sch.enter_postproc()
        if not all(p.apply(sch) for p in postprocs):
            continue
        h = int(tvm_ffi.structural_hash(sch.mod))
        if h not in seen:
            seen.add(h)
            programs.append(sch)
    return programs or None


def _has_valid_record(database: Any, mod: Any) -> bool:
    workload = database.commit_workload(mod)
    for record in database.get_top_k(workload, 1):
        if record.run_secs is not None and median_secs(record.run_secs) < FAILED_RUN_SECS:
            return True
    return False


def measure_fixed(
    fixed: dict[int, list[Any]],
    contexts: list[Any],
    tallies: list[TaskTally],
    target: Any,
    database: Any,
    builder: Any,
    runner: Any,
) -> None:
    """Build and measure every fixed task's programs in one batch; commit them; fill tallies.

    A task whose workload already has a valid record in ``database`` is not measured again:
    its tally stops with ``STOP_STORED``. Every other program is measured once and committed
    (a failed one with run time :data:`~tunecache.search.full.results.FAILED_RUN_SECS`), and
    its task's tally stops with ``STOP_TRIVIAL``; the batch's wall time is shared evenly.

    Parameters
    ----------
    fixed
        Task index -> its distinct programs (:func:`fixed_programs`).
    contexts
        Every task's ``TuneContext``, by task index.
    tallies
        Every task's :class:`~tunecache.search.full.allocator.TaskTally`, by task index;
        updated in place.
    target
        The ``tvm.target.Target`` to build for.
    database
        The MetaSchedule ``Database`` the records are committed to.
    builder, runner
        MetaSchedule builder and runner (:func:`~tunecache.tvm_layer.measure.measure_mods`).
    """
    todo: list[tuple[int, Any]] = []
    for i, programs in fixed.items():
        if _has_valid_record(database, contexts[i].mod):
            tallies[i].stop = STOP_STORED
        else:
            todo.extend((i, sch) for sch in programs)
    measure_programs(todo, contexts, tallies, target, database, builder, runner)
    for i, _ in todo:
        tallies[i].stop = STOP_TRIVIAL


def measure_programs(todo: list[tuple[int, Any]], contexts: list[Any], tallies: list[TaskTally], target: Any,
                     database: Any, builder: Any, runner: Any) -> None:
    """Build and measure ``(task index, schedule)`` pairs in one batch, commit each to ``database``
    (a failed one with :data:`FAILED_RUN_SECS`) and count it in its task's tally (one trial, an
    even share of the batch's wall time, its latency); the tallies are not stopped."""
    if not todo:
        return
    from tvm.s_tir import meta_schedule as ms

    from tunecache.tvm_layer.measure import measure_mods

    start = time.perf_counter()
    results = measure_mods([sch.mod for _, sch in todo], target, builder=builder, runner=runner)
    share = (time.perf_counter() - start) / len(todo)
    for (i, sch), res in zip(todo, results, strict=True):
        run_secs = list(res.run_secs) if res.ok else [FAILED_RUN_SECS]
        workload = database.commit_workload(contexts[i].mod)
        database.commit_tuning_record(
            ms.database.TuningRecord(
                sch.trace,
                workload,
                run_secs,
                target,
                ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True),
            )
        )
        tally = tallies[i]
        tally.trials += 1
        tally.seconds += share
        if res.ok:
            tally.valid += 1
            secs = median_secs(res.run_secs)
            tally.best = secs if tally.best is None else min(tally.best, secs)
