"""The search ladder through compile: a miss similar to a stored program is reused in few trials,
committed with provenance; a reused program far below its source's throughput escalates."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from _models import relax_matmul_relu
from _stores import copy_sqlite

import tunecache
from tunecache.search.narrow.align import Skeleton
from tunecache.store import Store

pytestmark = pytest.mark.tvm
TRIALS = 16


@pytest.fixture(scope="module")
def _tuned_once(tmp_path_factory):
    """One full search of relu(x @ w) at 64x128x64 (the tests' source), done once a module."""
    db = str(tmp_path_factory.mktemp("ladder") / "source.db")
    first = tunecache.compile(relax_matmul_relu(64, 128, 64), store=db, trials_per_task=TRIALS, seed=1, progress=False)
    (task,) = [t for t in first.report.tasks if t.family == "matmul"]
    assert task.outcome == "tuned" and task.trials > 0
    return db, first, task


@pytest.fixture
def tuned_source(_tuned_once, tmp_path):
    """A copy of the tuned source's store for one test (tests change their store's records)."""
    db, first, task = _tuned_once
    return copy_sqlite(db, tmp_path / "ladder.db"), first, task


def _impossibly_fast(db: str, src) -> None:
    """Make the source's stored programs claim 1 ns (no reused program comes near it)."""
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.target import hardware_key

    store = Store(db)
    for r in store.best_k(WorkloadKey(src.workload.split(":", 1)[1]), hardware_key(None), 10):
        store.set_latency(r.uid, 1e-9, cv=0.0)


def test_a_similar_shape_is_reused_in_fewer_trials(tuned_source) -> None:
    db, _first, src = tuned_source
    # escalate_below=0: keep the reused program whatever the (noisy) throughput comparison says.
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=1, progress=False,
                           escalate_below=0.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload
    assert 0 < t.trials < src.trials
    recs = Store(db).records(family="matmul")
    reused = [r for r in recs if r.provenance.kind == "reused"]
    assert reused and all(r.provenance.source_workload == src.workload and r.provenance.source_record for r in reused)
    # The narrowed search's final re-measurement ranks its fastest in the store (cv set, the
    # median of several interleaved samples, not the one run time it was committed with).
    remeasured = [r for r in reused if r.cv is not None]
    assert remeasured and any(r.latency_s != statistics.fmean(r.run_secs) for r in remeasured)
    best = Store(db).best_k(reused[0].workload, reused[0].hardware, 1)[0]
    assert best.cv is not None
    x = np.random.default_rng(0).standard_normal((128, 128)).astype("float32")
    w = np.random.default_rng(1).standard_normal((128, 64)).astype("float32")
    np.testing.assert_allclose(cm(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_a_time_budget_left_after_the_plan_goes_to_its_tasks(tuned_source) -> None:
    """With time to spare once the plan's narrowed search is done, the reused task is searched
    further, up to the per-task trial budget, and stays reported as reused from its source
    (without a time budget the same compile stops after the narrowed search's few trials)."""
    db, _first, src = tuned_source
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=1, progress=False,
                           escalate_below=0.0, time_budget_s=300.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload
    assert t.trials == TRIALS and "time budget left" in t.note
    shash = t.workload.split(":", 1)[1]
    kinds = {r.provenance.kind for r in Store(db).records(family="matmul") if r.workload.shash == shash}
    assert kinds == {"reused", "tuned"}


def test_a_reused_program_far_below_its_source_side_by_side_escalates(tuned_source) -> None:
    """A bar no program meets (50x the source's throughput): the stored figures and the two
    programs measured side by side both say slower, so the task is re-tuned in full."""
    db, _first, src = tuned_source
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=2, progress=False,
                           escalate_below=50.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "tuned" and t.note.startswith("escalated to full search (throughput "), t.note
    assert "its source's measured side by side" in t.note and t.source == src.workload
    assert t.trials > 0


def test_a_source_whose_stored_speed_does_not_hold_up_side_by_side_is_not_escalated(tuned_source) -> None:
    """A source whose stored latency claims an impossible speed (a lucky run, another machine's
    quiet minute): measured beside the reused program it runs at its real speed, and the
    reused program is kept, both figures in the note."""
    db, _first, src = tuned_source
    store = Store(db)
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.target import hardware_key

    hw = hardware_key(None)
    key = WorkloadKey(src.workload.split(":", 1)[1])
    _impossibly_fast(db, src)
    # A bar of 0.2 leaves this machine's noise room: the stored ratio is ~1e-5, a real one ~1.
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=2, progress=False,
                           escalate_below=0.2)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload, t.note
    assert "its source's as stored" in t.note and "measured side by side" in t.note and "not escalated" in t.note
    assert 0 < t.trials < TRIALS
    # Nothing measured side by side is stored: the source keeps the latency it had.
    assert {r.latency_s for r in store.best_k(key, hw, 10)} == {1e-9}


def test_a_task_whose_data_spills_further_than_its_sources_is_not_escalated(tuned_source, monkeypatch) -> None:
    """The source's throughput is no bar when the task's data fits only a farther cache level:
    the same impossible-speed source as above, with caches sized (a fake, to make the two
    tasks' levels deterministic) so that the source's 80 KiB fit L2 and the task's 128 KiB do not."""
    db, _first, src = tuned_source
    from tunecache.tvm_layer import target as target_mod

    _impossibly_fast(db, src)
    monkeypatch.setattr(target_mod, "cache_bytes", lambda: {1: 32 << 10, 2: 100 << 10, 3: 1 << 20})
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=2, progress=False)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload, t.note
    assert "not escalated" in t.note and "fits L3" in t.note and "L2" in t.note
    assert 0 < t.trials < TRIALS


def test_a_task_worth_little_of_the_model_is_not_escalated(tuned_source, monkeypatch) -> None:
    """Below ``ESCALATE_MIN_SHARE`` of the plan's work a slow reuse is kept, with the reason: the
    same impossible-speed source, the bar raised above this one-task model's whole share."""
    db, _first, src = tuned_source
    from tunecache.search import execute

    _impossibly_fast(db, src)
    monkeypatch.setattr(execute, "ESCALATE_MIN_SHARE", 1.01)
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, seed=2, progress=False)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and "not escalated: 100.0% of the model's estimated time" in t.note, t.note
    assert 0 < t.trials < TRIALS


