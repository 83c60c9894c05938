"""``tunecache warm``: tune a model zoo into the store ahead of time."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tunecache.cli.common import add_db

__all__ = ["register"]


def _cmd_warm(a: argparse.Namespace) -> int:
    from tunecache.errors import ConfigError
    from tunecache.warming import load_zoo_file, warm

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


def register(sub: Any) -> None:
    """Add ``tunecache warm`` to the parser."""
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
