"""The planner on real tasks: reuse edges, bridges that materialize, trivial tasks, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from _models import te_conv, te_matmul

from tunecache.reuse.costs import CostModel, neighbourhood_size, reuse_cost
from tunecache.reuse.planner import plan_tasks
from tunecache.tvm_layer.bridges import bridge_checker, describe_tasks

pytestmark = pytest.mark.tvm


def _items(mods):
    from tunecache.tvm_layer.convert import workload_of

    return [(workload_of(m)[0], name, 1.0, m) for name, m in mods]


def test_conv_pair_without_dominance_gets_a_checked_bridge(tvm, target) -> None:
    a = te_conv(tvm, (1, 16, 16, 16), 3, 16)  # 3x3, no padding: 14x14 output
    b = te_conv(tvm, (1, 16, 28, 28), 1, 16)  # 1x1: 28x28 output
    tasks = describe_tasks(_items([("conv3x3", a), ("conv1x1", b)]), target)
    assert [t.nest.extents for t in tasks] == [(1, 16, 14, 14, 16, 3, 3), (1, 16, 28, 28, 16, 1, 1)]
    mp = plan_tasks(tasks, cost_model=CostModel(full_trials=1000), bridge_check=bridge_checker(target))
    assert [tuple(n.extents) for n in mp.bridges.values()] == [(1, 16, 14, 14, 16, 1, 1)]
    (bridge,) = mp.bridges
    assert {mp.source_of(t.node)["kind"] for t in tasks} == {"bridge"}
    assert mp.plan.total_trials < 2 * 1000  # cheaper than tuning both from scratch
    no = plan_tasks(tasks, cost_model=CostModel(full_trials=1000), bridges=False)
    assert not no.bridges and no.plan.total_trials == 2000
    js = json.loads(mp.to_json())
    assert {n["source"]["kind"] for n in js["nodes"]} == {"root", "bridge"}
    assert any(n["node"] == bridge and n["node_kind"] == "bridge" for n in js["nodes"])


def test_a_full_search_weighs_what_reuses_it(tvm, target) -> None:
    """A bridge has no calls of its own; its search is worth the calls of the tasks it serves."""
    from tunecache.search.execute import node_specs
    from tunecache.tvm_layer.bridges import materialize_bridge

    a = te_conv(tvm, (1, 16, 16, 16), 3, 16)
    b = te_conv(tvm, (1, 16, 28, 28), 1, 16)
    items = _items([("conv3x3", a), ("conv1x1", b)])
    items = [(k, n, w, m) for (k, n, _w, m), w in zip(items, (3.0, 2.0), strict=False)]
    mp = plan_tasks(describe_tasks(items, target), cost_model=CostModel(full_trials=1000),
                    bridge_check=bridge_checker(target))
    (bridge,) = mp.bridges
    mods = {t.node: m for t in mp.tasks.values() for k, _n, _w, m in items if k == t.key}
    mods[bridge] = materialize_bridge(mp.bridges[bridge], mp.bridges[bridge].extents)
    specs = node_specs(mp, mods)
    assert specs[bridge].weight == 5.0  # 3 + 2: both tasks reuse it
    assert sorted(specs[t.node].weight for t in mp.tasks.values()) == [2.0, 3.0]  # leaves: their own


def test_a_memory_bound_task_is_shared_by_its_estimated_time(tvm, target) -> None:
    """A depthwise convolution does 9 multiply-adds an output: by work it is 1.5% of a plan beside
    a 3x3 convolution, by its bytes (``RIDGE`` multiply-adds a byte) 5%, over the bar below
    which a reused task gets round 0 only. The 3x3 convolution keeps its work's share."""
    from tvm import te, topi

    from tunecache.search import execute
    from tunecache.tvm_layer.tir import argument_bytes

    conv = te_conv(tvm, (1, 56, 56, 64), 3, 64, pad=1, layout="NHWC")
    x, w = te.placeholder((1, 56, 56, 64), name="x"), te.placeholder((3, 3, 64, 1), name="w")
    dw = tvm.IRModule({"main": te.create_prim_func([x, w, topi.nn.depthwise_conv2d_nhwc(x, w, 1, 1, 1)])})
    items = _items([("conv", conv), ("dw", dw)])
    mp = plan_tasks(describe_tasks(items, target), bridges=False)
    mods = {t.node: m for t in mp.tasks.values() for k, _n, _w, m in items if k == t.key}
    by = {mp.tasks[n].nest.family: n for n in mp.tasks}
    assert set(by) == {"conv2d", "depthwise_conv2d"}
    work = {f: float(mp.tasks[n].nest.work) for f, n in by.items()}
    shares = execute._work_shares(mp, mods)
    assert sum(shares.values()) == pytest.approx(1.0)
    est = {f: max(work[f], execute.RIDGE * argument_bytes(mods[n])) for f, n in by.items()}
    assert est["conv2d"] == work["conv2d"] and est["depthwise_conv2d"] > work["depthwise_conv2d"]
    assert work["depthwise_conv2d"] / sum(work.values()) < execute.REPLAYS_ONLY_BELOW
    assert shares[by["depthwise_conv2d"]] == pytest.approx(est["depthwise_conv2d"] / sum(est.values()))
    assert shares[by["depthwise_conv2d"]] > execute.REPLAYS_ONLY_BELOW


