"""What full search reports: a progress event per round, a result per task, run times read.

Small frozen values (:class:`SearchProgress`, :class:`TaskResult`) that the MetaSchedule hooks,
the trivial pass and :func:`~tunecache.search.full.tune_tasks` produce, and that the
narrowed search (:mod:`tunecache.search.narrow`) reuses for its own progress events.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from tunecache.search.full.allocator import STOP_ENDED

__all__ = ["FAILED_RUN_SECS", "SearchProgress", "TaskResult", "median_secs"]

#: Run seconds MetaSchedule's ``AddToDatabase`` stores for a candidate that failed.
FAILED_RUN_SECS = 1e10


def median_secs(run_secs: Any) -> float:
    """The median of one measurement's run times (MetaSchedule's ``run_secs``), in seconds.

    Parameters
    ----------
    run_secs
        The repeated run times of one candidate (floats or TVM ``FloatImm`` values).

    Returns
    -------
    float

    Examples
    --------
    >>> median_secs([3e-3, 1e-3, 2e-3])
    0.002
    """
    return float(statistics.median(float(x) for x in run_secs))


@dataclass(frozen=True)
class TaskResult:
    """What full search did for one task in one :func:`~tunecache.search.full.tune_tasks` call.

    Attributes
    ----------
    name
        The task's name.
    trials
        Candidates measured (built and run, or failed trying): the task's trial allocation.
    valid_trials
        Candidates that built and ran.
    seconds
        Wall seconds spent on this task's rounds: its search, building, measuring and
        processing of results (shared start-up is not counted). Its time allocation.
    best_latency_s
        Best (lowest) median run time measured in this call, or ``None`` if no candidate ran.
        A single measurement: re-measure (:mod:`tunecache.search.remeasure`) before trusting it.
    trivial
        The task's design space has no sampling instruction: its distinct programs were each
        measured once, outside the evolutionary search.
    rounds
        Scheduler rounds of the evolutionary search for this task (0 for a trivial task).
    empty_rounds
        Of those, rounds that measured nothing (the search found no new candidate).
    idle_seconds
        Wall seconds of those empty rounds.
    stop_reason
        Why the task stopped: ``"trivial"``, ``"stored"``, ``"converged"``, ``"exhausted"``,
        ``"task trial cap"``, ``"global trial cap"``, ``"time budget"`` or ``"search ended"``.
    """

    name: str
    trials: int
    valid_trials: int
    seconds: float
    best_latency_s: float | None
    trivial: bool = False
    rounds: int = 0
    empty_rounds: int = 0
    idle_seconds: float = 0.0
    stop_reason: str = STOP_ENDED


@dataclass(frozen=True)
class SearchProgress:
    """One progress event, sent after every measured round.

    Attributes
    ----------
    task_name
        The task whose round just finished.
    task_trials
        Trials measured for that task so far.
    total_trials
        Trials measured for all tasks so far.
    max_trials
        The global trial budget of this call.
    elapsed_s
        Wall seconds since :func:`~tunecache.search.full.tune_tasks` started.
    best_latency_s
        The task's best latency so far, or ``None``.
    """

    task_name: str
    task_trials: int
    total_trials: int
    max_trials: int
    elapsed_s: float
    best_latency_s: float | None

