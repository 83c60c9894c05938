"""Execute a reuse plan: full searches (tasks and bridges) first, then reuse children after their
sources are committed, with claims so two warmers never tune the same task at once, and
escalation to full search when a reused program is clearly worse than its source.

Every measurement is committed to the store as it lands, and a finished task is marked done, so
an interrupted run resumes where it stopped: done tasks are hits, a task with records but no done
mark is searched again with what is left of its budget.

Trial accounting: no task gets more than its budget, ``full_trials`` in all: a full search its
budget (a trivial task measures its one program once, and leaves the rest unused: it is not
handed to other tasks), a narrowed search ``reuse_trials``, and what an escalation to full
search or a time budget's top-up adds stops at ``full_trials`` too. So a plan spends at most
:func:`~tunecache.search.budget.plan_budget` trials (what a dry run and the progress line show,
next to the planner's estimate :func:`~tunecache.search.budget.plan_estimate`, which assumes no
escalation).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunecache import config
from tunecache.errors import Interrupted, TunecacheError, TuningError
from tunecache.interrupt import stop_requested
from tunecache.reuse.costs import FAR_RATIO
from tunecache.reuse.graph import ROOT
from tunecache.reuse.plan import PlanStep
from tunecache.reuse.planner import ModelPlan
from tunecache.search.budget import TOP_UP_MIN_S, full_search_deadline, step_caps
from tunecache.search.transfer import resolve_cost_model
from tunecache.store.claims import Lease, default_holder, holder_is_dead
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance
from tunecache.tvm_layer.database import make_database, reraise_store_error
from tunecache.values import SearchContext, TaskOutcome

log = logging.getLogger("tunecache")

__all__ = [
    "NodeSpec",
    "execute_plan",
    "search_full",
    "search_reuse",
    "run_node",
    "node_specs",
    "top_up",
    "search_context",
    "worth_more_search",
]
def _offset(progress: Callable[[Any], None] | None, base: int,
            total: int | None = None) -> Callable[[Any], None] | None:
    """``progress`` fed events whose ``total_trials`` count from ``base`` (and whose
    ``max_trials`` is ``total``): a search reports its own trials, the plan counts them all."""
    if progress is None or (base == 0 and total is None):
        return progress

    def relay(event: Any) -> None:
        fields: dict[str, Any] = {"total_trials": base + event.total_trials}
        if total is not None:
            fields["max_trials"] = total
        progress(replace(event, **fields))

    return relay


@dataclass(frozen=True)
class NodeSpec:
    """One plan node as the per-node search functions see it.

    Attributes
    ----------
    node
        Plan node id.
    name
        Task name (the node id for a bridge).
    key
        Workload key.
    mod
        The node's TIR ``IRModule``; ``None`` for a source that is only read from the store
        (a stored workload).
    weight
        Calls per model run, plus those of the tasks reused from it (full search's scheduler weight).
    work
        Floating-point work of one call (escalation compares throughput with its source's).
    family
        Operator family (what the shared cost model pre-trains on); ``""`` when unknown.
    share
        The task's share of its model's estimated time (:func:`_work_shares`; 1 for a bridge): a reused task
        below :data:`ESCALATE_MIN_SHARE` is not escalated, one below
        :data:`REPLAYS_ONLY_BELOW` gets its replay and its predicted program only.
    extents
        Loop extents of the node's nest (``()`` when unknown): a target extent that is a prime
        its source lacks (:func:`~tunecache.reuse.costs.prime_extent`) lowers the escalation
        bar (:data:`PRIME_BAR`).
    """

    node: str
    name: str
    key: WorkloadKey
    mod: Any = None
    weight: float = 1.0
    work: float = 0.0
    family: str = ""
    share: float = 1.0
    extents: tuple[int, ...] = ()


def _prov(hw: HardwareKey, kind: str, source: WorkloadKey | None = None, source_uid: str | None = None) -> Provenance:
    import tunecache

    return Provenance(kind=kind, source_workload=str(source) if source else None, source_record=source_uid,
                      host=config.current_host(), user=config.current_user(),
                      tunecache_version=tunecache.__version__, tvm_version=hw.tvm_version)


@contextlib.contextmanager
def search_context(target: Any, store: Any, hardware: HardwareKey, *, full_trials: int, reuse_trials: int,
                   work_dir: str | os.PathLike[str] | None = None, builder: Any = None, runner: Any = None,
                   time_budget_s: float | None = None, **settings: Any) -> Iterator[SearchContext]:
    """Open what a search needs and yield its :class:`~tunecache.values.SearchContext`.

    A builder (its worker processes take seconds to start), a runner and a work directory are
    made when not given, and closed (the directory deleted) on exit; given ones are left open.
    ``time_budget_s`` becomes the context's deadline, counted from now. Other keyword arguments
    are :class:`~tunecache.values.SearchContext` fields (``seed``, ``progress``, ``fresh``, ...).
    """
    from tunecache.tvm_layer.measure import close_runner, make_builder, make_runner

    own_dir = work_dir is None
    wd = Path(tempfile.mkdtemp(prefix="tunecache-search-")) if work_dir is None else Path(work_dir)
    own_builder, own_runner = builder is None, runner is None
    builder = make_builder() if builder is None else builder
    runner = make_runner() if runner is None else runner
    deadline = None if time_budget_s is None else time.time() + time_budget_s
    keep_dir = False
    try:
        yield SearchContext(target, store, hardware, full_trials, reuse_trials, builder, runner, wd,
                            deadline=deadline, **settings)
    except TuningError:
        keep_dir = True  # its message points at the logs in it
        raise
    finally:
        # Worker processes first (an interrupted search left none measuring), then the directory.
        if own_builder:
            builder.close()
        if own_runner:
            close_runner(runner)
        if own_dir and not keep_dir:
            shutil.rmtree(wd, ignore_errors=True)


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(1.0, deadline - time.time())


def _budget(spec: NodeSpec, ctx: SearchContext) -> int:
    """Trials left of ``spec``'s full search: its budget less the records it already has (a
    resumed search), or the whole budget when ``ctx.fresh``."""
    if ctx.fresh:
        return ctx.full_trials
    return max(0, ctx.full_trials - ctx.store.count_records(ctx.hardware, workload=spec.key))


def _best_latency(ctx: SearchContext, key: WorkloadKey) -> float | None:
    best = ctx.store.best_k(key, ctx.hardware, 1)
    return best[0].latency_s if best else None


def search_full(specs: Sequence[NodeSpec], ctx: SearchContext, *, note: str = "full search",
                max_total: int | None = None) -> list[TaskOutcome]:
    """Full search of ``specs`` in one task-scheduler run; one outcome per spec, in order.

    A spec's budget is ``ctx.full_trials`` less the records it already has (a resumed search;
    all of it with ``ctx.fresh``), and it gets no more than that: the trials a task leaves (a
    trivial task measures its one program once) are not handed to the others. ``max_total``
    caps the run's trials in all. Claims and done marks are the caller's business. No new
    search round starts after ``ctx.deadline`` or a stop request (then :class:`Interrupted` is
    raised once the round in flight is committed); every full search of a plan shares
    ``ctx.cost_model`` (default a fresh one).
    """
    from tunecache.search.full import FullSearchTask, tune_tasks

    budgets = {s.node: _budget(s, ctx) for s in specs}
    total = sum(budgets.values()) if max_total is None else min(sum(budgets.values()), max(0, max_total))
    todo = [s for s in specs if budgets[s.node] > 0] if total > 0 else []
    searched = {s.node for s in todo}
    done: dict[str, TaskOutcome] = {}

    def unsearched(s: NodeSpec) -> TaskOutcome:
        latency = _best_latency(ctx, s.key)
        why = "budget already spent (resumed)" if budgets[s.node] == 0 else "the plan's trial budget is spent"
        return TaskOutcome(s.node, s.name, s.key, "tuned" if latency is not None and not ctx.fresh else "fallback",
                           note=why, latency_s=latency)

    for s in specs:
        if s.node not in searched:
            done[s.node] = unsearched(s)
    if todo and ctx.search == "gradient":
        graded = search_gradient(todo, budgets, ctx, note=note, max_total=total)
        done.update(graded)
        todo = [s for s in todo if s.node not in graded]
        total -= sum(o.trials for o in graded.values())
        if total <= 0:  # the gradient search spent the run's cap: the rest are not searched
            done.update((s.node, unsearched(s)) for s in todo)
            todo = []
    if todo:
        db = make_database(ctx.store, ctx.hardware, ctx.target, provenance=_prov(ctx.hardware, "tuned"),
                           names={s.key.shash: s.name for s in todo})
        try:
            results = tune_tasks([FullSearchTask(s.node, s.mod, s.weight, budgets[s.node]) for s in todo],
                                 ctx.target, db,
                                 trials_per_task=max(budgets[s.node] for s in todo),
                                 max_trials_global=total,
                                 max_trials_per_task=max(budgets[s.node] for s in todo),
                                 time_budget_s=_remaining(ctx.deadline), seed=ctx.seed,
                                 work_dir=str(Path(ctx.work_dir) / "full"), progress=ctx.progress,
                                 builder=ctx.builder, runner=ctx.runner,
                                 cost_model=functools.partial(resolve_cost_model, ctx.cost_model,
                                                              {s.family for s in todo}))
        except RuntimeError as err:
            reraise_store_error(db, err)
            raise
        if stop_requested():  # nothing is marked done: a rerun resumes every task of this run
            raise Interrupted(sum(r.trials for r in results))
        for s, r in zip(todo, results, strict=True):
            latency = _best_latency(ctx, s.key)
            # With ctx.fresh a task that found no valid candidate keeps its stored best, but was not tuned now.
            ok = latency is not None and (r.valid_trials > 0 or not ctx.fresh)
            done[s.node] = TaskOutcome(s.node, s.name, s.key, "tuned" if ok else "fallback", r.trials, r.seconds,
                                       note=note if ok else "no candidate built and ran", latency_s=latency)
    return [done[s.node] for s in specs]


def search_gradient(specs: Sequence[NodeSpec], budgets: dict[str, int], ctx: SearchContext, *,
                    note: str = "full search", max_total: int | None = None) -> dict[str, TaskOutcome]:
    """Gradient search of each of ``specs`` that has a multi-level tiling sketch, with its budget,
    one after another, ``max_total`` trials at most in all; outcomes by node (the others, those
    the cap left no trials, and any the gradient search raised on are left out, for the
    evolutionary search).

    The cost model starts from the shipped one refitted on the store's records for the hardware
    (:func:`tunecache.search.gradient.training.start_model`), and every task's measurements refine
    it for the next; each task starts from the store's programs of similar tasks too
    (:func:`tunecache.search.gradient.training.read_store`). The store is read once a plan
    (``ctx.shared``): a later call goes on with the model the earlier ones refined. Records are committed like the
    evolutionary search's (provenance ``tuned``). After ``ctx.deadline`` no task starts and a task's
    search starts no new round; nor after a stop request.
    """
    from tunecache.search.gradient import gradient_search, tiled_spaces
    from tunecache.search.gradient.search import host_limits
    from tunecache.search.gradient.training import read_store, start_model
    from tunecache.search.predict import predicted_trace

    out: dict[str, TaskOutcome] = {}
    # model, rows, neighbours, limits: once a tiled task comes, then for every later gradient
    # search of the plan (each read of 4,000 stored records took VGG-16 5.5 s)
    started: tuple[Any, Any, Any, Any] | None = ctx.shared.get("gradient_start")
    base = 0
    for s in specs:
        try:
            spaces = tiled_spaces(s.mod, ctx.target)
        except Exception:  # noqa: BLE001 - no design space: the evolutionary search handles it
            spaces = []
        if not spaces:
            continue
        if started is None:
            sample = read_store(ctx.store, ctx.hardware)
            started = (*start_model(rows=sample.rows, seed=ctx.seed or 0), sample.tilings, host_limits(ctx.target))
            ctx.shared["gradient_start"] = started
        model, rows, neighbours, limits = started
        if stop_requested():
            raise Interrupted(base)
        if ctx.deadline is not None and time.time() >= ctx.deadline:
            break
        trials = budgets[s.node] if max_total is None else min(budgets[s.node], max_total - base)
        if trials < 1:
            break
        committed: list[str] = []  # record uids in the order the search measured them
        db = make_database(ctx.store, ctx.hardware, ctx.target, provenance=_prov(ctx.hardware, "tuned"),
                           names={s.key.shash: s.name}, on_commit=_appending_uids(committed))
        t0 = time.time()
        # A task with nothing stored measures its predicted program first: 32 trials of the
        # gradient search found 3.55 ms for ResNet-18's 56x56 3x3 conv, the prediction 1.22 ms
        # (session 25, Zen 3).
        own = predicted_trace(s.mod, ctx.target) if _best_latency(ctx, s.key) is None else None
        try:
            res = gradient_search(s.mod, ctx.target, builder=ctx.builder, runner=ctx.runner,
                                  max_trials=trials, database=db, model=model, store_rows=rows,
                                  seed=ctx.seed or 0,
                                  progress=_offset(ctx.progress, base,
                                                   sum(budgets.values()) if max_total is None else max_total),
                                  task_name=f"gradient search: {s.name}", spaces=spaces, neighbours=neighbours,
                                  limits=limits, deadline=ctx.deadline, seeds=[own] if own is not None else [])
        except TunecacheError:
            raise
        except Exception as err:  # noqa: BLE001 - a sketch it cannot handle: the evolutionary search takes the task
            reraise_store_error(db, err)
            log.warning("tunecache: the gradient search failed on %s (%s: %s); the evolutionary search tunes it",
                        s.name, type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")
            continue
        base += res.trials
        # Ranked by the medians of the search's last measurements (its seed among them), without
        # a cv: the bests' re-measurement after the plan still takes its 10 samples of the top 2.
        _set_remeasured(ctx, committed, res.remeasured_latency, trusted=False)
        if stop_requested():  # this task's records are committed; a rerun resumes the rest
            raise Interrupted(base)
        latency = _best_latency(ctx, s.key)
        ok = latency is not None and (res.valid > 0 or not ctx.fresh)
        out[s.node] = TaskOutcome(s.node, s.name, s.key, "tuned" if ok else "fallback", res.trials,
                                  time.time() - t0, note=f"{note} (gradient)" if ok else "no candidate built and ran",
                                  latency_s=latency)
    return out


def _appending_uids(uids: list[str]) -> Callable[[Any], None]:
    """A database's ``on_commit`` that appends each committed record's uid to ``uids``."""
    return lambda event: uids.append(event.record.uid)


def _set_remeasured(ctx: SearchContext, committed: Sequence[str],
                    remeasured: Sequence[tuple[int, float, float]], *, trusted: bool = True) -> None:
    """Make the ranking latency of each record a search measured again at its end (``(trial,
    median_s, cv)``; ``committed``: the record uids in the order measured) that median: the
    store ranks them by it. ``trusted``: with the cv, so the bests' re-measurement after the plan
    (:func:`~tunecache.search.remeasure.remeasure_bests`) skips them; else without, so it
    re-measures the top of that ranking."""
    for trial, median_s, cv in remeasured:
        if 0 <= trial < len(committed):
            ctx.store.set_latency(committed[trial], median_s, cv if trusted else None)


def search_reuse(spec: NodeSpec, source: NodeSpec, ctx: SearchContext, *,
                 max_total: int | None = None) -> TaskOutcome:
    """Narrowed search of ``spec`` from ``source``'s best stored programs and its own predicted
    program (measured in round 0 too: a far source can be worse than no source).

    Falls back to a full search when the source has no valid program, and escalates to one
    when the reused program's throughput is below ``ctx.escalate_below`` times the source's,
    measured side by side (the bar multiplied by :data:`PRIME_BAR` where an extent of it is a
    prime its source lacks). A task below :data:`REPLAYS_ONLY_BELOW` of its model's estimated time gets
    round 0 only, of two programs, its source's best replayed and its predicted one (and the
    neighbourhood rounds where neither reaches the escalation bar and an extent of it is a
    prime its source lacks).
    The source must be committed (its records in the store) before this is called.
    ``max_total`` caps the trials of the narrowed search and its escalation together (the
    escalation is skipped when nothing is left); the task never gets more than
    ``ctx.full_trials`` records in all.
    """
    from tunecache.search.narrow import narrowed_search
    from tunecache.search.predict import predicted_trace

    store, hardware = ctx.store, ctx.hardware
    sources = store.best_k(source.key, hardware, 3)
    if not sources:
        (o,) = search_full([spec], ctx, note="source has no valid program", max_total=max_total)
        return o
    cap = min(ctx.reuse_trials, ctx.full_trials) if max_total is None else min(ctx.reuse_trials, ctx.full_trials,
                                                                                max_total)
    if cap < 1:
        latency = _best_latency(ctx, spec.key)
        return TaskOutcome(spec.node, spec.name, spec.key, "reused" if latency is not None else "fallback",
                           source=str(source.key), note="the plan's trial budget is spent", latency_s=latency)
    committed: list[str] = []  # record uids in the order the narrowed search measured them
    db = make_database(store, hardware, ctx.target, provenance=_prov(hardware, "reused", source.key, sources[0].uid),
                       names={spec.key.shash: spec.name}, on_commit=_appending_uids(committed))
    t0 = time.time()
    # The task's own predicted program is one more source, second so that round 0 measures it:
    # a far source (a classifier's 1-row matmul reused by BERT's 128-row dense ran 5x slower
    # than the prediction, session 11) cannot sink the task.
    own = predicted_trace(spec.mod, ctx.target)
    programs = [sources[0], *([own] if own is not None else []), *sources[1:]]
    src_tput = source.work / sources[0].latency_s if sources[0].latency_s else 0.0
    small = spec.share < REPLAYS_ONLY_BELOW
    prime = _prime_unlike(spec, source)
    enough = None
    if small:  # the source's best program and the prediction, measured once each, unrolled little
        programs = programs[:2]
        if prime and src_tput > 0 and spec.work > 0:
            # ... and the neighbourhood rounds where neither reaches the escalation bar and a
            # prime extent leaves the replay no guide: ViT's layer norm and softmax at 197
            # tokens, 96 and 466 us from round 0, 15 and 309 us after 12 trials. Without a
            # prime, BERT 64's gained nothing worth their cost (layer norm 21 -> 20 us against a
            # full search's 7, softmax 24 -> 17 us in 15 s of search; session 30).
            def enough(latency: float) -> bool:
                return spec.work / latency >= ctx.escalate_below * src_tput
        else:
            cap = min(cap, len(programs))
    try:
        res = narrowed_search(programs, spec.mod,
                              ctx.target, builder=ctx.builder, runner=ctx.runner, max_trials=cap,
                              seed=ctx.seed or 0, database=db, task_name=spec.name, progress=ctx.progress,
                              max_unroll=MINOR_MAX_UNROLL if small else None, enough=enough,
                              first_round=len(programs) if small else None)
    except RuntimeError as err:
        reraise_store_error(db, err)
        raise
    secs = time.time() - t0
    _set_remeasured(ctx, committed, res.remeasured_latency)
    if stop_requested():
        raise Interrupted(res.trials)
    far = _far(source, spec)
    first = res.history[0].best_latency_s if res.history else None
    if small and len(res.history) > 1 and first and src_tput > 0:
        far += (f"; its replay and prediction at {spec.work / first / src_tput:.2f}x its source's throughput, "
                f"so neighbourhood rounds too (unrolled at most {MINOR_MAX_UNROLL} steps: {spec.share:.1%} of "
                "the model's estimated time)")
    elif small:
        far += (f"; its replay (unrolled at most {MINOR_MAX_UNROLL} steps) and prediction only: "
                f"{spec.share:.1%} of the model's estimated time")
    best = store.best_k(spec.key, hardware, 1)
    tput = spec.work / best[0].latency_s if best and best[0].latency_s else 0.0
    bar = ctx.escalate_below * (PRIME_BAR if prime else 1.0)
    slower = src_tput > 0 and tput < bar * src_tput
    if prime and best and src_tput > 0 and not slower and tput < ctx.escalate_below * src_tput:
        far += f"; throughput {tput / src_tput:.2f}x its source's, not escalated: {prime}, so the bar is {bar:.2f}x"
    spill = _spills_further(spec, source, ctx) if best and slower else ""
    # The stored figures were measured minutes (or machines) apart: the two programs measured
    # side by side decide whether 128 trials are spent on it.
    side = (_side_by_side(spec, source, sources[0].trace, best[0].trace, ctx)
            if best and slower and spec.share >= ESCALATE_MIN_SHARE and not spill else None)
    if best and slower and spec.share < ESCALATE_MIN_SHARE:
        far += f"; throughput {tput / src_tput:.2f}x its source's, not escalated" + (
            "" if small else f": {spec.share:.1%} of the model's estimated time")
    elif spill:  # the source's throughput is no bar for a task whose data comes from farther out
        far += f"; throughput {tput / src_tput:.2f}x its source's, not escalated: {spill}"
    elif side is not None and side[0] >= bar:
        far += f"; throughput {tput / src_tput:.2f}x its source's as stored, {side[1]}: not escalated"
    elif not best or slower:
        why = ("no valid reused program" if not best else f"throughput {side[1]}" if side is not None
               else f"throughput {tput / src_tput:.2f}x its source's")
        left = None if max_total is None else max_total - res.trials
        if left is None or left > 0:
            # Seeded: the narrowed candidates are this workload's records already.
            try:
                (o,) = search_full([spec], replace(ctx, progress=_offset(ctx.progress, res.trials)), max_total=left)
            except Interrupted as stop:
                raise Interrupted(res.trials + stop.trials) from stop
            return replace(o, trials=o.trials + res.trials, seconds=o.seconds + secs, escalated=True,
                           source=str(source.key), note=f"escalated to full search ({why}{far})")
        if not best:
            return TaskOutcome(spec.node, spec.name, spec.key, "fallback", res.trials, secs, source=str(source.key),
                               note="no valid reused program, and the plan's trial budget is spent")
        return TaskOutcome(spec.node, spec.name, spec.key, "reused", res.trials, secs, source=str(source.key),
                           note=f"narrowed search from {source.name} ({why}{far}; the plan's trial budget left no "
                                "room to escalate)", latency_s=best[0].latency_s)
    return TaskOutcome(spec.node, spec.name, spec.key, "reused", res.trials, secs, source=str(source.key),
                       note=f"narrowed search from {source.name}" + (f" ({far[2:]})" if far else ""),
                       latency_s=best[0].latency_s)


#: Rounds of the side-by-side measurement that decides an escalation (one sample of each program
#: a round, 3 runs averaged: ~1 s for BERT's dense layers). Its ratio is of the two programs'
#: fastest samples: measured 8 times on BERT's 64- and 128-row dense programs under a bursty
#: load of two busy processes, its standard deviation was 0.10 against 0.21 for the ratio of the
#: medians and 0.14 for the median of each round's ratio, and its mean 0.60 against 0.56-0.62
#: quiet (session 23, AMD EPYC Zen 3).
SIDE_ROUNDS = 10


def _side_by_side(spec: NodeSpec, source: NodeSpec, source_trace: Any, trace: Any,
                  ctx: SearchContext) -> tuple[float, str] | None:
    """``spec``'s throughput over ``source``'s with both programs (``trace`` on ``spec``'s module,
    ``source_trace`` on the source's) measured now, in the same interleaved rounds, and how it
    reads in a report; ``None`` where either cannot be measured (the stored figures then decide).

    A store's latency was measured when its program was tuned, perhaps on a colleague's machine:
    BERT's 768 x 768 dense at 64 tokens, reused from 128 tokens, came out at 0.64x, 0.66x and
    0.84x of its stored source's throughput in three compiles (0.7 is the bar), so the load of
    the minute decided a 128-trial escalation (session 22)."""
    from tunecache.search.remeasure import Remeasurement, measure_side_by_side

    src_mod = _node_module(source, ctx)
    if spec.mod is None or src_mod is None or spec.work <= 0 or source.work <= 0:
        return None
    mine, theirs = measure_side_by_side([(spec.mod, trace), (src_mod, source_trace)], ctx.target,
                                        runner=ctx.runner, builder=ctx.builder, repeats=SIDE_ROUNDS,
                                        rounds=SIDE_ROUNDS)
    if not isinstance(mine, Remeasurement) or not isinstance(theirs, Remeasurement):
        log.info("tunecache: %s and its source not measured side by side (%s)", spec.name,
                 mine if isinstance(mine, str) else theirs)
        return None
    # Each program's fastest sample (3 runs averaged): load from elsewhere only ever slows a run.
    fastest, theirs_fastest = min(mine.samples), min(theirs.samples)
    ratio = (spec.work / fastest) / (source.work / theirs_fastest)
    return ratio, (f"{ratio:.2f}x its source's measured side by side ({fastest * 1e3:.3g} ms, its source "
                   f"{theirs_fastest * 1e3:.3g} ms)")


def _prime_unlike(spec: NodeSpec, source: NodeSpec) -> str:
    """Why ``source``'s throughput is a lower bar for ``spec`` (:data:`PRIME_BAR`; ``""`` when
    it is not): an extent of ``spec`` is a prime the source's loop lacks
    (:func:`~tunecache.reuse.costs.prime_extent`), so its tiles are 1 or the whole loop, or
    padded."""
    from tunecache.reuse.costs import prime_extent

    prime = prime_extent(spec.extents, source.extents) if spec.extents and source.extents else None
    return "" if prime is None else f"its extent {prime} is a prime its source's loops lack"


def _cache_level(nbytes: int, caches: dict[int, int]) -> int:
    """The cache level that holds ``nbytes`` (L1 counted as L2; one past the last level: memory)."""
    levels = sorted(level for level in caches if level >= 2)
    return next((level for level in levels if nbytes <= caches[level]), (levels[-1] + 1) if levels else 4)


def _node_module(spec: NodeSpec, ctx: SearchContext) -> Any | None:
    """``spec``'s TIR module: the plan's, or for a stored source the store's (``None``: it holds none)."""
    from tunecache.tvm_layer.convert import stored_module

    return spec.mod if spec.mod is not None else stored_module(ctx.store, spec.key)


