"""Search for tensor programs: narrowed reuse search, full search, plan execution."""

from tunecache.search.full import (
    FullSearchTask,
    SearchProgress,
    SearchSizing,
    TaskResult,
    search_sizing,
    tune_tasks,
)
from tunecache.search.measure import default_build_workers, make_builder, make_runner

__all__ = [
    "FullSearchTask",
    "SearchProgress",
    "SearchSizing",
    "TaskResult",
    "default_build_workers",
    "make_builder",
    "make_runner",
    "search_sizing",
    "tune_tasks",
]
