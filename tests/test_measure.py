"""Real TVM tests of the measurement pipeline and full search on a tiny matmul.

Slow parts (worker start-up, one short search) are shared through module-scoped fixtures so
the file stays well under a minute and a half on a 2-core machine. No timing asserts.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tunecache.errors import ConfigError
from tunecache.search import (
    FullSearchTask,
    SearchProgress,
    TaskResult,
    make_builder,
    search_sizing,
    tune_tasks,
)
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.measure import COLD_REPEATS

N = 64
TRIALS = 12


def _matmul(n: int = N) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((n, n), name="A", dtype="float32")
    b = te.placeholder((n, n), name="B", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _unbuildable(mod: Any) -> Any:
    """The matmul with a loop bound to a GPU thread: the LLVM CPU backend refuses it."""
    from tvm.s_tir import Schedule

    sch = Schedule(mod)
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.bind(i, "threadIdx.x")
    return sch.mod


@pytest.fixture(scope="module")
def search(
    target: Any, builder: Any, runner: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One short full search on the matmul, shared by the tests below."""
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    events: list[SearchProgress] = []
    mod = _matmul()
    results = tune_tasks(
        [FullSearchTask("matmul64", mod)],
        target,
        db,
        trials_per_task=TRIALS,
        seed=7,
        work_dir=tmp_path_factory.mktemp("work"),
        progress=events.append,
        builder=builder,
        runner=runner,
    )
    return {"db": db, "results": results, "events": events, "mod": mod}


def _median_latency(mod: Any, target: Any) -> float:
    import numpy as np

    tvm = load_tvm("llvm")
    rt = tvm.tirx.build(mod, target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.rand(N, N).astype("float32"), dev) for _ in range(2)]
    args.append(tvm.runtime.tensor(np.zeros((N, N), "float32"), dev))
    timer = rt.time_evaluator(rt.entry_name, dev, number=20, repeat=5)
    return float(statistics.median(timer(*args).results))


@pytest.mark.tvm
def test_builder_returns_failures_as_data(target: Any, builder: Any) -> None:
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    mod = _matmul()
    results = builder.build([BuilderInput(mod, target), BuilderInput(_unbuildable(mod), target)])
    assert len(results) == 2
    good, bad = results
    assert good.error_msg is None and Path(good.artifact_path).is_file()
    assert bad.artifact_path is None
    assert "build failed" in bad.error_msg


@pytest.mark.tvm
def test_in_process_builder_and_runner_measure_a_candidate(
    target: Any, runner: Any, tmp_path: Path
) -> None:
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    mod = _matmul()
    here = make_builder(max_workers=0, artifact_dir=tmp_path)
    good, bad = here.build([BuilderInput(mod, target), BuilderInput(_unbuildable(mod), target)])
    assert good.error_msg is None
    assert bad.artifact_path is None and "not implemented" in bad.error_msg
    [future] = runner.run(
        [RunnerInput(good.artifact_path, "cpu", ArgInfo.from_prim_func(mod["main"]))]
    )
    result = future.result()
    assert result.error_msg is None
    assert len(result.run_secs) == COLD_REPEATS and all(0 < float(x) < 1.0 for x in result.run_secs)