def test_a_bridge_whose_sketch_differs_is_dropped(tvm, target) -> None:
    a = te_conv(tvm, (1, 16, 16, 16), 3, 16)
    b = te_conv(tvm, (1, 16, 28, 28), 1, 16)
    tasks = describe_tasks(_items([("a", a), ("b", b)]), target)
    mp = plan_tasks(tasks, bridge_check=lambda nest, users: False)
    assert not mp.bridges and mp.plan.total_trials == 2 * CostModel().full_trials


def test_dominating_matmuls_reuse_each_other_and_stored_sources_are_free(tvm, target) -> None:
    big, small, other = te_matmul(tvm, 256, 256, 256), te_matmul(tvm, 128, 256, 256), te_matmul(tvm, 64, 64, 64)
    tasks = describe_tasks(_items([("big", big), ("small", small)]), target)
    mp = plan_tasks(tasks)
    kinds = sorted(mp.source_of(t.node)["kind"] for t in tasks)
    assert kinds == ["root", "task"]
    stored = describe_tasks(_items([("tuned", other)]), target)
    mp2 = plan_tasks(tasks, stored=stored)
    # 64^3 is dominated by both: reusing the stored program beats any full search.
    assert [mp2.source_of(t.node)["kind"] for t in tasks].count("root") == 0
    assert mp2.plan.total_trials < CostModel().full_trials


def test_reuse_costs_follow_the_neighbourhood(tvm) -> None:
    from tunecache.tvm_layer.loopnest import analyze

    n1, n2 = analyze(te_matmul(tvm, 128, 256, 256)), analyze(te_matmul(tvm, 512, 512, 256))
    cm = CostModel()
    assert neighbourhood_size(n1, cm) > 0
    t, q = reuse_cost(n2, n1, cm)  # big -> small
    t2, q2 = reuse_cost(n1, n2, cm)  # small -> big
    assert 1 <= t <= cm.max_reuse_trials and 1 <= t2 <= cm.max_reuse_trials
    assert q > q2 >= 1.0  # smaller alphas fared worse on this CPU


def test_a_far_source_costs_about_a_full_search(tvm) -> None:
    """A classifier's 1-row matmul reused by a 197-row dense ran 4-5x slower than a near source's
    program: past 64x the work, reusing is priced above a full search, below 8x not penalized."""
    from tunecache.reuse.graph import reuse_weight
    from tunecache.tvm_layer.loopnest import analyze

    head, dense = analyze(te_matmul(tvm, 1, 768, 1000)), analyze(te_matmul(tvm, 192, 768, 2304))
    near = analyze(te_matmul(tvm, 128, 768, 2304))
    cm = CostModel()
    for full in (32.0, 128.0):
        assert reuse_weight(*reuse_cost(head, dense, cm), full_cost=full) > full
        assert reuse_weight(*reuse_cost(near, dense, cm), full_cost=full) < full
    assert reuse_cost(near, dense, cm)[1] < 1.05


