"""Narrowed reuse search on MetaSchedule traces: a tuned 64x128x64 matmul reused for 128x128x64.

The slow parts (worker start-up, one short full search of the source) are module-scoped. The
only latency assert is structural: the search's best is the minimum over measured candidates,
the zero-trial replay included, so ``best <= replay`` holds exactly within one run.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunecache.errors import ConfigError
from tunecache.search import FullSearchTask, tune_tasks
from tunecache.search.narrow import (
    PHASES,
    cpu_cost,
    fit_tiles,
    narrowed_search,
    propose_neighbours,
    replay_on,
    tile_moves,
)
from tunecache.store.records import decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.features import CpuFeatures, cpu_features, cuda_features

pytestmark = pytest.mark.tvm

BETA = (64, 128, 64)  # M, N, K
ALPHA = (128, 128, 64)


def _matmul(m: int, n: int, k: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((m, k), name="A", dtype="float32")
    b = te.placeholder((k, n), name="B", dtype="float32")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _tile_decisions(trace: list[Any]) -> dict[int, list[int]]:
    insts, decisions = trace
    return {i: v for i, v in decisions if insts[i][0] == "SamplePerfectTile"}


@pytest.fixture(scope="module")
def sources(target: Any, builder: Any, runner: Any, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """Beta's three best traces (plain JSON), from a short full search."""
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    beta = _matmul(*BETA)
    tune_tasks([FullSearchTask("beta", beta)], target, db, trials_per_task=8, seed=3,
               work_dir=tmp_path_factory.mktemp("beta"), builder=builder, runner=runner)
    top = db.get_top_k(db.commit_workload(beta), 3)
    assert top, "the source search found no valid program"
    return [decode_trace(r.trace.as_json()) for r in top]


@pytest.fixture(scope="module")
def narrowed(sources: list[Any], target: Any, builder: Any, runner: Any) -> dict[str, Any]:
    from tvm.s_tir import meta_schedule as ms

    class Counting:
        """The builder, counting what it is asked to build."""

        def __init__(self) -> None:
            self.built = 0

        def build(self, inputs: Any) -> Any:
            self.built += len(inputs)
            return builder.build(inputs)

    db = ms.database.MemoryDatabase()
    events: list[Any] = []
    counting = Counting()
    kept_before = sorted(Path(builder.artifact_dir).glob("tc-build-*"))
    res = narrowed_search(sources, _matmul(*ALPHA), target, builder=counting, runner=runner,
                          max_trials=8, round_size=4, seed=1, database=db, progress=events.append)
    return {"res": res, "db": db, "events": events, "built": counting.built,
            "kept": sorted(Path(builder.artifact_dir).glob("tc-build-*")) == kept_before}


# -- the measured search ----------------------------------------------------------------------


def test_narrowed_search_respects_budget_and_finds_valid(narrowed: dict[str, Any]) -> None:
    res = narrowed["res"]
    assert 1 <= res.trials <= 8
    assert res.valid_trials >= 1
    assert res.best_trace is not None and res.best_latency_s is not None
    assert res.history[0].phase == "replay" and res.history[0].measured >= 1
    assert sum(h.measured for h in res.history) == res.trials
    assert res.remeasured >= 0
    assert narrowed["events"] and narrowed["events"][-1].task_trials == res.trials


def test_the_final_remeasurement_runs_what_the_rounds_built(narrowed: dict[str, Any]) -> None:
    """The fastest candidates are re-measured from the builds their rounds made (LLVM takes up
    to seconds a candidate), and every build is deleted when the search ends."""
    res = narrowed["res"]
    assert res.remeasured > 0
    # Each candidate built once; again only if it moved into the top after its build was
    # dropped (a faster one's re-measured median turned out slower).
    assert narrowed["built"] == res.trials + res.rebuilt
    assert res.rebuilt <= res.trials
    assert narrowed["kept"]  # no build left behind


def test_best_is_never_worse_than_zero_trial_replay(narrowed: dict[str, Any]) -> None:
    res = narrowed["res"]
    assert res.zero_trial_latency_s is not None
    # The best is the minimum over measured candidates, and the replay is one of them.
    assert res.best_latency_s <= res.zero_trial_latency_s
    assert res.best_latency_s <= res.zero_trial_latency_s * 1.05


def test_every_measured_candidate_is_committed(narrowed: dict[str, Any]) -> None:
    db, res = narrowed["db"], narrowed["res"]
    assert len(db.get_all_tuning_records()) == res.trials
    traces = [decode_trace(r.trace.as_json()) for r in db.get_all_tuning_records()]
    assert res.best_trace in traces


