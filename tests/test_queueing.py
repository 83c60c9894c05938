"""Priorities of the tuning queue (``tunecache.queueing``): pure, no TVM."""

from __future__ import annotations

from types import SimpleNamespace

from tunecache.queueing import HEADROOM, NOMINAL_RATE, expected_tuned_s, queue_entries, served_as
from tunecache.store.keys import HardwareKey, WorkloadKey

HW = HardwareKey('{"kind":"llvm"}')


def _task(name: str, weight: int) -> SimpleNamespace:
    return SimpleNamespace(key=WorkloadKey(name), name=name, weight=weight)


def _replay(record: bool, how: str = "replayed", work: float = 1e8, source_latency_s: float | None = None) -> object:
    return SimpleNamespace(record=object() if record else None, how=how, work=work, source_latency_s=source_latency_s)


def test_what_is_served_worse_and_called_more_comes_first() -> None:
    tasks = [_task("fallback", 1), _task("predicted", 1), _task("predicted_x4", 4), _task("replayed", 1)]
    replays = {WorkloadKey("fallback"): _replay(False), WorkloadKey("predicted"): _replay(True, "predicted"),
               WorkloadKey("predicted_x4"): _replay(True, "predicted"), WorkloadKey("replayed"): _replay(True)}
    got = {e.name: e for e in queue_entries(tasks, replays, HW, "m")}
    assert [got[n].served for n in ("fallback", "predicted", "replayed")] == ["fallback", "predicted", "replayed"]
    assert got["fallback"].priority > got["replayed"].priority > got["predicted"].priority > 0
    assert got["predicted_x4"].priority == 4 * got["predicted"].priority and got["predicted_x4"].weight == 4
    assert all(e.models == ("m",) and e.hardware == HW for e in got.values())
    h = HEADROOM["fallback"]
    assert abs(got["fallback"].priority - 1e8 / NOMINAL_RATE * (1 / (1 - h) - 1)) < 1e-12


def test_a_replay_estimates_from_its_source_and_a_missing_description_is_small() -> None:
    assert expected_tuned_s(_replay(True, source_latency_s=2e-3)) == 2e-3
    assert expected_tuned_s(_replay(True, "predicted", work=2e10)) == 2.0
    assert expected_tuned_s(_replay(False, work=0.0)) == 1e-6 and expected_tuned_s(None) == 1e-6
    assert served_as(None) == "fallback"
