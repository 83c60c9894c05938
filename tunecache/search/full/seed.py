"""The predicted program as a full search's first candidate.

MetaSchedule's evolutionary search starts each task from its database's best records (a share
of the first population, ``init_measured_ratio``) and random samples of the design space. For a
task the store has nothing of, that start is random. :func:`seed_tasks` measures the program
:func:`tunecache.search.predict.predict_program` chooses for it (no measurement to choose it)
once, before the task loop, and commits it: the search then mutates a good program from its
first round on, and a search cut short still has it. It is one trial of the task's budget.
"""

from __future__ import annotations

from typing import Any

from tunecache.search.full.allocator import TaskTally
from tunecache.search.full.trivial import _has_valid_record, measure_programs

__all__ = ["seed_tasks"]


def seed_tasks(
    todo: list[int],
    contexts: list[Any],
    tallies: list[TaskTally],
    target: Any,
    database: Any,
    builder: Any,
    runner: Any,
    *,
    limit: int,
) -> set[int]:
    """Measure a predicted program of each task ``todo`` whose workload has no valid record.

    Parameters
    ----------
    todo
        Indices of the tasks to be searched.
    contexts, tallies
        Every task's ``TuneContext`` and tally, by index (tallies updated in place: one trial,
        its time, its latency; the tally is not stopped).
    target, database, builder, runner
        As for the search.
    limit
        Most programs measured (what the global budget has left).

    Returns
    -------
    set of int
        The tasks seeded. A task whose prediction fails is simply searched as before.
    """
    from tunecache.search.predict import predict_program

    chosen: list[tuple[int, Any]] = []
    for i in todo:
        if len(chosen) >= limit:
            break
        if _has_valid_record(database, contexts[i].mod):
            continue  # the search starts from the stored program already
        try:
            got = predict_program(contexts[i].mod, target)
        except Exception:  # noqa: BLE001 - no seed for this task; its search is unchanged
            continue
        if not isinstance(got, str):
            chosen.append((i, got.sch))
    measure_programs(chosen, contexts, tallies, target, database, builder, runner)
    return {i for i, _ in chosen}
