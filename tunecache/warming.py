"""``tunecache.warm``: tune a whole model zoo into the store ahead of time.

Tasks of every model are deduplicated by workload key (weights summed), store hits skipped, one
global reuse plan is made (with bridges), and the plan is executed locally or on a Ray cluster.
Interrupt it and run it again: committed work is kept and the rest continues.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tunecache.errors import ConfigError
from tunecache.report import WarmReport, format_seconds
from tunecache.values import TaskOutcome

__all__ = ["WarmReport", "warm", "load_zoo_file"]


def load_zoo_file(path: str | Path) -> tuple[list[str], list[Any]]:
    """Read a zoo TOML file; return (model specs, targets).

    Format::

        targets = ["llvm"]                 # optional; default: the host CPU
        [[model]]
        name = "bert_base"                 # a zoo name, with parameters:
        seq_len = 64
        [[model]]
        onnx = "models/foo.onnx"           # or an ONNX file (relative to the TOML file)
        [[model]]
        factory = "my_models.py:build"     # or a Python factory
    """
    import tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"cannot read zoo file {p}: {err}") from err
    specs = []
    for i, m in enumerate(data.get("model", [])):
        if not isinstance(m, dict):
            raise ConfigError(f"{p}: model entry {i + 1} is not a table")
        if "name" in m:
            params = ",".join(f"{k}={v}" for k, v in m.items() if k != "name")
            specs.append(m["name"] + (":" + params if params else ""))
        elif "onnx" in m:
            specs.append(str((p.parent / m["onnx"]).resolve()))
        elif "factory" in m:
            f, _, fn = str(m["factory"]).rpartition(":")
            specs.append(str((p.parent / f).resolve()) + ":" + fn)
        else:
            raise ConfigError(f"{p}: model entry {i + 1} needs one of name, onnx, factory")
    if not specs:
        raise ConfigError(f"{p} lists no [[model]] entries")
    targets = data.get("targets", [None])
    return specs, list(targets) if isinstance(targets, list) else [targets]


def warm(
    models: Sequence[str],
    target: Any = None,
    *,
    store: Any = None,
    full_trials: int = 64,
    reuse_trials: int = 16,
    time_budget_s: float | None = None,
    executor: str = "local",
    address: str | None = None,
    runner: str | None = None,
    bridges: bool = True,
    dry_run: bool = False,
    seed: int | None = None,
    progress: bool = True,
    holder: str | None = None,
) -> WarmReport:
    """Warm the store for ``models`` on ``target``.

    Parameters
    ----------
    models
        Model specs: zoo names (``"bert_base:seq_len=64"``), ``.onnx`` paths, ``file.py:factory``.
    target
        As in :func:`tunecache.compile` (default: the host CPU).
    store
        Store URL, path or object (default ``$TUNECACHE_DB`` / the user cache file).
    full_trials, reuse_trials
        Budgets of a full search and of a narrowed reuse search.
    time_budget_s
        Wall-clock budget of the whole warm.
    executor
        ``"local"`` or ``"ray"`` (``address``: ``"auto"`` joins a running cluster; ``None``
        starts a local one).
    runner
        ``rpc://HOST:PORT/KEY`` to measure through a TVM RPC tracker.
    bridges
        Plan with bridge operators.
    dry_run
        Plan only: nothing is measured.
    """
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor={executor!r}: use 'local' or 'ray'")
    from tunecache.planning import collect_tasks, make_plan
    from tunecache.store import open_store
    from tunecache.tvm_layer.bridges import materialize_bridge
    from tunecache.tvm_layer.measure import rpc_runner
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    tgt = resolve_target(target)
    hw = hardware_key(tgt)
    st = open_store(store)
    tasks = collect_tasks(list(models), tgt)
    # A task with records but no done mark was interrupted: it is planned again (resumed). Done
    # tasks are not planned, and stay reuse sources for the others.
    done = [t for t in tasks if st.is_done(t.key, hw)]
    done_keys = {t.key for t in done}
    todo = [t for t in tasks if t.key not in done_keys]
    mp = make_plan(todo, tgt, hw, st, bridges=bridges, full_trials=full_trials)
    hits = tuple(t.name for t in done)
    plan_text, plan_json = mp.to_text(), mp.to_json()
    scratch_trials, estimated_trials = float(mp.plan.scratch_trials), mp.plan.total_trials
    if dry_run:
        return WarmReport(outcomes=(), seconds=time.time() - t0, dry_run=True, plan_text=plan_text,
                          plan_json=plan_json, hits=hits, scratch_trials=scratch_trials,
                          estimated_trials=estimated_trials)
    mods = {t.node: next(x.mod for x in todo if x.key == t.key) for t in mp.tasks.values()}
    mods.update({n: materialize_bridge(nest, nest.extents) for n, nest in mp.bridges.items()})
    timeline: list[tuple[float, int]] = []
    spent = [0]
    n_steps = len(mp.plan.steps)

    def on_step(o: TaskOutcome) -> None:
        spent[0] += o.trials
        timeline.append((time.time() - t0, spent[0]))
        if progress:
            el = time.time() - t0
            frac = min(1.0, spent[0] / max(1.0, mp.plan.total_trials))
            eta = format_seconds(el * (1 - frac) / frac) if frac > 0 else "?"
            print(f"[warm] {len(timeline)}/{n_steps} steps ({o.outcome}: {o.name[:40]}), {spent[0]} trials, "
                  f"{format_seconds(el)} elapsed, ~{eta} left", file=sys.stderr, flush=True)

    if executor == "ray":
        from tunecache.search.ray_executor import execute_plan_ray

        outcomes = execute_plan_ray(mp, mods, tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials,
                                    address=address, seed=seed, on_step=on_step, time_budget_s=time_budget_s,
                                    runner=runner)
    else:
        from tunecache.search.execute import execute_plan, search_context

        with search_context(tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials,
                            runner=rpc_runner(runner) if runner else None, time_budget_s=time_budget_s,
                            seed=seed, holder=holder or "") as ctx:
            outcomes = execute_plan(mp, mods, ctx, on_step=on_step)
    ordered = tuple(outcomes[s.node] for s in mp.plan.steps if s.node in outcomes)
    return WarmReport(outcomes=ordered, seconds=time.time() - t0, timeline=tuple(timeline), plan_text=plan_text,
                      plan_json=plan_json, hits=hits, scratch_trials=scratch_trials,
                      estimated_trials=estimated_trials)
