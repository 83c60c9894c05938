"""The zero-measurement rung (issue 24): a program for a task chosen without measuring anything.

Tiny real workloads (a dense, an NHWC conv, a softmax): the predicted program is correct
against NumPy and is a real schedule (its trace tiles, its TIR is parallel and vectorized);
the decisions follow the target's SIMD width; the record it gives was never measured. Speed is
``tools/bench_zero_trial.py``'s business, not a unit test's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _models import te_conv, te_matmul

from tunecache.store.records import Record

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def tvm() -> Any:
    from tunecache.tvm_layer import load_tvm

    return load_tvm()


@pytest.fixture(scope="module")
def target(tvm: Any) -> Any:
    from tunecache.tvm_layer.target import host_cpu_target

    return host_cpu_target()


def _softmax(tvm: Any) -> Any:
    from tvm import te, topi

    x = te.placeholder((4, 32, 64), name="x")
    return tvm.IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x)])})


def _reference(kind: str, inputs: list[np.ndarray]) -> np.ndarray:
    if kind == "dense":
        return inputs[0] @ inputs[1]
    if kind == "conv":  # NHWC data, HWIO weights, 3x3, pad 1
        x, w = inputs
        xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        n, h, wd, _ = x.shape
        out = np.zeros((n, h, wd, w.shape[3]), "float32")
        for dy in range(3):
            for dx in range(3):
                out += np.einsum("nhwc,ck->nhwk", xp[:, dy:dy + h, dx:dx + wd, :], w[dy, dx])
        return out
    x = inputs[0]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _task(tvm: Any, kind: str) -> Any:
    if kind == "dense":
        return te_matmul(tvm, 64, 64, 64)
    if kind == "conv":
        return te_conv(tvm, (1, 14, 14, 32), 3, 32, pad=1, layout="NHWC")
    return _softmax(tvm)


def _checked_prediction(tvm: Any, mod: Any, target: Any, inputs: list[np.ndarray], want: np.ndarray) -> Any:
    """``mod``'s predicted program, after building it and checking its output on ``inputs``
    against ``want``."""
    from tunecache.search.predict import predict_program

    got = predict_program(mod, target)
    assert not isinstance(got, str), got
    ex = tvm.compile(got.sch.mod, target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"), device=dev)
    ex["main"](*(tvm.runtime.tensor(x, device=dev) for x in inputs), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
    return got


def _decisions(got: Any, kind: str) -> list[Any]:
    """The decisions of a predicted program's ``kind`` instructions, in order."""
    insts, decisions = got.sch.trace.as_json()
    return [d for i, d in decisions if str(insts[int(i)][0]) == kind]


def _predicted_tiles(tvm: Any, mod: Any, target: Any, inputs: list[np.ndarray], want: np.ndarray) -> list[list[int]]:
    """The tiles (``SamplePerfectTile`` decisions, in order) of ``mod``'s checked prediction."""
    got = _checked_prediction(tvm, mod, target, inputs, want)
    return [[int(x) for x in d] for d in _decisions(got, "SamplePerfectTile")]


