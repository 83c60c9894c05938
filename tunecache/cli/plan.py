"""``tunecache plan``: show which tasks would be tuned, reused or served from the store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tunecache.cli.common import add_db

__all__ = ["register"]


def _cmd_plan(a: argparse.Namespace) -> int:
    import time

    from tunecache.pipeline import lookup
    from tunecache.planning import collect_tasks, make_plan
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    target = resolve_target(a.target)
    tasks = collect_tasks(a.models, target)
    t1 = time.time()
    hw, store = hardware_key(target), open_store(a.db, read_only=a.read_only)
    misses = lookup(tasks, store, hw).misses(tasks, "auto")
    miss_keys = {t.key for t in misses}
    mp = make_plan(misses, target, hw, store, bridges=a.bridges, full_trials=a.full_trials,
                   hits=[t for t in tasks if t.key not in miss_keys])
    t2 = time.time()
    if a.json:
        print(mp.to_json())
    else:
        print(mp.to_text())
    print(f"{len(tasks)} distinct tasks from {len(a.models)} model(s); import {t1 - t0:.1f}s, planning {t2 - t1:.1f}s",
          file=sys.stderr)
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
    p.add_argument("--full-trials", type=float, default=1000.0, metavar="N",
                   help="trial budget of one full search (the cost of tuning a task from scratch)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (every node names its source)")
    p.set_defaults(fn=_cmd_plan)