def test_a_task_worth_little_of_the_model_gets_round_0_only(tuned_source, monkeypatch) -> None:
    """Below ``REPLAYS_ONLY_BELOW`` of the plan's work a reused task measures its source's best
    program and its predicted program, and no neighbourhood rounds (the bar is raised above this
    one-task model's whole share)."""
    db, _first, src = tuned_source
    from tunecache.search import execute

    monkeypatch.setattr(execute, "REPLAYS_ONLY_BELOW", 1.01)
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, reuse_trials=12, seed=2,
                           progress=False, escalate_below=0.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload, t.note
    assert f"its replay (unrolled at most {execute.MINOR_MAX_UNROLL} steps) and prediction only: " \
        "100.0% of the model's estimated time" in t.note, t.note
    assert 0 < t.trials <= 2
    shash = t.workload.split(":", 1)[1]
    reused = [r for r in Store(db).records(family="matmul") if r.workload.shash == shash]
    assert len(reused) == t.trials and {r.provenance.kind for r in reused} == {"reused"}
    # Neither program unrolls deeper than the cap (whatever its source chose).
    depths = [ch[sk.decisions[i]] for r in reused for sk in [Skeleton(0, r.trace)]
              for i, ch in sk.unroll_sites.items() if i in sk.decisions]
    assert depths and max(depths) <= execute.MINOR_MAX_UNROLL