@pytest.mark.tvm
def test_the_runner_replaces_its_worker_process_every_so_many_candidates(target: Any, tmp_path: Path) -> None:
    """A runner made with ``process_uses=2`` measures 5 candidates on 3 worker processes (its
    memory grows with every candidate, so a long warm must not keep one forever), all valid."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tunecache.tvm_layer.measure import make_runner

    mod = _matmul(16)
    [built] = make_builder(max_workers=0, artifact_dir=tmp_path).build([BuilderInput(mod, target)])
    runner = make_runner(process_uses=2)
    pids = []
    try:
        for _ in range(5):
            [future] = runner.run([RunnerInput(built.artifact_path, "cpu", ArgInfo.from_prim_func(mod["main"]))])
            assert future.result().error_msg is None
            pids += [w._proc.pid for w in runner.pool._worker_map.values()]
    finally:
        runner.pool.shutdown(wait=True)
    assert len(set(pids)) == 3, pids


def test_a_build_limit_follows_the_tasks_median_and_a_slow_task_raises_its_own() -> None:
    from tunecache.tvm_layer.measure import SLOW_BUILD_FACTOR, SLOW_BUILD_FLOOR_S, build_limit

    assert build_limit([], [0.1] * 3, 60.0) == 60.0  # too few builds seen: only the timeout
    assert build_limit([], [0.1] * 8, 60.0) == SLOW_BUILD_FLOOR_S  # 50 x 0.1 s, every task's
    assert build_limit([1.0] * 8, [0.1] * 100, 60.0) == SLOW_BUILD_FACTOR * 1.0  # the task's own
    assert build_limit([10.0] * 8, [0.1] * 100, 60.0) == 60.0  # never over the timeout
    # A task whose every program builds slowly: its first batch is stopped at every task's limit,
    # and those stops, counted at that limit, make its own limit 50 times as long.
    first = build_limit([], [0.1] * 8, 60.0)
    assert build_limit([first] * 8, [0.1] * 8 + [first] * 8, 600.0) == SLOW_BUILD_FACTOR * first


@pytest.mark.tvm
def test_a_candidate_slower_to_build_than_its_tasks_limit_is_stopped_as_data(
        target: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that builds longer than its task's limit (``build_limit``) is stopped, reported
    as failed with the reason, leaves no files, and the builder's worker builds the next candidate."""
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    import tunecache.tvm_layer.measure as measure

    mod = _matmul(16)
    # A thousandth of its median: only the floor lets the matmul's builds through.
    builder = make_builder(max_workers=1, artifact_dir=tmp_path, slow_factor=1e-3)
    try:
        seen = builder.build([BuilderInput(mod, target)] * measure.SLOW_BUILD_SAMPLES)
        assert all(r.error_msg is None for r in seen)  # too few builds seen for a limit
        task = measure._task_signature(mod)
        assert task != measure._task_signature(_matmul(32))
        assert builder.limit(task) == measure.SLOW_BUILD_FLOOR_S
        monkeypatch.setattr(measure, "SLOW_BUILD_FLOOR_S", 1e-4)  # now no real build is fast enough
        assert builder.limit(task) < 1e-3
        before = sorted(tmp_path.iterdir())
        [stopped] = builder.build([BuilderInput(mod, target)])
        assert stopped.artifact_path is None and "too slow to compile" in stopped.error_msg
        assert sorted(tmp_path.iterdir()) == before  # its directory, LLVM's files in it, removed
        monkeypatch.undo()
        [again] = builder.build([BuilderInput(mod, target)])  # on a fresh worker
        assert again.error_msg is None and Path(again.artifact_path).is_file()
    finally:
        builder.close()
    unlimited = make_builder(max_workers=1, artifact_dir=tmp_path, slow_factor=None)
    monkeypatch.setattr(measure, "SLOW_BUILD_FLOOR_S", 1e-4)
    try:
        built = unlimited.build([BuilderInput(mod, target)] * (measure.SLOW_BUILD_SAMPLES + 1))
        assert all(r.error_msg is None for r in built)
    finally:
        unlimited.close()
    with pytest.raises(ConfigError, match="slow_factor"):
        make_builder(slow_factor=0)


@pytest.mark.tvm
@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps (Linux)")
def test_build_and_run_workers_never_load_torch(target: Any, tmp_path: Path) -> None:
    """``import tvm`` imports torch when it can (3 of a worker's 5 s start); the builder's and
    runner's worker processes, first and replacement ones alike, build and run without it."""
    import importlib.util

    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tunecache.tvm_layer.measure import make_runner

    assert importlib.util.find_spec("torch") is not None  # else this test shows nothing

    def loads_torch(pid: int) -> bool:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()

    mod = _matmul(16)
    builder = make_builder(max_workers=1, artifact_dir=tmp_path)
    runner = make_runner(process_uses=1)  # each candidate on a fresh worker process
    pids: dict[int, bool] = {}  # worker process -> it loaded torch, read while it lives
    try:
        built = builder.build([BuilderInput(mod, target)])
        assert built[0].error_msg is None
        pids.update((w._proc.pid, loads_torch(w._proc.pid)) for w in builder._pool._worker_map.values())
        for _ in range(2):
            [future] = runner.run([RunnerInput(built[0].artifact_path, "cpu", ArgInfo.from_prim_func(mod["main"]))])
            assert future.result().error_msg is None
            pids.update((w._proc.pid, loads_torch(w._proc.pid)) for w in runner.pool._worker_map.values()
                        if w._proc is not None)
        assert len(pids) == 3 and not any(pids.values()), pids  # a builder, a runner, its replacement
    finally:
        builder.close()
        runner.pool.shutdown(wait=True)