@pytest.mark.parametrize("kind", ["dense", "conv", "softmax"])
def test_predicted_program_is_correct_and_a_real_schedule(tvm: Any, target: Any, kind: str) -> None:
    from tunecache.search.predict import Prediction, predict_program

    mod = _task(tvm, kind)
    got = predict_program(mod, target)
    assert isinstance(got, Prediction), got
    assert "0 measurements" in got.how

    insts = got.sch.trace.as_json()[0]
    kinds = [str(i[0]) for i in insts]
    text = str(got.sch.mod)
    assert "T.parallel" in text and "T.vectorized" in text  # parallel outer loop, SIMD inner loop
    if kind in ("dense", "conv"):
        assert kinds.count("Split") >= 3  # a multi-level tiling, not the naive loop nest
        assert "EnterPostproc" in kinds

    rng = np.random.default_rng(0)
    func = mod["main"]
    shapes = [[int(x) for x in p.shape] for p in func.params]
    inputs = [rng.standard_normal(s).astype("float32") for s in shapes[:-1]]
    ex = tvm.compile(got.sch.mod, target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(shapes[-1], "float32"), device=dev)
    ex["main"](*[tvm.runtime.tensor(x, device=dev) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), _reference(kind, inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("mcpu", "lanes"), [("skylake-avx512", 16), ("haswell", 8)])
def test_register_tile_follows_the_simd_width(tvm: Any, mcpu: str, lanes: int) -> None:
    from tunecache.search.predict import VECTORS, predict_program

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": mcpu})
    got = predict_program(te_matmul(tvm, 64, 128, 64), target)
    assert not isinstance(got, str), got
    insts, decisions = got.sch.trace.as_json()
    tiles = [[int(x) for x in d] for i, d in decisions if str(insts[int(i)][0]) == "SamplePerfectTile"]
    i_tile, j_tile, k_tile = tiles[:3]
    assert j_tile[-1] == VECTORS * lanes  # innermost space tile: whole vectors
    assert i_tile[-1] > 1  # several rows of accumulators
    assert i_tile[0] * j_tile[0] >= 2  # outer tiles: at least one parallel item per core
    assert np.prod(k_tile) == 64 and k_tile[1] > 1


@pytest.mark.parametrize(("mcpu", "rows"), [("skylake-avx512", 8), ("haswell", 4)])
def test_prime_row_count_gets_a_padded_register_tile(tvm: Any, mcpu: str, rows: int) -> None:
    """197 rows (ViT's tokens, prime) get full register tiles over 200 rows, not 1-row tiles;
    the program is correct and its record replays (the split's factors are in the trace)."""
    from tvm.s_tir import Schedule

    from tunecache.search.predict import predict_program, predicted_record
    from tunecache.tvm_layer.convert import record_to_tvm, workload_of
    from tunecache.tvm_layer.target import hardware_key

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": mcpu})
    mod = te_matmul(tvm, 197, 64, 32)
    got = predict_program(mod, target)
    assert not isinstance(got, str), got
    insts = got.sch.trace.as_json()[0]
    literal = [i for i in insts if str(i[0]) == "Split" and "None" in [str(x) for x in i[1][1:]]]
    assert len(literal) == 1 and int(literal[0][1][-1]) == rows  # the row axis, padded to whole tiles
    assert "T.where" in got.sch.mod.script()  # the last row tile is predicated

    key, _, workload = workload_of(mod)
    rec = predicted_record(mod, key, hardware_key(target), target)
    assert isinstance(rec, Record), rec
    sch = Schedule(mod, seed=1)
    record_to_tvm(rec, workload, target).trace.apply_to_schedule(sch, remove_postproc=False)
    import tvm_ffi

    assert tvm_ffi.structural_equal(sch.mod, got.sch.mod)
    if mcpu == "skylake-avx512":
        return  # this host may lack AVX-512: run the AVX2 program only
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((197, 32)).astype("float32"), rng.standard_normal((32, 64)).astype("float32")
    ex = tvm.compile(sch.mod, target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((197, 64), "float32"), device=dev)
    ex["main"](tvm.runtime.tensor(a, device=dev), tvm.runtime.tensor(b, device=dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_prime_vector_axis_is_one_loop_llvm_vectorizes(tvm: Any, target: Any) -> None:
    """197 columns (ViT's keys in Q x K^T, prime) have no vector-sized tile: the whole axis
    becomes one loop inside the outer reduction tile (a 1-wide vector tile ran 8x slower),
    rows keep their register tile, and the program computes the product."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32)).astype("float32"), rng.standard_normal((32, 197)).astype("float32")
    tiles = _predicted_tiles(tvm, te_matmul(tvm, 64, 197, 32), target, [a, b], a @ b)
    i_tile, j_tile = tiles[:2]
    assert j_tile == [1, 1, 197, 1], tiles
    assert i_tile[-1] > 1 and math.prod(i_tile) == 64, tiles


def test_a_panel_beyond_the_caches_is_split_by_columns(tvm: Any, target: Any, monkeypatch: Any) -> None:
    """When the columns' panel (reduction x columns) is larger than STREAM_WEIGHTS_ABOVE (GPT-2's
    154 MB LM head), the cores split the columns and every row stays inside, so the panel is
    read once; below it, rows are split as before. Both compute the product."""
    from tunecache.search import predict

    mod = te_matmul(tvm, 64, 256, 32)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32)).astype("float32"), rng.standard_normal((32, 256)).astype("float32")
    tiles = {}
    shipped = predict.STREAM_WEIGHTS_ABOVE
    for above in (shipped, 0):
        monkeypatch.setattr(predict, "STREAM_WEIGHTS_ABOVE", above)
        tiles[above] = _predicted_tiles(tvm, mod, target, [a, b], a @ b)
    i_small, (i_big, j_big) = tiles[shipped][0], tiles[0][:2]
    assert i_small[0] > 1, tiles  # a small panel: the rows are split between the cores
    assert i_big[:2] == [1, 1] and j_big[0] > 1, tiles  # a large one: the columns are


def test_a_large_panel_with_few_rows_is_split_by_channels_with_every_row_per_reduction_step(
        tvm: Any, monkeypatch: Any) -> None:
    """A 7x7 NHWC conv whose weights exceed SPLIT_WEIGHTS_ABOVE L2 caches (ResNet's last stage:
    predicted 4.4 -> 1.6-2.1 ms, docs/NOTES.md session 25): its output channels are split between
    the cores, its 1-row register tile gets 8 vectors (8 accumulators on AVX2) instead of 2, and
    all 49 output pixels sit inside one outer-reduction step; below the threshold the rows are
    split between the cores. Both programs compute the convolution."""
    from tunecache.search import predict

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "haswell"})
    mod = te_conv(tvm, (1, 7, 7, 32), 3, 128, pad=1, layout="NHWC")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 7, 7, 32)).astype("float32"), rng.standard_normal((3, 3, 32, 128)).astype("float32")
    tiles = {}
    for above in (math.inf, 0.0):
        monkeypatch.setattr(predict, "SPLIT_WEIGHTS_ABOVE", above)
        tiles[above] = _predicted_tiles(tvm, mod, target, [x, w], _reference("conv", [x, w]))
    (_, h, wd, c, *_), (_, h0, _, c0, *_) = tiles[0.0], tiles[math.inf]
    assert c == [2, 1, 1, 64] and h == [1, 1, 7, 1] and wd == [1, 1, 7, 1], tiles
    # below it: the rows split between the cores, 7 rows of 1 vector (FILL_ACCUMULATORS)
    assert c0[-1] == 8 and c0[0] == 1 and h0[0] > 1 and tiles[math.inf][2][-1] == 7, tiles


def test_a_few_rows_panel_keeps_its_steps_slice_of_weights_in_l1(tvm: Any, monkeypatch: Any) -> None:
    """The split panel of a 7x7 conv (ResNet's last stage): its kernel window comes inside the
    inner reduction tile and the input channels a step are the most whose slice of weights
    (window x channels x the register tile's 64 output channels) fits FEW_ROWS_PANEL_L1 of this
    host's L1 (0.87-0.93x the stored best on ResNet-18's, session 43). With the rule off, or on a
    stride-2 conv, the window stays outside. Every program computes the convolution."""
    from tunecache.search import predict

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "haswell"})
    mod = te_conv(tvm, (1, 7, 7, 64), 3, 128, pad=1, layout="NHWC")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 7, 7, 64)).astype("float32"), rng.standard_normal((3, 3, 64, 128)).astype("float32")
    monkeypatch.setattr(predict, "SPLIT_WEIGHTS_ABOVE", 0.0)
    red = {}
    for share in (0.0, predict.FEW_ROWS_PANEL_L1):
        monkeypatch.setattr(predict, "FEW_ROWS_PANEL_L1", share)
        tiles = _predicted_tiles(tvm, mod, target, [x, w], _reference("conv", [x, w]))
        assert tiles[3][-1] == 64, tiles  # 8 vectors of output channels (AVX2)
        red[share] = [t for t in tiles if len(t) == 2]  # (rh, rw, rc) as [outer, inner]
    rh, rw, rc = red[predict.FEW_ROWS_PANEL_L1]
    assert rh == [1, 3] and rw == [1, 3], red
    l1 = predict.FEW_ROWS_PANEL_L1 * predict.cache_sizes().l1
    fits = [d for d in range(1, 65) if 64 % d == 0 and 9 * d * 64 * 4 <= l1]
    assert rc == [64 // max(fits), max(fits)], (red, predict.cache_sizes())
    assert red[0.0][0] == [3, 1] and red[0.0][1] == [3, 1], red  # the rule off: the window outside
    # A stride-2 conv to the same 7x7 output (ran 1.10x slower with the rule): the window stays outside.
    strided = te_conv(tvm, (1, 14, 14, 64), 3, 128, pad=1, stride=2, layout="NHWC")
    x2 = rng.standard_normal((1, 14, 14, 64)).astype("float32")
    tiles = _predicted_tiles(tvm, strided, target, [x2, w], _reference("conv", [x2, w])[:, ::2, ::2])
    assert tiles[3][-1] == 64 and [t for t in tiles if len(t) == 2][0] == [3, 1], tiles


def test_a_short_last_reduction_axis_brings_the_axes_before_it_inside(tvm: Any, target: Any,
                                                                        monkeypatch: Any) -> None:
    """A conv on 3 input channels (a stem's) has its whole channel axis in the inner reduction
    tile, which alone would leave 3 products between trips through memory: the kernel's rows and
    columns come inside too (ResNet-18's stem predicted 3.0 -> 1.34 ms, session 25). Correct
    against NumPy; without the rule, the kernel's axes stay outside."""
    from tunecache.search import predict

    mod = te_conv(tvm, (1, 14, 14, 3), 3, 32, pad=1, layout="NHWC")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 14, 14, 3)).astype("float32"), rng.standard_normal((3, 3, 3, 32)).astype("float32")
    inner = {}
    for on in (False, True):
        monkeypatch.setattr(predict, "INNER_REDUCTION_ALL", on)
        tiles = _predicted_tiles(tvm, mod, target, [x, w], _reference("conv", [x, w]))
        inner[on] = [t[-1] for t in tiles if len(t) == 2]  # the reduction axes' inner tiles (rh, rw, rc)
    assert inner[False] == [1, 1, 3], inner
    assert inner[True][-1] == 3 and math.prod(inner[True]) >= 9, inner


def test_prediction_is_deterministic(tvm: Any, target: Any) -> None:
    from tunecache.search.predict import predict_program

    mod = te_conv(tvm, (1, 8, 8, 16), 3, 16, pad=1, layout="NHWC")
    a, b = predict_program(mod, target), predict_program(mod, target, seed=7)
    assert not isinstance(a, str) and not isinstance(b, str)
    assert str(a.sch.mod) == str(b.sch.mod)


def test_no_design_space_is_a_reason_not_an_error(target: Any) -> None:
    from tunecache.search.predict import predict_program

    got = predict_program("not a module", target)
    assert isinstance(got, str) and got


def test_predicted_record_is_served_never_measured(tvm: Any, target: Any) -> None:
    from tunecache.search.predict import predict_task, predicted_record
    from tunecache.tvm_layer.convert import record_to_tvm, workload_of
    from tunecache.tvm_layer.target import hardware_key

    mod = te_matmul(tvm, 32, 32, 32)
    key, _, workload = workload_of(mod)
    hw = hardware_key(target)
    rec = predicted_record(mod, key, hw, target)
    assert isinstance(rec, Record), rec
    assert rec.provenance.kind == "predicted"
    assert rec.latency_s is None and rec.run_secs == () and not rec.is_valid
    assert rec.workload == key and rec.hardware == hw
    again = predicted_record(mod, key, hw, target)
    assert isinstance(again, Record) and again.uid == rec.uid  # same prediction, same record
    with_how = predict_task(mod, key, hw, target)
    assert not isinstance(with_how, str) and with_how[0].uid == rec.uid and "analytic" in with_how[1]

    from tvm.s_tir import Schedule

    tr = record_to_tvm(rec, workload, target)  # loads as a MetaSchedule record
    sch = Schedule(mod, seed=1)
    tr.trace.apply_to_schedule(sch, remove_postproc=False)
    assert "T.vectorized" in str(sch.mod)


def _depthwise(tvm: Any, c: int, hw: int) -> Any:
    from tvm import te, topi

    x = te.placeholder((1, c, hw, hw), name="x")
    w = te.placeholder((c, 1, 3, 3), name="w")
    return tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.depthwise_conv2d_nchw(x, w, 1, 1, 1)])})


