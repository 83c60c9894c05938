"""``tunecache compile`` and ``tunecache zoo``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tunecache.cli.common import (
    add_budget,
    add_db,
    add_output_options,
    add_reuse_budget,
    reads_named_store,
    seconds,
    store_line,
    target_flag,
)
from tunecache.config import DEFAULT_SEARCH, SEARCHES

__all__ = ["load_model", "register", "target_text"]


def load_model(spec: str) -> tuple[Any, Any, str]:
    """:func:`tunecache.models.load_model_spec`, with a factory that raises named in the error."""
    from tunecache.errors import TunecacheError, UnsupportedModelError
    from tunecache.models import load_model_spec

    try:
        return load_model_spec(spec)
    except TunecacheError:
        raise
    except Exception as err:  # noqa: BLE001 - a user's factory may raise anything
        raise UnsupportedModelError(
            f"model {spec!r} could not be loaded: {type(err).__name__}: {err}; fix its factory or file "
            "(--debug shows the traceback)") from err


def target_text(target: Any) -> str:
    """A target as a short command line (``llvm -mcpu=znver3 -num-cores=2``) for messages."""
    from tunecache.tvm_layer.target import target_dict

    d = target_dict(target)
    kind = str(d.pop("kind", "?"))
    d.pop("keys", None)
    d = {k: v for k, v in d.items() if not k.startswith("feature.") and not isinstance(v, (dict, list))}
    return " ".join([kind, *(f"-{k}={v}" for k, v in sorted(d.items()))])


def _cmd_compile(a: argparse.Namespace) -> int:
    import tunecache
    from tunecache.api import check_output_path
    from tunecache.store import open_store

    # Everything a user can get wrong is checked before the model is imported and compiled.
    out = check_output_path(a.output) if a.output else None
    target = target_flag(a.target)
    # --tune never only reads the store it is given: a mistyped --db is an error naming it, not
    # a new empty store silently serving predicted programs instead of the team's (the default
    # store is created on first use as always).
    store = open_store(a.db, overlay=a.overlay, create=not (a.tune == "never" and reads_named_store(a.db)))
    model, inputs, name = load_model(a.model)
    if not a.quiet:
        print(f"tunecache: {name} for {target_text(target)}; {store_line(store)}", file=sys.stderr)
    cm = tunecache.compile(
        model,
        target,
        example_inputs=inputs,
        store=store,
        tune=a.tune,
        name=name,
        trials_per_task=a.budget,
        reuse_trials=a.reuse_budget,
        time_budget_s=a.time_budget,
        seed=a.seed,
        progress=not a.quiet,
        search=a.search,
        # A .tar holds object files: build them (a cached library is a .so already).
        library_cache=False if a.no_library_cache or (out is not None and out.suffix != ".so") else None,
    )
    if a.json:
        print(cm.report.to_json())
        if not a.quiet:  # stdout is only JSON: the summary for people goes to stderr
            print(f"tunecache: {cm.report.summary()}", file=sys.stderr)
    elif a.quiet:
        print(cm.report.summary())
    else:
        print(cm.report)
    if cm.report.queued and not a.quiet:
        print(f"tunecache: {len(cm.report.queued)} tasks queued for tuning; `tunecache worker --once --db ...` "
              "tunes them, and the next compile serves what it tuned", file=sys.stderr)
    if out is not None:
        path = cm.export_library(out)
        if not a.quiet:
            print(f"tunecache: wrote {path}", file=sys.stderr)
    return 0


def _cmd_zoo_list(a: argparse.Namespace) -> int:
    from tunecache import zoo
    from tunecache.report import format_table

    rows = []
    for n in zoo.names():
        row: dict[str, Any] = {"name": n, "description": zoo.describe(n)}
        if a.tasks:
            from tunecache.tvm_layer import frontend

            target = target_flag(a.target)
            zm = zoo.get(n)
            mod = frontend.prepare_for_tuning(frontend.import_model(zm.module, zm.example_inputs), target)
            tasks = frontend.extract_tasks(mod, target)
            row["tasks"] = len(tasks)
            row["calls"] = sum(t.weight for t in tasks)
        rows.append(row)
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ["name", *(["tasks", "calls"] if a.tasks else []), "description"]
    table = [[r["name"], *([str(r["tasks"]), str(r["calls"])] if a.tasks else []), r["description"]] for r in rows]
    print(format_table(header, table, wrap=("description",)))
    return 0


def register(sub: Any) -> None:
    """Add ``tunecache compile`` and ``tunecache zoo`` to the parser."""
    p = sub.add_parser("compile", help="compile a model with cached programs, tuning misses")
    p.add_argument("model", help="zoo name (e.g. resnet18, bert_base:seq_len=64), model.onnx, or file.py:factory")
    p.add_argument("--target", default=None, help="llvm (host CPU, default), cuda, a TVM tag, or JSON")
    add_db(p)
    p.add_argument("--overlay", metavar="URL", default=None,
                   help="local store in front of a read-only --db: hits from both, new records go here")
    p.add_argument("--tune", choices=("auto", "never", "background", "always"), default="auto",
                   help="auto: tune misses now; never: measure nothing (replayed, predicted or default "
                        "programs); background: as never, and queue the misses for `tunecache worker`; "
                        "always: re-tune every task")
    add_budget(p, "--trials-per-task", "--budget", what="trials of one task's search")
    add_reuse_budget(p)
    p.add_argument("--time-budget", type=seconds, default=None, metavar="SECONDS",
                   help="wall-clock budget of all tuning")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--search", choices=SEARCHES, default=DEFAULT_SEARCH,
                   help="search of tasks with nothing to reuse: gradient (descent on a cost model the store "
                        "trains; default) or evolutionary (MetaSchedule's)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write the compiled model: PATH.so a shared library, PATH.tar its object files")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--no-library-cache", action="store_true",
                   help="always generate code (default: load the library built last time when the model, "
                        "target and records are unchanged; TUNECACHE_LIB_CACHE=off does the same)")
    add_output_options(p)
    p.set_defaults(fn=_cmd_compile)

    z = sub.add_parser("zoo", help="the built-in model zoo")
    zs = z.add_subparsers(dest="zoocmd", metavar="SUBCOMMAND", required=True, parser_class=type(z))
    p = zs.add_parser("list", help="list zoo models (with --tasks: their task counts)")
    p.add_argument("--tasks", action="store_true", help="import each model and count its tasks (slower)")
    p.add_argument("--target", default=None)
    p.add_argument("--json", action="store_true")
    add_output_options(p)
    p.set_defaults(fn=_cmd_zoo_list)