def _argument_bytes(spec: NodeSpec, ctx: SearchContext) -> int:
    """Bytes of ``spec``'s arguments (0: unknown)."""
    from tunecache.tvm_layer.tir import argument_bytes

    mod = _node_module(spec, ctx)
    return argument_bytes(mod) if mod is not None else 0


def _spills_further(spec: NodeSpec, source: NodeSpec, ctx: SearchContext) -> str:
    """Why ``source``'s throughput is no bar for ``spec`` (``""`` when it is): ``spec``'s
    arguments fit only in a cache level farther out than the source's (or in none), so its
    reads are bound by a slower memory. VGG-16's 4096 x 4096 GEMV (64 MB, memory) was escalated
    against ResNet-50's 2048 x 1000 classifier (8 MB, L3): 32 trials for a kernel that streams
    its weights whatever the schedule."""
    from tunecache.tvm_layer.target import cache_bytes

    caches = cache_bytes()
    mine, theirs = _argument_bytes(spec, ctx), _argument_bytes(source, ctx)
    if not caches or mine <= 0 or theirs <= 0:
        return ""
    lm, lt = _cache_level(mine, caches), _cache_level(theirs, caches)
    if lm <= lt:
        return ""

    def where(level: int) -> str:
        return f"L{level} ({caches[level] >> 20 or 1} MiB)" if level in caches else "no cache"

    return f"its data ({mine / 2**20:.1f} MiB) fits {where(lm)}, its source's ({theirs / 2**20:.1f} MiB) {where(lt)}"