def test_remeasured_latencies_name_the_committed_records_they_belong_to(narrowed: dict[str, Any]) -> None:
    """``remeasured_latency`` points at candidates by their place in the commit order (what
    ``search_reuse`` turns into store uids): the winner's entry is its trace with its median."""
    db, res = narrowed["db"], narrowed["res"]
    recs = db.get_all_tuning_records()
    trials = [t for t, _m, _cv in res.remeasured_latency]
    assert len(trials) >= 2 and len(set(trials)) == len(trials) and all(0 <= t < len(recs) for t in trials)
    by_trial = {t: (m, cv) for t, m, cv in res.remeasured_latency}
    winners = [t for t in trials if decode_trace(recs[t].trace.as_json()) == res.best_trace]
    assert winners and any(by_trial[t][0] == res.best_latency_s for t in winners)
    assert all(m > 0 and cv >= 0 and max(float(x) for x in recs[t].run_secs) < 1.0 for t, (m, cv) in by_trial.items())


def test_each_committed_record_carries_its_own_measurement(sources: list[Any], target: Any, builder: Any) -> None:
    """Every candidate of a round is committed with its own run time (a run time left over from
    the runner loop once gave every record of a round the last candidate's, so a slow program
    could be stored as the best), and a candidate that failed to run as a failure."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    @derived_object
    class CountingRunner(PyRunner):
        """The k-th candidate run takes (k + 1) ms; every third one fails to run."""

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def run(self, runner_inputs: Any) -> Any:
            futures = []
            for _ in runner_inputs:
                self.calls += 1
                result = RunnerResult(None, "boom") if self.calls % 3 == 0 else RunnerResult([1e-3 * self.calls], None)
                futures.append(RunnerFuture(lambda: True, lambda r=result: r))
            return futures

    db = ms.database.MemoryDatabase()
    res = narrowed_search(sources, _matmul(*ALPHA), target, builder=builder, runner=CountingRunner(),
                          max_trials=8, round_size=4, seed=1, database=db, remeasure_top=0)
    secs = [float(r.run_secs[0]) for r in db.get_all_tuning_records()]
    assert len(secs) == res.trials >= 4
    valid = [s for s in secs if s < 1.0]
    assert len(valid) == len(set(valid)), secs  # no two candidates share a measurement
    assert len(valid) < len(secs)  # the failed runs are stored as failures
    assert res.best_latency_s == min(valid)


def test_a_program_measured_once_never_wins_over_remeasured_medians(sources: list[Any], target: Any,
                                                                   builder: Any) -> None:
    """When the fastest candidates' re-measured medians turn out slower than the next one's single
    measurement, that one is re-measured too before it can win (CI once served a program measured
    once). A fake runner makes it deterministic: a program's first run takes its place in the
    run order in ms; the two first to run re-run 50x slower."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult
    from tvm_ffi import structural_hash

    program_of: dict[str, int] = {}  # artifact path -> the module's structural hash

    class Hashing:
        """The real builder, remembering which program each artifact holds (a rebuild of a
        program gets a new path)."""

        def build(self, inputs: Any) -> Any:
            built = builder.build(inputs)
            for inp, b in zip(inputs, built, strict=True):
                if b.artifact_path:
                    program_of[str(b.artifact_path)] = structural_hash(inp.mod)
            return built

    @derived_object
    class FlippingRunner(PyRunner):
        def __init__(self) -> None:
            super().__init__()
            self.first: dict[int, float] = {}

        def run(self, runner_inputs: Any) -> Any:
            futures = []
            for inp in runner_inputs:
                prog = program_of[str(inp.artifact_path)]
                if prog not in self.first:
                    secs = 1e-3 * (len(self.first) + 1)
                    self.first[prog] = secs
                else:
                    secs = self.first[prog] * (50.0 if self.first[prog] <= 2e-3 else 1.0)
                result = RunnerResult([secs], None)
                futures.append(RunnerFuture(lambda: True, lambda r=result: r))
            return futures

    db = ms.database.MemoryDatabase()
    res = narrowed_search(sources, _matmul(*ALPHA), target, builder=Hashing(), runner=FlippingRunner(),
                          max_trials=8, round_size=4, seed=1, database=db, remeasure_top=2, remeasure_rounds=2)
    assert res.valid_trials >= 4
    recs = db.get_all_tuning_records()
    first = {t: float(r.run_secs[0]) for t, r in enumerate(recs)}
    medians = {t: m for t, m, _cv in res.remeasured_latency}
    # The two fastest in the search were re-measured 50x slower and dropped; the next two
    # moved up and were re-measured (their builds were dropped before: built again).
    assert {t for t, secs in first.items() if secs <= 2e-3} <= set(medians)
    assert {t for t, secs in first.items() if 2e-3 < secs <= 4e-3} <= set(medians)
    assert res.rebuilt >= 1
    # The winner is the fastest re-measured median, 3 ms, and is among the re-measured.
    [winner] = [t for t in medians if decode_trace(recs[t].trace.as_json()) == res.best_trace]
    assert res.best_latency_s == medians[winner] == pytest.approx(3e-3)


