"""``tunecache.warm``: tune a whole model zoo into the store ahead of time.

Tasks of every model are deduplicated by workload key (weights summed), store hits skipped, one
global reuse plan is made (with bridges), and the plan is executed locally or on a Ray cluster.
Interrupt it and run it again: committed work is kept and the rest continues.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tunecache.config import (
    DEFAULT_SEARCH,
    DEFAULT_TRIALS_PER_TASK,
    check_search,
    check_seconds,
    check_trials,
    default_reuse_trials,
)
from tunecache.errors import ConfigError, DependencyError, Interrupted, TunecacheError, UnsupportedModelError
from tunecache.progress import ProgressPrinter
from tunecache.report import WarmReport
from tunecache.values import TaskOutcome

log = logging.getLogger("tunecache")

__all__ = ["WarmReport", "collect_model_tasks", "collect_models", "warm", "warm_tasks", "load_zoo_file", "ray_cluster"]


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


def collect_model_tasks(specs: Sequence[str], target: Any) -> list[Any]:
    """Import each model spec and return the models' tasks, merged by workload key (weights summed).

    :func:`tunecache.planning.collect_tasks` one model at a time, so that a model that cannot be
    loaded (a zoo name that does not exist, a factory that raises) is named in the error.

    Raises
    ------
    UnsupportedModelError
        Naming the model spec, when its factory or its import raised something else.
    """
    return collect_models(specs, target)[0]


def collect_models(specs: Sequence[str], target: Any) -> tuple[list[Any], dict[Any, dict[str, float]]]:
    """Import each model spec; return the tasks and each task's calls in each model that has it.

    Parameters
    ----------
    specs, target
        As in :func:`collect_model_tasks`.

    Returns
    -------
    tasks : list of tunecache.tvm_layer.frontend.TaskInfo
        :func:`collect_model_tasks`'s tasks, merged by workload key (weights summed).
    calls : dict
        Workload key -> model spec -> calls in that model. A warm's plan takes each task's share
        of its own model's estimated time from them (:attr:`tunecache.reuse.planner.ModelPlan.models`).

    Raises
    ------
    UnsupportedModelError
        As :func:`collect_model_tasks`.
    """
    from tunecache.planning import collect_tasks

    merged: dict[Any, Any] = {}
    calls: dict[Any, dict[str, float]] = {}
    for spec in specs:
        try:
            tasks = collect_tasks([spec], target)
        except (TunecacheError, KeyboardInterrupt):
            raise
        except Exception as err:  # noqa: BLE001 - a user's factory may raise anything
            raise UnsupportedModelError(
                f"model {spec!r} could not be loaded: {type(err).__name__}: {err}; fix its factory or "
                "file, or leave it out (--debug shows the traceback)") from err
        for t in tasks:
            merged[t.key] = replace(merged[t.key], weight=merged[t.key].weight + t.weight) if t.key in merged else t
            per = calls.setdefault(t.key, {})
            per[spec] = per.get(spec, 0.0) + float(t.weight)
    return list(merged.values()), calls


def warm(
    models: Sequence[str],
    target: Any = None,
    *,
    store: Any = None,
    full_trials: int = DEFAULT_TRIALS_PER_TASK,
    reuse_trials: int | None = None,
    time_budget_s: float | None = None,
    executor: str = "local",
    address: str | None = None,
    runner: str | None = None,
    bridges: bool = True,
    dry_run: bool = False,
    seed: int | None = None,
    progress: bool = True,
    holder: str | None = None,
    search: str = DEFAULT_SEARCH,
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
        Budgets of a full search and of a narrowed reuse search (default:
        :func:`tunecache.config.default_reuse_trials`: a quarter of ``full_trials``, at most 8 or a
        tenth of it, at least 4). No task gets more than ``full_trials`` trials, so the warm
        spends no more than the most ``dry_run`` reports (``max_trials``, next to the planner's
        estimate: a narrowed search that falls short escalates to a full search).
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
    progress
        Show a progress line on stderr: every measured round and finished step (the Ray
        executor: every finished step).
    search
        As in :func:`tunecache.compile`: ``"evolutionary"`` or ``"gradient"`` (with Ray, each
        node's task starts its cost model from the store on its worker).

    Raises
    ------
    ConfigError, UnsupportedModelError, TargetError, StoreError
        For a bad argument, model, target or store; the message says what to do.
    Interrupted
        At a Ctrl-C, once the searches in flight committed what they measured.
    """
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor={executor!r}: use 'local' or 'ray'")
    check_trials("full_trials", full_trials)
    search = check_search("search", search)
    reuse_trials = default_reuse_trials(full_trials) if reuse_trials is None else check_trials("reuse_trials",
                                                                                             reuse_trials)
    time_budget_s = check_seconds("time_budget_s", time_budget_s)
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    t0 = time.time()
    tgt = resolve_target(target)
    hw = hardware_key(tgt)
    st = open_store(store)
    with ray_cluster(address if executor == "ray" and not dry_run else None):
        tasks, calls = collect_models(list(models), tgt)
        return warm_tasks(tasks, tgt, hw, st, t0, full_trials=full_trials, reuse_trials=reuse_trials,
                          time_budget_s=time_budget_s, executor=executor, address=address, runner=runner,
                          bridges=bridges, dry_run=dry_run, seed=seed, progress=progress, holder=holder,
                          search=search, model_calls=calls)


