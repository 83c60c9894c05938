"""``tunecache plan``: show which tasks would be tuned, reused or served from the store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tunecache.cli.common import (
    add_budget,
    add_db,
    add_output_options,
    add_reuse_budget,
    reads_named_store,
    target_flag,
)

__all__ = ["register"]


def _cmd_plan(a: argparse.Namespace) -> int:
    import time

    from tunecache.config import default_reuse_trials
    from tunecache.pipeline import lookup
    from tunecache.planning import make_plan
    from tunecache.report import plural
    from tunecache.search.budget import bounded_plan, plan_budget, plan_estimate
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key
    from tunecache.warming import collect_model_tasks

    t0 = time.time()
    target = target_flag(a.target)
    # A store named with --db is only read: missing, it is an error naming it (as compile --tune never).
    hw, store = hardware_key(target), open_store(a.db, read_only=a.read_only, create=not reads_named_store(a.db))
    tasks = collect_model_tasks(a.models, target)
    t1 = time.time()
    misses = lookup(tasks, store, hw).misses(tasks, "auto")
    miss_keys = {t.key for t in misses}
    reuse = default_reuse_trials(a.budget) if a.reuse_budget is None else a.reuse_budget
    mp = bounded_plan(make_plan(misses, target, hw, store, bridges=a.bridges, full_trials=float(a.budget),
                                hits=[t for t in tasks if t.key not in miss_keys]), a.budget, reuse)
    t2 = time.time()
    most = plan_budget(mp, a.budget)
    if a.json:
        import json

        print(json.dumps({**json.loads(mp.to_json()), "max_trials": most}, indent=2))
    else:
        print(mp.to_text())
        if most > plan_estimate(mp):
            print(f"at most {most} trials if narrowed searches escalate to full search")
    if not a.quiet:
        print(f"tunecache: {plural(len(tasks), 'distinct task')} from {plural(len(a.models), 'model')}; "
              f"import {t1 - t0:.1f}s, planning {t2 - t1:.1f}s", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add ``tunecache plan`` to the parser."""
    p = sub.add_parser("plan", help="plan reuse for models' tasks (no measurement)")
    p.add_argument("models", nargs="+", metavar="MODEL", help="zoo names, .onnx paths or file.py:factory")
    p.add_argument("--target", default=None)
    add_db(p)
    p.add_argument("--read-only", action="store_true", help="open the store read-only")
    p.add_argument("--bridges", action=argparse.BooleanOptionalAction, default=True,
                   help="consider bridge operators (default: on)")
    add_budget(p, "--budget", "--full-trials",
               what="trials of one full search (the cost of tuning a task from scratch)")
    add_reuse_budget(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON (every node names its source)")
    add_output_options(p)
    p.set_defaults(fn=_cmd_plan)