def test_the_predicted_program_is_measured_as_one_more_source(sources: list[Any], target: Any, builder: Any,
                                                              runner: Any) -> None:
    """A plan's reuse passes the task's own predicted program as a second source
    (``search.execute.search_reuse``): round 0 measures it beside the source's replay, so a far
    source (a classifier's 1-row matmul reused by BERT's 128-row dense ran 5x slower than the
    prediction, session 11) cannot sink the task."""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.search.narrow.align import Skeleton
    from tunecache.search.predict import predicted_trace

    # 80 rows: a source tiling its 64 rows as [1, 1, 1, 64] does not divide them, so round 0
    # also tries the nearest tiling that does (two candidates from one source).
    alpha = _matmul(80, ALPHA[1], ALPHA[2])
    own = predicted_trace(alpha, target)
    assert own is not None
    want = Skeleton(0, own)
    insts, decisions = sources[0]
    rows_site = min(_tile_decisions(sources[0]))
    whole_rows = [insts, [[i, [1, 1, 1, BETA[0]] if i == rows_site else v] for i, v in decisions]]

    def committed(srcs: list[Any], trials: int) -> tuple[Any, list[tuple[Any, Any]]]:
        db = ms.database.MemoryDatabase()
        res = narrowed_search(srcs, alpha, target, builder=builder, runner=runner, max_trials=trials,
                              round_size=trials, seed=1, database=db, remeasure_top=0)
        sks = [Skeleton(0, decode_trace(r.trace.as_json())) for r in db.get_all_tuning_records()]
        return res, [(sk.insts, sk.decisions) for sk in sks]

    res, programs = committed([whole_rows], 2)
    assert res.history[0].measured == 2  # the replay and its fitted tiling fill two trials alone
    assert (want.insts, want.decisions) not in programs
    # Round 0 keeps a place for the prediction whatever the sources before it bring (a
    # source's fitted tiling once took all of round 0 from it, in CI).
    for src in (whole_rows, sources[0]):
        res, programs = committed([src, own], 2)
        assert (want.insts, want.decisions) in programs
        assert res.trials <= 2 and res.source_valid[0] >= 1 and res.source_valid[1] >= 1


def test_max_unroll_lowers_a_sources_deeper_unroll(sources: list[Any], target: Any, builder: Any,
                                                   runner: Any) -> None:
    """``max_unroll`` lowers each candidate's unroll choice above it to the deepest one within it
    (a 512-step unroll of BERT's softmax took 5 s to build); without it the source's stays."""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.search.narrow.align import Skeleton, cap_unroll

    insts, decisions = sources[0]
    sk = Skeleton(0, sources[0])
    assert sk.unroll_sites, "MetaSchedule's CPU sketch samples an unroll depth"
    deepest = {i: max(range(len(ch)), key=lambda c: ch[c]) for i, ch in sk.unroll_sites.items()}
    deep = [insts, [[i, deepest.get(i, v)] for i, v in decisions]]

    def steps(trace: Any) -> list[int]:
        got = Skeleton(0, trace)
        return [ch[got.decisions[i]] for i, ch in got.unroll_sites.items() if i in got.decisions]

    assert set(steps(deep)) == {512}
    sk_deep = Skeleton(0, deep)
    assert set(steps(sk_deep.trace_json(cap_unroll(sk_deep, sk_deep.decisions, 64)))) == {64}
    for cap, want in ((16, {16}), (None, {512})):
        db = ms.database.MemoryDatabase()
        res = narrowed_search([deep], _matmul(*ALPHA), target, builder=builder, runner=runner, max_trials=1,
                              database=db, remeasure_rounds=0, max_unroll=cap)
        assert res.trials == 1 and res.best_trace is not None
        (rec,) = db.get_all_tuning_records()
        assert set(steps(decode_trace(rec.trace.as_json()))) == want