def warm_tasks(tasks: Sequence[Any], tgt: Any, hw: Any, st: Any, t0: float, *, full_trials: int,
               reuse_trials: int, time_budget_s: float | None, executor: str = "local", address: str | None = None,
               runner: str | None = None, bridges: bool = True, dry_run: bool = False, seed: int | None = None,
               progress: bool = True, holder: str | None = None, label: str = "warm",
               polish: bool = False, search: str = DEFAULT_SEARCH, measurers: tuple[Any, Any] | None = None,
               model_calls: Mapping[Any, Mapping[str, float]] | None = None, refit_model: bool = True) -> WarmReport:
    """The body of :func:`warm` once the tasks, target, store and cluster are there (the
    worker's too, :mod:`tunecache.worker`): plan the tasks not done, execute the plan.

    ``tasks`` have ``key``, ``name``, ``weight``, ``mod``; ``t0`` is when the caller started;
    ``label`` names the progress line; ``polish`` (the local executor) gives the tasks the plan
    tuned or reused one more full search up to ``full_trials`` records each
    (:func:`tunecache.search.execute.execute_plan`); ``measurers`` is a ``(builder, runner)``
    pair the caller keeps open across calls (the local executor without ``runner``; their worker
    processes take seconds to start: a worker draining its queue batch by batch starts them
    once), else each call makes and closes its own; ``model_calls`` (:func:`collect_models`) makes
    each task's share of estimated time its own model's, not the whole plan's. At its end the
    store's cost model is kept in the store (:func:`tunecache.replay.opinion_model`): fitted anew
    when the call tuned and ``refit_model`` (a worker's batches leave it to the store's growth
    instead), else only where none fresh is kept. Other parameters as in :func:`warm`.
    """
    from tunecache.pipeline import lookup, stored_records
    from tunecache.planning import make_plan
    from tunecache.search.budget import bounded_plan, plan_budget, plan_estimate
    from tunecache.tvm_layer.bridges import materialize_bridge

    # A task with records but no done mark was interrupted: it is planned again (resumed). Done
    # tasks are not planned, and stay reuse sources for the others.
    done = [t for t in tasks if st.is_done(t.key, hw)]
    done_keys = {t.key for t in done}
    # A task searched before whose every candidate failed to build or run (BERT's embedding
    # gather: the runner fills its indices at random, out of bounds) fails the same way again:
    # it is reported, not planned (a warm would otherwise search it, and exit "not done", on
    # every run). `tunecache compile --tune always` searches it again.
    failed_before = lookup([t for t in tasks if t.key not in done_keys], st, hw).failed
    todo = [t for t in tasks if t.key not in done_keys and t.key not in failed_before]
    mp = bounded_plan(make_plan(todo, tgt, hw, st, bridges=bridges, full_trials=full_trials), full_trials,
                      reuse_trials)
    if model_calls:
        mp = replace(mp, models={n: dict(model_calls[t.key]) for n, t in mp.tasks.items() if t.key in model_calls})
    hits = tuple(t.name for t in done)
    plan_text, plan_json = mp.to_text(), mp.to_json()
    scratch_trials, estimated_trials = float(mp.plan.scratch_trials), float(plan_estimate(mp))
    max_trials = plan_budget(mp, full_trials)
    if dry_run:
        return WarmReport(outcomes=(), seconds=time.time() - t0, dry_run=True, plan_text=plan_text,
                          plan_json=plan_json, hits=hits, scratch_trials=scratch_trials,
                          estimated_trials=estimated_trials, max_trials=max_trials,
                          unmeasurable=tuple(t.name for t in tasks if t.key in failed_before))
    mods = {t.node: next(x.mod for x in todo if x.key == t.key) for t in mp.tasks.values()}
    mods.update({n: materialize_bridge(nest, nest.extents) for n, nest in mp.bridges.items()})
    timeline: list[tuple[float, int]] = []
    printer = ProgressPrinter(label=label, time_budget_s=time_budget_s) if progress else None

    def on_round(event: Any) -> None:
        timeline.append((time.time() - t0, int(event.total_trials)))
        if printer is not None:
            printer(event)

    spent = [0]

    def on_step(o: TaskOutcome) -> None:
        spent[0] += o.trials
        if executor == "ray":  # no round events from Ray workers: the timeline is per step
            timeline.append((time.time() - t0, spent[0]))
        if printer is not None:
            printer.step(o)

    if printer is not None:
        printer.start(len(mp.plan.steps), max_trials, {s.node: s.est_trials for s in mp.plan.steps})
    try:
        if executor == "ray":
            from tunecache.search.ray_executor import execute_plan_ray

            outcomes = execute_plan_ray(mp, mods, tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials,
                                        address=address, seed=seed, on_step=on_step, time_budget_s=time_budget_s,
                                        runner=runner, search=search)
        else:
            from tunecache.interrupt import stop_on_interrupt
            from tunecache.pipeline import REMEASURE_SHARE
            from tunecache.search.execute import execute_plan, search_context
            from tunecache.search.remeasure import remeasure_plan
            from tunecache.tvm_layer.measure import rpc_runner

            builder, local = measurers if measurers is not None and not runner else (None, None)
            with stop_on_interrupt(), search_context(
                    tgt, st, hw, full_trials=full_trials, reuse_trials=reuse_trials, builder=builder,
                    runner=rpc_runner(runner) if runner else local,
                    time_budget_s=None if time_budget_s is None else (1 - REMEASURE_SHARE) * time_budget_s,
                    seed=seed, holder=holder or "", progress=on_round, search=search) as ctx:
                outcomes = execute_plan(mp, mods, ctx, on_step=on_step, polish=polish)
                # As compile does: the store's ranking is what replays and the next model's
                # narrowed searches pick their source by, so it is a re-measured one.
                remeasure_plan(mp, todo, outcomes, ctx, deadline=None if time_budget_s is None else t0 + time_budget_s)
    except Interrupted as stop:
        raise Interrupted(stop.trials, stored_records(st, hw, [t.key for t in todo])) from stop
    finally:
        if printer is not None:
            printer.close(spent[0] if sys.exc_info()[0] is None else None)
    ordered = tuple(outcomes[s.node] for s in mp.plan.steps if s.node in outcomes)
    total = sum(o.trials for o in ordered)
    if not timeline or timeline[-1][1] != total:
        timeline.append((time.time() - t0, total))
    failed_now = lookup(todo, st, hw).failed | failed_before
    _keep_cost_model(st, hw, refit=total > 0 and refit_model)
    return WarmReport(outcomes=ordered, seconds=time.time() - t0, timeline=tuple(timeline), plan_text=plan_text,
                      plan_json=plan_json, hits=hits, scratch_trials=scratch_trials,
                      estimated_trials=estimated_trials, max_trials=max_trials,
                      unmeasurable=tuple(t.name for t in tasks if t.key in failed_now))


