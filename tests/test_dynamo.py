"""``torch.compile(model, backend="tunecache")``: found through the entry point, outputs as eager's,
the graph's tasks in the store, and every graph tunecache cannot take run eagerly instead.

dynamo hands over a graph whose inputs include the model's weights, and after a second input
shape a shape-polymorphic graph with ``SymInt`` sizes: both are exercised by calling a CNN at
batch sizes 1, 2 and 3.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tunecache.api  # noqa: E402 - after the torch skip
from tunecache.dynamo import CompiledGraph, backend  # noqa: E402
from tunecache.store import open_store  # noqa: E402

pytestmark = pytest.mark.tvm


class TwoHeads(torch.nn.Module):
    """A tiny CNN returning a dict of two tensors (dynamo's graph returns them as a tuple)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        features = torch.relu(self.bn(self.conv(x)))
        return {"logits": self.fc(features.flatten(1)), "features": features}


def _options(tmp_path, **extra):
    return {"store": str(tmp_path / "tc.db"), "tune": "never", "library_cache": False, **extra}


def _close(out, ref) -> None:
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_entry_point_finds_the_backend_without_an_import() -> None:
    code = ("import sys, torch\n"
            "from torch._dynamo.backends.registry import list_backends, lookup_backend\n"
            "assert 'tunecache' in list_backends(), list_backends()\n"
            "assert 'tunecache' not in sys.modules\n"
            "fn = lookup_backend('tunecache')\n"
            "print(fn.__module__, fn.__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, ("the torch_dynamo_backends entry point is missing: reinstall tunecache "
                                 f"(pip install -e .)\n{out.stderr[-2000:]}")
    assert out.stdout.split() == ["tunecache.dynamo", "backend"]


def test_a_cnn_at_three_batch_sizes_matches_eager(tmp_path) -> None:
    torch.manual_seed(0)
    net = TwoHeads().eval()
    fast = torch.compile(net, backend="tunecache", options=_options(tmp_path))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="tunecache")  # nothing falls back to eager
        for b in (1, 2, 3, 1):  # 2: dynamo recompiles a graph with a SymInt batch size
            x = torch.randn(b, 3, 8, 8)
            out, ref = fast(x), net(x)
            assert set(out) == {"logits", "features"}
            _close(out["logits"], ref["logits"])
            _close(out["features"], ref["features"])
        # A weight changed in place: the graph is compiled again with the new value.
        net.fc.weight.mul_(2)
        x = torch.randn(3, 3, 8, 8)
        _close(fast(x)["logits"], net(x)["logits"])


def test_a_transformer_layer_matches_eager(tmp_path, monkeypatch) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval()
    monkeypatch.setattr(torch.backends.mha, "get_fastpath_enabled", lambda: False)
    fast = torch.compile(layer, backend="tunecache", options=_options(tmp_path))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("error", message="tunecache")
        for seq in (4, 6):
            x = torch.randn(2, seq, 16)
            _close(fast(x), layer(x))


def test_the_graph_s_tasks_land_in_the_store(tmp_path, monkeypatch) -> None:
    if "background" not in tunecache.api.TUNE_MODES:
        pytest.skip("tune='background' is not in tunecache.compile yet")
    url = str(tmp_path / "env.db")
    monkeypatch.setenv("TUNECACHE_DB", url)  # the store and the mode come from the environment
    monkeypatch.setenv("TUNECACHE_TUNE", "background")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 8 * 8, 5)).eval()
    fast = torch.compile(net, backend="tunecache", options={"library_cache": False, "name": "tiny"})
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        _close(fast(x), net(x))
    store = open_store(url)
    families = {w.desc.family for w in store.workloads() if w.desc is not None}
    assert {"conv2d", "matmul"} <= families
    queued = store.queued()
    assert queued and all("tiny" in q.models for q in queued)


def test_a_graph_tvm_cannot_import_runs_eagerly_with_a_warning(tmp_path) -> None:
    torch.manual_seed(0)
    # In eval mode without grad, PyTorch runs the layer as one fused operator, which TVM cannot import.
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval()
    fast = torch.compile(layer, backend="tunecache", options=_options(tmp_path))
    x = torch.randn(2, 4, 16)
    with torch.no_grad(), pytest.warns(UserWarning, match=r"runs eagerly.*_transformer_encoder_layer_fwd"):
        out = fast(x)
    with torch.no_grad():
        _close(out, layer(x))


def test_a_graph_that_needs_autograd_runs_eagerly_with_a_warning(tmp_path) -> None:
    net = torch.nn.Linear(4, 3)
    fast = torch.compile(net, backend="tunecache", options=_options(tmp_path))
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match=r"needs autograd.*torch.no_grad\(\)"):
        out = fast(x)
    out.sum().backward()  # eager: gradients flow
    assert net.weight.grad is not None


def test_graphs_with_nothing_to_compile_run_as_they_are() -> None:
    identity = torch.fx.symbolic_trace(lambda x: x)
    assert backend(identity, [torch.randn(2)]) == identity.forward
    no_tensor_inputs = torch.fx.symbolic_trace(lambda n: torch.ones(3) * n)
    assert backend(no_tensor_inputs, [2]) == no_tensor_inputs.forward
    add = torch.fx.symbolic_trace(lambda x: x + 1)  # one tensor out, not a tuple: returned as it is
    compiled = backend(add, [torch.randn(2)], options={"store": "memory", "tune": "never", "library_cache": False})
    assert isinstance(compiled, CompiledGraph)
    x = torch.randn(2)
    _close(compiled(x), x + 1)


def test_bad_options_say_what_is_known(tmp_path) -> None:
    fast = torch.compile(torch.nn.Linear(4, 3), backend="tunecache", options=_options(tmp_path, trials=4))
    with torch.no_grad(), pytest.raises(Exception, match=r"'trials' are unknown; known: store"):
        fast(torch.randn(2, 4))
    with pytest.raises(tunecache.errors.ConfigError, match="is not one of"):
        backend(torch.fx.symbolic_trace(lambda x: x + 1), [torch.randn(2)], options={"tune": "sometimes"})