def test_result_replays_on_alpha_and_is_correct(narrowed: dict[str, Any], target: Any) -> None:
    tvm = load_tvm("llvm")
    from tvm.s_tir.schedule import Schedule, Trace

    sch = Schedule(_matmul(*ALPHA))
    Trace.apply_json_to_schedule(narrowed["res"].best_trace, sch)
    rt = tvm.tirx.build(sch.mod, target)
    m, n, k = ALPHA
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    dev = tvm.cpu()
    out = tvm.runtime.tensor(np.zeros((m, n), "float32"), dev)
    rt["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), out)
    np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_bad_source_is_counted_not_raised(sources: list[Any], target: Any, builder: Any,
                                          runner: Any) -> None:
    insts, decisions = sources[0]
    bad_insts = [
        [kind, inputs, ["no_such_block", *attrs[1:]] if kind == "GetSBlock" else attrs, outputs]
        for kind, inputs, attrs, outputs in insts
    ]
    bad = [bad_insts, decisions]
    res = narrowed_search([bad, "not a trace", sources[0]], _matmul(*ALPHA), target,
                          builder=builder, runner=runner, max_trials=2, round_size=2)
    assert res.source_valid[0] == 0 and res.source_valid[1] == 0
    assert res.failed_replay >= 2
    assert res.valid_trials >= 1 and res.best_source == 2
    only_bad = narrowed_search([bad], _matmul(*ALPHA), target, builder=builder, runner=runner,
                               max_trials=2)
    assert only_bad.trials == 0 and only_bad.best_trace is None
    assert only_bad.zero_trial_latency_s is None and only_bad.source_valid == (0,)


def test_arguments_are_validated(sources: list[Any], target: Any) -> None:
    with pytest.raises(ConfigError, match="at least one source"):
        narrowed_search([], _matmul(*ALPHA), target, builder=None, runner=None)
    with pytest.raises(ConfigError, match="max_trials"):
        narrowed_search(sources, _matmul(*ALPHA), target, builder=None, runner=None, max_trials=0)
    with pytest.raises(ConfigError, match="first_round"):
        narrowed_search(sources, _matmul(*ALPHA), target, builder=None, runner=None, first_round=0)
    with pytest.raises(ConfigError, match="phase"):
        propose_neighbours(sources[0], _matmul(*ALPHA), target, "sideways")


# -- neighbourhoods, without measuring --------------------------------------------------------


def test_tile_moves_preserve_product_and_limits() -> None:
    tiles = (4, 6, 1, 8)
    moves = tile_moves(tiles, [(0, 1), (1, 2), (2, 3)], max_innermost_factor=16)
    assert len(moves) == len(set(moves)) and tiles not in moves
    for t in moves:
        assert math.prod(t) == math.prod(tiles)
        assert t[-1] <= 16
        assert sum(a != b for a, b in zip(t, tiles, strict=False)) == 2  # exactly one factor moved
    assert (4, 6, 8, 1) not in moves  # moves go one prime at a time
    assert tile_moves([7, 1], [(0, 1)], max_innermost_factor=4) == []  # 7 would exceed 4
    assert tile_moves([1, 1, 1], [(0, 1)]) == []


def test_fit_tiles_repairs_non_dividing_extents() -> None:
    # TVM's replay would turn these into [1, 1, 1, 28] and [1, 1, 1, 100] (innermost > 64).
    assert fit_tiles([2, 4, 2, 8], 28) == (1, 2, 2, 7)
    assert fit_tiles([1, 1, 1, 64], 100, max_innermost_factor=64) == (2, 1, 1, 50)
    for extent in (1, 7, 28, 97, 100, 130, 512):
        for req in ([2, 4, 2, 8], [1, 1, 1, 64], [16, 1]):
            t = fit_tiles(req, extent, max_innermost_factor=64)
            assert math.prod(t) == extent and len(t) == len(req) and t[-1] <= 64
    assert fit_tiles([2, 4, 2, 8], 512) == (8, 4, 2, 8)  # fits: same as TVM's rescaling


def test_neighbours_are_valid_for_alpha_extents(sources: list[Any], target: Any) -> None:
    from tvm.s_tir.schedule import Schedule, Trace

    alpha = _matmul(*ALPHA)
    extents = {4: ALPHA[0], 6: ALPHA[1], 8: ALPHA[2]}  # SamplePerfectTile of i, j, k
    total = 0
    for phase in PHASES:
        cands = propose_neighbours(sources[0], alpha, target, phase)
        keys = [repr(c[1]) for c in cands]
        assert len(keys) == len(set(keys)), f"duplicates in {phase}"
        for cand in cands:
            for idx, tiles in _tile_decisions(cand).items():
                assert math.prod(tiles) == extents[idx]
            sch = Schedule(alpha)
            Trace.apply_json_to_schedule(cand, sch)
            # TVM keeps decisions that fit unchanged: what we proposed is what runs.
            assert decode_trace(sch.trace.as_json())[1] == cand[1]
        total += len(cands)
    assert total > 0


def test_replay_rescales_tiles_to_alpha(sources: list[Any], target: Any) -> None:
    sch = replay_on(sources[0], _matmul(*ALPHA), target)
    assert sch is not None
    applied = _tile_decisions(decode_trace(sch.trace.as_json()))
    assert [math.prod(applied[i]) for i in (4, 6, 8)] == list(ALPHA)


def test_replay_maps_block_names_between_differently_built_tasks(sources: list[Any], target: Any) -> None:
    """Beta's blocks are ``C``; alpha (built like a Relax task) names the same block ``matmul_out``.

    The sketch signature ignores names; without mapping them the replay fails (a TE-built bridge
    operator and a Relax-built task: ``T_sub`` vs ``T_subtract``).
    """
    import numpy as np
    from tvm import te

    tvm = load_tvm("llvm")
    m, n, k = ALPHA
    a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="matmul_out")
    alpha = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    sch = replay_on(sources[0], alpha, target)
    assert sch is not None
    applied = _tile_decisions(decode_trace(sch.trace.as_json()))
    assert [math.prod(applied[i]) for i in (4, 6, 8)] == list(ALPHA)
    rt = tvm.tirx.build(sch.mod, target)
    x, y = np.random.rand(m, k).astype("float32"), np.random.rand(k, n).astype("float32")
    out = tvm.runtime.tensor(np.zeros((m, n), "float32"))
    rt["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y), out)
    np.testing.assert_allclose(out.numpy(), x @ y, rtol=1e-4)


def _matmul_residual_relu(m: int, n: int, k: int) -> Any:
    """``relu(A @ B + bias + res)``: a matmul whose sketch inlines a fused epilogue, as Relax fuses
    a convolution's residual ``add`` and ``relu``."""
    tvm = load_tvm("llvm")
    from tvm import te, topi

    a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    bias, res = te.placeholder((n,), name="bias"), te.placeholder((m, n), name="res")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    c = te.compute((m, n), lambda i, j: c[i, j] + bias[j], name="T_add")
    c = te.compute((m, n), lambda i, j: c[i, j] + res[i, j], name="T_add1")
    return tvm.IRModule({"main": te.create_prim_func([a, b, bias, res, topi.nn.relu(c)])})


def test_decisions_move_onto_a_sketch_with_another_epilogue(sources: list[Any], target: Any, builder: Any,
                                                            runner: Any) -> None:
    """Beta (a plain matmul) and alpha (a matmul with a fused bias, residual add and relu) have
    different sketch sets but sample the same decisions: beta's decisions are carried onto
    alpha's own sketch (its epilogue fused as MetaSchedule would), and the program is correct."""
    from tunecache.search.narrow.align import Materializer, Skeleton, structure
    from tunecache.tvm_layer.sketch import decision_signature, sketch_signature

    alpha = _matmul_residual_relu(*ALPHA)
    assert sketch_signature(alpha, target) != sketch_signature(_matmul(*BETA), target)
    assert decision_signature(alpha, target) == decision_signature(_matmul(*BETA), target)

    mat = Materializer(alpha, target, 0)
    beta = Skeleton(0, sources[0])
    moved = mat.adapt(beta)
    alpha_sketches = [structure(a) for a in mat.alpha_sketches()]
    assert structure(beta.insts) not in alpha_sketches  # without moving, beta's sketch is foreign
    assert structure(moved.insts) in alpha_sketches
    # Beta's decisions, in order: the tiles are beta's, rescaled by TVM where alpha is larger.
    assert [moved.decisions[i] for i in sorted(moved.decisions)] == [beta.decisions[i] for i in sorted(beta.decisions)]

    sch = replay_on(sources[0], alpha, target)  # zero-trial reuse: the same move
    assert sch is not None
    replayed = decode_trace(sch.trace.as_json())[0]
    cut = next(i for i, inst in enumerate(replayed) if inst[0] == "EnterPostproc")
    assert structure(replayed[:cut]) in alpha_sketches
    applied = _tile_decisions(decode_trace(sch.trace.as_json()))
    assert sorted(math.prod(v) for v in applied.values()) == sorted(ALPHA)
    tvm = load_tvm("llvm")
    m, n, k = ALPHA
    rng = np.random.default_rng(0)
    x, y = rng.random((m, k), "float32"), rng.random((k, n), "float32")
    bias, res = rng.random(n, "float32") - 0.5, rng.random((m, n), "float32") - 20.0
    out = tvm.runtime.tensor(np.zeros((m, n), "float32"))
    tvm.tirx.build(sch.mod, target)["main"](*(tvm.runtime.tensor(v) for v in (x, y, bias, res)), out)
    np.testing.assert_allclose(out.numpy(), np.maximum(x @ y + bias + res, 0), rtol=1e-4, atol=1e-4)

    got = narrowed_search(sources, alpha, target, builder=builder, runner=runner, max_trials=4, round_size=4, seed=1)
    assert got.failed_replay == 0 and got.valid_trials > 0


def _conv_nhwc(size: int, c_in: int, c_out: int, kernel: int) -> Any:
    """A stride-1 NHWC/HWIO convolution keeping ``size``; a kernel above 1 pads the input."""
    tvm = load_tvm("llvm")
    from tvm import te, topi

    data = te.placeholder((1, size, size, c_in), name="data")
    weight = te.placeholder((kernel, kernel, c_in, c_out), name="weight")
    out = topi.nn.conv2d_nhwc(data, weight, 1, (kernel - 1) // 2, 1, "float32")
    return tvm.IRModule({"main": te.create_prim_func([data, weight, out])})


def _run_conv(mod: Any, target: Any, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    tvm = load_tvm("llvm")
    out = tvm.runtime.tensor(np.zeros(data.shape[:3] + weight.shape[3:], "float32"))
    tvm.tirx.build(mod, target)["main"](tvm.runtime.tensor(data), tvm.runtime.tensor(weight), out)
    return out.numpy()


def test_a_1x1_conv_program_is_reused_by_a_padded_3x3_conv(target: Any, builder: Any, runner: Any) -> None:
    """A padded 3x3 conv samples one decision a 1x1 conv has not (where its ``pad_temp`` is
    computed); the rest are the same decisions. The two share a decision signature, beta's
    decisions move onto alpha's sketch with that site left open, round 0 measures the root and
    two other locations for it (never TVM's random pick, which may inline the padding), and the
    reverse move drops the site."""
    from tunecache.reuse.planner import plan_tasks
    from tunecache.search.narrow.align import OPEN_TRIES, Materializer, Skeleton, open_picks
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.bridges import describe_tasks
    from tunecache.tvm_layer.sketch import _design_space, decision_signature, decision_texts

    one, three = _conv_nhwc(14, 32, 32, 1), _conv_nhwc(14, 32, 32, 3)
    assert set(decision_texts(one, target)) != set(decision_texts(three, target))
    assert decision_signature(one, target) == decision_signature(three, target)
    keys = [WorkloadKey(f"{i}" * 8, "0") for i in (1, 3)]
    mp = plan_tasks(describe_tasks([(keys[0], "one", 1.0, one), (keys[1], "three", 1.0, three)], target))
    assert len(mp.plan.full_searches) == 1  # the other one is reused from it

    beta = decode_trace(_design_space(one, target)[0].trace.as_json())  # a sampled 1x1 program
    mat = Materializer(three, target, 0)
    moved = mat.adapt(Skeleton(0, beta))
    (site,) = moved.open_sites
    assert moved.insts[site][0] == "SampleComputeLocation"
    assert [moved.decisions[i] for i in sorted(moved.decisions)] == [v for _, v in beta[1]]
    picks = open_picks(mat, moved, dict(moved.decisions), OPEN_TRIES)
    locations = [p[site] for p in picks]
    assert locations[0] == -1 and len(set(locations)) == OPEN_TRIES and -2 not in locations
    elsewhere = Materializer(_matmul(*ALPHA), target, 0)  # where the moved sketch cannot replay
    assert open_picks(elsewhere, moved, dict(moved.decisions), OPEN_TRIES) == [dict(moved.decisions)]
    assert elsewhere.failed_replay == 0  # probing locations is not a failed replay

    sch = replay_on(beta, three, target)  # zero-trial reuse puts the padding at the root
    assert sch is not None
    applied = dict(decode_trace(sch.trace.as_json())[1])
    assert [v for i, v in sorted(applied.items()) if i in moved.open_sites] == [-1]
    rng = np.random.default_rng(0)
    data, weight = rng.random((1, 14, 14, 32), "float32"), rng.random((3, 3, 32, 32), "float32") - 0.5
    np.testing.assert_allclose(_run_conv(sch.mod, target, data, weight), _run_conv(three, target, data, weight),
                               rtol=1e-4, atol=1e-4)

    res = narrowed_search([beta], three, target, builder=builder, runner=runner, max_trials=OPEN_TRIES,
                          round_size=4, seed=1)
    assert res.failed_replay == 0 and res.history[0].measured == OPEN_TRIES and res.valid_trials > 0

    back = Materializer(one, target, 0).adapt(Skeleton(0, decode_trace(sch.trace.as_json())))
    assert not back.open_sites
    assert Materializer(one, target, 0).materialize(back, back.decisions) is not None


def test_block_name_mapping_rules() -> None:
    from tunecache.search.narrow.align import map_blocks

    assert map_blocks(["C", "root"], ["C", "root"]) == {}
    assert map_blocks(["C", "root"], ["matmul", "root"]) == {"C": "matmul"}  # same count: by position
    # alpha has one more (epilogue) block: missing names go to the alpha name they prefix
    assert map_blocks(["conv", "T_sub", "T_div", "root"], ["conv", "T_subtract", "T_divide", "compute", "root"]) == {
        "T_sub": "T_subtract", "T_div": "T_divide"}
    assert map_blocks(["conv", "X", "root"], ["conv", "T_subtract", "compute", "root"]) is None


def _softmax(rows: int, n: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te, topi

    x = te.placeholder((rows, n), name="x", dtype="float32")
    return tvm.IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x)])})


