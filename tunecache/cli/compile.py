"""``tunecache compile`` and ``tunecache zoo``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tunecache.cli.common import add_db
from tunecache.models import load_model_spec

__all__ = ["register"]


def _cmd_compile(a: argparse.Namespace) -> int:
    import tunecache

    model, inputs, name = load_model_spec(a.model)
    cm = tunecache.compile(
        model,
        a.target,
        example_inputs=inputs,
        store=a.db,
        overlay=a.overlay,
        tune=a.tune,
        trials_per_task=a.trials_per_task,
        time_budget_s=a.time_budget,
        seed=a.seed,
        progress=not a.quiet,
        library_cache=False if a.no_library_cache else None,
    )
    if a.json:
        print(cm.report.to_json())
    else:
        print(f"{name} on {cm.target}")
        print(cm.report)
    if a.output:
        path = cm.export_library(a.output)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _cmd_zoo_list(a: argparse.Namespace) -> int:
    from tunecache import zoo

    rows = []
    for n in zoo.names():
        row: dict[str, Any] = {"name": n, "description": zoo.describe(n)}
        if a.tasks:
            from tunecache.tvm_layer import frontend

            zm = zoo.get(n)
            mod = frontend.prepare_for_tuning(frontend.import_model(zm.module, zm.example_inputs), a.target)
            tasks = frontend.extract_tasks(mod, a.target)
            row["tasks"] = len(tasks)
            row["calls"] = sum(t.weight for t in tasks)
        rows.append(row)
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:
        extra = f"  {r['tasks']:3d} tasks ({r['calls']} calls)" if a.tasks else ""
        print(f"{r['name']:14s}{extra}  {r['description']}")
    return 0


def register(sub: Any) -> None:
    """Add ``tunecache compile`` and ``tunecache zoo`` to the parser."""
    p = sub.add_parser("compile", help="compile a model with cached programs, tuning misses")
    p.add_argument("model", help="zoo name (e.g. resnet18, bert_base:seq_len=64), model.onnx, or file.py:factory")
    p.add_argument("--target", default=None, help="llvm (host CPU, default), cuda, a TVM tag, or JSON")
    add_db(p)
    p.add_argument("--overlay", metavar="URL", default=None,
                   help="local store in front of a read-only --db: hits from both, new records go here")
    p.add_argument("--tune", choices=("auto", "never", "always"), default="auto")
    p.add_argument("--trials-per-task", type=int, default=32, metavar="N")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("-o", "--output", help="write a deployable shared library (.so)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line")
    p.add_argument("--no-library-cache", action="store_true",
                   help="always generate code (default: load the library built last time when the model, "
                        "target and records are unchanged; TUNECACHE_LIB_CACHE=off does the same)")
    p.set_defaults(fn=_cmd_compile)

    z = sub.add_parser("zoo", help="the built-in model zoo")
    zs = z.add_subparsers(dest="zoocmd", metavar="SUBCOMMAND", required=True)
    p = zs.add_parser("list", help="list zoo models (with --tasks: their task counts)")
    p.add_argument("--tasks", action="store_true", help="import each model and count its tasks (slower)")
    p.add_argument("--target", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=_cmd_zoo_list)

