"""Gradient search (Felix, ASPLOS'24) on MetaSchedule's CPU sketches: descend, round, measure.

One round:

1. **Starts**: for every multi-level tiling sketch of the task (:func:`tiled_spaces`), random
   points, the best measured programs so far, and in the first round the best programs of
   stored neighbours of the sketch's shape, their tiles carried to this task's extents
   (:mod:`~tunecache.search.gradient.starts`; the best predicted two are measured, after the
   model's top pick, whatever the model says of the rest), and first of all the ``seeds`` (the
   task's analytically predicted program, for a task with nothing stored); each start keeps its own
   categorical choices (unroll bound, compute locations), which the descent does not change.
   The best measured programs' one-move neighbours (the narrowed search's moves: a tile factor
   between levels, the unroll bound, a compute location) join the ranking as they are.
2. **Descent**: Adam on the relaxed exponents (:class:`~tunecache.search.gradient.space.TiledSpace`)
   to lower the cost model's predicted ``log(seconds / work)``, with penalties past the CPU's
   limits (:class:`Limits`: the sketch's innermost factor bound, a vectorized tile below the
   SIMD width, and, when asked, working sets past the L1 and L2 caches); every few steps the
   point is rounded to tiles that divide.
3. **Selection**: the rounded points are de-duplicated, ranked by the model, replayed and
   postprocessed (a candidate TVM rejects is counted and skipped), and ``round_size`` of them
   are built and measured, like any other search's candidates (and committed to ``database``),
   best prediction first (optionally the best of each start's descent first:
   :data:`DIVERSE_SHARE`).
4. **Refinement**: the model is fitted again on the store's rows and the task's measurements
   (the task's weighted up).

Without a trained model (an empty store, the first round), the round measures random points of
the space: the cold start the issue names. A candidate that fails is data, never raised.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tunecache.errors import ConfigError
from tunecache.search.gradient.model import CostModel
from tunecache.search.gradient.space import TiledSpace, footprint_feature, tiled_spaces
from tunecache.search.gradient.starts import Tiling, neighbour_starts
from tunecache.search.narrow.moves import PHASES, neighbour_decisions

__all__ = ["GradientResult", "Limits", "gradient_search", "host_limits"]

#: Weight of the task's own measurements against a store row when the model is refined.
OWN_WEIGHT = 8.0
#: Least share of the refit's total weight the task's own measurements carry (their weight grows
#: past ``OWN_WEIGHT`` as the store's rows outnumber them); 0: ``OWN_WEIGHT`` alone. Measured on
#: the Zen 5 of ``docs/gradient.md`` (2 tasks x 3 seeds, 128 trials, the shipped rows as the
#: store's): 0.5 ended 1.09x worse on BERT's dense, whose stall it was meant to lift, 0.98x on a conv.
OWN_SHARE = 0.0
#: The best measured programs of each sketch whose one-move neighbours join a round's ranking.
LOCAL_FROM = 2
#: Stored neighbours' carried tiles measured in the first round whatever the model predicts
#: (the best predicted of them): a store's program for a similar shape is evidence the model
#: may not have learned yet.
FORCED_NEIGHBOURS = 2
#: Share of a round's measurements given to the best prediction of each distinct start's descent
#: before the rest go by rank. 0: measured worse at the end. On the Zen 5 of ``docs/gradient.md``
#: (3 tasks x 3 seeds, 128 trials) a share of 0.5 was ahead on 2 of 3 tasks after 16 trials but
#: ended 1.05-1.15x worse on all 3 (medians) than ranking the whole round.
DIVERSE_SHARE = 0.0


@dataclass(frozen=True)
class GradientResult:
    """What one :func:`gradient_search` did.

    Attributes
    ----------
    best_latency_s
        The best latency: the median of its samples where it was measured again at the end,
        else its one measurement (``None`` if nothing ran).
    best_trace
        The best program's trace JSON (``None`` if nothing ran).
    trials
        Candidates measured.
    valid
        Of those, how many built and ran.
    curve
        The best latency after each trial (``inf`` until one ran).
    rounds
        Rounds run; ``cold_rounds`` of them measured random points (no trained model).
    cold_rounds
        See ``rounds``.
    proposed
        Distinct rounded points the descents produced, over all rounds.
    failed_replay
        Rounded points TVM did not replay or postprocess.
    model_seconds
        Seconds spent fitting the model and descending (not building or measuring).
    elapsed_s
        Wall seconds of the whole search.
    remeasured_latency
        ``(trial, median_s, cv)`` of the candidates measured again at the end (the fastest and
        the first seed), interleaved: their committed records' ranking latencies by rights.
    """

    best_latency_s: float | None
    best_trace: Any
    trials: int
    valid: int
    curve: tuple[float, ...] = field(default_factory=tuple)
    rounds: int = 0
    cold_rounds: int = 0
    proposed: int = 0
    failed_replay: int = 0
    model_seconds: float = 0.0
    elapsed_s: float = 0.0
    remeasured_latency: tuple[tuple[int, float, float], ...] = ()


@dataclass(frozen=True)
class Limits:
    """The CPU's limits a descent is penalised past (a quadratic in log units; 0 turns one off).

    Attributes
    ----------
    lanes
        SIMD lanes of the element type: the innermost tile of the vectorized axis is pushed up
        to at least this many (where the axis is that long).
    l1_bytes, l2_bytes
        Data cache sizes: the bytes one iteration of the first reduction loop touches are pushed
        under ``l2_bytes``, those of the innermost reduction loop's whole run under ``l1_bytes``.
    weight
        The vector width penalty's weight against the model's predicted ``log(seconds / work)``.
    cache_weight
        The cache penalties' weight. 0 by default: on the Zen 5 of ``docs/gradient.md`` they made
        the best after 16 trials 1.2x worse (geometric mean, 4 tasks x 2 seeds) and after 64
        1.02x; the model learns the caches from the store's measurements better than this
        rule of thumb places them.
    """

    lanes: int = 0
    l1_bytes: int = 0
    l2_bytes: int = 0
    weight: float = 1.0
    cache_weight: float = 0.0


def host_limits(target: Any) -> Limits:
    """:class:`Limits` of a CPU target: its SIMD width (float32) and this host's cache sizes
    (32 KiB and 1 MiB where the host does not say)."""
    from tunecache.search.narrow.search import _simd_lanes
    from tunecache.tvm_layer.target import cache_bytes

    caches = cache_bytes()
    try:
        lanes = _simd_lanes(target)
    except Exception:  # noqa: BLE001 - no vector width known: no penalty
        lanes = 0
    return Limits(lanes, caches.get(1, 32 * 1024), caches.get(2, 1024 * 1024))


def _penalties(space: TiledSpace, limits: Limits) -> list[tuple[str, int, float]]:
    """``(kind, index, cap)`` of the descent's penalties on ``space``: ``"min"`` on a log tile
    (vector width, with a positive ``weight``), ``"max"`` on a feature (a footprint against a
    cache, with a positive ``cache_weight``), ``"tile"`` on a log tile (the sketch's innermost
    factor bound, always)."""
    out = [("tile", int(space.offsets[a] + ax.levels - 1), math.log(ax.max_innermost))
           for a, ax in enumerate(space.axes) if ax.max_innermost > 0]
    vec = space.vec
    if limits.weight > 0 and limits.lanes > 1 and vec is not None and space.axes[vec].extent >= limits.lanes:
        ax = space.axes[vec]
        out.append(("min", int(space.offsets[vec] + ax.levels - 1), math.log(limits.lanes)))
    r_pos = [i for i, c in enumerate(space.structure) if c == "R"] if limits.cache_weight > 0 else []
    if r_pos and 0 < r_pos[0] + 1 < 6 and limits.l2_bytes > 0:
        out.append(("max", footprint_feature(r_pos[0] + 1), math.log(limits.l2_bytes)))
    if r_pos and 0 < r_pos[-1] < 6 and limits.l1_bytes > 0:
        out.append(("max", footprint_feature(r_pos[-1]), math.log(limits.l1_bytes)))
    return out


def _descend(space: TiledSpace, model: CostModel, z0: np.ndarray, categorical: np.ndarray, *, steps: int,
             lr: float, every: int, limits: Limits = Limits()) -> list[dict[int, list[int]]]:
    """Adam from ``z0``; the rounded tiles every ``every`` steps (and at the end)."""
    z = z0.copy()
    m = np.zeros_like(z)
    v = np.zeros_like(z)
    penalties = _penalties(space, limits)
    out = []
    for t in range(1, steps + 1):
        logs, sigma = space.log_tiles(z)
        feats, jac = space.features(logs, categorical)
        _, g_feat = model.input_gradient(feats)
        g_logs = g_feat @ jac
        for kind, at, cap in penalties:
            if kind == "tile" and logs[at] > cap:  # the innermost bound: rounding repairs it anyway
                g_logs[at] += 2.0 * (logs[at] - cap)
            elif kind == "min" and logs[at] < cap:
                g_logs[at] -= 2.0 * limits.weight * (cap - logs[at])
            elif kind == "max" and feats[at] > cap:
                g_logs += 2.0 * limits.cache_weight * (feats[at] - cap) * jac[at]
        g = space.grad_z(sigma, g_logs)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        z -= lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        if t % every == 0 or t == steps:
            out.append(space.round(z))
    return out


def _key(space: int, decisions: dict[int, Any]) -> str:
    """A round's de-duplication key of a sketch's decisions."""
    return f"{space}|{sorted((k, str(v)) for k, v in decisions.items())}"


def _categorical_choices(space: TiledSpace) -> list[tuple[int, int]]:
    """``(site, number of choices)`` of the sketch's categorical sites (unroll bounds)."""
    return [(i, s.n) for i, s in space.skeleton.sites.items() if s.kind == "categorical"]