def _far(source: NodeSpec, target: NodeSpec) -> str:
    """``"; the source is 12x this task's work"`` when the source is at least
    :data:`~tunecache.reuse.costs.FAR_RATIO` times larger or smaller than its target (fewer of its
    tile sizes fit), else ``""``."""
    if source.work <= 0 or target.work <= 0:
        return ""
    ratio = source.work / target.work
    if ratio >= FAR_RATIO:
        return f"; the source is {ratio:.0f}x this task's work, so fewer of its tile sizes carry over"
    if ratio <= 1 / FAR_RATIO:
        return f"; the source is 1/{1 / ratio:.0f} of this task's work, so fewer of its tile sizes carry over"
    return ""


def _claim(spec: NodeSpec, ctx: SearchContext) -> bool:
    """Claim ``spec``'s task for ``ctx.holder``, taking over the claim of a dead local holder.

    A fresh search (``tune="always"``) claims nothing: claims keep two warmers off a task that
    is not done yet, and the tasks it searches again are done already (a done task's claim is
    never given out again).
    """
    if ctx.fresh:
        return True
    other = ctx.store.claim_holder(spec.key, ctx.hardware)
    steal = other if other and other != ctx.holder and holder_is_dead(other) else None
    return bool(ctx.store.claim(spec.key, ctx.hardware, ctx.holder, ctx.lease_s, steal_from=steal))


