"""``tunecache warm``: tune a model zoo into the store ahead of time."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tunecache.cli.common import (
    add_budget,
    add_db,
    add_output_options,
    add_reuse_budget,
    seconds,
    store_line,
    target_flag,
)
from tunecache.config import DEFAULT_SEARCH, SEARCHES

__all__ = ["register"]


def _cmd_warm(a: argparse.Namespace) -> int:
    from tunecache.errors import ConfigError
    from tunecache.report import plural
    from tunecache.store import open_store
    from tunecache.warming import load_zoo_file, warm

    models, targets = list(a.models), [a.target]
    if a.zoo:
        zoo_models, zoo_targets = load_zoo_file(a.zoo)
        models += zoo_models
        if a.target is None:
            targets = zoo_targets
    if not models:
        raise ConfigError("name models to warm (e.g. `tunecache warm resnet18 bert_base`) or give --zoo ZOO.toml")
    if a.plot:
        from pathlib import Path

        plot = Path(a.plot)
        if plot.suffix.lower() not in (".png", ".svg", ".pdf"):
            raise ConfigError(f"--plot {a.plot}: name a .png (or .svg, .pdf) file")
        if not plot.parent.is_dir():
            raise ConfigError(f"--plot {a.plot}: directory {plot.parent} does not exist; create it or write elsewhere")
    resolved = [target_flag(t) for t in targets]  # a bad target is an error before anything is imported
    store = open_store(a.db)
    if not a.quiet:
        print(f"tunecache: {store_line(store)}", file=sys.stderr)
    rc = 0
    for t in resolved:
        rep = warm(models, t, store=store, full_trials=a.budget, reuse_trials=a.reuse_budget,
                   time_budget_s=a.time_budget, executor=a.executor, address=a.address, runner=a.runner,
                   bridges=a.bridges, dry_run=a.dry_run, seed=a.seed, progress=not a.quiet, search=a.search)
        if a.json:
            print(rep.to_json())
        elif a.dry_run:
            if not a.quiet:
                print(rep.plan_text)
            print(rep.summary())
        else:
            print(rep.summary() if a.quiet else rep)
        if a.plot and rep.outcomes:
            png = rep.plot(a.plot)
            if png is None:
                print("tunecache: no plot: matplotlib is not installed (pip install 'tunecache[plot]')",
                      file=sys.stderr)
            elif not a.quiet:
                print(f"tunecache: wrote the plot {png}", file=sys.stderr)
        elif a.plot and not a.dry_run:
            print(f"tunecache: no plot written to {a.plot}: nothing was searched (every task a store hit)",
                  file=sys.stderr)
        if rep.unmeasurable:
            print(f"tunecache: {plural(len(rep.unmeasurable), 'task')} cannot be measured here: every candidate of "
                  f"{', '.join(rep.unmeasurable)} failed to build or run, so it is not searched again and models "
                  "compile with a replayed, predicted or default program for it (`tunecache compile --tune "
                  "always` searches it again)", file=sys.stderr)
        if not rep.dry_run and rep.not_done:
            print(f"tunecache: {plural(rep.not_done, 'step')} not done (see the notes); run the same "
                  "command again to retry them", file=sys.stderr)
            rc = 5
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
    add_budget(w, "--budget", what="trials of one task's full search")
    add_reuse_budget(w)
    w.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS")
    w.add_argument("--bridges", action=argparse.BooleanOptionalAction, default=True)
    w.add_argument("--dry-run", action="store_true", help="print the plan and estimated trials only")
    w.add_argument("--seed", type=int, default=None)
    w.add_argument("--search", choices=SEARCHES, default=DEFAULT_SEARCH,
                   help="search of tasks with nothing to reuse: gradient (default) or evolutionary")
    w.add_argument("--plot", metavar="PNG", default=None,
                   help="write a plot of trials over time to this .png (none by default)")
    w.add_argument("--json", action="store_true")
    add_output_options(w)
    w.set_defaults(fn=_cmd_warm)