def test_a_prime_extent_the_source_lacks_costs_more_than_sharing_it_and_less_than_a_full_search(tvm) -> None:
    """197 rows (ViT's tokens, a prime) cannot take a 128-row program's row tiles: such reuse is
    priced above a 197-row source, or a 192-row target, but below a full search (the narrowed
    search measures the task's predicted program, its rows padded, in round 0)."""
    from tunecache.reuse.graph import reuse_weight
    from tunecache.tvm_layer.loopnest import analyze

    bert, vit = analyze(te_matmul(tvm, 128, 768, 2304)), analyze(te_matmul(tvm, 197, 768, 2304))
    vit_other, even = analyze(te_matmul(tvm, 197, 768, 768)), analyze(te_matmul(tvm, 192, 768, 2304))
    cm = CostModel()
    for full in (32.0, 128.0):
        prime = reuse_weight(*reuse_cost(bert, vit, cm), full_cost=full)
        assert prime < full
        assert reuse_weight(*reuse_cost(vit_other, vit, cm), full_cost=full) < prime
        assert reuse_weight(*reuse_cost(bert, even, cm), full_cost=full) < prime


def test_cli_plan_json_names_every_source(tmp_path) -> None:
    from tunecache.store import open_store

    open_store(str(tmp_path / "p.db")).close()  # plan only reads the store it is given: it must exist
    proc = subprocess.run([sys.executable, "-m", "tunecache.cli", "plan", "small_cnn", "--db", str(tmp_path / "p.db"),
                           "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    js = json.loads(proc.stdout)
    assert js["nodes"] and all(n["source"]["kind"] in ("root", "store", "task", "bridge") for n in js["nodes"])
    trivial = [n for n in js["nodes"] if n.get("family") == "other"]
    assert trivial and all(n["est_trials"] == 1 for n in trivial)
    assert js["estimated_trials"] <= js["scratch_trials"]


def test_a_small_models_task_is_shared_by_its_own_models_time(tvm, target) -> None:
    """A warm plans several models' tasks together (``ModelPlan.models``): a task of a small model
    gets its share of that model's estimated time, not of the whole plan's, so it is not cut to a
    replay for being small beside a large model; a task of two models takes its larger share."""
    from tunecache.search import execute

    big = te_conv(tvm, (1, 56, 56, 256), 3, 256, pad=1, layout="NHWC")
    small = te_conv(tvm, (1, 14, 14, 16), 3, 16, pad=1, layout="NHWC")
    shared = te_conv(tvm, (1, 14, 14, 32), 1, 16, layout="NHWC")
    items = _items([("big", big), ("small", small), ("shared", shared)])
    mp = plan_tasks(describe_tasks(items, target), bridges=False)
    mods = {t.node: m for t in mp.tasks.values() for k, _n, _w, m in items if k == t.key}
    node = {mp.tasks[n].name: n for n in mp.tasks}
    merged = execute._work_shares(mp, mods)  # one model: the whole plan
    assert merged[node["small"]] < execute.REPLAYS_ONLY_BELOW and merged[node["shared"]] < execute.REPLAYS_ONLY_BELOW
    calls = {"big": {"large_model": 1.0}, "small": {"small_model": 1.0},
             "shared": {"large_model": 1.0, "small_model": 1.0}}
    per_model = execute._work_shares(replace(mp, models={node[k]: v for k, v in calls.items()}), mods)
    small_total = merged[node["small"]] + merged[node["shared"]]
    assert per_model[node["small"]] == pytest.approx(merged[node["small"]] / small_total)
    assert per_model[node["shared"]] == pytest.approx(merged[node["shared"]] / small_total)
    assert per_model[node["small"]] > execute.REPLAYS_ONLY_BELOW
    assert per_model[node["big"]] == pytest.approx(merged[node["big"]] / (merged[node["big"]] + merged[node["shared"]]))