def _done_in_store(spec: NodeSpec, ctx: SearchContext) -> TaskOutcome | None:
    """A ``hit`` outcome when the store marks ``spec`` done (never with ``ctx.fresh``)."""
    if ctx.fresh or not ctx.store.is_done(spec.key, ctx.hardware):
        return None
    return TaskOutcome(spec.node, spec.name, spec.key, "hit", note="done in the store",
                       latency_s=_best_latency(ctx, spec.key))


def run_node(spec: NodeSpec, source: NodeSpec | None, ctx: SearchContext) -> TaskOutcome:
    """Do one plan node the way :func:`execute_plan` does, claims included (used by the Ray executor).

    A node done in the store is a ``hit``. Otherwise it is claimed (waiting up to
    ``ctx.wait_s`` while another live warmer holds it; a dead local holder's claim is taken
    over), searched under a renewed lease (``source is None``: full search; else narrowed search
    from ``source``), and marked done unless it fell back.
    """
    ctx = replace(ctx, holder=ctx.holder or default_holder())
    give_up = time.time() + ctx.wait_s
    while True:
        hit = _done_in_store(spec, ctx)
        if hit is not None:
            return hit
        if ctx.deadline is not None and time.time() > ctx.deadline:
            return TaskOutcome(spec.node, spec.name, spec.key, "fallback", note="time budget spent")
        if _claim(spec, ctx):
            break
        if time.time() > give_up:
            return TaskOutcome(spec.node, spec.name, spec.key, "fallback", note="claimed by another warmer")
        time.sleep(1.0)
    with Lease(ctx.store, ctx.hardware, [spec.key], ctx.holder, ctx.lease_s):
        o = search_full([spec], ctx)[0] if source is None else search_reuse(spec, source, ctx)
        if o.outcome != "fallback":
            ctx.store.mark_done(o.key, ctx.hardware, ctx.holder)
    return o


