"""Wall time per tuning trial: stock MetaSchedule vs tunecache's pipeline, side by side.

Tunes one float32 matmul (default 256x256x256) on this machine's CPU twice in one run:

- **tunecache**: :func:`tunecache.search.tune_tasks` (warm build workers, steady runner,
  search sized to the budget) with ``--trials`` trials, in this process;
- **stock**: ``ms.tune_tir`` with MetaSchedule's defaults (``LocalBuilder``, ``LocalRunner``,
  default evolutionary search) with ``--stock-trials`` trials, in a fresh child process that
  imports TVM the ordinary way (no stubbed intrinsics), as a user would.

Both use an in-memory database. Prints one JSON object: seconds per trial, valid record counts
and best latency for each, and the ratio of seconds per trial (both including every process
start-up; tunecache's worker start-up is also given apart). The tunecache best is also
re-measured in-process (10 runs x 3 repeats, median), since single tuning measurements are noisy.

Usage::

    python tools/bench_trial.py [--trials 64] [--stock-trials 8] [--size 256]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FAILED = 1e9  # run seconds at or above this are MetaSchedule's marks for failed candidates


def _matmul(tvm: Any, n: int) -> Any:
    from tvm import te

    a = te.placeholder((n, n), name="A", dtype="float32")
    b = te.placeholder((n, n), name="B", dtype="float32")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return tvm.IRModule({"main": te.create_prim_func([a, b, c])})


def _target(tvm: Any) -> Any:
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "num-cores": 2, "mcpu": cpu})


def _record_summary(db: Any) -> dict[str, Any]:
    secs = [float(statistics.median(float(x) for x in r.run_secs)) for r in db.get_all_tuning_records()]
    valid = [s for s in secs if s < FAILED]
    return {
        "records": len(secs),
        "valid_records": len(valid),
        "best_ms": round(min(valid) * 1e3, 4) if valid else None,
    }


def _time_module(tvm: Any, mod: Any, target: Any, n: int) -> float:
    """Median seconds of ``mod`` built in-process (10 runs x 3 repeats)."""
    import numpy as np

    rt = tvm.tirx.build(mod, target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.rand(n, n).astype("float32"), dev) for _ in range(2)]
    args.append(tvm.runtime.tensor(np.zeros((n, n), "float32"), dev))
    timer = rt.time_evaluator(rt.entry_name, dev, number=10, repeat=3)
    return float(statistics.median(timer(*args).results))


def run_stock(trials: int, n: int) -> dict[str, Any]:
    """Stock ``ms.tune_tir`` (run in a child process that imported TVM normally)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    target = _target(tvm)
    mod = _matmul(tvm, n)
    db = ms.database.MemoryDatabase()
    with tempfile.TemporaryDirectory(prefix="bench-stock-") as work:
        start = time.perf_counter()
        ms.tune_tir(mod, target, work, max_trials_global=trials, database=db)
        wall = time.perf_counter() - start
    out = {"trials": trials, "wall_s": round(wall, 2), "s_per_trial": round(wall / trials, 3)}
    out.update(_record_summary(db))
    return out


def run_tunecache(trials: int, n: int, seed: int) -> dict[str, Any]:
    """tunecache's full search on one task, plus an in-process re-measure of its best."""
    from tunecache.search import FullSearchTask, make_builder, make_runner, tune_tasks
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm("llvm")
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    target = _target(tvm)
    mod = _matmul(tvm, n)
    db = ms.database.MemoryDatabase()
    with tempfile.TemporaryDirectory(prefix="bench-tc-") as work:
        start = time.perf_counter()
        # What tune_tasks does when given no builder/runner, timed apart: these processes
        # start once per session, not once per task.
        builder = make_builder(artifact_dir=work)
        runner = make_runner()
        started = time.perf_counter()
        [result] = tune_tasks(
            [FullSearchTask(f"matmul{n}", mod)],
            target,
            db,
            trials_per_task=trials,
            seed=seed,
            work_dir=work,
            builder=builder,
            runner=runner,
        )
        end = time.perf_counter()
        builder.close()
        runner.pool.shutdown(wait=True)
    wall = end - start
    trials_done = max(1, result.trials)
    out = {
        "trials": result.trials,
        "wall_s": round(wall, 2),
        "s_per_trial": round(wall / trials_done, 3),
        "worker_startup_s": round(started - start, 2),
        "s_per_trial_after_startup": round((end - started) / trials_done, 3),
    }
    out.update(_record_summary(db))
    best = db.get_top_k(db.commit_workload(mod), 1)
    if best:
        sch = Schedule(mod)
        best[0].trace.apply_to_schedule(sch, remove_postproc=False)
        out["best_remeasured_ms"] = round(_time_module(tvm, sch.mod, target, n) * 1e3, 4)
    out["untuned_ms"] = round(_time_module(tvm, mod, target, n) * 1e3, 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64, help="tunecache trials (default 64)")
    parser.add_argument(
        "--stock-trials", type=int, default=8,
        help="stock MetaSchedule trials (default 8: each costs ~20 s here); 0 skips stock",
    )
    parser.add_argument("--size", type=int, default=256, help="matmul size n (n x n x n)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--_stock-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._stock_child:
        print(json.dumps(run_stock(args.stock_trials, args.size)))
        return 0

    report: dict[str, Any] = {
        "workload": f"matmul {args.size}x{args.size}x{args.size} float32",
        "cpu_count": os.cpu_count(),
    }
    report["tunecache"] = run_tunecache(args.trials, args.size, args.seed)
    if args.stock_trials > 0:
        child = subprocess.run(
            [sys.executable, __file__, "--_stock-child",
             "--stock-trials", str(args.stock_trials), "--size", str(args.size)],
            capture_output=True, text=True, check=False,
        )
        lines = [ln for ln in child.stdout.splitlines() if ln.startswith("{")]
        if child.returncode != 0 or not lines:
            report["stock"] = {"error": f"exit {child.returncode}: {child.stderr[-2000:]}"}
        else:
            report["stock"] = json.loads(lines[-1])
            ratio = report["stock"]["s_per_trial"] / max(report["tunecache"]["s_per_trial"], 1e-9)
            report["speedup_s_per_trial"] = round(ratio, 1)
    import tvm

    report["mcpu"] = tvm.target.codegen.llvm_get_system_cpu()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
