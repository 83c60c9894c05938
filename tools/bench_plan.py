"""Benchmark the reuse planner on synthetic workloads; print JSON.

For each size: time to enumerate 1-hop bridges and build the OC graph, time to plan with and
without bridges, and the plans' estimated trials versus tuning everything from scratch. Then
the measured gap of the bridge approximation versus the exact optimum on small instances.

    python tools/bench_plan.py                 # sizes 100, 300, 1000
    python tools/bench_plan.py --sizes 2000 --gap-instances 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunecache.reuse import exact_steiner_cost, plan_reuse  # noqa: E402
from tunecache.reuse.synthetic import random_choice_graph, synthetic_choice_graph  # noqa: E402


def _best_of(repeat: int, fn: Any) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def bench_size(n: int, seed: int, n_stored: int, repeat: int) -> dict[str, Any]:
    build_s, (g, required) = _best_of(
        repeat, lambda: synthetic_choice_graph(n, seed=seed, n_stored=n_stored)
    )
    kinds = [k for _, k in g.nodes(data="kind")]
    plain_s, plain = _best_of(repeat, lambda: plan_reuse(g, required=required, use_bridges=False))
    bridged_s, bridged = _best_of(repeat, lambda: plan_reuse(g, required=required))

    def summary(p: Any) -> dict[str, Any]:
        return {
            "est_trials": round(p.total_trials, 1),
            "cost": round(p.total_cost, 1),
            "full_searches": len(p.full_searches),
            "bridges_tuned": len(p.bridges),
            "fewer_trials_than_scratch": round(p.speedup, 2),
        }

    return {
        "tasks": n,
        "stored": n_stored,
        "families": len({name.split("[")[0] for name in required}),
        "candidate_bridges": kinds.count("bridge"),
        "edges": g.number_of_edges(),
        "build_graph_s": round(build_s, 3),
        "plan_without_bridges_s": round(plain_s, 3),
        "plan_with_bridges_s": round(bridged_s, 3),
        "total_with_bridges_s": round(build_s + bridged_s, 3),
        "scratch_trials": plain.scratch_trials,
        "without_bridges": summary(plain),
        "with_bridges": summary(bridged),
    }



def bench_gap(instances: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    gaps: dict[str, list[float]] = {"random_graphs": [], "synthetic_10_tasks": []}
    for _ in range(instances):
        g, required = random_choice_graph(rng, max_bridges=8)
        gaps["random_graphs"].append(
            plan_reuse(g, required=required).total_cost / exact_steiner_cost(g, required=required)
        )
    s = 0
    while len(gaps["synthetic_10_tasks"]) < instances and s < 20 * instances:
        g, required = synthetic_choice_graph(10, seed=seed + s, n_stored=2, max_ratio=64.0)
        s += 1
        if sum(1 for _, k in g.nodes(data="kind") if k == "bridge") > 14:
            continue
        gaps["synthetic_10_tasks"].append(
            plan_reuse(g, required=required).total_cost / exact_steiner_cost(g, required=required)
        )
    out = {}
    for name, values in gaps.items():
        if values:
            out[name] = {
                "instances": len(values),
                "max_gap": round(max(values), 4),
                "mean_gap": round(statistics.fmean(values), 5),
                "optimal_share": round(sum(v <= 1 + 1e-9 for v in values) / len(values), 3),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stored", type=float, default=0.1, help="stored workloads per task")
    ap.add_argument("--repeat", type=int, default=3, help="timings are the best of this many runs")
    ap.add_argument("--gap-instances", type=int, default=200)
    args = ap.parse_args(argv)
    report = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "sizes": [bench_size(n, args.seed, int(n * args.stored), args.repeat) for n in args.sizes],
    }
    if args.gap_instances:
        report["approximation_gap_vs_exact"] = bench_gap(args.gap_instances, args.seed)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