def test_depthwise_nchw_is_correct_and_a_real_schedule(tvm: Any, target: Any) -> None:
    from tunecache.search.predict import Prediction, predict_program

    mod = _depthwise(tvm, 32, 28)
    got = predict_program(mod, target)
    assert isinstance(got, Prediction), got
    text = str(got.sch.mod)
    assert "T.parallel" in text and "T.vectorized" in text
    assert [str(i[0]) for i in got.sch.trace.as_json()[0]].count("Split") >= 3

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 28, 28)).astype("float32")
    w = rng.standard_normal((32, 1, 3, 3)).astype("float32")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 32, 28, 28), "float32")
    for dy in range(3):
        for dx in range(3):
            want += xp[:, :, dy:dy + 28, dx:dx + 28] * w[None, :, 0, dy, dx, None, None]
    ex = tvm.compile(got.sch.mod, target=target)
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros(want.shape, "float32"), device=dev)
    ex["main"](tvm.runtime.tensor(x, device=dev), tvm.runtime.tensor(w, device=dev), out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("mcpu", "lanes"), [("skylake-avx512", 16), ("haswell", 8)])
def test_nchw_register_tile_spans_output_channels_and_whole_vectors(tvm: Any, mcpu: str, lanes: int) -> None:
    """An NCHW 1x1 conv's register tile: the output channels as rows (one input vector feeds
    them all), not the image rows, and a vector tile of whole vectors or at most one."""
    from tunecache.search.predict import predict_program

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": mcpu})
    for hw in (56, 28):  # 56 = 3.5 AVX-512 vectors, 28 = 3.5 AVX2 vectors: neither a multiple
        got = predict_program(te_conv(tvm, (1, 16, hw, hw), 1, 64, layout="NCHW"), target)
        assert not isinstance(got, str), got
        insts, decisions = got.sch.trace.as_json()
        tiles = [[int(x) for x in d] for i, d in decisions if str(insts[int(i)][0]) == "SamplePerfectTile"]
        _n, oc, h, w = tiles[:4]
        assert oc[-1] > 1 and h[-1] == 1
        assert w[-1] % lanes == 0 or w[-1] <= lanes