def test_a_runner_lent_with_more_repeats_keeps_its_worker_process(target: Any, tmp_path: Path) -> None:
    """Re-measuring the bests borrows the search's runner with 10 repeats instead of starting a
    worker process of its own: the lent runner measures with the block's repeats, on the same
    process, and has its own settings back afterwards."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tunecache.tvm_layer.measure import evaluating, make_runner

    mod = _matmul(16)
    [built] = make_builder(max_workers=0, artifact_dir=tmp_path).build([BuilderInput(mod, target)])
    runner = make_runner()
    args = [RunnerInput(built.artifact_path, "cpu", ArgInfo.from_prim_func(mod["main"]))]

    def measured(r: Any) -> tuple[int, list[int]]:
        [future] = r.run(args)
        res = future.result()
        assert res.error_msg is None
        return len(res.run_secs), [w._proc.pid for w in r.pool._worker_map.values()]

    try:
        before, pids = measured(runner)
        with evaluating(runner, repeat=5) as lent:
            assert lent is runner
            during, lent_pids = measured(lent)
        after, later_pids = measured(runner)
    finally:
        runner.pool.shutdown(wait=True)
    assert (before, during, after) == (COLD_REPEATS, 5, COLD_REPEATS)
    assert pids == lent_pids == later_pids and len(pids) == 1


@pytest.mark.tvm
def test_the_runner_times_cpu_programs_cold_and_other_devices_warm(target: Any, tmp_path: Path) -> None:
    """Each sample of a CPU candidate is one run after the cache flush of every argument but the
    first (what its worker process is handed); a candidate of another device is handed the warm
    settings (the flush would read a GPU's memory as the host's), and the runner is cold again
    afterwards. A runner made with ``cold=False`` averages warm runs."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    from tunecache.tvm_layer.measure import make_runner

    mod = _matmul(16)
    [built] = make_builder(max_workers=0, artifact_dir=tmp_path).build([BuilderInput(mod, target)])
    args = ArgInfo.from_prim_func(mod["main"])
    runner, warm = make_runner(), make_runner(cold=False)
    handed: list[tuple[str, bool, int, int]] = []
    for r in (runner, warm):
        submit = r.pool.submit

        def spy(*a: Any, submit: Any = submit) -> Any:  # the evaluator settings a worker is handed
            cfg, device = a[4], a[7]
            handed.append((device, cfg.enable_cpu_cache_flush, cfg.number, cfg.repeat))
            return submit(*a)

        r.pool.submit = spy
    try:
        [cpu] = runner.run([RunnerInput(built.artifact_path, "cpu", args)])
        [gpu] = runner.run([RunnerInput(built.artifact_path, "cuda", args)])
        [again] = runner.run([RunnerInput(built.artifact_path, "cpu", args)])
        [warmed] = warm.run([RunnerInput(built.artifact_path, "cpu", args)])
        assert cpu.result().error_msg is None and again.result().error_msg is None
        assert len(cpu.result().run_secs) == COLD_REPEATS
        assert gpu.result().error_msg is not None  # a CPU build on a "cuda" device: an error as data
        assert len(warmed.result().run_secs) == 1
    finally:
        runner.pool.shutdown(wait=True)
        warm.pool.shutdown(wait=True)
    assert handed == [("cpu", True, 1, COLD_REPEATS), ("cuda", False, 3, COLD_REPEATS),
                      ("cpu", True, 1, COLD_REPEATS), ("cpu", False, 3, 1)]


