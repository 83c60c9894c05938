"""tunecache's search engine: trivial tasks once, converged tasks stop, re-measured bests.

The allocation tests drive the task picker with a fake scheduler (no TVM). The TVM tests use
small TE workloads: one real search shared by several tests, and one search with a
deterministic fake runner (latencies fixed per task) so that which task converges is not left
to measurement noise. Builds are real throughout. No timing asserts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tunecache.errors import ConfigError
from tunecache.search.full import (
    STOP_CONVERGED,
    STOP_EXHAUSTED,
    STOP_TIME,
    STOP_TRIVIAL,
    EarlyStopping,
    FullSearchTask,
    fixed_programs,
    tune_tasks,
)
from tunecache.search.full.allocator import Allocator, TaskTally
from tunecache.tvm_layer import load_tvm

# -- the task picker, with a fake MetaSchedule scheduler ---------------------------------------


@dataclass
class _FakeRecord:
    flop: float
    is_terminated: bool = False
    runner_futures: Any = None


@dataclass
class _FakeScheduler:
    tasks_: list[_FakeRecord]
    joined: list[int] = field(default_factory=list)

    def join_running_task(self, i: int) -> None:
        self.joined.append(i)
        self.tasks_[i].runner_futures = None

    def terminate_task(self, i: int) -> None:
        assert not self.tasks_[i].is_terminated
        self.tasks_[i].is_terminated = True


def _round(tally: TaskTally, n: int, best: float | None) -> None:
    tally.trials += n
    tally.rounds += 1
    tally.best = best if tally.best is None or best is None else min(tally.best, best)
    tally.last_round_empty = n == 0
    tally.history.append((tally.trials, tally.best))


def _allocator(tallies: list[TaskTally], weights: list[float], **kw: Any) -> Allocator:
    args: dict[str, Any] = dict(
        max_trials_per_task=[1000] * len(tallies),
        max_trials_global=1000,
        deadline=None,
        early_stopping=EarlyStopping(min_improvement=0.02),
        window_trials=8,
        grad_window=24,
    )
    args.update(kw)
    return Allocator(tallies, weights, **args)


def test_fresh_tasks_first_heaviest_first() -> None:
    tallies = [TaskTally() for _ in range(3)]
    sched = _FakeScheduler([_FakeRecord(1e3), _FakeRecord(1e6), _FakeRecord(1e5)])
    alloc = _allocator(tallies, [1.0, 1.0, 20.0])
    assert alloc.next_task(sched) == 2  # 20 * 1e5 > 1 * 1e6
    _round(tallies[2], 8, 1e-3)
    assert alloc.next_task(sched) == 1
    _round(tallies[1], 8, 1e-3)
    assert alloc.next_task(sched) == 0


def test_converged_task_stops_and_its_trials_go_to_the_other() -> None:
    small, big = TaskTally(), TaskTally()
    sched = _FakeScheduler([_FakeRecord(1e3), _FakeRecord(1e6)])
    alloc = _allocator([small, big], [1.0, 4.0], max_trials_global=64)
    _round(small, 8, 1e-4)
    _round(big, 8, 1e-3)
    _round(small, 8, 0.99e-4)  # 1% better over the last 8 trials: converged
    picks = []
    for _ in range(10):
        i = alloc.next_task(sched)
        if i < 0:
            break
        picks.append(i)
        _round(big, 8, big.best * 0.9)
    assert small.stop == STOP_CONVERGED and sched.tasks_[0].is_terminated
    assert set(picks) == {1}
    assert small.trials + big.trials == 64  # the global cap, all of the rest to the big task


def test_weighted_gradient_prefers_more_weighted_latency() -> None:
    a, b = TaskTally(), TaskTally()
    sched = _FakeScheduler([_FakeRecord(1e6), _FakeRecord(1e6)])
    alloc = _allocator([a, b], [1.0, 3.0], early_stopping=None)
    _round(a, 8, 2e-3)
    _round(b, 8, 1e-3)
    assert alloc.next_task(sched) == 1  # 3 * 1e-3 > 1 * 2e-3


def test_empty_round_exhausts_and_deadline_stops_everything() -> None:
    a, b = TaskTally(), TaskTally()
    sched = _FakeScheduler([_FakeRecord(1e6), _FakeRecord(1e6, runner_futures=[object()])])
    now = [0.0]
    alloc = _allocator([a, b], [1.0, 1.0], deadline=10.0, clock=lambda: now[0])
    _round(a, 8, 1e-3)
    _round(a, 0, None)
    assert alloc.next_task(sched) == 1
    assert a.stop == STOP_EXHAUSTED and sched.joined == [1]  # round in flight joined first
    now[0] = 11.0
    assert alloc.next_task(sched) == -1
    assert b.stop == STOP_TIME


def test_a_stop_request_stops_every_task_before_the_next_round() -> None:
    """Ctrl-C (tunecache.interrupt) asks the search to stop: the rounds in flight are joined
    (committed), no task gets another round, each says why it stopped."""
    from tunecache.search.full import STOP_INTERRUPTED

    a, b = TaskTally(), TaskTally()
    sched = _FakeScheduler([_FakeRecord(1e6), _FakeRecord(1e6, runner_futures=[object()])])
    stop = [False]
    alloc = _allocator([a, b], [1.0, 1.0], should_stop=lambda: stop[0])
    _round(a, 8, 1e-3)
    assert alloc.next_task(sched) == 1
    stop[0] = True
    sched.tasks_[1].runner_futures = [object()]
    assert alloc.next_task(sched) == -1
    assert sched.joined == [1, 1] and a.stop == b.stop == STOP_INTERRUPTED


def test_early_stopping_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="min_improvement"):
        EarlyStopping(min_improvement=1.5)
    with pytest.raises(ConfigError, match="window_trials"):
        EarlyStopping(window_trials=0)
    with pytest.raises(ConfigError, match="early stopping needs"):
        tune_tasks(
            [FullSearchTask("a", None)],
            None,
            None,
            trials_per_task=4,
            work_dir="/tmp",
            scheduler="gradient",
        )


# -- real TVM -----------------------------------------------------------------------------------


def _prim(tvm: Any, tensors: list[Any]) -> Any:
    from tvm import te

    return tvm.IRModule({"main": te.create_prim_func(tensors)})


def _matmul(n: int) -> Any:
    tvm = load_tvm("llvm")
    from tvm import te

    a = te.placeholder((n, n), name="A", dtype="float32")
    b = te.placeholder((n, n), name="B", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return _prim(tvm, [a, b, c])


def _elementwise() -> dict[str, Any]:
    tvm = load_tvm("llvm")
    from tvm import te, topi

    a = te.placeholder((64, 256), name="A", dtype="float32")
    b = te.placeholder((64, 256), name="B", dtype="float32")
    return {
        "add": _prim(tvm, [a, b, te.compute(a.shape, lambda i, j: a[i, j] + b[i, j], name="C")]),
        "relu": _prim(tvm, [a, topi.nn.relu(a)]),
        "reshape": _prim(tvm, [a, topi.reshape(a, (128, 128))]),
    }


@pytest.fixture(scope="module")
def tuned(target: Any, builder: Any, runner: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three elementwise tasks and a 64x64 matmul tuned into a store with the engine."""
    from tunecache.store import Store
    from tunecache.tvm_layer.convert import workload_of
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.target import hardware_key

    store = Store("memory")
    hw = hardware_key(target)
    mods = {**_elementwise(), "matmul": _matmul(64)}
    tasks = [FullSearchTask(name, mod, 2.0 if name == "matmul" else 1.0) for name, mod in mods.items()]
    db = make_database(store, hw, target)
    asked: list[int] = []  # the cost model is made only for the task loop (None: the default)
    results = tune_tasks(
        tasks,
        target,
        db,
        trials_per_task=12,
        max_trials_global=16,
        seed=5,
        work_dir=tmp_path_factory.mktemp("work"),
        builder=builder,
        runner=runner,
        cost_model=lambda: asked.append(1),
    )
    keys = {name: workload_of(mod)[0] for name, mod in mods.items()}
    return {"store": store, "hw": hw, "mods": mods, "keys": keys, "results": {r.name: r for r in results},
            "cost_model_asked": len(asked)}