def node_specs(mp: ModelPlan, mods: dict[str, Any]) -> dict[str, NodeSpec]:
    """Return a :class:`NodeSpec` for every task, bridge and stored node of ``mp``.

    ``mods`` holds the TIR module of every task and bridge node; stored nodes get none.
    """
    from tunecache.tvm_layer.convert import workload_of

    def served(n: str) -> float:
        """Weight of the tasks that reuse ``n``'s program, directly or down the chain."""
        return sum(float(mp.tasks[c].weight if c in mp.tasks else 0.0) + served(c) for c in mp.plan.children(n))

    share = _work_shares(mp, mods)
    specs: dict[str, NodeSpec] = {}
    for n, m in mods.items():
        # A full search's weight is what its result is worth: its own calls plus those of every
        # task reused from it (a bridge has none of its own), so the task scheduler does not
        # starve a bridge that half the model reuses.
        if n in mp.tasks:
            t = mp.tasks[n]
            specs[n] = NodeSpec(n, t.name, workload_of(m)[0], m, float(t.weight) + served(n), float(t.nest.work),
                                t.nest.family, share[n], tuple(t.nest.extents))
        else:
            bridge = mp.bridges.get(n)
            specs[n] = NodeSpec(n, n, workload_of(m)[0], m, max(1.0, served(n)),
                                float(bridge.work) if bridge is not None else 0.0,
                                bridge.family if bridge is not None else "",
                                extents=tuple(bridge.extents) if bridge is not None else ())
    for n, s in mp.stored.items():
        specs[n] = NodeSpec(n, s.name, s.key, None, 1.0, float(s.nest.work), s.nest.family,
                            extents=tuple(s.nest.extents))
    return specs


