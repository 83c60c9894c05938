"""TVM work on every core, from threads of one process.

TVM's FFI releases the GIL while a call runs (``tvm_ffi``'s default), so the C++ half of
per-kernel work (generating a design space, replaying and postprocessing a trace, lowering and
LLVM code generation) runs in parallel from Python threads, with no second process to start and
no TVM objects to serialize. The Python half still takes turns on the GIL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["thread_map", "workers"]

T = TypeVar("T")
R = TypeVar("R")


def workers() -> int:
    """Threads for TVM work: one per physical core this process may run on."""
    from tunecache.tvm_layer.target import physical_cores

    return physical_cores()


def thread_map(fn: Callable[[T], R], items: Sequence[T], *, threads: int | None = None,
               name: str = "tunecache") -> list[R]:
    """``[fn(x) for x in items]``, on ``threads`` threads (default :func:`workers`), in order.

    An exception raised by ``fn`` is raised here (the first, in item order), and so is a Ctrl-C
    in the calling thread: the items not started yet are dropped, the ones running finish (TVM's
    C++ cannot be interrupted). One item or one thread runs in the calling thread.
    """
    threads = min(threads or workers(), len(items))
    if threads <= 1:
        return [fn(x) for x in items]
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