def _keep_cost_model(st: Any, hw: Any, *, refit: bool) -> None:
    """Keep the cost model replays are weighed by in the store, so that the next ``tune="never"``
    compile reads it instead of fitting it (:func:`tunecache.replay.opinion_model`): fitted anew
    after a warm that tuned (``refit``), else only where none is kept or the kept one is stale (a
    store warmed before models were kept)."""
    from tunecache.replay import opinion_model
    from tunecache.search.gradient.kept import TooFewRows

    try:
        opinion_model(st, hw, refit=refit)
    except TooFewRows as err:
        log.info("tunecache: no cost model kept: %s", err)
    except Exception as err:  # noqa: BLE001 - the warm's records are in; a reader fits the model itself
        log.warning("tunecache: the store's cost model was not fitted: %s: %s", type(err).__name__, err)


@contextlib.contextmanager
def ray_cluster(address: str | None) -> Iterator[None]:
    """Join the Ray cluster at ``address`` for the duration (nothing for ``None``: the executor
    starts a local instance), saying in a sentence when no cluster answers."""
    if address is None:
        yield
        return
    try:
        import ray
    except ImportError as err:
        raise DependencyError("--executor ray needs Ray: run `pip install 'tunecache[ray]'`") from err
    if ray.is_initialized():
        yield
        return
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        first = str(err).strip().split(". ")[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"--executor ray --address {address}: no Ray cluster answers ({first}); start one with "
            "`ray start --head` (and `ray start --address=<head>` on the other nodes), or leave out "
            "--address to run a local Ray instance") from err
    try:
        yield
    finally:
        ray.shutdown()