def test_build_takes_a_predicted_kernel_as_scheduled_not_replayed_again(tvm: Any, target: Any) -> None:
    """The kernel the rung scheduled is what the build applies (kept in-process, not replayed a
    second time), and it is the very kernel MetaSchedule's pass would make from the record."""
    import tvm_ffi

    from tunecache.search.predict import predicted_record
    from tunecache.store.factory import open_store
    from tunecache.tvm_layer import scheduled
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.frontend.codegen import _already_scheduled, apply_database
    from tunecache.tvm_layer.target import hardware_key

    mod = te_matmul(tvm, 48, 40, 24)
    key, _, _ = workload_of(mod)
    hw = hardware_key(target)
    rec = predicted_record(mod, key, hw, target)
    assert isinstance(rec, Record), rec
    kernel = mod["main"].without_attr("global_symbol")  # a model's kernels are private
    model = tvm.IRModule({"fused_matmul": kernel})
    db = make_database(open_store("memory"), hw, target, extra={key: rec})
    with target:
        kept = _already_scheduled(db, kernel)
        assert kept is not None
        applied = apply_database(model, db)
        scheduled.clear()
        assert _already_scheduled(db, kernel) is None  # forgotten: the pass replays the record
        replayed = apply_database(model, db)
    assert tvm_ffi.structural_equal(applied["fused_matmul"], replayed["fused_matmul"])
    assert tvm_ffi.structural_equal(kept, replayed["fused_matmul"])
    assert "T.vectorized" in applied["fused_matmul"].script()
    assert applied["fused_matmul"].attrs.get("global_symbol") is None  # still private


