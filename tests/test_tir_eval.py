"""Weight re-layouts computed with numpy (``tir_eval.evaluate``) instead of compiled with LLVM.

Each hand-written kernel is run both ways (numpy, and TVM's LLVM build of the same kernel) on
random inputs; kernels the evaluator does not understand are declined, not guessed. The last
test compiles a small CNN with predicted programs (their records re-lay weights out) and checks
every re-layout the build computed with numpy against LLVM, and the model against PyTorch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.tvm

tvm = pytest.importorskip("tvm")
from tvm.script import tirx as T  # noqa: E402


@T.prim_func(private=True, s_tir=True)
def relayout(a: T.Buffer((64, 24), "float32"), b: T.Buffer((24, 4, 16), "float32")):
    for i, j in T.grid(64, 24):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vj, vi // 16, vi % 16] = a[vi, vj]


@T.prim_func(private=True, s_tir=True)
def two_outputs(a: T.Buffer((3, 3, 8, 16), "float32"), c: T.Buffer((1, 1, 1, 16), "float32"),
                b: T.Buffer((2, 3, 3, 8, 8), "float32"), d: T.Buffer((16,), "float32")):
    for o0, o1, o2, o3, o4 in T.grid(2, 3, 3, 8, 8):
        with T.sblock("b"):
            v0, v1, v2, v3, v4 = T.axis.remap("SSSSS", [o0, o1, o2, o3, o4])
            b[v0, v1, v2, v3, v4] = a[v1, v2, v3, v0 * 8 + v4]
    for x0, x1, x2, x3 in T.grid(1, 1, 1, 16):
        with T.sblock("d"):
            w0, w1, w2, w3 = T.axis.remap("SSSS", [x0, x1, x2, x3])
            d[w3] = c[w0, w1, w2, w3]


@T.prim_func(private=True, s_tir=True)
def padded(a: T.Buffer((10, 6), "float32"), b: T.Buffer((3, 4, 6), "float32")):
    for i0, i1, j in T.grid(3, 4, 6):
        with T.sblock("b"):
            vi = T.axis.spatial(12, i0 * 4 + i1)
            vj = T.axis.spatial(6, j)
            b[vi // 4, vi % 4, vj] = T.if_then_else(vi < 10, a[vi, vj], T.float32(0))


@T.prim_func(private=True, s_tir=True)
def predicated(a: T.Buffer((10,), "float32"), b: T.Buffer((10,), "float32")):
    for i0, i1 in T.grid(3, 4):
        with T.sblock("b"):
            vi = T.axis.spatial(10, i0 * 4 + i1)
            T.where(i0 * 4 + i1 < 10)
            b[vi] = a[vi] * T.float32(2)


@T.prim_func(private=True, s_tir=True)
def prepack(a: T.Buffer((192, 96), "float32"), b: T.Buffer((3, 3, 2, 64, 16), "float16")):
    # the shape of MetaSchedule's dense weight re-layout (VGG-16: 25088 x 4096), with a cast
    for i, j in T.grid(192, 96):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vj // 32, vi // 64, vj % 32 // 16, vi % 64, vj % 16] = T.Cast("float16", a[vi, vj])


@T.prim_func(private=True, s_tir=True)
def regroup(a: T.Buffer((4, 6), "float32"), b: T.Buffer((6, 4), "float32")):
    # both sides split one variable, by 4 and by 6: the splits do not nest
    for i in range(24):
        with T.sblock("b"):
            vi = T.axis.spatial(24, i)
            b[vi // 4, vi % 4] = a[vi // 6, vi % 6]


@T.prim_func(private=True, s_tir=True)
def rowsum(a: T.Buffer((4, 8), "float32"), b: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.sblock("b"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                b[vi] = T.float32(0)
            b[vi] = b[vi] + a[vi, vk]


def _shape(param: Any) -> list[int]:
    return [int(d) for d in param.shape]


def _llvm(func: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``func`` (destination-passing) as TVM builds it for this CPU."""
    from tunecache.tvm_layer.target import resolve_target

    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target=resolve_target(None))
    dev = tvm.cpu(0)
    outs = [tvm.runtime.tensor(np.zeros(_shape(p), dtype=str(p.dtype)), dev) for p in func.params[len(inputs):]]
    lib["main"](*[tvm.runtime.tensor(x, dev) for x in inputs], *outs)
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("func", [relayout, two_outputs, prepack, regroup, padded, predicated],
                         ids=["relayout", "two_outputs", "prepack", "regroup", "padded", "predicated"])
