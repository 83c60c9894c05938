"""The built-library cache: a compile whose model, target and records are unchanged loads a ``.so``.

Real compiles of the small CNN and a Relax matmul against real SQLite stores; the cache key must
change with the weights and with the records the kernels are built from.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import tunecache
from tunecache import zoo
from tunecache.libcache import LibraryCache, library_key
from tunecache.tvm_layer import frontend

torch = pytest.importorskip("torch")

LOADED = "loaded from the library cache"


def _compile(model, store, libs, **kw):
    return tunecache.compile(model.module, example_inputs=model.example_inputs, store=str(store),
                             library_cache=libs, progress=False, **kw)


@pytest.mark.tvm
def test_unchanged_compile_loads_the_library_and_other_weights_do_not(tmp_path) -> None:
    libs, db = tmp_path / "libs", tmp_path / "s.db"
    a, b = zoo.get("small_cnn", seed=0), zoo.get("small_cnn", seed=1)
    first = _compile(a, db, libs, tune="never")
    assert first.report.build == "built, cached"
    assert len(LibraryCache(libs).entries()) == 1
    second = _compile(a, db, libs, tune="never")
    assert second.report.build == LOADED
    x = a.example_inputs[0]
    np.testing.assert_array_equal(second(x).numpy(), first(x).numpy())
    # The cached library is what export_library writes, and it loads back.
    lib = frontend.load_library(second.export_library(tmp_path / "m.so"))
    np.testing.assert_array_equal(frontend.run(lib, second.imported, x).numpy(), first(x).numpy())

    # Same structure and tasks, other weights: another library, with the other model's outputs.
    other = _compile(b, db, libs, tune="never")
    assert other.report.build == "built, cached"
    with torch.no_grad():
        ref = b.module(*b.example_inputs).numpy()
    np.testing.assert_allclose(other(*b.example_inputs).numpy(), ref, rtol=1e-4, atol=1e-4)
    assert len(LibraryCache(libs).entries()) == 2


@pytest.mark.tvm
def test_a_new_best_record_rebuilds(tmp_path) -> None:
    from _models import relax_matmul_relu

    libs, db = tmp_path / "libs", str(tmp_path / "s.db")
    mod = relax_matmul_relu(16, 32, 24)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 32)).astype("float32"), rng.standard_normal((32, 24)).astype("float32")
    untuned = tunecache.compile(mod, store=db, tune="never", library_cache=libs, progress=False)
    assert untuned.report.build == "built, cached"
    tuned = tunecache.compile(mod, store=db, trials_per_task=2, seed=1, library_cache=libs, progress=False)
    assert tuned.report.count("tuned") >= 1
    assert tuned.report.build == "built, cached"  # the kernels now come from records: a new key
    again = tunecache.compile(mod, store=db, library_cache=libs, progress=False)
    assert again.report.build == LOADED and again.report.trials == 0
    np.testing.assert_allclose(again(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.tvm
def test_a_corrupt_cached_library_is_rebuilt(tmp_path, caplog) -> None:
    libs, db = tmp_path / "libs", tmp_path / "s.db"
    m = zoo.get("small_cnn")
    _compile(m, db, libs, tune="never")
    (entry,) = LibraryCache(libs).entries()
    entry.write_bytes(b"\x7fELF truncated by a crash")
    with caplog.at_level(logging.WARNING, logger="tunecache"):
        cm = _compile(m, db, libs, tune="never")
    assert cm.report.build == "built, cached"
    assert "does not load" in caplog.text
    with torch.no_grad():
        ref = m.module(*m.example_inputs).numpy()
    np.testing.assert_allclose(cm(*m.example_inputs).numpy(), ref, rtol=1e-4, atol=1e-4)
    assert LibraryCache(libs).load(entry.stem) is not None  # the rebuilt file loads


@pytest.mark.tvm
def test_library_cache_off_always_builds(tmp_path) -> None:
    m = zoo.get("small_cnn")
    for _ in range(2):
        cm = _compile(m, tmp_path / "s.db", False, tune="never")
        assert cm.report.build == "built"


class _Exe:
    """Stands in for an executable: ``export_library`` writes a file (no TVM needed)."""

    def __init__(self, payload: bytes = b"lib") -> None:
        self.payload = payload

    def export_library(self, path: str) -> None:
        Path(path).write_bytes(self.payload)


def test_cache_keeps_the_most_recent_entries(tmp_path) -> None:
    import os

    cache = LibraryCache(tmp_path, max_entries=3)
    for i in range(5):
        p = cache.save(f"k{i}", _Exe())
        assert p is not None
        os.utime(p, (1000 + i, 1000 + i))
    cache._prune()
    assert [p.stem for p in cache.entries()] == ["k4", "k3", "k2"]
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def test_a_library_that_loads_slower_than_it_builds_is_not_kept(tmp_path) -> None:
    from tunecache.libcache import LOAD_BYTES_PER_S

    cache = LibraryCache(tmp_path)
    payload = b"w" * 1_000_000  # weights dominate: loading takes ~1e6 / LOAD_BYTES_PER_S s
    load_s = len(payload) / LOAD_BYTES_PER_S
    assert cache.save("big", _Exe(payload), build_s=load_s / 10) is None
    assert cache.skipped("big") and cache.entries() == [] and cache.load("big") is None
    assert cache.save("code", _Exe(payload), build_s=load_s * 10) is not None  # codegen dominates
    assert not cache.skipped("code") and [p.stem for p in cache.entries()] == ["code"]


def test_a_cache_that_cannot_be_written_does_not_fail_the_compile(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert LibraryCache(blocker / "libs").save("k", _Exe()) is None


def test_key_depends_on_every_part() -> None:
    base = dict(model_hash="1", target="llvm", hardware_id="h", programs=[("w1", "u1"), ("w2", None)])
    k = library_key(**base)
    assert library_key(**{**base, "programs": [("w2", None), ("w1", "u1")]}) == k  # order-free
    for change in ({"model_hash": "2"}, {"target": "llvm -mcpu=x"}, {"hardware_id": "g"},
                   {"programs": [("w1", "u9"), ("w2", None)]}, {"programs": [("w1", "u1"), ("w2", "u2")]}):
        assert library_key(**{**base, **change}) != k, change


@pytest.mark.tvm
def test_a_known_model_with_all_hits_loads_without_being_prepared(tmp_path, monkeypatch) -> None:
    """The tasks a model was prepared into are remembered next to its library: the next compile
    (every task a hit) loads the library without preparing the model (FoldConstant over every
    weight). A damaged task index, or a model with other weights, goes the long way."""
    m, other = zoo.get("small_cnn", seed=0), zoo.get("small_cnn", seed=1)
    libs, db = tmp_path / "libs", tmp_path / "s.db"
    first = _compile(m, db, libs, trials_per_task=2, seed=1)
    assert first.report.trials > 0 and first.report.build == "built, cached"

    def no_prepare(*_a, **_k):
        raise AssertionError("prepared again")

    real_prepare = frontend.prepare_for_tuning
    monkeypatch.setattr(frontend, "prepare_for_tuning", no_prepare)
    again = _compile(m, db, libs)
    assert again.report.build == LOADED and again.report.trials == 0
    assert [(t.name, t.weight, t.outcome) for t in again.report.tasks] == [
        (t.name, t.weight, "hit") for t in first.report.tasks]
    x = m.example_inputs[0]
    np.testing.assert_array_equal(again(x).numpy(), first(x).numpy())
    with pytest.raises(AssertionError, match="prepared again"):  # other weights: another model
        _compile(other, db, libs)

    for index in libs.glob("*.tasks.json"):
        index.write_text("{not json")
    monkeypatch.setattr(frontend, "prepare_for_tuning", real_prepare)
    third = _compile(m, db, libs)
    assert third.report.build == LOADED and third.report.count("hit") == len(first.report.tasks)