def test_scheduled_kernels_are_bounded_and_keyed_by_trace_and_target() -> None:
    from tunecache.tvm_layer import scheduled

    scheduled.clear()
    for i in range(scheduled.LIMIT + 5):
        scheduled.remember("w", [[["Split", i]], []], "llvm", f"mod{i}")
    assert scheduled.recall("w", [[["Split", 0]], []], "llvm") is None  # the oldest went first
    assert scheduled.recall("w", [[["Split", 7]], []], "llvm") == "mod7"
    assert scheduled.recall("w", [[["Split", 7]], []], "cuda") is None
    assert scheduled.recall("v", [[["Split", 7]], []], "llvm") is None
    scheduled.clear()
    assert scheduled.recall("w", [[["Split", 7]], []], "llvm") is None


@pytest.mark.parametrize("kind", ["dense", "conv"])
def test_ranking_without_the_layout_rewrite_picks_the_same_program(tvm: Any, target: Any, kind: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Candidates are scored before weight prepacking's postprocessor (it moves no loop the score
    reads) and only the chosen one gets it: the program is the one ranking with it gives."""
    import tvm_ffi

    from tunecache.search import predict

    mod = _task(tvm, kind)
    mod = tvm.IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})  # a weight, as a model's
    fast = predict.predict_program(mod, target)
    monkeypatch.setattr(predict, "SCORED_WITHOUT", frozenset())
    full = predict.predict_program(mod, target)
    assert isinstance(fast, predict.Prediction) and isinstance(full, predict.Prediction)
    assert fast.sketch == full.sketch and fast.decisions == full.decisions
    assert tvm_ffi.structural_equal(fast.sch.mod, full.sch.mod)
    assert any(str(i[0]) == "TransformLayout" for i in fast.sch.trace.as_json()[0])  # the winner was prepacked


def _depthwise_nhwc(tvm: Any, c: int, hw: int) -> Any:
    from tvm import te, topi

    x = te.placeholder((1, hw, hw, c), name="x")
    w = te.placeholder((3, 3, c, 1), name="w")
    return tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.depthwise_conv2d_nhwc(x, w, 1, 1, 1)])})


def _locations(got: Any) -> list[int]:
    return [int(d) for d in _decisions(got, "SampleComputeLocation")]


@pytest.mark.parametrize(("layout", "depthwise", "along"), [
    ("NHWC", True, True), ("NCHW", True, False), ("NHWC", False, False), ("NCHW", False, False)])
def test_a_padding_is_read_along_the_vector_axis_only_where_no_bound_tests_that_axis(
        tvm: Any, layout: str, depthwise: bool, along: bool) -> None:
    from tunecache.tvm_layer.tir import first_primfunc, iter_sblocks, reads_along_innermost

    if depthwise:
        mod = _depthwise_nhwc(tvm, 16, 14) if layout == "NHWC" else _depthwise(tvm, 16, 14)
    else:
        mod = te_conv(tvm, (1, 14, 14, 16) if layout == "NHWC" else (1, 16, 14, 14), 3, 16, pad=1, layout=layout)
    _root, pad, conv = (str(b.name_hint) for b in iter_sblocks(first_primfunc(mod)))
    assert reads_along_innermost(mod, conv, pad) is along
    assert reads_along_innermost(mod, conv, "no_such_block") is None


def test_a_producer_with_no_padding_is_not_read_along_the_vector_axis(tvm: Any) -> None:
    """A transposed weight feeding a matmul is read along the matmul's columns, but it is no
    padding: inlining it is not this rule's to choose."""
    from tvm import te

    from tunecache.tvm_layer.tir import reads_along_innermost

    a, w = te.placeholder((16, 32), name="a"), te.placeholder((64, 32), name="w")
    wt = te.compute((32, 64), lambda k, j: w[j, k], name="wt")
    r = te.reduce_axis((0, 32), name="r")
    c = te.compute((16, 64), lambda i, j: te.sum(a[i, r] * wt[r, j], axis=r), name="c")
    mod = tvm.IRModule({"main": te.create_prim_func([a, w, c])})
    assert reads_along_innermost(mod, "c", "wt") is False


