"""Ctrl-C during a search: stop at the next safe point instead of unwinding through TVM.

A ``KeyboardInterrupt`` raised while MetaSchedule's C++ task loop is calling back into Python
(the task picker, a measure callback, the builder) unwinds through C++ frames: the process
ended in ``std::terminate`` ("Segfault encountered") and left its work directory behind. And a
Ctrl-C at a terminal signals the whole process group, so the build and measurement worker
processes died with tracebacks of their own, and the candidates they were running came back as
failures.

While a search runs, :func:`stop_on_interrupt` changes both:

- the first SIGINT only *asks* the search to stop (:func:`stop_requested`); the search checks
  at safe points (before every round of a full search, between plan steps), so the round in
  flight is measured and committed, the worker processes are shut down in order, the work
  directory is removed, and the search raises :class:`tunecache.errors.Interrupted`. A second
  SIGINT raises ``KeyboardInterrupt`` at once;
- SIGINT is blocked in the threads the search starts, so the worker processes those threads
  start inherit a blocked SIGINT: a Ctrl-C at the terminal reaches tunecache alone. One helper
  thread keeps SIGINT unblocked so that the signal is still received (Python runs the handler
  in the main thread).

Outside a search (importing a model, building the library) Ctrl-C raises ``KeyboardInterrupt``
as usual: nothing is running in other processes then.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["request_stop", "stop_on_interrupt", "stop_requested"]

_stop = threading.Event()
_active = threading.Lock()


def stop_requested() -> bool:
    """Whether a stop was asked for (by a Ctrl-C, or :func:`request_stop`) during this search."""
    return _stop.is_set()


def request_stop() -> None:
    """Ask the search in progress to stop at its next safe point (what the first Ctrl-C does)."""
    _stop.set()


def _receive(done: threading.Event) -> None:
    """Body of the helper thread: the one thread with SIGINT unblocked while a search runs."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    done.wait()


@contextlib.contextmanager
def stop_on_interrupt(notice: str = "stopping after the measurements in flight (Ctrl-C again to stop at once)",
                      ) -> Iterator[None]:
    """Make Ctrl-C a stop request for the duration of a search (see the module docstring).

    Parameters
    ----------
    notice
        Printed on stderr at the first Ctrl-C.

    Notes
    -----
    Does nothing but clear the stop flag outside the main thread (signals go to the main
    thread only), when SIGINT is ignored (``nohup``), or inside another ``stop_on_interrupt``.
    """
    main = threading.current_thread() is threading.main_thread()
    if not main or not _active.acquire(blocking=False):
        yield
        return
    _stop.clear()
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN or not hasattr(signal, "pthread_sigmask"):
            yield
            return
        presses = [0]

        def handler(signum: int, frame: Any) -> None:
            presses[0] += 1
            if presses[0] > 1:
                raise KeyboardInterrupt
            _stop.set()
            print(f"\ntunecache: {notice}", file=sys.stderr, flush=True)

        signal.signal(signal.SIGINT, handler)
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        done = threading.Event()
        helper = threading.Thread(target=_receive, args=(done,), name="tunecache-sigint", daemon=True)
        helper.start()
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a pending SIGINT is handled here
            done.set()
            helper.join()
            signal.signal(signal.SIGINT, previous)
    finally:
        _stop.clear()
        _active.release()
