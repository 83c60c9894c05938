"""Operator-set half of ``tools/bench_reuse.py``: ETO's Section 7.2 evaluation on this CPU.

An operator set is the distinct tasks of one family group of a zoo model (the conv2d tasks of
``resnet50``, the matmul/batch_matmul tasks of ``bert_base``), with the model's call counts as
weights. Arms, each against its own fresh SQLite store:

- ``full``: full search of every task (``pipeline.search(reuse=False)``, the ``tune="always"``
  path) with ``budget`` trials per task, then its bests re-measured;
- ``plan``: tunecache's plan (``pipeline.search``: reuse plan with bridges, full search of the
  roots with the same per-task budget, narrowed search of the rest, escalation, re-measurement),
  its full searches sharing one cost model pre-trained on the store (transfer learning);
- ``plan_cold``: the same plan with a fresh cost model per full search (MetaSchedule's default),
  in its own store: what transfer learning and the shared model buy;
- ``top3`` / ``zero_trial`` / ``resample``: for each task the plan reused, start from the full
  search that the plan's reuse chain leads back to (a root or a bridge, already paid for) and
  apply its best 3 programs measured once each (Selective Tuning's TopK), its best program with no
  measurement, or its best sketch with fresh random decisions (as many trials as the narrowed
  search spent on that task). Tasks the plan tuned fully keep the plan's result in every arm.

Every pick is then built in this process, checked against the untuned kernel and re-measured
head to head, interleaved; the weighted latency sum (sum of weight x latency) of each arm is
normalized to full search's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ARMS = ("full", "plan", "plan_cold", "top3", "zero_trial", "resample")

#: Operator set name -> (zoo model, its parameters, families kept). One BERT layer: the
#: layers are identical, so their tasks are too (weights per layer).
SETS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "bert": ("bert_base", {"num_layers": 1}, ("matmul", "batch_matmul")),
    "resnet50": ("resnet50", {}, ("conv2d",)),
}


def set_tasks(name: str, target: Any) -> list[Any]:
    """The distinct tasks of operator set ``name`` (:class:`~tunecache.tvm_layer.frontend.TaskInfo`)."""
    from tunecache import zoo
    from tunecache.tvm_layer import frontend

    model_name, params, families = SETS[name]
    zm = zoo.get(model_name, **params)
    mod = frontend.prepare_for_tuning(frontend.import_model(zm.module, zm.example_inputs), target)
    return [t for t in frontend.extract_tasks(mod, target) if t.desc.family in families]


def _best_schedule(store: Any, hw: Any, key: Any, mod: Any) -> Any:
    from tvm.s_tir.schedule import Schedule, Trace

    from tunecache.store.records import decode_trace

    best = store.best_k(key, hw, 1)
    if not best:
        return None
    sch = Schedule(mod)
    Trace.apply_json_to_schedule(decode_trace(best[0].trace), sch)
    return sch


def _full_ancestor(mp: Any, node: str) -> str:
    """The node whose full search the plan's reuse chain from ``node`` starts at."""
    from tunecache.reuse.graph import ROOT

    while mp.plan.step(node).source != ROOT:
        node = mp.plan.step(node).source
    return node


