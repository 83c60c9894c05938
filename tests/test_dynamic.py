"""``DynamicModel`` (``compile(..., dynamic=True)``): one compiled variant per input shape.

The cache itself with a fake ``compile_variant`` (no TVM): compiled once per key, LRU eviction,
one compile for two threads asking for the same new shape, clear errors. Then the real path: a
tiny CNN at three batch sizes and a transformer encoder layer at three sequence lengths, each
variant compiled by ``tunecache.compile`` (``tune="never"``) and matching PyTorch.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from tunecache.dynamic import DynamicModel, check_dynamic_model, shape_key
from tunecache.errors import ConfigError

# -- the cache, with a fake compile ------------------------------------------------------------


class FakeReport:
    def __init__(self, key: Any) -> None:
        self.key = key


class FakeVariant:
    """Doubles its input; its report names the shapes it was compiled for."""

    def __init__(self, inputs: tuple[Any, ...]) -> None:
        self.report = FakeReport(shape_key(inputs))
        self.refreshed = False

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return 2 * x

    def refresh(self) -> FakeVariant:
        new = FakeVariant.__new__(FakeVariant)
        new.report, new.refreshed = self.report, True
        return new


class CountingCompile:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[Any] = []
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(self, inputs: tuple[Any, ...]) -> FakeVariant:
        with self._lock:
            self.calls.append(shape_key(inputs))
        time.sleep(self.delay_s)
        return FakeVariant(inputs)


def x(*shape: int, dtype: str = "float32") -> np.ndarray:
    return np.ones(shape, dtype)


def test_each_shape_is_compiled_once_and_runs() -> None:
    compile_variant = CountingCompile()
    dm = DynamicModel(object(), compile_variant)
    for _ in range(2):
        for b in (1, 2, 3):
            np.testing.assert_array_equal(dm(x(b, 4)), 2 * x(b, 4))
    assert compile_variant.calls == [(((1, 4), "float32"),), (((2, 4), "float32"),), (((3, 4), "float32"),)]
    dm(x(2, 4, dtype="float64"))  # another dtype is another variant
    assert len(compile_variant.calls) == 4 and len(dm) == 4
    assert list(dm.variants) == compile_variant.calls
    assert dm.report.key == (((2, 4), "float64"),)


def test_least_recently_used_variant_is_evicted() -> None:
    compile_variant = CountingCompile()
    dm = DynamicModel(object(), compile_variant, max_variants=2)
    dm(x(1, 4))
    dm(x(2, 4))
    dm(x(1, 4))  # 1 is now the most recently used: 2 goes first
    dm(x(3, 4))
    assert list(dm.variants) == [(((1, 4), "float32"),), (((3, 4), "float32"),)]
    assert dm.report.key == (((3, 4), "float32"),)
    dm(x(2, 4))  # evicted: compiled again
    assert [k[0][0][0] for k in compile_variant.calls] == [1, 2, 3, 2]
    assert len(dm) == 2


def test_two_threads_compile_a_new_shape_once() -> None:
    compile_variant = CountingCompile(delay_s=0.2)
    dm = DynamicModel(object(), compile_variant)
    results: list[np.ndarray] = []
    threads = [threading.Thread(target=lambda: results.append(dm(x(5, 4)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compile_variant.calls) == 1 and len(results) == 4


def test_a_failed_compile_is_not_cached() -> None:
    calls = []

    def flaky(inputs: tuple[Any, ...]) -> FakeVariant:
        calls.append(1)
        if len(calls) == 1:
            raise ConfigError("first compile fails")
        return FakeVariant(inputs)

    dm = DynamicModel(object(), flaky)
    with pytest.raises(ConfigError, match="first compile fails"):
        dm(x(1, 4))
    assert len(dm) == 0
    dm(x(1, 4))
    assert len(calls) == 2 and len(dm) == 1


def test_refresh_replaces_variants_that_have_better_programs() -> None:
    dm = DynamicModel(object(), CountingCompile())
    dm(x(1, 4))
    dm(x(2, 4))
    assert dm.refresh() == 2
    assert all(v.refreshed for v in dm._variants.values())


def test_clear_errors() -> None:
    dm = DynamicModel(object(), CountingCompile())
    with pytest.raises(LookupError, match="no variant compiled yet"):
        _ = dm.report
    with pytest.raises(TypeError, match=r"input 1 is a list, not an array.*numpy.asarray"):
        dm(x(1, 4), [1.0, 2.0])
    for bad in (0, -1, 2.5, True, "8"):
        with pytest.raises(ConfigError, match="max_variants"):
            DynamicModel(object(), CountingCompile(), bad)  # type: ignore[arg-type]


def test_only_a_torch_module_can_be_dynamic() -> None:
    torch = pytest.importorskip("torch")
    from _models import onnx_cnn

    check_dynamic_model(torch.nn.Linear(2, 2))  # accepted
    with pytest.raises(ConfigError, match=r"dynamic=True needs a torch.nn.Module.*ModelProto"):
        check_dynamic_model(onnx_cnn())
    with pytest.raises(ConfigError, match=r"needs a torch.nn.Module.*model\.onnx"):
        check_dynamic_model("model.onnx")
    ep = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    with pytest.raises(ConfigError, match="pass the torch.nn.Module it was exported from"):
        check_dynamic_model(ep)


@pytest.mark.tvm
def test_a_relax_module_cannot_be_dynamic() -> None:
    from _models import relax_matmul_relu

    with pytest.raises(ConfigError, match=r"needs a torch.nn.Module.*IRModule"):
        check_dynamic_model(relax_matmul_relu(4, 8, 4))


# -- the real path: tunecache.compile per shape ------------------------------------------------


def _dynamic(model: Any, store: Any, max_variants: int = 8, tune: str = "never") -> tuple[DynamicModel, list[Any]]:
    """A DynamicModel over ``model`` compiling each variant as ``compile(..., dynamic=True)`` would."""
    import tunecache

    calls: list[Any] = []

    def compile_variant(inputs: tuple[Any, ...]) -> Any:
        calls.append(shape_key(inputs))
        return tunecache.compile(model, example_inputs=inputs, store=store, tune=tune, progress=False,
                                 library_cache=False)

    return DynamicModel(model, compile_variant, max_variants), calls


@pytest.mark.tvm
def test_a_cnn_at_three_batch_sizes_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    from tunecache.store import open_store

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(4, 5)).eval()
    dm, calls = _dynamic(net, open_store("memory"), max_variants=2)
    inputs = {b: torch.randn(b, 3, 8, 8) for b in (1, 2, 3)}
    for b, xb in inputs.items():
        out = dm(xb)
        assert isinstance(out, torch.Tensor) and tuple(out.shape) == (b, 5)
        with torch.no_grad():
            np.testing.assert_allclose(out.numpy(), net(xb).numpy(), rtol=1e-4, atol=1e-4)
        assert dm.report.tasks and all(t.outcome != "tuned" and t.trials == 0 for t in dm.report.tasks)
    assert len(calls) == 3
    dm(inputs[3])  # kept: nothing compiled
    assert len(calls) == 3
    dm(inputs[1])  # evicted (max_variants=2): compiled again
    assert len(calls) == 4 and [k[0][0][0] for k in dm.variants] == [3, 1]


@pytest.mark.tvm
def test_a_transformer_layer_at_three_sequence_lengths_matches_pytorch() -> None:
    torch = pytest.importorskip("torch")
    from tunecache.store import open_store

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval()
    dm, calls = _dynamic(layer, open_store("memory"))
    for seq in (4, 6, 8):
        xs = torch.randn(1, seq, 16)
        out = dm(xs)
        with torch.no_grad():
            np.testing.assert_allclose(out.numpy(), layer(xs).numpy(), rtol=1e-4, atol=1e-4)
    dm(torch.randn(1, 6, 16))
    assert [k[0][0] for k in calls] == [(1, 4, 16), (1, 6, 16), (1, 8, 16)]
    assert len(dm.variants) == 3


@pytest.mark.tvm
def test_new_shapes_queue_their_tasks_in_background_mode(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    import tunecache.api
    from tunecache.store import open_store

    if "background" not in tunecache.api.TUNE_MODES:
        pytest.skip("tune='background' is not in tunecache.compile yet")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    url = str(tmp_path / "tc.db")
    dm, _calls = _dynamic(net, url, tune="background")
    for b in (1, 2, 3):
        xb = torch.randn(b, 3, 8, 8)
        with torch.no_grad():
            np.testing.assert_allclose(dm(xb).numpy(), net(xb).numpy(), rtol=1e-4, atol=1e-4)
        assert dm.report.queued
    queued = open_store(url).queued()
    assert len({q.workload for q in queued}) >= 3  # each batch size is its own conv2d workload