@pytest.mark.tvm
def test_programs_measured_in_rounds_are_interleaved_and_a_failure_is_data(target: Any) -> None:
    """``measure_mods(rounds=3)`` builds once and runs the built programs three times, each
    round in the order of the one before rotated by one (a burst of load elsewhere then slows
    each a little, not one a lot); every round's samples come back; an unbuildable module is a
    failure returned as data and is never run."""
    from tunecache.tvm_layer.measure import make_runner, measure_mods

    runner = make_runner(repeat=2)
    calls: list[list[str]] = []

    class Spying:  # the real runner, its calls recorded
        def run(self, inputs: Any) -> Any:
            calls.append([str(i.artifact_path) for i in inputs])
            return runner.run(inputs)

    small, large = _matmul(16), _matmul(32)
    try:
        got = measure_mods([small, _unbuildable(small), large], target, builder=make_builder(max_workers=0),
                           runner=Spying(), rounds=3)
        with pytest.raises(ValueError, match="rounds"):
            measure_mods([small], target, builder=make_builder(max_workers=0), runner=Spying(), rounds=0)
    finally:
        runner.pool.shutdown(wait=True)
    ok_small, bad, ok_large = got
    assert ok_small.ok and ok_large.ok and len(ok_small.run_secs) == len(ok_large.run_secs) == 6
    assert not bad.ok and bad.error and not bad.run_secs
    assert len(calls) == 3 and all(len(c) == 2 for c in calls)
    first, second = calls[0]
    assert calls == [[first, second], [second, first], [first, second]]
    assert not any(Path(p).exists() for p in calls[0])  # builds are deleted once measured


@pytest.mark.tvm
def test_every_record_is_valid_and_in_the_database(search: dict[str, Any]) -> None:
    [result] = search["results"]
    assert isinstance(result, TaskResult)
    assert result.name == "matmul64"
    assert result.trials == TRIALS
    assert result.valid_trials == TRIALS
    assert result.best_latency_s is not None and result.best_latency_s > 0
    assert result.seconds > 0

    db = search["db"]
    records = db.get_all_tuning_records()
    assert len(records) == TRIALS
    assert all(0 < float(s) < 1.0 for r in records for s in r.run_secs)  # failures would be stored as 1e10
    # Each candidate's samples (three cold runs); the search's best is the fastest one's median.
    assert {len(r.run_secs) for r in records} == {COLD_REPEATS}
    assert min(statistics.median(float(s) for s in r.run_secs) for r in records) == pytest.approx(result.best_latency_s)
    workload = db.commit_workload(search["mod"])
    assert len(db.get_top_k(workload, TRIALS)) == TRIALS


@pytest.mark.tvm
def test_progress_events_count_up_to_the_budget(search: dict[str, Any]) -> None:
    events = search["events"]
    assert events, "one event per measured round"
    assert all(e.task_name == "matmul64" and e.max_trials == TRIALS for e in events)
    assert [e.total_trials for e in events] == sorted(e.total_trials for e in events)
    assert events[-1].task_trials == TRIALS
    assert len(events) >= 2  # the search is sized to at least two rounds


@pytest.mark.tvm
def test_tuned_beats_untuned(search: dict[str, Any], target: Any) -> None:
    from tvm.s_tir import Schedule

    mod = search["mod"]
    db = search["db"]
    [best] = db.get_top_k(db.commit_workload(mod), 1)
    sch = Schedule(mod)
    best.trace.apply_to_schedule(sch, remove_postproc=False)
    assert _median_latency(sch.mod, target) < _median_latency(mod, target)


@pytest.mark.tvm
@pytest.mark.parametrize("scheduler", ["tunecache", "gradient"])
def test_time_budget_stops_new_rounds(
    scheduler: str, target: Any, builder: Any, runner: Any, tmp_path: Path
) -> None:
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    [result] = tune_tasks(
        [FullSearchTask("matmul64", _matmul())],
        target,
        db,
        trials_per_task=64,
        time_budget_s=1e-3,
        seed=3,
        work_dir=tmp_path,
        builder=builder,
        runner=runner,
        scheduler=scheduler,
        early_stopping=None,
    )
    # The budget covers set-up and is checked before the task loop (and, with tunecache's
    # scheduler, before every round): it is spent before the first round, so none starts.
    assert (result.trials, result.stop_reason) == (0, "time budget")
    assert len(db.get_all_tuning_records()) == result.trials


