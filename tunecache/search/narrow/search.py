"""Narrowed reuse search: tune task alpha starting from the tuned traces of a similar task beta.

This is ETO's reuse-based tuner (Zhao et al., PVLDB 15(2), 2022, Section 5, Algorithm 1)
re-derived for MetaSchedule traces on CPUs:

1. **Round 0 — zero-trial replay.** Beta's best trace is replayed on alpha with its own
   decisions (``SamplePerfectTile`` rescales tilings that no longer divide alpha's extents), the
   target's postprocessors run, and it is measured; beta's next-best traces follow in the same
   round (Selective Tuning's "TopK"). Measured here, this replay alone is the strongest cheap
   baseline (``shared/REUSE_EVIDENCE.md``), so it is always measured first and the result can
   never be worse than it except for measurement noise.
2. **Hierarchical neighbourhood rounds** around the best program so far, one kind of move per
   round, in ETO's order: ``outer`` (move a prime factor between the two outermost tile levels
   of a spatial loop: the parallel items, ETO's BShape), ``inner`` (between inner tile levels and
   the reduction levels: each item's footprint and register tile, ETO's TShape/LShape), then
   ``annotation`` (the neighbouring unroll choice of each ``SampleCategorical`` and other
   ``SampleComputeLocation`` choices, ETO's unroll pragma round). Every move keeps each loop's
   tile product equal to its extent in alpha.
3. Neighbours are de-duplicated (after replay, by the decisions TVM really applied), ranked by a
   cheap analytic cost of their postprocessed TIR (:func:`cpu_cost`; ETO's feature ranges become
   soft penalties, since they mostly do not hold on CPUs), and the best ``round_size`` are
   built and measured.
4. The search stops once a full cycle of the three move kinds has not improved the best by more
   than 1%, or when ``max_trials`` candidates have been measured.

A candidate that fails to replay, postprocess, build or run is counted, never raised.

The moves and the ranking are in :mod:`tunecache.search.narrow.moves`, the alignment of a source
with alpha's sketch and its replay in :mod:`tunecache.search.narrow.align`, and zero-trial reuse
of one trace in :mod:`tunecache.search.narrow.replay`; this module holds the search loop.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.errors import ConfigError, InvalidRecordError
from tunecache.search.narrow.align import (
    OPEN_TRIES,
    Candidate,
    Materializer,
    Skeleton,
    cap_unroll,
    decisions_key,
    open_picks,
)
from tunecache.search.narrow.moves import PHASES, cpu_cost, cuda_cost, fitted_decisions, neighbour_decisions
from tunecache.search.narrow.replay import as_ir_module, trace_of
from tunecache.search.remeasure import Remeasurement
from tunecache.store.records import INVALID_RUN_SECS, decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.tir import first_primfunc

__all__ = ["IMPROVEMENT", "NarrowResult", "NarrowedSearch", "RoundSummary", "narrowed_search"]

#: A round must beat the best by more than this fraction to count as an improvement.
IMPROVEMENT = 0.01
#: MetaSchedule's run time for a failed candidate.
_FAILED_RUN_SECS = 1e10


@dataclass(frozen=True)
class RoundSummary:
    """One measured (or skipped) round of :func:`narrowed_search`.

    Attributes
    ----------
    index
        0 for the replay round, then 1, 2, ...
    phase
        ``"replay"`` or one of :data:`PHASES`.
    proposed
        Distinct new candidates that replayed and postprocessed (before ranking).
    measured
        Candidates built and run this round.
    valid
        Of those, how many built and ran.
    best_latency_s
        Best latency after the round (``None`` while nothing is valid).
    improved
        Whether the round beat the previous best by more than :data:`IMPROVEMENT`.
    """

    index: int
    phase: str
    proposed: int
    measured: int
    valid: int
    best_latency_s: float | None
    improved: bool


@dataclass(frozen=True)
class NarrowResult:
    """What :func:`narrowed_search` found.

    Attributes
    ----------
    best_trace
        The best program's full trace as plain JSON ``[instructions, decisions]``, its
        postprocessing included (what MetaSchedule stores in a ``TuningRecord``); ``None`` when
        no candidate built and ran.
    best_latency_s
        Its latency: the median of its measurements (the search's one plus the final
        re-measurements of the fastest few candidates).
    trials
        Candidates built and run (or tried to), at most ``max_trials``.
    valid_trials
        Of those, the ones that built and ran.
    seconds
        Wall time of the whole search.
    zero_trial_latency_s
        Latency of the replay of the first source that replayed (beta's best unless it failed),
        measured in round 0 (and re-measured with the others if it was among the fastest):
        what zero-trial reuse would have served. ``best_latency_s <= zero_trial_latency_s``.
    remeasured
        Extra measurements taken by the final re-measurement (not counted as trials).
    remeasured_latency
        ``(trial, median_s, cv)`` of each candidate the final re-measurement measured again:
        its place among the trials (the order they were committed to ``database``) and the
        median and coefficient of variation of all its samples. The caller may make these the
        records' ranking latencies (``Store.set_latency``): a store ranks by one measurement
        otherwise.
    rebuilt
        Candidates built a second time for the final re-measurement: the builds of the
        ``remeasure_top`` fastest are kept, but one that moves up when a faster one's median
        turns out slower was not.
    best_source
        Index (into ``sources``) of the trace the best program descends from.
    source_valid
        Valid measured candidates descending from each source, in the order of ``sources``.
    failed_replay, failed_postproc, failed_build, failed_run
        Candidates lost at each stage (replay and postprocessing failures cost no trial).
    history
        One :class:`RoundSummary` per round.
    """

    best_trace: list[Any] | None
    best_latency_s: float | None
    trials: int
    valid_trials: int
    seconds: float
    zero_trial_latency_s: float | None
    best_source: int | None
    source_valid: tuple[int, ...]
    failed_replay: int
    failed_postproc: int
    failed_build: int
    failed_run: int
    history: tuple[RoundSummary, ...]
    remeasured: int = 0
    remeasured_latency: tuple[tuple[int, float, float], ...] = ()
    rebuilt: int = 0


def _simd_lanes(target: Any, dtype_bits: int = 32) -> int:
    from tvm.target import codegen

    width = 16
    for feature, bytes_ in (("avx512f", 64), ("avx2", 32), ("avx", 32)):
        try:
            if codegen.target_has_features(feature, target):
                width = bytes_
                break
        except Exception:  # noqa: BLE001 - not an x86 target
            break
    return max(1, width * 8 // dtype_bits)


def _median(run_secs: Any) -> float:
    return float(statistics.median(float(x) for x in run_secs))


class NarrowedSearch:
    """The state of one :func:`narrowed_search`: the candidates seen and measured, the best.

    Measures candidates with the given builder and runner, commits each to ``database`` (when
    given), keeps the counts of :class:`NarrowResult` and sends a progress event per round.
    """

    def __init__(self, mod: Any, target: Any, builder: Any, runner: Any, database: Any,
                 seed: int, progress: Any, max_trials: int, task_name: str, keep_builds: int = 0,
                 max_unroll: int | None = None) -> None:
        load_tvm(str(target.kind.name))
        from tvm.s_tir import meta_schedule as ms

        self.ms = ms
        self.mod = mod
        self.target = target
        self.builder = builder
        self.runner = runner
        self.database = database
        self.progress = progress
        self.max_trials = max_trials
        self.task_name = task_name
        self.mat = Materializer(mod, target, seed)
        self.rng = random.Random(seed)
        _first_prim_func(mod)  # a ConfigError unless the module holds the task's PrimFunc
        self.workload = database.commit_workload(mod) if database is not None else None
        self.device = "cuda" if self.mat.is_cuda else "cpu"
        self.cores = int(target.attrs.get("num-cores", os.cpu_count() or 1)) if not self.mat.is_cuda else 1
        self.lanes = _simd_lanes(target) if not self.mat.is_cuda else 1
        self.seen: set[str] = set()
        self.trials = 0
        self.valid = 0
        self.failed_build = 0
        self.failed_run = 0
        self.source_valid: dict[int, int] = {}
        self.measured_valid: list[Candidate] = []
        self.remeasured = 0
        self.rebuilt = 0
        self.best: Candidate | None = None
        self.start = time.perf_counter()
        # The builds of the ``keep_builds`` fastest candidates and of the first that ran (the
        # zero-trial replay), kept until ``close()``: the final re-measurement runs them again
        # without building them again (LLVM takes 0.1-4 s a candidate here). 0 keeps none.
        self.keep_builds = keep_builds
        self.artifacts: dict[int, str] = {}
        self.first_valid: Candidate | None = None
        self.max_unroll = max_unroll

    # -- measuring ---------------------------------------------------------------------------
    def _args_info(self, cand: Candidate) -> Any:
        """The candidate's own arguments: a schedule that re-lays a weight out (``RewriteLayout``)
        takes it in the new layout once the builder removes the re-layout block."""
        return self.ms.arg_info.ArgInfo.from_entry_func(cand.sch.mod, remove_preproc=True)

    def measure(self, cands: list[Candidate]) -> int:
        """Build and run ``cands``; update the best; return how many were valid."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        if not cands:
            return 0
        built = self.builder.build([BuilderInput(c.sch.mod, self.target) for c in cands])
        run_idx = [i for i, b in enumerate(built) if b.error_msg is None and b.artifact_path]
        run_secs: dict[int, list[float] | None] = {i: None for i in range(len(cands))}
        if run_idx:
            futures = self.runner.run(
                [RunnerInput(str(built[i].artifact_path), self.device, self._args_info(cands[i])) for i in run_idx]
            )
            for i, fut in zip(run_idx, futures, strict=False):
                res = fut.result()
                if res.error_msg is None and res.run_secs is not None:
                    secs = [float(x) for x in res.run_secs]
                    if secs and max(secs) < INVALID_RUN_SECS:
                        run_secs[i] = secs
                        continue
                self.failed_run += 1
        for i, b in enumerate(built):
            if b.error_msg is not None or not b.artifact_path:
                self.failed_build += 1
            elif run_secs[i] is not None and self.keep_builds > 0:
                self.artifacts[id(cands[i])] = str(b.artifact_path)
            else:
                _remove_artifact(str(b.artifact_path))
        valid = 0
        for i, cand in enumerate(cands):
            cand.trial = self.trials
            self.trials += 1
            cand_secs = run_secs[i]
            if cand_secs is not None:
                valid += 1
                src = cand.skeleton.source
                self.source_valid[src] = self.source_valid.get(src, 0) + 1
                cand.samples.append(_median(cand_secs))
                cand.latency_s = cand.samples[0]
                self.measured_valid.append(cand)
                if self.first_valid is None:
                    self.first_valid = cand
                if self.best is None or cand.latency_s < (self.best.latency_s or math.inf):
                    self.best = cand
            if self.database is not None:
                self.database.commit_tuning_record(
                    self.ms.database.TuningRecord(
                        cand.sch.trace,
                        self.workload,
                        cand_secs if cand_secs is not None else [_FAILED_RUN_SECS],
                        self.target,
                        self._args_info(cand),
                    )
                )
        self.valid += valid
        self._prune_builds()
        if self.progress is not None:
            from tunecache.search.full.results import SearchProgress

            self.progress(
                SearchProgress(
                    task_name=self.task_name,
                    task_trials=self.trials,
                    total_trials=self.trials,
                    max_trials=self.max_trials,
                    elapsed_s=time.perf_counter() - self.start,
                    best_latency_s=None if self.best is None else self.best.latency_s,
                )
            )
        return valid

    def remeasure(self, top_k: int, rounds: int, also: Candidate | None = None) -> None:
        """Measure the ``top_k`` fastest candidates (and ``also``) ``rounds`` more times,
        interleaved, and re-pick the best by the median of all its measurements (the minimum of
        many single noisy measurements is biased towards lucky ones).

        A candidate whose median turns out slower drops down, and one measured once may then rank
        among the ``top_k``: passes repeat until the ``top_k`` fastest have all been re-measured
        (or failed to be), as :func:`~tunecache.search.remeasure.remeasure_best` does for a store,
        so a single lucky measurement never wins over re-measured medians.
        """
        if rounds < 1:
            return
        done: set[int] = set()
        top = sorted(self.measured_valid, key=lambda c: c.latency_s or math.inf)[:top_k]
        if also is not None and also.latency_s is not None and all(c is not also for c in top):
            top.append(also)
        if len(top) < 2:
            return
        while True:
            todo = [c for c in top if id(c) not in done]
            if not todo:
                break
            self._remeasure_pass(todo, rounds)
            done.update(id(c) for c in todo)
            top = sorted(self.measured_valid, key=lambda c: c.latency_s or math.inf)[:top_k]
        self.best = min(self.measured_valid, key=lambda c: c.latency_s or math.inf)

    def remeasured_latency(self) -> tuple[tuple[int, float, float], ...]:
        """``(trial, median_s, cv)`` of every candidate measured more than once
        (:meth:`remeasure`): what the caller makes the committed records' ranking latencies."""
        out = []
        for c in self.measured_valid:
            if c.trial is not None and len(c.samples) > 1:
                rm = Remeasurement.from_samples(c.samples)
                out.append((c.trial, rm.median_s, rm.cv))
        return tuple(out)

    def _remeasure_pass(self, cands: list[Candidate], rounds: int) -> None:
        """Run ``cands`` ``rounds`` times, interleaved (building those whose build was not kept),
        and make each one's latency the median of all its samples."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        unbuilt = [c for c in cands if id(c) not in self.artifacts]  # builds not kept (keep_builds < top_k)
        if unbuilt:
            self.rebuilt += len(unbuilt)
            for c, b in zip(unbuilt, self.builder.build([BuilderInput(c.sch.mod, self.target) for c in unbuilt]),
                            strict=False):
                if b.error_msg is None and b.artifact_path:
                    self.artifacts[id(c)] = str(b.artifact_path)
        ok = [(c, self.artifacts[id(c)]) for c in cands if id(c) in self.artifacts]
        for _ in range(rounds if ok else 0):
            futures = self.runner.run([RunnerInput(path, self.device, self._args_info(c)) for c, path in ok])
            for (cand, _), fut in zip(ok, futures, strict=False):
                res = fut.result()
                if res.error_msg is None and res.run_secs is not None:
                    secs = [float(x) for x in res.run_secs]
                    if secs and max(secs) < INVALID_RUN_SECS:
                        cand.samples.append(_median(secs))
                        self.remeasured += 1
        for cand in cands:
            cand.latency_s = float(statistics.median(cand.samples))

    def _prune_builds(self) -> None:
        """Delete the kept builds of candidates no longer among the ``keep_builds`` fastest."""
        if not self.artifacts:
            return
        fastest = sorted(self.measured_valid, key=lambda c: c.latency_s or math.inf)[: self.keep_builds]
        wanted = {id(c) for c in fastest} | ({id(self.first_valid)} if self.first_valid is not None else set())
        for key in [k for k in self.artifacts if k not in wanted]:
            _remove_artifact(self.artifacts.pop(key))

    def close(self) -> None:
        """Delete the built candidates kept for re-measuring."""
        for path in self.artifacts.values():
            _remove_artifact(path)
        self.artifacts.clear()

    # -- proposing ---------------------------------------------------------------------------
    def materialize_new(self, skeleton: Skeleton, decisions: dict[int, Any]) -> Candidate | None:
        """Materialize ``skeleton`` with ``decisions`` unless this search has seen it, as asked
        or as TVM applied it; ``None`` for a repeat or a failed replay or postprocess. Unroll
        choices above ``max_unroll`` (when set) are lowered first (:func:`cap_unroll`)."""
        if self.max_unroll is not None:
            decisions = cap_unroll(skeleton, decisions, self.max_unroll)
        req = decisions_key(skeleton.digest, decisions)
        if req in self.seen:
            return None
        self.seen.add(req)
        cand = self.mat.materialize(skeleton, decisions)
        if cand is None:
            return None
        applied = decisions_key(skeleton.digest, cand.decisions)
        if applied != req:
            if applied in self.seen:
                return None
            self.seen.add(applied)
        return cand

    def rank(self, cands: list[Candidate]) -> list[Candidate]:
        """``cands`` cheapest first by the analytic cost near the best so far (seeded ties)."""
        ref = self.best.features if self.best is not None else None
        for c in cands:
            if c.features is None:
                c.cost = math.inf
            elif self.mat.is_cuda:
                c.cost = cuda_cost(c.features, ref)
            else:
                c.cost = cpu_cost(c.features, ref, cores=self.cores, simd_lanes=self.lanes)
        ties = {id(c): self.rng.random() for c in cands}
        return sorted(cands, key=lambda c: (c.cost, ties[id(c)]))


def _remove_artifact(path: str) -> None:
    """Delete a built candidate: the builder gives each its own directory."""
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def _first_prim_func(mod: Any) -> Any:
    try:
        return first_primfunc(mod)
    except ValueError:
        raise ConfigError("narrowed_search needs a module holding one PrimFunc (the task)") from None


def _validate(sources: Sequence[Any], max_trials: int, round_size: int, first_round: int | None = None) -> None:
    if first_round is not None and first_round < 1:
        raise ConfigError(f"first_round must be >= 1, got {first_round!r}")
    if not sources:
        raise ConfigError("narrowed_search needs at least one source trace; got none")
    if max_trials < 1:
        raise ConfigError(f"max_trials must be >= 1, got {max_trials!r}")
    if round_size < 1:
        raise ConfigError(f"round_size must be >= 1, got {round_size!r}")


def narrowed_search(
    sources: Sequence[Any],
    mod: Any,
    target: Any,
    *,
    builder: Any,
    runner: Any,
    max_trials: int = 32,
    round_size: int = 8,
    seed: int = 0,
    database: Any = None,
    progress: Callable[[Any], None] | None = None,
    task_name: str = "narrowed",
    remeasure_top: int = 3,
    remeasure_rounds: int = 2,
    max_unroll: int | None = None,
    enough: Callable[[float], bool] | None = None,
    first_round: int | None = None,
) -> NarrowResult:
    """Tune ``mod`` (task alpha) from the tuned traces of a similar task beta.

    Parameters
    ----------
    sources
        Beta's programs, best first: store :class:`~tunecache.store.records.Record` values,
        MetaSchedule ``TuningRecord`` / ``Trace`` objects, or trace JSON
        (``[instructions, decisions]``). A source that does not decode or replay is counted in
        ``failed_replay`` and skipped.
    mod
        Alpha's TIR ``IRModule`` (or ``PrimFunc``).
    target
        A ``tvm.target.Target``.
    builder, runner
        MetaSchedule builder and runner, e.g.
        :func:`~tunecache.tvm_layer.measure.make_builder` and
        :func:`~tunecache.tvm_layer.measure.make_runner` (the caller closes them).
    max_trials
        Most candidates built and measured, round 0 included.
    round_size
        Most candidates measured per round (round 0 replays up to this many sources).
    seed
        Seeds the replay schedules and the tie-breaks between equally ranked neighbours.
    database
        A MetaSchedule ``Database``; when given, every measured candidate is committed to it
        (failures with run time ``1e10``, as MetaSchedule does), under
        ``database.commit_workload(mod)``.
    progress
        Called with a :class:`~tunecache.search.full.SearchProgress` after every round.
    task_name
        Name used in progress events.
    remeasure_top, remeasure_rounds
        At the end, the ``remeasure_top`` fastest candidates and the zero-trial replay are
        measured ``remeasure_rounds`` more times, interleaved, and the best is re-picked by the
        median of each one's measurements (these re-measurements are not trials).
        ``remeasure_rounds=0`` disables it.
    max_unroll
        When given, every candidate's unroll choices (``auto_unroll_max_step``) are at most this
        many steps: a source's deeper unroll is lowered to the deepest choice within it
        (:func:`~tunecache.search.narrow.align.cap_unroll`). LLVM's time grows with the unroll
        depth; a caller that cannot afford long builds (a task worth little of its model) sets it.
    enough
        When given, called with round 0's best latency (seconds): ``True`` ends the search there,
        with no neighbourhood rounds (a task worth little whose replay is already good enough).
    first_round
        Most candidates of round 0 (default ``round_size``): one per source with
        ``len(sources)``, no extra compute locations or fitted tiles.

    Returns
    -------
    NarrowResult

    Raises
    ------
    ConfigError
        If ``sources`` is empty, ``max_trials``, ``round_size`` or ``first_round`` is below 1,
        or ``mod`` has no PrimFunc.

    Examples
    --------
    >>> res = narrowed_search([beta_best.trace], alpha_mod, target,
    ...                       builder=builder, runner=runner, max_trials=16)  # doctest: +SKIP
    >>> res.best_latency_s <= res.zero_trial_latency_s                         # doctest: +SKIP
    True
    """
    _validate(sources, max_trials, round_size, first_round)
    mod = as_ir_module(mod)
    search = NarrowedSearch(mod, target, builder, runner, database, int(seed), progress, max_trials, task_name,
                            keep_builds=remeasure_top if remeasure_rounds > 0 else 0, max_unroll=max_unroll)
    try:
        return _search(search, sources, max_trials, round_size, remeasure_top, remeasure_rounds, enough,
                       first_round)
    finally:
        search.close()


def _search(search: NarrowedSearch, sources: Sequence[Any], max_trials: int, round_size: int, remeasure_top: int,
            remeasure_rounds: int, enough: Callable[[float], bool] | None = None,
            first_round: int | None = None) -> NarrowResult:
    """The rounds of :func:`narrowed_search` (its docstring) on ``search``."""
    history: list[RoundSummary] = []
    mat = search.mat

    # Round 0: replay the sources with their own decisions, best first.
    skeletons: list[Skeleton] = []
    for i, src in enumerate(sources):
        try:
            skeletons.append(mat.adapt(Skeleton(i, trace_of(src))))
        except (InvalidRecordError, TypeError, ValueError, IndexError):
            mat.failed_replay += 1
    first: list[Candidate] = []
    limit = min(round_size if first_round is None else first_round, max_trials)
    for at, sk in enumerate(skeletons):
        if len(first) >= limit:
            break
        # Every later source keeps a place for its own replay (the task's predicted program comes
        # last: a source's extra picks once took all of round 0 from it).
        room = max(1, limit - len(first) - (len(skeletons) - at - 1))
        # Sites beta had no decision for get a few compute locations (the best source's replay)
        # or the first of them (the other sources).
        picks = open_picks(mat, sk, dict(sk.decisions), OPEN_TRIES if not first else 1)
        cands = [c for c in (search.materialize_new(sk, d) for d in picks[:room]) if c is not None]
        if not cands:
            continue
        first.extend(cands)
        # Where TVM's rescaling degenerated an inner tile (it does not divide alpha's extent),
        # also try the nearest perfect tiling to what beta asked for.
        fitted = fitted_decisions(sk, cands[0].decisions)
        if fitted is not None and len(cands) < room:
            fit = search.materialize_new(sk, fitted)
            if fit is not None:
                first.append(fit)
    valid = search.measure(first)
    zero_cand = search.first_valid  # round 0 is the first measured: its first candidate that ran
    history.append(RoundSummary(0, "replay", len(first), len(first), valid,
                                None if search.best is None else search.best.latency_s, False))

    # Rounds of hierarchical neighbourhoods around the best so far.
    stale, step = 0, 0
    if enough is not None and search.best is not None and search.best.latency_s is not None \
            and enough(search.best.latency_s):
        stale = len(PHASES)  # round 0 is good enough: no rounds
    while search.best is not None and search.trials < max_trials and stale < len(PHASES):
        phase = PHASES[step % len(PHASES)]
        step += 1
        best = search.best
        assert best.latency_s is not None
        cands = []
        for d in neighbour_decisions(best.skeleton, best.decisions, phase):
            c = search.materialize_new(best.skeleton, d)
            if c is not None:
                cands.append(c)
        picked = search.rank(cands)[: min(round_size, max_trials - search.trials)]
        before = best.latency_s
        valid = search.measure(picked)
        after = search.best.latency_s
        improved = after is not None and after < before * (1.0 - IMPROVEMENT)
        stale = 0 if improved else stale + 1
        history.append(RoundSummary(len(history), phase, len(cands), len(picked), valid, after, improved))

    # The zero-trial replay is re-measured with the top candidates: the search then keeps
    # beta's program unless another beat it in repeated measurements, not in one lucky one.
    search.remeasure(remeasure_top, remeasure_rounds, also=zero_cand)
    zero = None if zero_cand is None else zero_cand.latency_s
    winner = search.best
    source_valid = [search.source_valid.get(i, 0) for i in range(len(sources))]
    return NarrowResult(
        best_trace=None if winner is None else decode_trace(winner.sch.trace.as_json()),
        best_latency_s=None if winner is None else winner.latency_s,
        trials=search.trials,
        valid_trials=search.valid,
        seconds=time.perf_counter() - search.start,
        zero_trial_latency_s=zero,
        best_source=None if winner is None else winner.skeleton.source,
        source_valid=tuple(source_valid),
        failed_replay=mat.failed_replay,
        failed_postproc=mat.failed_postproc,
        failed_build=search.failed_build,
        failed_run=search.failed_run,
        history=tuple(history),
        remeasured=search.remeasured,
        remeasured_latency=search.remeasured_latency(),
        rebuilt=search.rebuilt,
    )
