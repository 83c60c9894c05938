"""What full search is given: a task (its module, weight and cap), the schedulers, and the checks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.errors import ConfigError
from tunecache.search.full.allocator import EarlyStopping

__all__ = ["SCHEDULERS", "FullSearchTask", "validate"]


#: Task schedulers :func:`tune_tasks` can run.
SCHEDULERS = ("tunecache", "gradient")


@dataclass(frozen=True)
class FullSearchTask:
    """One tuning task: a TIR module and how much it matters.

    Attributes
    ----------
    name
        Unique task name (used in logs, progress events and results).
    mod
        A ``tvm.ir.IRModule`` holding the one ``PrimFunc`` to tune, or the ``PrimFunc`` itself
        (for a task extracted from a Relax model this is ``ExtractedTask.dispatched[0]``).
    weight
        How many times the model calls this task; the gradient scheduler spends more trials on
        tasks whose weighted latency is larger. Must be positive.
    max_trials
        Most candidates this task may get in this search, below the search's own per-task cap
        (``None``: that cap alone). A resumed task gets what is left of its budget, so it is
        never tuned past it; a round is cut to fit.
    """

    name: str
    mod: Any
    weight: float = 1.0
    max_trials: int | None = None

    @classmethod
    def from_extracted(cls, task: Any) -> FullSearchTask:
        """Convert a MetaSchedule ``ExtractedTask`` (from ``relax_integration.extract_tasks``)."""
        return cls(name=str(task.task_name), mod=task.dispatched[0], weight=float(task.weight))


def validate(
    tasks: Sequence[FullSearchTask],
    trials_per_task: int,
    max_trials_global: int | None,
    time_budget_s: float | None,
    max_trials_per_task: int | None,
    scheduler: str,
    early_stopping: EarlyStopping | None,
) -> None:
    """Refuse arguments :func:`~tunecache.search.full.tune.tune_tasks` cannot run with, naming them.

    Raises
    ------
    ConfigError
        If there is no task, a name repeats, a weight or budget is not positive, or the
        scheduler is unknown or cannot stop tasks early.
    """
    if not tasks:
        raise ConfigError("tune_tasks needs at least one task; got an empty list")
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"task names must be unique; repeated: {dupes}")
    bad = [(t.name, t.weight) for t in tasks if not (t.weight > 0 and math.isfinite(t.weight))]
    if bad:
        raise ConfigError(f"task weights must be positive and finite; got {bad}")
    if trials_per_task < 1:
        raise ConfigError(f"trials_per_task must be >= 1, got {trials_per_task!r}")
    if max_trials_global is not None and max_trials_global < 1:
        raise ConfigError(f"max_trials_global must be >= 1 or None, got {max_trials_global!r}")
    if max_trials_per_task is not None and max_trials_per_task < 1:
        raise ConfigError(f"max_trials_per_task must be >= 1 or None, got {max_trials_per_task!r}")
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError(f"time_budget_s must be positive or None, got {time_budget_s!r}")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"scheduler must be one of {SCHEDULERS}, got {scheduler!r}")
    if scheduler == "gradient" and early_stopping is not None:
        raise ConfigError(
            "early stopping needs scheduler='tunecache' (MetaSchedule's GradientBased scheduler "
            "cannot skip a task in its first round-robin pass); pass early_stopping=None"
        )
