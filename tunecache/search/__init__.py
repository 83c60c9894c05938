"""Search for tensor programs: narrowed reuse search, full search, plan execution."""

from tunecache.search.full import (
    FullSearchTask,
    SearchProgress,
    SearchSizing,
    TaskResult,
    search_sizing,
    tune_tasks,
)
from tunecache.search.narrow import NarrowResult, narrowed_search
from tunecache.tvm_layer.measure import default_build_workers, make_builder, make_runner

__all__ = [
    "FullSearchTask",
    "NarrowResult",
    "SearchProgress",
    "SearchSizing",
    "TaskResult",
    "default_build_workers",
    "make_builder",
    "make_runner",
    "narrowed_search",
    "search_sizing",
    "tune_tasks",
]