@pytest.mark.tvm
def test_fixed_design_spaces_are_found(target: Any) -> None:
    from tvm.s_tir import meta_schedule as ms

    def programs(mod: Any) -> Any:
        ctx = ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply",
                             search_strategy="evolutionary", task_name="t")  # fmt: skip
        return fixed_programs(ctx)

    for name, mod in _elementwise().items():
        found = programs(mod)
        assert found is not None and len(found) == 1, name
    assert programs(_matmul(64)) is None


@pytest.mark.tvm
def test_trivial_tasks_get_exactly_one_measurement(tuned: dict[str, Any]) -> None:
    store, hw = tuned["store"], tuned["hw"]
    for name in ("add", "relu", "reshape"):
        r = tuned["results"][name]
        assert (r.trivial, r.trials, r.valid_trials, r.rounds) == (True, 1, 1, 0), r
        assert r.stop_reason == STOP_TRIVIAL
        assert r.best_latency_s is not None and r.best_latency_s > 0
        assert len(store.records(workload=tuned["keys"][name], hardware=hw)) == 1
    mm = tuned["results"]["matmul"]
    assert not mm.trivial and mm.trials == 16 - 3  # the rest of the global budget
    assert tuned["cost_model_asked"] == 1  # for the matmul's search
    assert mm.valid_trials == mm.trials and mm.empty_rounds == 0
    assert len(store.records(workload=tuned["keys"]["matmul"], hardware=hw)) == mm.trials