def _work_shares(mp: ModelPlan, mods: dict[str, Any]) -> dict[str, float]:
    """Each planned task's share of its model's estimated time: calls x a roofline estimate of one
    call, ``max(work, RIDGE x argument bytes)``, over all the planned tasks of that model
    (``mp.models``; all of the plan's tasks when it is one model's). A task of several models
    takes its largest share.

    Shares are per model because a warm plans several models' tasks together: over the whole
    zoo (``tunecache warm resnet18 resnet50 mobilenet_v2 bert_base``), ResNet-18's stride-2
    convolution, 3.5% of ResNet-18, came to 0.3%, below :data:`REPLAYS_ONLY_BELOW`; its replay
    stood, where 24 more trials around it found a program 0.80-0.86x as long (session 36).

    Work alone (multiply-adds) called MobileNetV2's largest depthwise convolutions 0.9% and 1.4%
    of the model where they took 5.5% and 5.8% of its kernel time (9 multiply-adds an output,
    inputs of 1.8-4.8 MB): at :data:`RIDGE`, 5.9% and 3.5%; every MobileNetV2 task over 1% of the
    kernel time is within 0.57-1.8x of its share of it (by work, down to 0.16x), and a GEMV
    streaming 64 MB of weights is as large as its bytes make it (session 31).
    """
    from tunecache.tvm_layer.tir import argument_bytes

    call = {n: max(float(t.nest.work), RIDGE * (argument_bytes(mods[n]) if n in mods else 0))
            for n, t in mp.tasks.items()}
    by_model: dict[str, dict[str, float]] = {}  # model -> node -> calls x one call's estimate
    for n, t in mp.tasks.items():
        for model, calls in (mp.models.get(n) or {"": float(t.weight)}).items():
            by_model.setdefault(model, {})[n] = float(calls) * call[n]
    share = dict.fromkeys(mp.tasks, 0.0)
    for est in by_model.values():
        total = sum(est.values()) or 1.0
        for n, e in est.items():
            share[n] = max(share[n], e / total)
    return share


#: Multiply-adds a kernel does in the time it takes to move one byte of its arguments (a
#: roofline's ridge point) in :func:`_work_shares`. AMD EPYC Zen 4, 2 cores: ONNX Runtime's 3x3
#: convolutions run ~110 G multiply-adds a second, its depthwise ones move ~30-40 GB a second
#: (MobileNetV2 in the model): 3-4; at 4 each MobileNetV2 task's share of the estimate is within
#: 0.57-1.8x of its share of the model's kernel time, for every task over 1% (session 31).
RIDGE = 4.0


#: A reused task whose share of its model's estimated time (:func:`_work_shares`) is below this is
#: not escalated to a full search when its throughput falls short of its source's: BERT's softmax
#: at 64 tokens (0.68x its 128-token source's) took 102 s of a 125 s compile at B = 128, for a
#: kernel worth under 1% of the model; its layer norm at 256 tokens, 17 s of 39 s.
ESCALATE_MIN_SHARE = 0.02