def test_a_simplified_trace_replays_on_its_own_task_as_itself(target: Any) -> None:
    """A tuned trace is stored simplified (unused queries dropped, its variables numbered anew):
    the sketch it came from must still be recognised. Softmax's design space has sketches that
    differ only in which loop of a split reduction is rfactored; read by raw variable names, a
    trace that rfactors the inner loop matched one that rfactors the outer loop, and replayed on
    its own task as another, slower program (BERT's layer norm and softmax, session 19)."""
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.search.narrow.align import structure
    from tunecache.search.narrow.replay import replay_on
    from tunecache.tvm_layer.sketch import design_space_json

    mod = _softmax(16, 128)
    sketches = design_space_json(mod, target)
    assert sum("RFactor" in str(s) for s in sketches) >= 2
    for sketch in sketches:
        sch = Schedule(mod)
        Trace.apply_json_to_schedule(sketch, sch)
        simplified = sch.trace.simplified(remove_postproc=True).as_json()
        assert structure(decode_trace(simplified)[0]) == structure(decode_trace(sketch)[0])
        whole, short = replay_on(sketch, mod, target), replay_on(simplified, mod, target)
        assert (whole is None) == (short is None)
        if whole is not None and short is not None:
            assert whole.mod.script() == short.mod.script()


def test_a_predicted_padded_row_tile_is_kept_and_its_other_sites_move() -> None:
    """A predicted program covers a prime row count with a padded register tile, a split of
    literal factors. A narrowed search must measure it as predicted (moved onto the task's own
    sketch, its split took the sampled 197 x 1 x 1 x 1 and ViT's dense ran 2.5x slower) and move
    its other tiles, never the sampled decision the split ignores."""
    import tvm_ffi

    from tunecache.search.narrow.align import Materializer, Skeleton
    from tunecache.search.narrow.moves import neighbour_decisions
    from tunecache.search.predict import predict_program, predicted_trace

    tvm = load_tvm("llvm")
    target = tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": "haswell"})
    mod = _matmul(197, 64, 32)
    pred = predict_program(mod, target)
    assert not isinstance(pred, str), pred
    trace = predicted_trace(mod, target)
    assert trace is not None
    literal = [i for i, inst in enumerate(trace[0]) if inst[0] == "Split" and "None" in map(str, inst[1][1:])]
    assert len(literal) == 1

    mat = Materializer(mod, target, seed=0)
    sk = mat.adapt(Skeleton(0, trace))
    assert sk.insts[literal[0]] == trace[0][literal[0]]  # kept, not moved onto the sampled sketch
    cand = mat.materialize(sk, dict(sk.decisions))
    assert cand is not None
    pred.sch.enter_postproc()
    assert all(p.apply(pred.sch) for p in mat.postprocs)
    assert tvm_ffi.structural_equal(cand.sch.mod, pred.sch.mod)
    ignored = {i for i, inst in enumerate(sk.insts) if inst[0] == "SamplePerfectTile"} - set(sk.sites)
    assert len(ignored) == 1  # the row sample the literal split ignores is no site to move
    moved = [d for phase in PHASES for d in neighbour_decisions(sk, cand.decisions, phase)]
    assert moved and all(d[i] == cand.decisions[i] for d in moved for i in ignored)
    for d in moved[:3]:
        c = mat.materialize(sk, d)
        assert c is not None and "T.where" in c.sch.mod.script()  # still padded: the last tile predicated