@pytest.mark.tvm
def test_trivial_tasks_alone_never_make_a_cost_model(target: Any, builder: Any, runner: Any, tmp_path: Path) -> None:
    """A plan's shared cost model is pre-trained on first use: BERT's reshapes, each with one
    program, made every compile from a warm store pay for a model nothing used."""
    from tunecache.store import Store
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.target import hardware_key

    asked: list[int] = []
    mods = _elementwise()
    db = make_database(Store("memory"), hardware_key(target), target)
    results = tune_tasks([FullSearchTask(name, mod) for name, mod in mods.items()], target, db, trials_per_task=4,
                         work_dir=tmp_path, builder=builder, runner=runner, cost_model=lambda: asked.append(1))
    assert [r.trivial for r in results] == [True] * len(mods) and asked == []


@pytest.mark.tvm
def test_stored_trivial_task_is_not_measured_again(
    tuned: dict[str, Any], target: Any, builder: Any, runner: Any, tmp_path: Path
) -> None:
    from tunecache.tvm_layer.database import make_database

    db = make_database(tuned["store"], tuned["hw"], target)
    [r] = tune_tasks([FullSearchTask("add", tuned["mods"]["add"])], target, db,
                     trials_per_task=4, work_dir=tmp_path, builder=builder, runner=runner)  # fmt: skip
    assert (r.trivial, r.trials, r.stop_reason) == (True, 0, "stored")


@pytest.mark.tvm
def test_lucky_record_is_corrected_by_remeasure(tuned: dict[str, Any], target: Any) -> None:
    from tunecache.search.remeasure import remeasure, remeasure_best
    from tunecache.store.records import Provenance, Record

    store, hw, key, mod = tuned["store"], tuned["hw"], tuned["keys"]["matmul"], tuned["mods"]["matmul"]
    # The untuned program (an empty trace: serial loops) with a lucky 1 ns measurement.
    lucky = Record(workload=key, hardware=hw, trace=[[], []], run_secs=(1e-9,), latency_s=1e-9,
                   provenance=Provenance(kind="tuned"))  # fmt: skip
    store.commit_record(lucky)
    assert store.best_k(key, hw, 1)[0].uid == lucky.uid

    done = remeasure_best(store, hw, key, mod, target, k=2, repeats=5)
    by_uid = {d.uid: d for d in done}
    assert by_uid[lucky.uid].remeasurement is not None
    assert by_uid[lucky.uid].remeasurement.median_s > 1e-6
    best = store.best_k(key, hw, 2)
    # Ranked by what it really takes now: serial loops of a 64x64 matmul may still beat a
    # parallel program tuned with a few trials on a loaded machine, so only the 1 ns is gone.
    assert best[0].latency_s > 1e-6
    assert all(r.cv is not None and r.uid in by_uid for r in best)  # the top 2 are re-measured
    [again] = [r for r in store.records(workload=key, hardware=hw) if r.uid == lucky.uid]
    assert again.run_secs == (1e-9,) and again.latency_s == by_uid[lucky.uid].remeasurement.median_s

    one = remeasure(mod, best[0].trace, target, repeats=4, number=2)
    assert len(one.samples) == 4 and one.median_s > 0 and one.cv >= 0


