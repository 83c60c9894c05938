"""What ``tune="background"`` queues for ``tunecache worker``, and how urgently.

A background compile measures nothing: each miss is served by a replay, a prediction or TVM's
default schedule (:mod:`tunecache.replay`) and queued in the store
(:meth:`~tunecache.store.contract.BaseStore.enqueue`). The worker takes the highest priority
first: the seconds per model run that tuning the task may win, ``weight x latency left to win``.
Nothing about the served program was measured, so both factors are estimates:

* the latency of a tuned program of the task: a replay's source latency scaled by the two tasks'
  iteration-space sizes, else the task's size at :data:`NOMINAL_RATE`;
* the share of the served program's latency that tuning wins back, :data:`HEADROOM`, by how the
  task is served (set from this project's measurements, ``docs/NOTES.md``).

Priorities order tasks; they are not a forecast to be read as seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.values import QueueEntry

__all__ = ["HEADROOM", "NOMINAL_RATE", "expected_tuned_s", "queue_entries", "served_as"]

#: Loop-nest iterations a second of a tuned CPU program, when nothing measured says otherwise
#: (BERT's 128x768x3072 dense: 3.0e8 multiply-adds in ~8 ms on 2 AVX-512 cores, ~4e10/s; a
#: memory-bound elementwise kernel far fewer): an order of magnitude, used only to rank tasks.
NOMINAL_RATE = 1e10

#: Share of the served program's time a search wins back, by how the task is served: TVM's
#: default schedule ran 100-600x a tuned program's time on this project's CPUs; predicted
#: programs 1.0-1.35x, replays of a similar program 1.0-2.1x (``tools/bench_never.py``,
#: ``tools/bench_newmodel.py``).
HEADROOM = {"fallback": 0.99, "predicted": 0.25, "replayed": 0.35}


def served_as(replay: Any) -> str:
    """How a miss is served while it waits: ``replayed``, ``predicted`` or ``fallback``."""
    if replay is None or replay.record is None:
        return "fallback"
    return "predicted" if replay.how == "predicted" else "replayed"


def expected_tuned_s(replay: Any) -> float:
    """An estimate of a tuned program's latency on the miss (seconds): the replay's scaled source
    latency when it has one, else the miss's work at :data:`NOMINAL_RATE` (1 µs when the miss
    was not described)."""
    if replay is not None and replay.source_latency_s:
        return float(replay.source_latency_s)
    work = float(getattr(replay, "work", 0.0) or 0.0)
    return work / NOMINAL_RATE if work > 0 else 1e-6


def queue_entries(misses: Sequence[Any], replays: Mapping[WorkloadKey, Any], hw: HardwareKey,
                  model: str) -> list[QueueEntry]:
    """The queue entries of a background compile's misses.

    Parameters
    ----------
    misses
        The tasks the store had no program for (``key``, ``name``, ``weight``).
    replays
        How each is served now (:class:`tunecache.replay.Replay` by workload key).
    hw
        The hardware key to tune them for.
    model
        The name of the model that asked.

    Returns
    -------
    list of QueueEntry
        One per miss, with its priority: ``weight x expected tuned latency x (1/(1-h) - 1)`` for
        the headroom ``h`` of how it is served (the time a run spends above a tuned program).
    """
    out = []
    for t in misses:
        r = replays.get(t.key)
        served = served_as(r)
        h = HEADROOM[served]
        left = expected_tuned_s(r) * (1.0 / (1.0 - h) - 1.0)  # served latency minus tuned latency
        out.append(QueueEntry(workload=t.key, hardware=hw, name=t.name, weight=int(t.weight),
                              priority=int(t.weight) * left, served=served, models=(model,) if model else ()))
    return out
