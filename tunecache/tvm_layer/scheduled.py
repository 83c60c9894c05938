"""Kernels this process has already scheduled from a trace, so serving the trace again is free.

A replayed or predicted program is built twice in one compile: once where it is chosen (the
trace replayed onto the task and postprocessed), and again when the model is built and
``MetaScheduleApplyDatabase`` replays the chosen record's trace onto the same kernel. The second
time repeats the first exactly (same workload, same trace, same target), and on ResNet-18 it cost
0.8 s of CPU: decoding each trace into TVM objects, serializing each kernel for its workload row,
and replaying. :func:`remember` keeps the first result; the store's MetaSchedule database
(:mod:`tunecache.tvm_layer.database`) asks :func:`recall` before replaying.

The key is the workload's structural hash, the digest of the trace's JSON (what a record stores)
and the target, so a kernel is only ever served the program its record names. Bounded: the least
recently used entries go first.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["LIMIT", "clear", "recall", "remember", "trace_digest"]

#: Scheduled kernels kept (a few models' worth; each is one TIR function).
LIMIT = 512

_MEMO: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
_LOCK = threading.Lock()


def trace_digest(trace: Any) -> str:
    """A digest of a record's trace JSON (``[instructions, decisions]``), independent of key order."""
    return hashlib.sha256(json.dumps(trace, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def remember(shash: str, trace: Any, target: Any, mod: Any) -> None:
    """Keep ``mod``, the scheduled ``IRModule`` that replaying ``trace`` on workload ``shash`` for
    ``target`` gives (its postprocessors applied)."""
    key = (str(shash), trace_digest(trace), str(target))
    with _LOCK:
        _MEMO[key] = mod
        _MEMO.move_to_end(key)
        while len(_MEMO) > LIMIT:
            _MEMO.popitem(last=False)


def recall(shash: str, trace: Any, target: Any) -> Any | None:
    """The scheduled ``IRModule`` :func:`remember` kept for this workload, trace and target, or
    ``None``."""
    key = (str(shash), trace_digest(trace), str(target))
    with _LOCK:
        mod = _MEMO.get(key)
        if mod is not None:
            _MEMO.move_to_end(key)
        return mod


def clear() -> None:
    """Forget every kept kernel."""
    with _LOCK:
        _MEMO.clear()
