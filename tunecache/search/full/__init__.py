"""Full search: MetaSchedule's evolutionary search over many tasks, run by tunecache's engine."""

from tunecache.search.full.allocator import (
    MIN_WINDOW_TRIALS,
    STOP_CONVERGED,
    STOP_ENDED,
    STOP_EXHAUSTED,
    STOP_GLOBAL_CAP,
    STOP_INTERRUPTED,
    STOP_STORED,
    STOP_TASK_CAP,
    STOP_TIME,
    STOP_TRIVIAL,
    Allocator,
    EarlyStopping,
    TaskTally,
)
from tunecache.search.full.hooks import TrialPool
from tunecache.search.full.results import FAILED_RUN_SECS, SearchProgress, TaskResult
from tunecache.search.full.sizing import (
    COMPACT_BELOW_TRIALS_PER_ITER,
    COMPACT_GENETIC_ITERS,
    COMPACT_INIT_MIN_UNMEASURED,
    COMPACT_POPULATION,
    FIRST_PASS_SECONDS_PER_ROUND,
    FIRST_PASS_SECONDS_PER_TRIAL,
    FIRST_PASS_SHARE,
    SearchSizing,
    compact_search,
    fit_to_time_budget,
    search_sizing,
)
from tunecache.search.full.task import SCHEDULERS, FullSearchTask
from tunecache.search.full.trivial import fixed_programs
from tunecache.search.full.tune import tune_tasks

__all__ = [
    "COMPACT_BELOW_TRIALS_PER_ITER",
    "COMPACT_GENETIC_ITERS",
    "COMPACT_INIT_MIN_UNMEASURED",
    "COMPACT_POPULATION",
    "FAILED_RUN_SECS",
    "FIRST_PASS_SECONDS_PER_ROUND",
    "FIRST_PASS_SECONDS_PER_TRIAL",
    "FIRST_PASS_SHARE",
    "MIN_WINDOW_TRIALS",
    "SCHEDULERS",
    "STOP_CONVERGED",
    "STOP_ENDED",
    "STOP_EXHAUSTED",
    "STOP_GLOBAL_CAP",
    "STOP_INTERRUPTED",
    "STOP_STORED",
    "STOP_TASK_CAP",
    "STOP_TIME",
    "STOP_TRIVIAL",
    "Allocator",
    "EarlyStopping",
    "FullSearchTask",
    "SearchProgress",
    "SearchSizing",
    "TaskResult",
    "TaskTally",
    "TrialPool",
    "compact_search",
    "fit_to_time_budget",
    "fixed_programs",
    "search_sizing",
    "tune_tasks",
]
