"""A full search seeded with the predicted program against one from scratch (issue 24).

    python tools/bench_seeded.py [--kinds dense768,conv,bmm] [--budget 32] [--seeds 0 1] [--json out.json]

For every kind (``tools/bench_zero_trial.py``'s tasks) and seed, tunecache's full search
(``tune_tasks``: evolutionary search, XGBoost cost model, no early stopping) runs twice with the
same budget, builder and runner: ``seeded`` measures the program ``tunecache.search.predict``
chooses first (``seed_predicted=True``, the default since session 10), ``scratch`` does not.
From each search's records in commit order it reports the best-so-far curve, the trials each
needed to come within 1/0.9 of the best latency either found for that kind and seed
(``trials_to_90``), and the final best. Latencies are the search's own measurements (the
searches alternate, so load affects both). Prints JSON (CPU, load before and after, per kind
the medians over seeds and every curve).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from bench_zero_trial import ALIASES, cpu_model, tasks  # noqa: E402

#: Within this fraction of the best latency found counts as reached (Felix's "90% of the best").
WITHIN = 0.9


def search(mod: Any, target: Any, budget: int, seed: int, seeded: bool, builder: Any, runner: Any) -> list[float]:
    """Best-so-far latency (seconds) after each trial of one full search."""
    from tunecache.search.full import FullSearchTask, tune_tasks
    from tunecache.tvm_layer import ms

    db = ms().database.MemoryDatabase()
    with tempfile.TemporaryDirectory() as work:
        tune_tasks([FullSearchTask("task", mod)], target, db, trials_per_task=budget, max_trials_global=budget,
                   early_stopping=None, seed=seed, work_dir=work, builder=builder, runner=runner,
                   seed_predicted=seeded)
    curve, best = [], float("inf")
    for rec in db.get_all_tuning_records():
        secs = [float(x) for x in (rec.run_secs or [])]
        if secs and max(secs) < 1e9:
            best = min(best, statistics.median(secs))
        curve.append(best)
    return curve


def reached(curve: list[float], goal: float) -> int | None:
    """Trials (1-based) after which ``curve`` is at most ``goal``."""
    return next((i + 1 for i, v in enumerate(curve) if v <= goal), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default="dense768,conv,bmm", help="comma-separated kinds of bench_zero_trial")
    ap.add_argument("--budget", type=int, default=32, help="trials of each search")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.measure import make_builder, make_runner
    from tunecache.tvm_layer.target import resolve_target

    tvm = load_tvm("llvm")
    target = resolve_target(None)
    kinds = tasks(tvm)
    chosen = [ALIASES.get(k, k) for k in args.kinds.split(",") if k]
    unknown = [k for k in chosen if k not in kinds]
    if unknown:
        ap.error(f"unknown kinds {unknown}; choose from {sorted(kinds)}")
    out: dict[str, Any] = {"cpu": cpu_model(), "budget": args.budget, "seeds": args.seeds, "within": WITHIN,
                           "load_before": os.getloadavg(), "kinds": {}}
    builder, runner = make_builder(), make_runner()
    t0 = time.time()
    try:
        for kind in chosen:
            mod = kinds[kind][0]
            runs: dict[str, list[list[float]]] = {"seeded": [], "scratch": []}
            for seed in args.seeds:
                order = ("seeded", "scratch") if seed % 2 == 0 else ("scratch", "seeded")  # alternate under load
                for arm in order:
                    runs[arm].append(search(mod, target, args.budget, seed, arm == "seeded", builder, runner))
                    print(f"{kind} seed {seed} {arm}: best {runs[arm][-1][-1] * 1e3:.3f} ms", file=sys.stderr)
            to90: dict[str, list[int | None]] = {"seeded": [], "scratch": []}
            for i in range(len(args.seeds)):
                best = min(runs["seeded"][i][-1], runs["scratch"][i][-1])
                for arm in runs:
                    to90[arm].append(reached(runs[arm][i], best / WITHIN))
            out["kinds"][kind] = {
                "trials_to_90": {arm: statistics.median([v if v is not None else args.budget + 1 for v in vals])
                                 for arm, vals in to90.items()},
                "trials_to_90_per_seed": to90,
                "first_trial_ms": {arm: statistics.median(c[0] * 1e3 for c in curves) for arm, curves in runs.items()},
                "best_ms": {arm: statistics.median(c[-1] * 1e3 for c in curves) for arm, curves in runs.items()},
                "curves_ms": {arm: [[round(v * 1e3, 4) for v in c] for c in curves] for arm, curves in runs.items()},
            }
    finally:
        builder.close()
        runner.pool.shutdown(wait=True)
    out["seconds"] = round(time.time() - t0, 1)
    out["load_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