# -- features and cost ------------------------------------------------------------------------


def test_cpu_features_of_a_replayed_candidate(sources: list[Any], target: Any) -> None:
    sch = replay_on(sources[0], _matmul(*ALPHA), target)
    f = cpu_features(sch)
    assert f.parallel_extent >= 1 and f.vector_lanes >= 1
    assert f.total_work == math.prod(ALPHA)
    assert f.work_per_item * f.parallel_extent == f.total_work
    assert 0 < f.inner_footprint_bytes <= f.item_footprint_bytes
    # Inputs and output of one item can never exceed the whole problem's bytes (plus caches).
    m, n, k = ALPHA
    assert f.item_footprint_bytes <= 4 * (m * k + k * n + 2 * m * n)


def test_cpu_cost_prefers_balanced_vectorized_candidates() -> None:
    good = CpuFeatures(32, 8, 64, 1024, 32768, 100_000, 8_000, "C")
    odd = CpuFeatures(3, 8, 64, 1024, 32768, 100_000, 8_000, "C")
    narrow = CpuFeatures(32, 3, 64, 1024, 32768, 100_000, 8_000, "C")
    big = CpuFeatures(32, 8, 64, 1024, 32768, 8_000_000, 8_000, "C")
    base = cpu_cost(good, good, cores=2, simd_lanes=8)
    for worse in (odd, narrow, big):
        assert cpu_cost(worse, good, cores=2, simd_lanes=8) > base


