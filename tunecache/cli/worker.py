"""``tunecache worker``: tune the tasks background compiles queued."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tunecache.cli.common import (
    add_budget,
    add_db,
    add_output_options,
    add_reuse_budget,
    at_least_one,
    seconds,
    store_line,
    target_flag,
)

__all__ = ["register"]


def _cmd_worker(a: argparse.Namespace) -> int:
    from tunecache.store import open_store
    from tunecache.worker import work

    target = target_flag(a.target)  # a bad target is an error before the store is touched
    store = open_store(a.db)
    if not a.quiet:
        waiting = len(store.queued())
        how = "drains the queue and exits" if a.once else f"polls every {a.poll:g}s; Ctrl-C or SIGTERM stops it"
        print(f"tunecache: worker ({how}); {waiting} tasks queued in all; {store_line(store)}", file=sys.stderr)

    def batch_line(entries: list[Any]) -> None:
        if not a.quiet:
            names = ", ".join(e.name for e in entries[:4]) + (", ..." if len(entries) > 4 else "")
            print(f"tunecache: tuning {len(entries)} queued tasks: {names}", file=sys.stderr)

    rep = work(target, store=store, once=a.once, trials_per_task=a.budget, reuse_trials=a.reuse_budget,
               batch=a.batch, max_tasks=a.max_tasks, time_budget_s=a.time_budget, poll_s=a.poll,
               executor=a.executor, address=a.address, runner=a.runner, seed=a.seed, progress=not a.quiet,
               on_batch=batch_line)
    if a.json:
        print(rep.to_json())
    else:
        print(rep.summary())
        for name, why in rep.dropped:
            print(f"tunecache: dropped {name}: {why}", file=sys.stderr)
    return 130 if rep.stopped == "interrupted" else 0


def register(sub: Any) -> None:
    """Add ``tunecache worker`` to the parser."""
    w = sub.add_parser("worker", help="tune the tasks background compiles queued (tune='background')")
    w.add_argument("--once", action="store_true", help="drain the queue and exit (default: keep polling)")
    w.add_argument("--target", default=None, help="tune the tasks queued for this target (default: this host's CPU)")
    add_db(w)
    add_budget(w, "--budget", "--trials-per-task", what="trials of one task's full search")
    add_reuse_budget(w)
    w.add_argument("--batch", type=at_least_one, default=16, metavar="N",
                   help="tasks planned together, highest priority first (default 16)")
    w.add_argument("--max-tasks", type=at_least_one, default=None, metavar="N", help="exit after N tasks")
    w.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS", help="exit after this long")
    w.add_argument("--poll", type=seconds, default=10.0, metavar="SECONDS",
                   help="seconds between looks at an empty queue (default 10)")
    w.add_argument("--executor", choices=("local", "ray"), default="local")
    w.add_argument("--address", default=None, help="Ray cluster address ('auto' joins a running one)")
    w.add_argument("--runner", default=None, metavar="rpc://HOST:PORT/KEY", help="measure through a TVM RPC tracker")
    w.add_argument("--seed", type=int, default=None)
    w.add_argument("--json", action="store_true")
    add_output_options(w)
    w.set_defaults(fn=_cmd_worker)