def test_a_prime_extent_its_source_lacks_is_searched_around_and_held_to_a_lower_bar(
        tuned_source, monkeypatch) -> None:
    """67 rows (a prime) cannot take the 64-row source's row tiles: the task is reused (priced
    below a full search) and held to ``PRIME_BAR`` times the escalation bar, with the reason in
    its note (the bar set so low here that the impossible-speed source passes); below the
    round-0-only share its replay misses the (unlowered) bar, so it gets the rounds too."""
    db, _first, src = tuned_source
    from tunecache.search import execute

    _impossibly_fast(db, src)
    monkeypatch.setattr(execute, "REPLAYS_ONLY_BELOW", 1.01)
    monkeypatch.setattr(execute, "PRIME_BAR", 1e-12)
    cm = tunecache.compile(relax_matmul_relu(67, 128, 64), store=db, trials_per_task=TRIALS, reuse_trials=6, seed=2,
                           progress=False)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload, t.note
    assert "not escalated: its extent 67 is a prime its source's loops lack, so the bar is" in t.note, t.note
    assert "so neighbourhood rounds too" in t.note and f"unrolled at most {execute.MINOR_MAX_UNROLL} steps" in t.note
    assert 2 < t.trials <= 6
    x = np.random.default_rng(0).standard_normal((67, 128)).astype("float32")
    w = np.random.default_rng(1).standard_normal((128, 64)).astype("float32")
    np.testing.assert_allclose(cm(x, w), np.maximum(x @ w, 0), rtol=1e-4, atol=1e-4)


def test_a_prime_extent_far_below_even_the_lower_bar_escalates(tuned_source) -> None:
    """The lower bar of a prime extent is still a bar: one no program meets even halved (50x
    the source's throughput, as above) sends the 67-row task to a full search."""
    db, _first, src = tuned_source
    cm = tunecache.compile(relax_matmul_relu(67, 128, 64), store=db, trials_per_task=TRIALS, reuse_trials=6, seed=2,
                           progress=False, escalate_below=50.0)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "tuned" and t.note.startswith("escalated to full search (throughput "), t.note
    assert "its source's measured side by side" in t.note and t.source == src.workload and t.trials > 6


def test_a_task_worth_little_gets_round_0_only_even_below_the_bar_without_a_prime(tuned_source, monkeypatch) -> None:
    """Below ``REPLAYS_ONLY_BELOW`` a reused task with no prime extent gets its replay and
    prediction only, even where both fall short of the escalation bar (the impossible-speed
    source): the rounds are for a replay a prime leaves no guide (the test above), and below
    ``ESCALATE_MIN_SHARE`` it is not escalated either."""
    db, _first, src = tuned_source
    from tunecache.search import execute

    _impossibly_fast(db, src)
    monkeypatch.setattr(execute, "REPLAYS_ONLY_BELOW", 1.01)
    monkeypatch.setattr(execute, "ESCALATE_MIN_SHARE", 1.01)
    cm = tunecache.compile(relax_matmul_relu(128, 128, 64), store=db, trials_per_task=TRIALS, reuse_trials=8, seed=2,
                           progress=False)
    (t,) = [t for t in cm.report.tasks if t.family == "matmul"]
    assert t.outcome == "reused" and t.source == src.workload, t.note
    assert "prediction only" in t.note and "neighbourhood rounds" not in t.note and "not escalated" in t.note, t.note
    assert 0 < t.trials <= 2