def test_cuda_features_without_a_gpu() -> None:
    tvm = load_tvm("llvm")  # CUDA intrinsics are not needed for these rules
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.schedule import Schedule

    mod = _matmul(128, 128, 64)
    target = tvm.target.Target("nvidia/nvidia-a100")
    rules = [
        ms.schedule_rule.MultiLevelTiling(
            structure="SSSRRSRS", tile_binds=["blockIdx.x", "vthread.x", "threadIdx.x"],
            max_innermost_factor=64, vector_load_lens=[1, 2, 3, 4],
            reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope="shared"),
            reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[3], scope="local"),
        ),
        ms.schedule_rule.AutoBind(max_threadblocks=256, thread_extents=[32, 64, 128, 256]),
    ]
    space_gen = ms.space_generator.PostOrderApply(sch_rules=rules, postprocs="cuda", mutator_probs={})
    # A fixed rand_state: with a random one, no sampled candidate passed VerifyGPUCode in some
    # runs (cause not investigated).
    ctx = ms.TuneContext(mod=mod, target=target, rand_state=1, space_generator=space_gen)
    space = ctx.space_generator.generate_design_space(mod)[0]
    found = None
    for seed in range(1, 200):
        sch = Schedule(mod, seed=seed)
        space.trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        if all(p.apply(sch) for p in ctx.space_generator.postprocs):  # VerifyGPUCode included
            found = sch
            break
    assert found is not None, "no CUDA candidate passed the postprocessors"
    f = cuda_features(found, target)
    assert f.kernels == 1
    assert f.thread_blocks > 0 and 0 < f.threads_per_block <= 1024
    assert 0 < f.shared_bytes_per_block <= 48 * 1024 * 4


