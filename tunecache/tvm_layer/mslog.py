"""MetaSchedule's loggers for one tuning call, set up without touching the caller's logging.

MetaSchedule's own set-up (``get_loggers_from_work_dir`` -> ``create_loggers``) runs
``logging.config.dictConfig``, which closes *every* handler of the process (a user's file
handler, a test framework's capture handlers) and crashes with ``AttributeError: 'NoneType'
object has no attribute 'format'`` when a handler without a name is attached to
``tvm.s_tir.meta_schedule`` (pytest 9.2 leaves its ``LogCaptureHandler`` there). tunecache never
calls it: :func:`ms_loggers` adds its own handlers for the duration of a call and removes them
after, and leaves every handler it did not add where it was.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

__all__ = ["MS_LOGGER", "ms_loggers"]

#: MetaSchedule's root logger: its task scheduler and search strategies log below it.
MS_LOGGER = "tvm.s_tir.meta_schedule"
_FORMAT = logging.Formatter("%(asctime)s [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")


def _task_logger_names(task_names: Sequence[str]) -> list[str]:
    """One logger name per task, as MetaSchedule names them (``...task_07_fused_dense``)."""
    width = len(str(max(len(task_names) - 1, 0)))
    return [f"{MS_LOGGER}.logging.task_{i:0{width}d}_{name[:100]}" for i, name in enumerate(task_names)]


def _file_handler(path: str) -> logging.Handler:
    handler = logging.FileHandler(path, mode="a", delay=True)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(_FORMAT)
    return handler


@contextlib.contextmanager
def ms_loggers(work_dir: str | os.PathLike[str], task_names: Sequence[str], *,
               console: bool = False) -> Iterator[list[logging.Logger]]:
    """Yield one logger per task for ``TuneContext(logger=...)``, logging under ``work_dir/logs``.

    Parameters
    ----------
    work_dir
        The call's work directory: the task scheduler logs to
        ``logs/tvm.s_tir.meta_schedule.task_scheduler.log``, each task to a file of its own.
    task_names
        The tasks' names, in the order of the contexts.
    console
        Also print MetaSchedule's INFO lines on stderr; by default only its warnings.

    Yields
    ------
    list of logging.Logger
        The tasks' loggers. On exit the handlers added here are closed and removed, and the
        loggers' levels and ``propagate`` flags are restored; handlers that were attached
        before (named or not) stay attached and untouched throughout.
    """
    log_dir = os.path.join(os.fspath(work_dir), "logs")
    os.makedirs(log_dir, exist_ok=True)
    root = logging.getLogger(MS_LOGGER)
    console_handler = logging.StreamHandler(sys.stderr)  # stdout stays the caller's (--json)
    console_handler.setLevel(logging.INFO if console else logging.WARNING)
    console_handler.setFormatter(_FORMAT)
    added: list[tuple[logging.Logger, logging.Handler]] = [
        (root, console_handler),
        (root, _file_handler(os.path.join(log_dir, f"{MS_LOGGER}.task_scheduler.log"))),
    ]
    loggers = [logging.getLogger(name) for name in _task_logger_names(task_names)]
    added += [(lg, _file_handler(os.path.join(log_dir, f"{lg.name}.log"))) for lg in loggers]
    touched = {id(lg): lg for lg, _ in added}
    saved = {key: (lg.level, lg.propagate) for key, lg in touched.items()}
    for lg in touched.values():
        if lg is not root or lg.level == logging.NOTSET:  # a level the user set on the root stays
            lg.setLevel(logging.DEBUG)
        lg.propagate = False  # MetaSchedule's DEBUG lines stay out of the caller's root handlers
    for lg, handler in added:
        lg.addHandler(handler)
    try:
        yield loggers
    finally:
        for lg, handler in added:
            lg.removeHandler(handler)
            handler.close()
        for key, lg in touched.items():
            lg.setLevel(saved[key][0])
            lg.propagate = saved[key][1]