@pytest.mark.tvm
def test_programs_of_two_workloads_are_measured_side_by_side(tuned: dict[str, Any], target: Any,
                                                             runner: Any) -> None:
    """Each program is measured on its own module in shared rounds; a trace that does not replay
    on the module it is given comes back as the reason, and nothing is stored."""
    from tunecache.search.remeasure import Remeasurement, measure_side_by_side

    store, hw, keys, mods = tuned["store"], tuned["hw"], tuned["keys"], tuned["mods"]
    mm = store.best_k(keys["matmul"], hw, 1)[0]
    name = next(n for n in mods if n != "matmul")
    ew = store.best_k(keys[name], hw, 1)[0]
    before = {r.uid: r.latency_s for r in store.records(hardware=hw)}
    got = measure_side_by_side([(mods["matmul"], mm.trace), (mods[name], mm.trace), (mods[name], ew.trace)], target,
                               runner=runner, repeats=4, rounds=2)
    assert isinstance(got[0], Remeasurement) and len(got[0].samples) == 4 and got[0].median_s > 0
    assert isinstance(got[1], str) and "does not replay" in got[1]
    assert isinstance(got[2], Remeasurement) and len(got[2].samples) == 4
    assert {r.uid: r.latency_s for r in store.records(hardware=hw)} == before


def _fake_runner_class() -> Any:
    """A runner whose latencies are fixed per task: 16x16 matmul always 2 ms (converged at
    once); 64x64 matmul 1 ms, 3% better at every candidate (never converges)."""
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    @derived_object
    class FakeRunner(PyRunner):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def run(self, runner_inputs: Any) -> Any:
            futures = []
            for inp in runner_inputs:
                n = int(inp.args_info[0].shape[0])
                if n == 16:
                    secs = 2e-3
                else:
                    secs = 1e-3 * 0.97**self.calls
                    self.calls += 1
                result = RunnerResult([secs], None)
                futures.append(RunnerFuture(lambda: True, lambda r=result: r))
            return futures

    return FakeRunner


@pytest.mark.tvm
def test_early_stopping_hands_trials_to_the_heavier_task(
    target: Any, builder: Any, tmp_path: Path
) -> None:
    from tvm.s_tir import meta_schedule as ms

    fake = _fake_runner_class()
    tasks = [FullSearchTask("small", _matmul(16), 1.0), FullSearchTask("big", _matmul(64), 4.0)]
    runs = {}
    for label, es in (("on", EarlyStopping(min_improvement=0.02, window_trials=8)), ("off", None)):
        results = tune_tasks(tasks, target, ms.database.MemoryDatabase(), trials_per_task=16,
                             max_trials_global=48, early_stopping=es, seed=1,
                             work_dir=tmp_path / label, builder=builder, runner=fake())  # fmt: skip
        runs[label] = {r.name: r for r in results}
    on, off = runs["on"], runs["off"]
    assert on["small"].stop_reason == STOP_CONVERGED
    assert on["small"].trials < 48  # stopped before its cap (the global budget)
    assert on["big"].trials > 48 // 2  # beyond an even split
    assert on["small"].trials + on["big"].trials == 48
    assert on["big"].trials > off["big"].trials  # off: each task capped at trials_per_task
    assert off["big"].trials == off["small"].trials == 16


@pytest.mark.tvm
def test_a_task_with_its_own_cap_gets_no_more(target: Any, builder: Any, tmp_path: Path) -> None:
    """A resumed task (a few trials left of its budget) searched beside fresh ones: its cap
    holds exactly, even where it is smaller than a round, and the fresh task's does not bind it."""
    from tvm.s_tir import meta_schedule as ms

    fake = _fake_runner_class()
    tasks = [FullSearchTask("resumed", _matmul(64), 4.0, max_trials=3), FullSearchTask("fresh", _matmul(16), 1.0)]
    results = tune_tasks(tasks, target, ms.database.MemoryDatabase(), trials_per_task=8, max_trials_global=11,
                         early_stopping=None, seed=1, work_dir=tmp_path, builder=builder, runner=fake())
    got = {r.name: r for r in results}
    assert got["resumed"].trials == 3 and got["resumed"].rounds == 1  # one round, cut to fit
    assert got["fresh"].trials == 8