def test_evaluate_matches_llvm(func: Any) -> None:
    from tunecache.tvm_layer.frontend.tir_eval import evaluate

    rng = np.random.default_rng(0)
    n_in = 2 if func is two_outputs else 1
    inputs = [rng.standard_normal(_shape(p)).astype("float32") for p in func.params[:n_in]]
    got = evaluate(func, inputs)
    assert got is not None
    want = _llvm(func, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_evaluate_declines_what_it_does_not_understand() -> None:
    from tunecache.tvm_layer.frontend.tir_eval import evaluate

    x = np.ones((4, 8), dtype="float32")
    assert evaluate(rowsum, [x]) is None  # a reduction
    assert evaluate(relayout, [np.ones((64, 25), dtype="float32")]) is None  # another shape
    assert evaluate(relayout, [np.ones((64, 24), dtype="float64")]) is None  # another dtype


def test_model_weight_prepacks_are_computed_with_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A predicted CNN's weight re-layouts: all computed by numpy, each equal to LLVM's."""
    torch = pytest.importorskip("torch")
    import tunecache
    from tunecache import zoo
    from tunecache.tvm_layer.frontend import tir_eval

    seen: list[tuple[Any, list[np.ndarray], list[np.ndarray] | None]] = []
    real = tir_eval.evaluate

    def spy(func: Any, inputs: Any, empty: Any = None) -> Any:
        got = real(func, inputs, empty)
        seen.append((func, [np.array(x) for x in inputs], None if got is None else [np.array(x) for x in got]))
        return got

    monkeypatch.setattr(tir_eval, "evaluate", spy)
    zm = zoo.get("small_cnn")
    cm = tunecache.compile(zm.module, example_inputs=zm.example_inputs, store="memory", tune="never",
                           progress=False, library_cache=False)
    assert seen, "no weight re-layout was evaluated: the predicted convolutions re-lay their weights out"
    assert all(got is not None for _, _, got in seen)
    for func, inputs, got in seen:
        for g, w in zip(got or [], _llvm(func, inputs), strict=True):
            np.testing.assert_array_equal(g, w)
    with torch.no_grad():
        want = zm.module(*zm.example_inputs)
    np.testing.assert_allclose(np.asarray(cm(*zm.example_inputs)), want.numpy(), rtol=1e-4, atol=1e-5)


def test_large_nests_run_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop nest over the vectorized limit is computed in chunks (same result), and one that
    would take too many chunks is declined."""
    from tunecache.tvm_layer.frontend import tir_eval

    rng = np.random.default_rng(1)
    x = rng.standard_normal((24,)).astype("float32")
    y = rng.standard_normal((4, 6)).astype("float32")
    want = tir_eval.evaluate(predicated, [x[:10]])
    monkeypatch.setattr(tir_eval, "MAX_POINTS", 2)  # 3 x 4 iterations: 6 chunks of 2
    got = tir_eval.evaluate(predicated, [x[:10]])
    assert got is not None and want is not None
    np.testing.assert_array_equal(got[0], want[0])
    monkeypatch.setattr(tir_eval, "MAX_STEPS", 4)
    assert tir_eval.evaluate(predicated, [x[:10]]) is None
    assert tir_eval.evaluate(regroup, [y]) is None  # 24 points, 2 at a time


def test_permutations_are_one_transpose(monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-layouts that only move elements (splits and fusions of the loop variables on either
    side, a cast, extent-1 variables) are one numpy transpose, not a pass per loop chunk."""
    from tunecache.tvm_layer.frontend import tir_eval

    monkeypatch.setattr(tir_eval, "MAX_STEPS", 0)  # the element-wise path would decline at once
    rng = np.random.default_rng(2)
    for func, n_in in ((relayout, 1), (two_outputs, 2), (prepack, 1)):
        inputs = [rng.standard_normal(_shape(p)).astype("float32") for p in func.params[:n_in]]
        got = tir_eval.evaluate(func, inputs)
        assert got is not None, func
        for g, w in zip(got, _llvm(func, inputs), strict=True):
            np.testing.assert_array_equal(g, w)
    assert tir_eval.evaluate(regroup, [np.ones((4, 6), dtype="float32")]) is None