def run_set(name: str, budget: int, reuse_trials: int, repeats: int, seed: int, bridges: bool,
            work: str, measure_once: Callable[..., list[float | None]],
            resample_sketch: Callable[..., list[Any]],
            head_to_head: Callable[..., dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Run every arm on operator set ``name``; return its report (see the module docstring)."""
    from tunecache.pipeline import search
    from tunecache.search.narrow import replay_on
    from tunecache.store import open_store
    from tunecache.store.records import decode_trace
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    log = lambda msg: print(f"[{name}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    target = resolve_target(None)
    hw = hardware_key(target)
    tasks = set_tasks(name, target)
    log(f"{len(tasks)} tasks, weights {[t.weight for t in tasks]}")
    report: dict[str, Any] = {"set": name, "model": SETS[name][0], "budget": budget, "reuse_trials": reuse_trials,
                              "bridges": bridges, "tasks": []}

    # -- full search of every task
    full_store = open_store(f"sqlite:///{work}/{name}-full.sqlite")
    t0 = time.perf_counter()
    # Bests re-measured as the plan's are; no pre-trained cost model (the reference is a cold search).
    full_result = search(tasks, target, full_store, hw, trials_per_task=budget, reuse=False, transfer=False,
                         seed=seed, work_dir=f"{work}/{name}-full")
    full = {t.key: full_result.for_task(t.key) for t in tasks}
    full_wall = time.perf_counter() - t0
    log(f"full search: {full_wall:.0f}s, {sum(o.trials for o in full.values())} trials")

    # -- tunecache's plan
    plan_store = open_store(f"sqlite:///{work}/{name}-plan.sqlite")
    t0 = time.perf_counter()
    planned = search(tasks, target, plan_store, hw, trials_per_task=budget, reuse_trials=reuse_trials,
                     bridges=bridges, seed=seed, work_dir=f"{work}/{name}-plan")
    mp, steps = planned.plan, planned.outcomes
    plan_wall = time.perf_counter() - t0
    log(f"plan: {plan_wall:.0f}s, {sum(o.trials for o in steps.values())} trials, "
        f"{len(mp.plan.full_searches)} full searches ({len(mp.bridges)} bridges)")
    node_of = {pt.key: n for n, pt in mp.tasks.items()}

    cold_store = open_store(f"sqlite:///{work}/{name}-plan-cold.sqlite")
    t0 = time.perf_counter()
    cold = search(tasks, target, cold_store, hw, trials_per_task=budget, reuse_trials=reuse_trials, bridges=bridges,
                  seed=seed, work_dir=f"{work}/{name}-plan-cold", transfer=False)
    mp_cold, steps_cold = cold.plan, cold.outcomes
    cold_wall = time.perf_counter() - t0
    cold_node_of = {pt.key: n for n, pt in mp_cold.tasks.items()}
    log(f"plan (cold cost models): {cold_wall:.0f}s, {sum(o.trials for o in steps_cold.values())} trials")

    # -- baselines from the full searches the plan paid for
    builder, runner = make_builder(), make_runner()
    base_seconds = {a: sum(steps[n].seconds for n in mp.plan.full_searches if n in steps)
                    for a in ("top3", "zero_trial", "resample")}
    base_trials = {a: sum(steps[n].trials for n in mp.plan.full_searches if n in steps)
                   for a in ("top3", "zero_trial", "resample")}
    rows = []
    try:
        for t in tasks:
            node = node_of[t.key]
            step = steps[node]
            picks: dict[str, Any] = {"full": _best_schedule(full_store, hw, t.key, t.mod),
                                     "plan": _best_schedule(plan_store, hw, t.key, t.mod),
                                     "plan_cold": _best_schedule(cold_store, hw, t.key, t.mod)}
            cold_step = steps_cold[cold_node_of[t.key]]
            row: dict[str, Any] = {
                "name": t.name, "weight": t.weight, "plan_outcome": step.outcome, "escalated": step.escalated,
                "plan_trials": step.trials, "plan_seconds": step.seconds, "full_trials": full[t.key].trials,
                "full_seconds": full[t.key].seconds, "plan_cold_outcome": cold_step.outcome,
                "plan_cold_trials": cold_step.trials, "plan_cold_seconds": cold_step.seconds,
            }
            root = _full_ancestor(mp, node)
            if root == node:
                for a in ("top3", "zero_trial", "resample"):
                    picks[a] = picks["plan"]
                row["source"] = None
            else:
                root_key = steps[root].key
                row["source"] = root
                top = [decode_trace(r.trace) for r in plan_store.best_k(root_key, hw, 3)]
                if not top:
                    for a in ("top3", "zero_trial", "resample"):
                        picks[a] = None
                else:
                    ts = time.perf_counter()
                    picks["zero_trial"] = replay_on(top[0], t.mod, target)
                    base_seconds["zero_trial"] += time.perf_counter() - ts

                    ts = time.perf_counter()
                    replays = [s for s in (replay_on(tr, t.mod, target) for tr in top) if s is not None]
                    lat = measure_once(replays, t.mod, target, builder, runner) if replays else []
                    ok = [(x, s) for x, s in zip(lat, replays, strict=False) if x is not None]
                    picks["top3"] = min(ok, key=lambda p: p[0])[1] if ok else None
                    base_seconds["top3"] += time.perf_counter() - ts
                    base_trials["top3"] += len(replays)

                    ts = time.perf_counter()
                    samples = resample_sketch(top[0], t.mod, target, max(1, step.trials), seed)
                    lat = measure_once(samples, t.mod, target, builder, runner) if samples else []
                    ok = [(x, s) for x, s in zip(lat, samples, strict=False) if x is not None]
                    picks["resample"] = min(ok, key=lambda p: p[0])[1] if ok else None
                    base_seconds["resample"] += time.perf_counter() - ts
                    base_trials["resample"] += len(samples)
            h2h = head_to_head(picks, t.mod, target, repeats)
            row["latency_s"] = {a: h2h[a]["latency_s"] for a in ARMS}
            row["correct"] = {a: h2h[a]["correct"] for a in ARMS}
            rows.append(row)
            log(f"{t.name} x{t.weight:g} [{step.outcome}{' escalated' if step.escalated else ''}] " + ", ".join(
                f"{a}={row['latency_s'][a] * 1e3:.3f}ms" for a in ARMS if row['latency_s'][a] is not None))
    finally:
        builder.close()
    report["tasks"] = rows
    report["plan"] = {"full_searches": list(mp.plan.full_searches), "bridges": list(mp.bridges),
                      "estimated_speedup": mp.plan.speedup}

    def weighted(arm: str) -> float | None:
        lats = [(r["weight"], r["latency_s"][arm]) for r in rows]
        return None if any(x is None for _, x in lats) else sum(w * x for w, x in lats)

    full_sum = weighted("full")
    seconds = {"full": sum(o.seconds for o in full.values()), "plan": sum(o.seconds for o in steps.values()),
               "plan_cold": sum(o.seconds for o in steps_cold.values()), **base_seconds}
    trials = {"full": sum(o.trials for o in full.values()), "plan": sum(o.trials for o in steps.values()),
              "plan_cold": sum(o.trials for o in steps_cold.values()), **base_trials}
    arms = {}
    for a in ARMS:
        ws = weighted(a)
        arms[a] = {
            "weighted_latency_s": ws,
            "throughput_vs_full": (full_sum / ws) if (full_sum and ws) else None,
            "search_seconds": seconds[a],
            "speedup_vs_full": seconds["full"] / seconds[a] if seconds[a] else None,
            "trials": trials[a],
            "all_correct": all(r["correct"][a] is not False for r in rows),
        }
    arms["full"]["wall_seconds"] = full_wall
    arms["plan"]["wall_seconds"] = plan_wall
    arms["plan_cold"]["wall_seconds"] = cold_wall
    report["arms"] = arms
    log("arms: " + ", ".join(f"{a}: {arms[a]['throughput_vs_full'] or 0:.3f}x thr, "
                             f"{arms[a]['speedup_vs_full'] or 0:.1f}x faster" for a in ARMS))
    return report


def plot_sets(reports: list[dict[str, Any]], path: str | Path) -> None:
    """Bar charts: throughput vs full search, and search seconds, per arm and operator set."""
    from bench_reuse import bar_pair

    series = {a: ([r["arms"][a]["throughput_vs_full"] or 0 for r in reports],
                  [r["arms"][a]["search_seconds"] for r in reports]) for a in ARMS}
    bar_pair(path, [f"{r['set']} ({len(r['tasks'])} tasks)" for r in reports], series,
             ("weighted throughput / full search", "search seconds"),
             f"Operator sets on this CPU (full search: {reports[0]['budget']} trials per task)", goal=0.97)