def test_a_depthwise_convs_padding_is_inlined_and_a_dense_convs_stays_at_the_root(
        tvm: Any, target: Any, monkeypatch: Any) -> None:
    """MobileNetV2's depthwise convs ran 0.55-0.84x the root's time with the padding inlined
    (session 26); dense convs, which read it as scalars, 1.0-1.6x slower."""
    import tunecache.search.narrow.align as align
    from tunecache.search.predict import predict_program
    from tunecache.tvm_layer.tir import first_primfunc, iter_sblocks

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 28, 28, 32)).astype("float32")
    w = rng.standard_normal((3, 3, 32, 1)).astype("float32")
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(xp[:, dy:dy + 28, dx:dx + 28, :] * w[dy, dx, :, 0] for dy in range(3) for dx in range(3))
    mod = _depthwise_nhwc(tvm, 32, 28)
    got = _checked_prediction(tvm, mod, target, [x, w], want)
    assert _locations(got) == [-2]
    blocks = " ".join(str(b.name_hint) for b in iter_sblocks(first_primfunc(got.sch.mod)))
    assert "pad" not in blocks.lower(), blocks

    dense = predict_program(te_conv(tvm, (1, 14, 14, 32), 3, 32, pad=1, layout="NHWC"), target)
    assert not isinstance(dense, str) and _locations(dense) == [-1]
    monkeypatch.setattr(align, "INLINE_ALONG_VECTOR", False)
    rooted = predict_program(mod, target)
    assert not isinstance(rooted, str) and _locations(rooted) == [-1]