def _select(state: Any, spaces: list[TiledSpace], pool: list[tuple[float, int, dict[int, Any], str]],
            want: int, diverse: int) -> list[tuple[int, dict[int, Any], Any]]:
    """Materialize a round's candidates from the ranked ``pool``: first, in rank order, the best
    point of each start not yet drawn from, until ``diverse`` are chosen; then the rest by rank.
    Points TVM does not replay, or that were measured before, are skipped."""
    chosen: list[tuple[int, dict[int, Any], Any]] = []
    tried: set[int] = set()
    origins: set[str] = set()
    for first in (True, False):
        for i, (_, si, full, origin) in enumerate(pool):
            if len(chosen) >= (diverse if first else want):
                break
            if i in tried or (first and origin in origins):
                continue
            tried.add(i)
            cand = state.materialize_new(spaces[si].skeleton, full)
            if cand is not None:
                origins.add(origin)
                chosen.append((si, full, cand))
    return chosen


def _parallel_items(space: TiledSpace, decisions: dict[int, Any]) -> int:
    """Iterations of the spatial loops outside the first reduction level: what the parallel
    postprocessor can spread over the cores."""
    first_r = space.structure.find("R")
    items = 1
    for ax in space.axes:
        if ax.spatial and ax.site in decisions:
            items *= math.prod(int(f) for lvl, f in enumerate(decisions[ax.site])
                               if lvl < len(ax.positions) and ax.positions[lvl] < first_r)
    return items