@pytest.mark.tvm
@pytest.mark.parametrize("seeded", [False, True])
def test_the_global_budget_is_never_overshot(target: Any, builder: Any, tmp_path: Path, seeded: bool) -> None:
    """MetaSchedule checks its global cap before a round and measures the whole round: 2 tasks,
    8 trials a task, 11 in all spent 16. The engine cuts the last round to what is left; a
    predicted seed (one trial a task before the loop) counts against the same budget."""
    from tvm.s_tir import meta_schedule as ms

    fake = _fake_runner_class()
    tasks = [FullSearchTask("a", _matmul(64), 4.0), FullSearchTask("b", _matmul(16), 1.0)]
    results = tune_tasks(tasks, target, ms.database.MemoryDatabase(), trials_per_task=8, max_trials_global=11,
                         seed=1, work_dir=tmp_path, builder=builder, runner=fake(), seed_predicted=seeded)
    assert sum(r.trials for r in results) == 11, [(r.name, r.trials, r.stop_reason) for r in results]
    if seeded:  # a seed, then one round each (the heavier task first: the rest of the budget)
        assert sorted(r.trials for r in results) == [2, 9] and all(r.rounds == 1 for r in results), results
    else:
        assert max(r.trials for r in results) == 8 and min(r.trials for r in results) == 3


@pytest.mark.tvm
def test_the_search_starts_from_the_predicted_program(target: Any, builder: Any, runner: Any,
                                                       tmp_path: Path) -> None:
    """The first record of a task with nothing stored is the predicted program, measured; the
    task's cap counts it."""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.search.predict import predict_program

    mod = _matmul(64)
    db = ms.database.MemoryDatabase()
    (res,) = tune_tasks([FullSearchTask("mm", mod)], target, db, trials_per_task=4, early_stopping=None, seed=1,
                        work_dir=tmp_path, builder=builder, runner=runner)
    assert res.trials == 4
    records = db.get_all_tuning_records()
    assert len(records) == 4
    predicted = predict_program(mod, target)
    assert not isinstance(predicted, str)
    assert str(records[0].trace) == str(predicted.sch.trace)  # measured first, before any round
    assert records[0].run_secs is not None and float(records[0].run_secs[0]) < 1.0


