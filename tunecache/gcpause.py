"""Python's cyclic garbage collector paused while a compile allocates.

A compile makes hundreds of thousands of short-lived Python objects (torch.export's graphs, TVM
object wrappers, trace JSON), and each allocation burst can trigger a full collection that
traces the whole heap: on small_cnn 0.22-0.25 s of a 0.8 s compile, in one compile of two or
three (``docs/NOTES.md``, session 12). Almost nothing a compile allocates is cyclic garbage;
reference counting frees it. The collector is paused for the compile's own phases (import,
preparation, replays, build), never for a search, which can run for hours, and the caller's
setting is restored after (a caller who disabled it keeps it disabled).
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused", "gc_running"]

_LOCK = threading.Lock()
_DEPTH = 0
_WAS_ENABLED = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector meanwhile (nested and concurrent uses pause it once)."""
    global _DEPTH, _WAS_ENABLED
    with _LOCK:
        if _DEPTH == 0:
            _WAS_ENABLED = gc.isenabled()
            gc.disable()
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _WAS_ENABLED:
                gc.enable()


@contextlib.contextmanager
def gc_running() -> Iterator[None]:
    """Inside :func:`gc_paused`, run the collector again meanwhile if the caller had it running
    (a search inside a compile: it runs as long as its budget says)."""
    with _LOCK:
        resume = _DEPTH > 0 and _WAS_ENABLED
    if resume:
        gc.enable()
    try:
        yield
    finally:
        if resume:
            with _LOCK:
                if _DEPTH > 0:
                    gc.disable()