def _parallel_enough(pool: list[tuple[float, int, dict[int, Any], str]], spaces: list[TiledSpace],
                     cores: int) -> list[tuple[float, int, dict[int, Any], str]]:
    """``pool`` without the points whose loops outside the reduction give fewer than ``cores``
    parallel items where their sketch could give that many (all of it if none is left).

    A single-threaded program is measured undisturbed by load on the other core, where a
    parallel one waits for its slowest thread: on a shared 2-core machine a 64-trial search of a
    512^3 matmul kept a program with no parallel loop (3.5 ms as measured), which ran 1.9x slower
    than the 2-thread prediction side by side and 2.8x slower than numpy (session 25).
    """
    if cores < 2:
        return pool
    out = [p for p in pool if _parallel_items(spaces[p[1]], p[2]) >= cores
           or math.prod(ax.extent for ax in spaces[p[1]].axes if ax.spatial) < cores]
    return out or pool


def _seed_candidates(state: Any, seeds: Sequence[Any]) -> list[Any]:
    """Candidates of ``seeds`` (plain trace JSON: the task's predicted program) replayed on the
    task as they are, the open compute locations as :func:`~tunecache.search.narrow.align.open_picks`
    orders them (the block's root where TVM accepts it; a depthwise conv's padding inlined); a
    seed that does not replay is counted in the materializer and skipped."""
    from tunecache.errors import InvalidRecordError
    from tunecache.search.narrow.align import Skeleton, open_picks

    out = []
    for i, trace in enumerate(seeds):
        try:
            sk = state.mat.adapt(Skeleton(-1 - i, trace))
        except (InvalidRecordError, TypeError, ValueError, IndexError):
            state.mat.failed_replay += 1
            continue
        picks = open_picks(state.mat, sk, dict(sk.decisions), 1)
        cand = state.materialize_new(sk, picks[0]) if picks else None
        if cand is not None:
            out.append(cand)
    return out


