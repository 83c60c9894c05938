"""thread_map: TVM work on every core from threads (no TVM needed to test the helper itself)."""

from __future__ import annotations

import threading
import time

import pytest

from tunecache.tvm_layer.threads import thread_map


def test_results_keep_the_items_order_and_use_several_threads() -> None:
    seen: set[str] = set()

    def work(x: int) -> int:
        seen.add(threading.current_thread().name)
        time.sleep(0.01 * (5 - x % 5))  # later items finish first
        return x * x

    assert thread_map(work, list(range(10)), threads=3, name="t") == [x * x for x in range(10)]
    assert len(seen) > 1 and all(n.startswith("t") for n in seen)
    assert thread_map(work, [7], threads=3) == [49]  # one item: no pool
    assert thread_map(work, [], threads=3) == []


def test_a_failure_is_raised_and_the_items_not_started_are_dropped() -> None:
    started: list[int] = []

    def work(x: int) -> int:
        started.append(x)
        if x == 0:
            raise ValueError("item 0 fails")
        time.sleep(0.2)
        return x

    with pytest.raises(ValueError, match="item 0 fails"):
        thread_map(work, list(range(20)), threads=2)
    assert len(started) < 20
