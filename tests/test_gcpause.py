"""The collector pause around a compile's own phases (tunecache.gcpause)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tunecache.gcpause import gc_paused, gc_running


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_nests_and_restores_a_running_collector() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner exit does not resume it
        with gc_running():
            assert gc.isenabled()  # a search inside a compile runs with it
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_caller_who_disabled_the_collector_keeps_it_disabled() -> None:
    gc.disable()
    with gc_paused():
        with gc_running():
            assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_still_restores_it() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()