#: The escalation bar (``escalate_below`` times the source's throughput) is multiplied by this for a
#: task with an extent that is a prime its source lacks (:func:`_prime_unlike`): its tiles are 1
#: or the whole loop, or padded, and its own best runs well below its source's throughput.
#: ViT-B/16's 12 x 197 x 197 attention matmuls, reused from BERT's 128-token ones, ran 0.56x and
#: 0.51x their sources' throughput side by side, and the full searches this escalated them to
#: found 0.46 and 0.52 ms against their 0.46 and 0.51 ms (session 30): 256 trials for nothing;
#: its narrowed searches at 197 tokens came out at 0.50-0.66x (attention matmuls, softmax), its
#: layer norm's replay alone at 0.18x (15 us after a narrowed search, 96 us replayed).
PRIME_BAR = 0.5

#: A reused task whose share of its model's estimated time is below this gets round 0 of a narrowed search
#: only, with two programs (its source's best replayed and its predicted program, each measured
#: once; the faster is kept), unless neither reaches the escalation bar and a prime extent its
#: source lacks makes the replay no guide: then the neighbourhood rounds too (session 30). BERT's
#: softmax, layer norm and attention matmul at 64 tokens (0.0-1.4% of the work each) took 14 of a
#: 25 s compile's narrowed searches, 35 of its 79 trials (the softmax's candidates take 2-3 s each
#: to generate code for), where the rounds after round 0 gained 0-55% (single runs) on kernels
#: worth ~0.5-4% of the model's time; cut, they cost 0.5% of its calls x kernel latency (session
#: 23). Shares are of estimated time (:func:`_work_shares`), not of work: by work, MobileNetV2's
#: two largest depthwise convolutions (0.9% and 1.4%) got round 0 only and ran 2.4-2.6x ONNX
#: Runtime's in the model (session 31).
REPLAYS_ONLY_BELOW = 0.02

#: Such a task's replayed source is unrolled at most this many steps (``narrowed_search``'s
#: ``max_unroll``): BERT's softmax program from its 128-token search unrolls 512 steps around an
#: inlined ``fast_exp`` and took 5-7 s to build at 64 tokens (2.1 s at 256), 0.5 s (0.3 s)
#: unrolled 16 steps; measured side by side, 10 rounds, fastest samples, the unroll depth
#: (0, 16, 64 or 512) moved none of BERT's minor kernels beyond noise (softmax, layer norm,
#: 64-token attention matmul; session 24).
MINOR_MAX_UNROLL = 16

#: :func:`top_up` leaves out a task whose share of the searched tasks' time (calls x best
#: latency) is below this: BERT's fused fast-softmax (0.7% of a 2-layer BERT's) took 168 of a
#: worker's 204 s there, 7 s of code generation a candidate, for at most 0.7% of the model.
TOP_UP_MIN_SHARE = 0.02


def worth_more_search(mp: ModelPlan, out: dict[str, TaskOutcome], min_share: float = TOP_UP_MIN_SHARE) -> list[str]:
    """The plan's tuned or reused tasks, in plan order, whose calls x best latency is at least
    ``min_share`` of all of theirs (a task with no latency is kept: its share is unknown)."""
    done = [n for n in mp.tasks if n in out and out[n].outcome in ("tuned", "reused")]
    cost = {n: mp.tasks[n].weight * lat for n in done if (lat := out[n].latency_s)}
    total = sum(cost.values())
    return [n for n in done if n not in cost or total <= 0 or cost[n] >= min_share * total]


def top_up(mp: ModelPlan, specs: dict[str, NodeSpec], out: dict[str, TaskOutcome],
           ctx: SearchContext, max_total: int | None = None) -> dict[str, TaskOutcome]:
    """Spend what a time budget has left after every step of a plan on one more full search.

    Under a time budget the roots' full searches stop early to leave time for their reuse
    children (:func:`full_search_deadline`), and a narrowed search stops as soon as its
    neighbourhood stops paying, so a plan often finishes with a fifth of its budget unused
    (resnet18, 200 s: 156-164 s). That time goes to one task-scheduler run over the tasks the plan
    tuned or reused, each weighted by its own calls, each starting from its records in the store
    (evolutionary search seeds its population from them), up to ``ctx.full_trials`` records a
    task. Tasks below :data:`TOP_UP_MIN_SHARE` of the time are left out (:func:`worth_more_search`).
    Returns ``out`` with the trials and seconds of the tasks searched again added to their
    outcome; the outcome kind (``tuned``/``reused``) and its source stay. ``max_total`` caps the
    search's trials (what the plan has left).
    """
    tasks = [replace(specs[n], weight=mp.tasks[n].weight) for n in worth_more_search(mp, out)]
    if not tasks or (max_total is not None and max_total < 1):
        return out
    merged = dict(out)
    for o in search_full(tasks, replace(ctx, fresh=False), note="budget left after the plan", max_total=max_total):
        prev = merged[o.node]
        if o.trials and o.outcome == "tuned":
            merged[o.node] = replace(prev, trials=prev.trials + o.trials, seconds=prev.seconds + o.seconds,
                                     latency_s=o.latency_s, note=f"{prev.note}; {o.trials} more trials with the "
                                                                 "time budget left after the plan")
    return merged