# -- weight prepacking (MetaSchedule's RewriteLayout on layout-free buffers) ---------------------


def test_sources_that_re_lay_out_weights_are_stored_and_reused(target: Any, builder: Any, runner: Any,
                                                               tmp_path: Any) -> None:
    """A matmul whose B is a weight (``layout_free_buffers``, as `frontend.prepare_for_tuning`
    marks them on CPU): its programs re-lay B out (a ``TransformLayout`` in the trace). They
    must survive the store's JSON (TVM 0.27's ``TuningRecord.as_json`` raises on the index
    map) and a narrowed search must measure them with B in its new layout."""
    from tunecache.store import Store
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.target import hardware_key

    def weighted(m: int, n: int, k: int) -> Any:
        mod = _matmul(m, n, k)
        return load_tvm().IRModule({"main": mod["main"].with_attr("layout_free_buffers", [1])})

    store, hw = Store("memory"), hardware_key(target)
    db = make_database(store, hw, target)
    beta = weighted(*BETA)
    tune_tasks([FullSearchTask("beta", beta)], target, db, trials_per_task=8, seed=3,
               work_dir=tmp_path / "beta", builder=builder, runner=runner)
    recs = [r for r in store.records() if r.latency_s is not None]
    assert recs, "the source search stored no valid program"
    relaid = [r for r in recs if any(inst[0] == "TransformLayout" for inst in r.trace[0])]
    assert relaid, "no stored program re-lays the weight out: the test would prove nothing"
    res = narrowed_search([r.trace for r in relaid[:3]], weighted(*ALPHA), target, builder=builder,
                          runner=runner, max_trials=4, round_size=4, seed=1)
    assert res.valid_trials == res.trials > 0
    assert res.failed_run == 0 and res.failed_build == 0