def _pointwise_tiles(tvm: Any, target: Any, hw: int) -> list[list[int]]:
    """The checked prediction's tiles of an NHWC 1x1 conv, ``hw`` x ``hw`` x 64 -> 128 channels."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, hw, hw, 64)).astype("float32")
    w = rng.standard_normal((1, 1, 64, 128)).astype("float32")
    mod = te_conv(tvm, (1, hw, hw, 64), 1, 128, layout="NHWC")
    return _predicted_tiles(tvm, mod, target, [x, w], np.einsum("nhwc,ck->nhwk", x, w[0, 0]))


def test_a_7_wide_output_gets_7_rows_of_accumulators_not_1(tvm: Any, target: Any, monkeypatch: Any) -> None:
    """A 7x7 output's 7 columns have no divisor near the 4 rows wanted: the register tile had
    1 row (2 accumulators); MobileNetV2's 7x7 1x1 convs ran 0.36-0.52x as long with 7 rows
    (AVX2: 7 rows x 1 vector). The 4 rows wanted of AVX2 are set here: with AVX-512's 8, 7 is
    near enough without the fill; its 128 output channels are 8 vectors then, and the fill's
    most accumulators are 1 row x 8 vectors."""
    import tunecache.search.predict as predict

    lanes = predict._lanes(target)

    def accumulators(tiles: list[list[int]]) -> int:
        assert tiles[3][-1] % lanes == 0
        return tiles[2][-1] * tiles[3][-1] // lanes

    monkeypatch.setattr(predict, "ROWS", 4)
    filled = _pointwise_tiles(tvm, target, 7)
    assert accumulators(filled) >= 7
    assert filled[2][-1] == (7 if lanes == 8 else 1)
    monkeypatch.setattr(predict, "FILL_ACCUMULATORS", False)
    unfilled = _pointwise_tiles(tvm, target, 7)
    assert unfilled[2][-1] == 1 and accumulators(unfilled) < accumulators(filled)


def test_a_14_wide_output_takes_its_other_rows_from_the_axis_before(tvm: Any, target: Any,
                                                                      monkeypatch: Any) -> None:
    """14 output columns give 2 of the 4 rows wanted (AVX2); the output rows give the other 2:
    2 x 2 pixels. ResNet-50's 14x14 1x1 convs, predicted side by side: 10.3 -> 6.1 ms weighted."""
    import tunecache.search.predict as predict

    monkeypatch.setattr(predict, "ROWS", 4)
    tiles = _pointwise_tiles(tvm, target, 14)
    assert (tiles[1][-1], tiles[2][-1]) == (2, 2), tiles
    monkeypatch.setattr(predict, "ROWS_FROM_TWO_AXES", False)
    tiles = _pointwise_tiles(tvm, target, 14)
    assert (tiles[1][-1], tiles[2][-1]) == (1, 2), tiles