def test_search_sizing_small_budget() -> None:
    small = search_sizing(64)
    assert (small.population_size, small.init_min_unmeasured, small.genetic_num_iters) == (
        64,
        16,
        2,
    )
    for trials in (1, 5, 16, 64, 100, 256, 2000):
        per_iter = search_sizing(trials).num_trials_per_iter
        assert 1 <= per_iter <= min(64, trials)


def test_a_time_budget_shrinks_rounds_so_every_task_gets_a_first_round() -> None:
    from tunecache.search.full import (
        FIRST_PASS_SECONDS_PER_ROUND,
        FIRST_PASS_SECONDS_PER_TRIAL,
        FIRST_PASS_SHARE,
        fit_to_time_budget,
    )

    base = search_sizing(64)
    assert fit_to_time_budget(base, 22, None) == base  # no budget: unchanged
    for n_tasks, budget in ((22, 240.0), (50, 600.0), (5, 30.0), (3, 3600.0)):
        fitted = fit_to_time_budget(base, n_tasks, budget)
        per_iter = fitted.num_trials_per_iter
        assert 1 <= per_iter <= base.num_trials_per_iter
        first_pass = n_tasks * (FIRST_PASS_SECONDS_PER_ROUND + per_iter * FIRST_PASS_SECONDS_PER_TRIAL)
        # Fits in its share of the budget, unless it is already at one candidate a round ...
        assert per_iter == 1 or first_pass <= FIRST_PASS_SHARE * budget
        # ... and is the largest round that does (or the unshrunk one).
        bigger = n_tasks * (FIRST_PASS_SECONDS_PER_ROUND + (per_iter + 1) * FIRST_PASS_SECONDS_PER_TRIAL)
        assert per_iter == base.num_trials_per_iter or bigger > FIRST_PASS_SHARE * budget
        assert (fitted.population_size, fitted.genetic_num_iters) == (base.population_size, base.genetic_num_iters)
    assert fit_to_time_budget(base, 1000, 10.0).num_trials_per_iter == 1


def test_full_searches_of_a_plan_leave_time_for_its_reuse_children() -> None:
    from tunecache.search.budget import REUSE_SECONDS_PER_SEARCH, REUSE_SECONDS_PER_TRIAL, full_search_deadline

    assert full_search_deadline(None, 5, 8) is None
    per_child = 8 * REUSE_SECONDS_PER_TRIAL + REUSE_SECONDS_PER_SEARCH
    now, deadline = 1000.0, 1300.0
    for children in (0, 1, 10, 60, 1000):
        full = full_search_deadline(deadline, children, 8, now=now)
        assert now < full <= deadline
        reserved = deadline - full
        # the children's estimated time is kept back, but never more than half of what is left
        assert reserved == pytest.approx(min(children * per_child, 0.5 * (deadline - now)))
    assert full_search_deadline(deadline, 3, 8, now=deadline + 5) == deadline + 5  # already late: no time


def test_tune_tasks_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one task"):
        tune_tasks([], None, None, trials_per_task=4, work_dir=tmp_path)
    dup = [FullSearchTask("a", None), FullSearchTask("a", None)]
    with pytest.raises(ConfigError, match="unique"):
        tune_tasks(dup, None, None, trials_per_task=4, work_dir=tmp_path)
    with pytest.raises(ConfigError, match="weights"):
        tune_tasks(
            [FullSearchTask("a", None, 0.0)], None, None, trials_per_task=4, work_dir=tmp_path
        )
    with pytest.raises(ConfigError, match="trials_per_task"):
        tune_tasks([FullSearchTask("a", None)], None, None, trials_per_task=0, work_dir=tmp_path)
    with pytest.raises(ConfigError, match="max_workers"):
        make_builder(max_workers=-1)