def execute_plan(
    mp: ModelPlan,
    mods: dict[str, Any],
    ctx: SearchContext,
    *,
    on_step: Callable[[TaskOutcome], None] | None = None,
    transfer: bool = True,
    max_trials: int | None = None,
    polish: bool = False,
) -> dict[str, TaskOutcome]:
    """Run ``mp``'s steps in order; return an outcome per node (tasks and bridges).

    Parameters
    ----------
    mp
        The plan (:func:`tunecache.reuse.planner.plan_tasks`), best cut to what its steps may
        spend (:func:`bounded_plan`).
    mods
        TIR module of every task and bridge node.
    ctx
        Where and how to search: target, store, hardware, budgets, builder and runner, the
        deadline (once passed, no new step starts; finished steps stay committed), the claim
        holder and lease (claims of other holders are waited for, up to ``ctx.wait_s``, and
        taken over when their lease expires). ``ctx.progress`` receives the plan's trials so far
        (``total_trials``) out of ``max_trials`` (``max_trials``).
    on_step
        Called after every finished step (progress, resumability reporting).
    transfer
        Every full search of the plan (roots, bridges, escalations) uses one XGBoost cost
        model, pre-trained on the store's records of the hardware
        (:func:`tunecache.search.transfer.pretrained_cost_model`) and trained further by each
        search. ``False``: a fresh model per search (MetaSchedule's default), which predicts at
        random until it has seen 100 measurements, i.e. for most of a small search.
    max_trials
        Most trials the whole plan may spend (default :func:`plan_budget` of ``mp``). A step
        never takes what the steps after it may need (their :func:`step_caps`).
    polish
        Without a deadline: once every step is done (and marked done), one more full search of
        the tasks the plan tuned or reused, each up to ``ctx.full_trials`` records, starting
        from what the plan found (:func:`top_up`; ``tunecache worker``, where quality matters
        more than trials). With a deadline, the time left is spent that way anyway.

    Raises
    ------
    Interrupted
        After a stop request (:mod:`tunecache.interrupt`): the searches in flight committed what
        they measured, the steps finished before are marked done, the rest are left to a rerun.

    Notes
    -----
    Full searches that are ready together share one task-scheduler run (:func:`search_full`);
    a reuse child runs (:func:`search_reuse`) once its source is committed.
    :func:`tunecache.search.ray_executor.execute_plan_ray` runs the same per-node function
    (:func:`run_node`) as Ray tasks.
    """
    ctx = replace(ctx, holder=ctx.holder or default_holder())
    store, hardware, deadline = ctx.store, ctx.hardware, ctx.deadline
    specs = node_specs(mp, mods)
    out: dict[str, TaskOutcome] = {}
    caps = step_caps(mp, ctx.full_trials)
    budget = sum(caps.values()) if max_trials is None else max_trials
    progress = ctx.progress
    spent = 0

    def room(starting: Sequence[str]) -> int:
        """Trials the steps ``starting`` may take: what the plan has left less what the steps
        after them may need."""
        later = sum(caps[n] for n in caps if n not in out and n not in starting)
        return budget - spent - later

    def share_model() -> None:
        """Give the plan's searches one cost model, pre-trained when an evolutionary search first
        needs it, on the families of the tasks it searches (a plan whose searches are all
        gradient and narrowed searches, or all done in the store, pays nothing)."""
        nonlocal ctx
        if transfer and ctx.cost_model is None:
            from tunecache.search.transfer import PretrainedOnUse

            ctx = replace(ctx, cost_model=PretrainedOnUse(store, hardware, ctx.target))

    def finish(o: TaskOutcome) -> None:
        nonlocal spent
        out[o.node] = o
        spent += o.trials
        if o.outcome != "fallback":
            store.mark_done(o.key, hardware, ctx.holder)
        if on_step is not None:
            on_step(o)

    def over_budget() -> bool:
        return deadline is not None and time.time() > deadline

    def searching(c: SearchContext) -> SearchContext:
        return replace(c, progress=_offset(progress, spent, budget))

    pending = list(mp.plan.steps)
    give_up = time.time() + ctx.wait_s
    try:
        while pending and not over_budget() and not stop_requested():
            ready_full: list[PlanStep] = []
            ready_reuse: list[PlanStep] = []
            waiting: list[PlanStep] = []
            for s in pending:
                spec = specs[s.node]
                hit = _done_in_store(spec, ctx)
                if hit is not None:
                    finish(hit)
                    continue
                src_ok = s.source == ROOT or s.source in mp.stored or s.source in out
                if not src_ok or not _claim(spec, ctx):
                    waiting.append(s)
                    continue
                (ready_full if s.source == ROOT else ready_reuse).append(s)
            # One lease renews every task claimed in this pass until the pass ends: the reuse
            # children wait while the full searches run, longer than a lease.
            claimed = [specs[s.node].key for s in ready_full + ready_reuse]
            with Lease(store, hardware, claimed, ctx.holder, ctx.lease_s) if claimed else contextlib.nullcontext():
                if ready_full:
                    share_model()
                    reuse_left = sum(1 for s in mp.plan.steps if s.source != ROOT and s.node not in out)
                    full_ctx = replace(ctx, deadline=full_search_deadline(deadline, reuse_left, ctx.reuse_trials))
                    nodes = [s.node for s in ready_full]
                    for o in search_full([specs[n] for n in nodes], searching(full_ctx), max_total=room(nodes)):
                        finish(o)
                for s in ready_reuse:
                    if over_budget() or stop_requested():
                        continue  # released when the lease ends
                    share_model()  # an escalation is a full search
                    finish(search_reuse(specs[s.node], specs[s.source], searching(ctx), max_total=room([s.node])))
            pending = [s for s in waiting if s.node not in out] + [s for s in ready_reuse if s.node not in out]
            if pending and not ready_full and not ready_reuse:
                if time.time() > give_up:
                    break
                time.sleep(1.0)  # another warmer holds these: wait for its done mark or lease expiry
        time_left = deadline is not None and deadline - time.time() > TOP_UP_MIN_S
        if not pending and not stop_requested() and (time_left or (polish and deadline is None)):
            share_model()
            before = sum(o.trials for o in out.values())
            out = top_up(mp, specs, out, searching(ctx), max_total=budget - spent if time_left else None)
            spent += sum(o.trials for o in out.values()) - before
    except Interrupted as stop:  # raised by a search with the trials it spent
        raise Interrupted(spent + stop.trials) from stop
    if stop_requested():
        raise Interrupted(spent)
    for s in mp.plan.steps:
        if s.node not in out:
            spec = specs[s.node]
            out[s.node] = TaskOutcome(s.node, spec.name, spec.key, "fallback",
                                      note="time budget spent" if over_budget() else "claimed by another warmer")
    return out
