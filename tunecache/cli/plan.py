"""``tunecache plan``: show which tasks would be tuned, reused or served from the store."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

__all__ = ["register", "collect_tasks", "make_plan"]


def collect_tasks(specs: list[str], target: Any) -> list[Any]:
    """Import each model spec and return its tasks deduplicated by workload key (weights summed)."""
    from dataclasses import replace

    from tunecache.tvm_layer import frontend
    from tunecache.cli.compile import load_model_spec

    merged: dict[Any, Any] = {}
    for spec in specs:
        model, inputs, _name = load_model_spec(spec)
        mod = frontend.prepare_for_tuning(frontend.import_model(model, inputs), target)
        for t in frontend.extract_tasks(mod, target):
            if t.key in merged:
                merged[t.key] = replace(merged[t.key], weight=merged[t.key].weight + t.weight)
            else:
                merged[t.key] = t
    return list(merged.values())


def make_plan(tasks: list[Any], target: Any, hw: Any, store: Any, *, bridges: bool, full_trials: float,
              check_bridges: bool = True) -> Any:
    """Plan the store misses among ``tasks``; stored workloads of ``hw`` are free sources."""
    from dataclasses import replace

    from tunecache.reuse.costs import CostModel, calibrate
    from tunecache.reuse.planner import plan_tasks
    from tunecache.tvm_layer.bridges import bridge_checker, describe_tasks
    from tunecache.store import WorkloadKey
    from tunecache.tvm_layer.convert import workload_from_json

    hits = [t for t in tasks if store.best_k(t.key, hw, 1)]
    hit_keys = {t.key for t in hits}
    misses = [t for t in tasks if t.key not in hit_keys]
    recs = store.records(hardware=hw, valid_only=True)
    stored_items = []
    for key in sorted({r.workload for r in recs} - {t.key for t in tasks}, key=str):
        sw = store.get_workload(key)
        if sw is None or not sw.mod_json:
            continue
        try:
            mod = workload_from_json(WorkloadKey(key.shash, key.mod_eq), sw.mod_json).mod
        except Exception:  # noqa: BLE001 - an undecodable stored workload is simply not a source
            continue
        stored_items.append((key, sw.desc.name or key.shash[:8], 0.0, mod))
    cm = calibrate(replace(CostModel(), full_trials=full_trials, target_kind=str(target.kind.name)), recs)
    return plan_tasks(
        describe_tasks([(t.key, t.name, t.weight, t.mod) for t in misses], target),
        stored=describe_tasks(stored_items, target),
        cost_model=cm,
        bridges=bridges,
        hits=[t.name for t in hits],
        bridge_check=bridge_checker(target) if (bridges and check_bridges) else None,
    )


def _cmd_plan(a: argparse.Namespace) -> int:
    import time

    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    target = resolve_target(a.target)
    tasks = collect_tasks(a.models, target)
    t1 = time.time()
    mp = make_plan(tasks, target, hardware_key(target), open_store(a.db, read_only=a.read_only),
                   bridges=a.bridges, full_trials=a.full_trials)
    t2 = time.time()
    if a.json:
        print(mp.to_json())
    else:
        print(mp.to_text())
    print(f"{len(tasks)} distinct tasks from {len(a.models)} model(s); import {t1 - t0:.1f}s, planning {t2 - t1:.1f}s",
          file=sys.stderr)
    return 0


def _cmd_warm(a: argparse.Namespace) -> int:
    from tunecache.errors import ConfigError
    from tunecache.warm import load_zoo_file, warm

    models, targets = list(a.models), [a.target]
    if a.zoo:
        zoo_models, zoo_targets = load_zoo_file(a.zoo)
        models += zoo_models
        if a.target is None:
            targets = zoo_targets
    if not models:
        raise ConfigError("name models to warm (e.g. `tunecache warm resnet18 bert_base`) or give --zoo ZOO.toml")
    rc = 0
    for t in targets:
        rep = warm(models, t, store=a.db, full_trials=a.budget, reuse_trials=a.reuse_budget,
                   time_budget_s=a.time_budget, executor=a.executor, address=a.address, runner=a.runner,
                   bridges=a.bridges, dry_run=a.dry_run, seed=a.seed)
        if a.json:
            print(rep.to_json())
        elif a.dry_run:
            print(rep.plan_text)
            print(rep.summary())
        else:
            print(rep)
            png = rep.plot(a.plot or "warm.png") if rep.outcomes else None
            if png:
                print(f"plot: {png}", file=sys.stderr)
        rc = rc or (0 if rep.dry_run or rep.count("fallback") == 0 else 5)
    return rc


def register(sub: Any, add_db: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``tunecache plan`` to the parser."""
    p = sub.add_parser("plan", help="plan reuse for models' tasks (no measurement)")
    p.add_argument("models", nargs="+", metavar="MODEL", help="zoo names, .onnx paths or file.py:factory")
    p.add_argument("--target", default=None)
    add_db(p)
    p.add_argument("--read-only", action="store_true", help="open the store read-only")
    p.add_argument("--bridges", action=argparse.BooleanOptionalAction, default=True,
                   help="consider bridge operators (default: on)")
    p.add_argument("--full-trials", type=float, default=1000.0, metavar="N",
                   help="trial budget of one full search (the cost of tuning a task from scratch)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (every node names its source)")
    p.set_defaults(fn=_cmd_plan)

    w = sub.add_parser("warm", help="tune a model zoo into the store ahead of time (resumable)")
    w.add_argument("models", nargs="*", metavar="MODEL", help="zoo names, .onnx paths or file.py:factory")
    w.add_argument("--zoo", metavar="ZOO.toml", help="a zoo file listing models (and targets)")
    w.add_argument("--target", default=None)
    add_db(w)
    w.add_argument("--executor", choices=("local", "ray"), default="local")
    w.add_argument("--address", default=None, help="Ray cluster address ('auto' joins a running one)")
    w.add_argument("--runner", default=None, metavar="rpc://HOST:PORT/KEY", help="measure through a TVM RPC tracker")
    w.add_argument("--budget", type=int, default=64, metavar="TRIALS", help="trials of one full search")
    w.add_argument("--reuse-budget", type=int, default=16, metavar="TRIALS", help="trials of one narrowed search")
    w.add_argument("--time-budget", type=float, default=None, metavar="SECONDS")
    w.add_argument("--bridges", action=argparse.BooleanOptionalAction, default=True)
    w.add_argument("--dry-run", action="store_true", help="print the plan and estimated time only")
    w.add_argument("--seed", type=int, default=None)
    w.add_argument("--plot", metavar="PNG", default=None, help="write trials-vs-time plot (default warm.png)")
    w.add_argument("--json", action="store_true")
    w.set_defaults(fn=_cmd_warm)