def test_reuse_children_stay_claimed_while_earlier_searches_run(tuned_source, monkeypatch) -> None:
    """Every task claimed in a pass keeps its claim, renewed, while the searches before it run:
    they take longer than a lease, and an expired claim lets another warmer search it too."""
    import dataclasses
    import time

    from tunecache import pipeline
    from tunecache.search import execute
    from tunecache.tvm_layer import frontend
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    db, _first, _src = tuned_source
    store = Store(db)
    tgt = resolve_target(None)
    hw = hardware_key(tgt)
    misses = []
    for m, n in ((128, 64), (64, 128)):  # each one step from the source: both reuse it at once
        mod = frontend.prepare_for_tuning(relax_matmul_relu(m, 128, n), tgt)
        misses += [t for t in frontend.extract_tasks(mod, tgt) if t.desc.family == "matmul"]
    lease = 0.4
    real_execute = execute.execute_plan
    def short_leases(mp, mods, ctx, **kw):
        return real_execute(mp, mods, dataclasses.replace(ctx, lease_s=lease), **kw)

    monkeypatch.setattr(execute, "execute_plan", short_leases)
    real_reuse, real_full = execute.search_reuse, execute.search_full
    intruder_got: list[bool] = []

    def probe(own_keys) -> None:
        ours = [m.key for m in misses if m.key not in own_keys and not store.is_done(m.key, hw)
                and store.claim_holder(m.key, hw) is not None]  # claimed by this plan, waiting
        time.sleep(3 * lease)  # longer than a lease: only renewal keeps those claims
        intruder_got.extend(store.claim(k, hw, "intruder", 60.0) for k in ours)

    def slow_reuse(spec, *a, **kw):
        probe({spec.key})
        return real_reuse(spec, *a, **kw)

    def slow_full(specs, *a, **kw):
        probe({s.key for s in specs})
        return real_full(specs, *a, **kw)

    monkeypatch.setattr(execute, "search_reuse", slow_reuse)
    monkeypatch.setattr(execute, "search_full", slow_full)
    result = pipeline.search(misses, tgt, store, hw, trials_per_task=TRIALS, reuse_trials=4, bridges=False,
                             escalate_below=0.0, seed=1)
    mp, steps = result.plan, result.outcomes
    assert {o.key for o in steps.values()} == {m.key for m in misses}
    assert all(o.outcome in ("reused", "tuned") for o in steps.values())
    # the task waiting its turn was never taken
    assert intruder_got and not any(intruder_got), [(st.node, st.source) for st in mp.plan.steps]


@pytest.mark.parametrize(("latencies", "kept"), [
    # calls x latency: a 1.0, b 0.015 (1.5% < 2%), c unknown (kept), d a fallback (never searched again)
    ({"a": 1e-3, "b": 5e-6, "c": None, "d": 1e-3}, ["a", "c"]),
    ({"a": 1e-3, "b": 1e-3, "c": None, "d": 1e-3}, ["a", "b", "c"]),
])
def test_more_search_goes_to_tasks_worth_two_percent_of_the_time(latencies, kept) -> None:
    from types import SimpleNamespace

    from tunecache.search.execute import worth_more_search
    from tunecache.store.keys import WorkloadKey
    from tunecache.values import TaskOutcome

    weights = {"a": 1, "b": 3, "c": 1, "d": 1}
    plan = SimpleNamespace(tasks={n: SimpleNamespace(weight=w) for n, w in weights.items()})  # a ModelPlan
    out = {n: TaskOutcome(n, n, WorkloadKey(str(i)), "fallback" if n == "d" else "tuned", 8, 1.0,
                          latency_s=latencies[n]) for i, n in enumerate(weights)}
    assert worth_more_search(plan, out) == kept  # type: ignore[arg-type]


def test_cache_levels_of_a_task_s_data() -> None:
    """L1 counts as L2; past the last level is memory (one more level)."""
    from tunecache.search.execute import _cache_level

    caches = {1: 48 << 10, 2: 1 << 20, 3: 32 << 20}
    assert [_cache_level(n, caches) for n in (1, 48 << 10, 1 << 20, (1 << 20) + 1, 32 << 20, 64 << 20)] == [
        2, 2, 2, 3, 3, 4]
    assert _cache_level(64 << 20, {1: 32 << 10, 2: 256 << 10}) == 3