@pytest.mark.tvm
def test_rounds_cut_to_a_time_budget_get_a_compact_search(
    target: Any, builder: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Under a time budget, the engine's evolutionary searches are as small as its rounds; the
    stock scheduler keeps the budget's sizing. (The constructor is wrapped, the search is real.)"""
    from tvm.s_tir import meta_schedule as ms

    from tunecache.search.full import COMPACT_GENETIC_ITERS, COMPACT_POPULATION, fit_to_time_budget, search_sizing

    real = ms.search_strategy.EvolutionarySearch
    made: list[dict[str, Any]] = []

    def spy(**kw: Any) -> Any:
        made.append(kw)
        return real(**kw)

    monkeypatch.setattr(ms.search_strategy, "EvolutionarySearch", spy)
    fake = _fake_runner_class()
    sizes = {}
    for scheduler in ("tunecache", "gradient"):
        made.clear()
        results = tune_tasks([FullSearchTask("a", _matmul(32)), FullSearchTask("b", _matmul(16))], target,
                             ms.database.MemoryDatabase(), trials_per_task=64, max_trials_global=4,
                             time_budget_s=20.0, scheduler=scheduler, early_stopping=None, seed=2,
                             work_dir=tmp_path / scheduler, builder=builder, runner=fake())  # fmt: skip
        assert sum(r.trials for r in results) == 4
        sizes[scheduler] = {(kw["population_size"], kw["genetic_num_iters"]) for kw in made}
    budget = fit_to_time_budget(search_sizing(64), 2, 20.0)
    assert budget.num_trials_per_iter < 8 and budget.population_size > COMPACT_POPULATION
    assert sizes["tunecache"] == {(COMPACT_POPULATION, COMPACT_GENETIC_ITERS)}
    assert sizes["gradient"] == {(budget.population_size, budget.genetic_num_iters)}


@pytest.mark.tvm
def test_time_budget_counts_before_every_round(
    target: Any, builder: Any, runner: Any, tmp_path: Path
) -> None:
    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    tasks = [FullSearchTask("matmul", _matmul(32)), FullSearchTask("add", _elementwise()["add"])]
    results = tune_tasks(tasks, target, db, trials_per_task=16, time_budget_s=1e-3,
                         work_dir=tmp_path, builder=builder, runner=runner)  # fmt: skip
    assert [(r.trials, r.stop_reason) for r in results] == [(0, STOP_TIME), (0, STOP_TIME)]
    assert len(db.get_all_tuning_records()) == 0


def _slow_join_runner_class() -> Any:
    """A runner whose futures never report done before they are joined: every join after
    MetaSchedule's round robin happens where its scheduler picks the task (the deterministic case
    of a slow real runner). The first ``quick`` batches' results come at once; every later
    result waits until ``until`` (a ``time.monotonic()``), so a time budget that ends then runs
    out inside the first join at a pick on a machine of any speed."""
    load_tvm()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    @derived_object
    class SlowJoinRunner(PyRunner):
        def __init__(self, quick: int, until: float) -> None:
            super().__init__()
            self.quick = quick
            self.until = until
            self.batches = 0

        def run(self, runner_inputs: Any) -> Any:
            import time

            self.batches += 1
            late = self.batches > self.quick

            def result() -> Any:
                if late:
                    time.sleep(max(0.0, self.until - time.monotonic()))
                return RunnerResult([1e-3], None)

            return [RunnerFuture(lambda: False, result) for _ in runner_inputs]

    return SlowJoinRunner


@pytest.mark.tvm
def test_stock_scheduler_stops_cleanly_when_the_budget_runs_out_in_a_join(
    target: Any, builder: Any, tmp_path: Path
) -> None:
    """MetaSchedule's GradientBased joins the task it picked and then asserts it is alive; the
    time budget spent in that join must end the search, not raise."""
    import time

    from tvm.s_tir import meta_schedule as ms

    db = ms.database.MemoryDatabase()
    tasks = [FullSearchTask("a", _matmul(16)), FullSearchTask("b", _matmul(32))]
    # The round robin's two batches took 7 s on a slow 2-core VM (11.6 s to the first beside two
    # busy processes): the budget leaves room for a machine twice as slow.
    budget_s = 20.0
    runner = _slow_join_runner_class()(quick=len(tasks), until=time.monotonic() + budget_s + 0.5)
    results = tune_tasks(tasks, target, db, trials_per_task=512, time_budget_s=budget_s, early_stopping=None,
                         trivial_once=False, scheduler="gradient", seed=1, work_dir=tmp_path,
                         builder=builder, runner=runner)  # fmt: skip
    assert all(r.stop_reason == STOP_TIME for r in results), [(r.trials, r.rounds, r.stop_reason) for r in results]
    assert max(r.rounds for r in results) >= 2  # past the round robin: a join at a pick
    assert sum(r.trials for r in results) == len(db.get_all_tuning_records()) > 0


@pytest.mark.tvm
def test_tuning_tolerates_and_keeps_the_callers_log_handlers(
    target: Any, builder: Any, runner: Any, tmp_path: Path
) -> None:
    """An unnamed handler on MetaSchedule's logger (pytest 9.2's capture handler, a user's
    routing of TVM's logs) crashed MetaSchedule's own logger set-up; it also closed every
    handler of the process. Tuning leaves such handlers attached, open and fed."""
    import logging

    from tunecache.store import Store
    from tunecache.tvm_layer.database import make_database
    from tunecache.tvm_layer.mslog import MS_LOGGER
    from tunecache.tvm_layer.target import hardware_key

    class Recorder(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []
            self.closed = False

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

        def close(self) -> None:
            self.closed = True
            super().close()

    ms_logger = logging.getLogger(MS_LOGGER)
    unnamed, elsewhere = Recorder(), Recorder()
    assert unnamed.get_name() is None
    before = list(ms_logger.handlers)
    ms_logger.addHandler(unnamed)
    logging.getLogger().addHandler(elsewhere)
    try:
        store = Store("memory")
        hw = hardware_key(target)
        results = tune_tasks([FullSearchTask("mm", _matmul(32))], target, make_database(store, hw, target),
                             trials_per_task=2, seed=1, work_dir=tmp_path, builder=builder, runner=runner)
        assert results[0].valid_trials >= 1
        assert ms_logger.handlers == [*before, unnamed]  # ours removed, the caller's kept
        assert not unnamed.closed and not elsewhere.closed
        assert unnamed.records, "MetaSchedule's log lines still reach a handler the caller attached"
        logs = list((tmp_path / "logs").glob("*.log"))
        assert any("task_scheduler" in p.name for p in logs) and any("task_0_mm" in p.name for p in logs)
    finally:
        ms_logger.removeHandler(unnamed)
        logging.getLogger().removeHandler(elsewhere)