def _place(cand: Any, spaces: list[TiledSpace], state: Any) -> tuple[int, dict[int, Any]] | None:
    """``(space index, decisions)`` of a seed's candidate as a point of the space whose sketch it
    is (the same instructions, names aside), so its tiles join the descent and the refit; the
    point is marked seen. ``None`` where no space's sketch is its own (a padded row tile's
    literal split, another sketch)."""
    from tunecache.search.narrow.align import align_sites, decisions_key, structure

    mine = structure(cand.skeleton.insts)
    for si, space in enumerate(spaces):
        if structure(space.skeleton.insts) != mine:
            continue
        d = dict(space.skeleton.decisions)
        d.update({a: cand.decisions[b] for b, a in align_sites(cand.skeleton.insts, space.skeleton.insts)
                  if b in cand.decisions})
        if all(ax.site in d for ax in space.axes):
            state.seen.add(decisions_key(space.skeleton.digest, d))
            return si, d
    return None


def gradient_search(
    mod: Any,
    target: Any,
    *,
    builder: Any,
    runner: Any,
    max_trials: int,
    database: Any = None,
    model: CostModel | None = None,
    store_rows: tuple[np.ndarray, np.ndarray] | None = None,
    starts: list[dict[int, Any]] | None = None,
    round_size: int = 16,
    n_starts: int = 8,
    steps: int = 40,
    lr: float = 0.15,
    seed: int = 0,
    progress: Any = None,
    task_name: str = "gradient",
    spaces: list[TiledSpace] | None = None,
    neighbours: Sequence[Tiling] = (),
    limits: Limits | None = None,
    diverse_share: float = DIVERSE_SHARE,
    own_share: float = OWN_SHARE,
    deadline: float | None = None,
    seeds: Sequence[Any] = (),
    remeasure_top: int = 3,
    remeasure_rounds: int = 2,
) -> GradientResult:
    """Tune one task by gradient descent on a differentiable cost model.

    Parameters
    ----------
    mod
        The task's TIR ``IRModule``.
    target
        A ``tvm.target.Target`` (CPU: the sketches must be multi-level tilings).
    builder, runner
        MetaSchedule builder and runner (:func:`~tunecache.tvm_layer.measure.make_builder`).
    max_trials
        Candidates to measure at most.
    database
        A MetaSchedule database every measured candidate is committed to, or ``None``.
    model
        The cost model to start from (e.g. trained on the store); a fresh one if ``None``.
    store_rows
        ``(features, targets)`` of the store's records for refitting beside the task's own.
    starts
        Decisions of stored neighbours to descend from (sites of this task's sketches).
    round_size
        Candidates measured a round (Felix: 16).
    n_starts, steps, lr
        Random starts per sketch and round, Adam steps and step size of each descent.
    seed
        Seeds starts, categorical choices and replays.
    progress
        Called with a ``SearchProgress`` after each round, or ``None``.
    task_name
        Names the task in progress events.
    spaces
        ``tiled_spaces(mod, target)`` when the caller has them already (they read each sketch's
        block with a TVM ``Schedule``).
    neighbours
        Stored programs of other tasks (:func:`~tunecache.search.gradient.training.read_store`):
        the nearest of each sketch's shape are carried to this task and start the first round
        (:func:`~tunecache.search.gradient.starts.neighbour_starts`); the best predicted
        :data:`FORCED_NEIGHBOURS` of them are measured in it.
    limits
        The CPU's limits the descents are penalised past; :func:`host_limits` of ``target`` if
        ``None``.
    diverse_share
        Share of each round measured one per start (the best prediction of each descent, in rank
        order) before the rest of the round goes by rank alone; 0 ranks the whole round.
    own_share
        Least share of the refit's total weight the task's own measurements carry against
        ``store_rows`` (below 1); 0 weighs each of them :data:`OWN_WEIGHT` times a store row.
    deadline
        A ``time.time()`` after which no new round starts (the round in flight finishes; the
        first round always runs): how ``compile``'s and ``warm``'s ``time_budget_s`` reach it.
        ``None``: no deadline.
    seeds
        Programs (plain trace JSON) measured first in the first round whatever the model says:
        the task's predicted program (:func:`~tunecache.search.predict.predicted_trace`), so
        the search ends no worse than it. A seed whose sketch is one of ``spaces`` joins the
        descent's starts and the refit like any measured point.
    remeasure_top, remeasure_rounds
        At the end, the ``remeasure_top`` fastest candidates and the first seed are measured
        ``remeasure_rounds`` more times, interleaved, and the best is re-picked by the median of
        each one's samples: a seed measured once in an unlucky moment is not lost to a program
        it beats (ResNet-50's 14x14 1x1 conv stored a 1.23 ms program whose seed ran 0.77 ms
        against its 1.09 side by side, session 26). ``remeasure_rounds=0`` disables it.

    Returns
    -------
    GradientResult
        The best program and how the search got there.

    Raises
    ------
    ConfigError
        If ``max_trials`` or ``round_size`` is below 1, or the task has no multi-level tiling
        sketch (nothing to descend on: use the evolutionary search).
    """
    from tunecache.search.narrow.search import NarrowedSearch

    if max_trials < 1 or round_size < 1:
        raise ConfigError(f"max_trials and round_size must be >= 1 (got {max_trials}, {round_size})")
    if not 0.0 <= own_share < 1.0 or not 0.0 <= diverse_share <= 1.0:
        raise ConfigError(f"own_share must be in [0, 1) and diverse_share in [0, 1] "
                          f"(got {own_share}, {diverse_share})")
    spaces = tiled_spaces(mod, target) if spaces is None else spaces
    if not spaces:
        raise ConfigError("the task has no multi-level tiling sketch for the gradient search to descend on "
                          "(an elementwise or injective task): tune it with search='evolutionary'")
    t0 = time.perf_counter()
    state = NarrowedSearch(mod, target, builder, runner, database, seed, progress, max_trials, task_name,
                           keep_builds=remeasure_top if remeasure_rounds > 0 else 0)
    try:
        rng = np.random.default_rng(seed)
        pyrng = random.Random(seed)
        model = model if model is not None else CostModel(seed)
        trained = model.trained_on > 0
        own_x: list[np.ndarray] = []
        own_y: list[float] = []
        curve: list[float] = []
        rounds = cold = proposed = 0
        first_seed = None
        model_s = 0.0
        by_space: dict[int, list[tuple[float, dict[int, Any]]]] = {}  # measured (latency, decisions)
        extra_starts = list(starts or [])
        limits = host_limits(target) if limits is None else limits
        from tunecache.search.predict import _cores

        cores = _cores(target)
        from tunecache.interrupt import stop_requested

        while state.trials < max_trials and not stop_requested():  # Ctrl-C: after the round in flight
            if deadline is not None and time.time() >= deadline and rounds > 0:
                break  # the time budget: no new round (the first always runs: a started task gets a program)
            rounds += 1
            t_model = time.perf_counter()
            # (prediction, space, decisions, origin): origin names the start a point descended from
            pool: list[tuple[float, int, dict[int, Any], str]] = []
            carried: list[tuple[float, int, dict[int, Any], str]] = []  # stored neighbours' carried tiles
            seen_round: set[str] = set()
            for si, space in enumerate(spaces):
                base = dict(space.skeleton.decisions)
                cats = _categorical_choices(space)
                begin: list[dict[int, Any]] = []
                best_own = sorted(by_space.get(si, []), key=lambda t: t[0])[:max(2, LOCAL_FROM)]
                begin += [d for _, d in best_own]
                if rounds == 1:
                    begin.append(base)
                    for start in extra_starts:
                        d0 = dict(base)
                        d0.update({k: v for k, v in start.items() if k in space.skeleton.sites})
                        begin.append(d0)
                    for d in neighbour_starts(space, neighbours):
                        begin.append(d)
                        pred = float(model.predict(space.feature_values(d))[0]) if trained else pyrng.random()
                        carried.append((pred, si, d, f"{si}|n{len(carried)}"))
                for _ in range(n_starts):
                    d = dict(base)
                    d.update(space.round(space.random_point(rng)))
                    for site, n in cats:
                        d[site] = pyrng.randrange(n)
                    begin.append(d)
                # One move around the best measured programs (a tile factor between levels, the
                # unroll bound, a compute location): the descent keeps categorical choices fixed.
                local = [nd for _, d in best_own[:LOCAL_FROM] for phase in PHASES
                         for nd in neighbour_decisions(space.skeleton, d, phase)] if trained else []
                for d in local:
                    key = _key(si, d)
                    if key not in seen_round:
                        seen_round.add(key)
                        pool.append((float(model.predict(space.feature_values(d))[0]), si, d, f"{si}|local"))
                for bi, d in enumerate(begin):
                    if not all(ax.site in d for ax in space.axes):
                        continue
                    points = [space.round(space.point(d))]
                    if trained:
                        points += _descend(space, model, space.point(d), space.categorical(d), steps=steps, lr=lr,
                                           every=max(1, steps // 4), limits=limits)
                    for tiles in points:
                        full = dict(d)
                        full.update(tiles)
                        key = _key(si, full)
                        if key in seen_round:
                            continue
                        seen_round.add(key)
                        pred = float(model.predict(space.feature_values(full))[0]) if trained else pyrng.random()
                        pool.append((pred, si, full, f"{si}|{bi}"))
            proposed += len(pool)
            pool.sort(key=lambda t: t[0])
            carried.sort(key=lambda t: t[0])
            # The model's top pick first (the zero-measurement pick), then the forced neighbours;
            # a point twice in the pool is materialized once.
            pool = _parallel_enough(pool[:1] + carried[:FORCED_NEIGHBOURS] + pool[1:], spaces, cores)
            model_s += time.perf_counter() - t_model
            want = min(round_size, max_trials - state.trials)
            seeded = _seed_candidates(state, seeds[:want]) if rounds == 1 else []
            first_seed = seeded[0] if seeded else first_seed
            want -= len(seeded)
            chosen = _select(state, spaces, pool, want, round(want * diverse_share)) if want > 0 else []
            if not chosen and not seeded:
                break  # the space is exhausted (every rounded point seen)
            if not trained:
                cold += 1
            state.measure(seeded + [c for _, _, c in chosen])
            placed = [(p[0], p[1], c) for c in seeded if (p := _place(c, spaces, state)) is not None]
            chosen = placed + chosen
            for si, full, cand in chosen:
                if cand.latency_s is not None:
                    space = spaces[si]
                    by_space.setdefault(si, []).append((cand.latency_s, full))
                    own_x.append(space.feature_values(full))
                    own_y.append(math.log(cand.latency_s) - space.work)
            # best so far after each trial, in measurement order
            for cand in seeded + [c for _, _, c in chosen[len(placed):]]:
                best = min(curve[-1] if curve else math.inf, cand.latency_s if cand.latency_s is not None else math.inf)
                curve.append(best)
            if own_x:  # refit on the store's rows and the task's own
                t_model = time.perf_counter()
                n_store = 0 if store_rows is None else len(store_rows[0])
                w_own = max(OWN_WEIGHT, own_share / (1.0 - own_share) * n_store / len(own_x))
                xs, ys, ws = np.array(own_x), np.array(own_y), np.full(len(own_x), w_own)
                if n_store and store_rows is not None:
                    xs = np.vstack([store_rows[0], xs])
                    ys = np.concatenate([store_rows[1], ys])
                    ws = np.concatenate([np.ones(len(store_rows[0])), ws])
                model.fit(xs, ys, weights=ws, epochs=60 if trained else 200, rescale=not trained, seed=rounds)
                trained = True
                model_s += time.perf_counter() - t_model
        if not stop_requested():
            state.remeasure(remeasure_top, remeasure_rounds, also=first_seed)
        best_cand = state.best
        return GradientResult(
            best_latency_s=None if best_cand is None else best_cand.latency_s,
            best_trace=None if best_cand is None else best_cand.sch.trace.as_json(),
            trials=state.trials,
            valid=state.valid,
            curve=tuple(curve),
            rounds=rounds,
            cold_rounds=cold,
            proposed=proposed,
            failed_replay=state.mat.failed_replay + state.mat.failed_postproc,
            model_seconds=model_s,
            elapsed_s=time.perf_counter() - t0,
            remeasured_latency=state.remeasured_latency(),
        )
    finally:
        state.close()

