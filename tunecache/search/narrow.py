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
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunecache.errors import ConfigError, InvalidRecordError
from tunecache.tvm_layer.features import CpuFeatures, CudaFeatures, cpu_features, cuda_features
from tunecache.store.records import INVALID_RUN_SECS, decode_trace
from tunecache.tvm_layer import load_tvm

__all__ = [
    "PHASES",
    "NarrowResult",
    "RoundSummary",
    "cpu_cost",
    "fit_tiles",
    "narrowed_search",
    "propose_neighbours",
    "replay_on",
    "sketch_on",
    "tile_moves",
]

#: Kinds of moves, in the order the search cycles through them (ETO: B, then T/L, then unroll).
PHASES: tuple[str, ...] = ("outer", "inner", "annotation")
#: A round must beat the best by more than this fraction to count as an improvement.
IMPROVEMENT = 0.01
#: Round 0 measures the best source's replay with this many compute locations for the sites it
#: had no decision for (a ``pad_temp`` the source's sketch did not have): :func:`_open_picks`.
OPEN_TRIES = 3
#: MetaSchedule's run time for a failed candidate.
_FAILED_RUN_SECS = 1e10


# ---------------------------------------------------------------------------------------------
# Results


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


# ---------------------------------------------------------------------------------------------
# Pure pieces: tile moves and the analytic cost.


def _prime_factors(n: int) -> list[int]:
    out: list[int] = []
    d = 2
    while d * d <= n:
        if n % d == 0:
            out.append(d)
            while n % d == 0:
                n //= d
        d += 1
    if n > 1:
        out.append(n)
    return out


def tile_moves(
    tiles: Sequence[int],
    pairs: Iterable[tuple[int, int]],
    max_innermost_factor: int = -1,
) -> list[tuple[int, ...]]:
    """Return the tilings one prime-factor move away from ``tiles``.

    A move divides one level of each pair ``(i, j)`` by a prime ``p`` that divides it and
    multiplies the other level by ``p``, so the product (the loop's extent) never changes.

    Parameters
    ----------
    tiles
        A perfect tiling, outermost level first (a ``SamplePerfectTile`` decision).
    pairs
        Pairs of level indices to move factors between (e.g. ``[(0, 1)]``).
    max_innermost_factor
        Largest allowed innermost tile (the instruction's attribute); ``<= 0`` for no limit.

    Returns
    -------
    list[tuple[int, ...]]
        Distinct new tilings, in a deterministic order, ``tiles`` itself excluded.

    Examples
    --------
    >>> tile_moves([4, 2, 2, 8], [(0, 1)])
    [(2, 4, 2, 8), (8, 1, 2, 8)]
    """
    base = tuple(int(t) for t in tiles)
    seen = {base}
    out: list[tuple[int, ...]] = []
    last = len(base) - 1
    for i, j in pairs:
        if not (0 <= i < len(base) and 0 <= j < len(base)) or i == j:
            continue
        for src, dst in ((i, j), (j, i)):
            for p in _prime_factors(base[src]):
                new = list(base)
                new[src] //= p
                new[dst] *= p
                if max_innermost_factor > 0 and new[last] > max_innermost_factor:
                    continue
                t = tuple(new)
                if t not in seen:
                    seen.add(t)
                    out.append(t)
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def fit_tiles(requested: Sequence[int], extent: int, max_innermost_factor: int = -1) -> tuple[int, ...]:
    """Return the perfect tiling of ``extent`` nearest to ``requested``, level by level.

    TVM's own replay keeps an inner tile only if it divides what is left of the loop and
    otherwise gives that level *everything* left (a 28-long loop with requested tiles
    ``[2, 4, 2, 8]`` replays as ``[1, 1, 1, 28]``, ignoring ``max_innermost_factor``). This
    instead picks, from the innermost level outwards, the divisor of what is left closest in
    log-scale to the requested tile (the smaller one on ties; the innermost at most
    ``max_innermost_factor`` when that is positive); the outermost level takes the rest.

    Examples
    --------
    >>> fit_tiles([2, 4, 2, 8], 28)
    (1, 2, 2, 7)
    >>> fit_tiles([2, 4, 2, 8], 512)
    (8, 4, 2, 8)
    """
    left = int(extent)
    out = [1] * len(requested)
    for level in range(len(requested) - 1, 0, -1):
        want = max(1, int(requested[level]))
        options = _divisors(left)
        if level == len(requested) - 1 and max_innermost_factor > 0:
            options = [d for d in options if d <= max_innermost_factor] or [1]
        best = min(options, key=lambda d: (abs(math.log(d / want)), d))
        out[level] = best
        left //= best
    out[0] = left
    return tuple(out)


def cpu_cost(
    features: CpuFeatures,
    reference: CpuFeatures | None,
    *,
    cores: int,
    simd_lanes: int,
    l1_bytes: int = 32 * 1024,
    l2_bytes: int = 512 * 1024,
) -> float:
    """A cheap score of a CPU candidate (lower is better), used only to rank neighbours.

    Multiplies penalties for: parallel items that do not split evenly over ``cores`` (or fewer
    items than cores), an innermost vector shorter than (or not a multiple of) the SIMD width, a
    per-item working set beyond L2 and an inner tile beyond L1, and, as ETO's feature ranges
    turned into a soft trust region, the distance in log2 of the parallel extent and the two
    footprints from ``reference`` (the best program so far).

    Examples
    --------
    >>> f = CpuFeatures(32, 8, 64, 1024, 32768, 100_000, 8_000, "C")
    >>> cpu_cost(f, f, cores=2, simd_lanes=8)
    1.0
    """
    cost = 1.0
    p = max(1, features.parallel_extent)
    cost *= math.ceil(p / cores) * cores / p
    lanes = max(1, features.vector_lanes)
    if lanes < simd_lanes:
        cost *= 1.0 + 0.5 * (1.0 - lanes / simd_lanes)
    elif lanes % simd_lanes:
        cost *= 1.15
    if features.item_footprint_bytes > l2_bytes:
        cost *= 1.0 + 0.2 * math.log2(features.item_footprint_bytes / l2_bytes)
    if features.inner_footprint_bytes > l1_bytes:
        cost *= 1.0 + 0.2 * math.log2(features.inner_footprint_bytes / l1_bytes)
    if reference is not None:
        dist = 0.0
        for a, b in (
            (features.parallel_extent, reference.parallel_extent),
            (features.item_footprint_bytes, reference.item_footprint_bytes),
            (features.inner_footprint_bytes, reference.inner_footprint_bytes),
        ):
            dist += abs(math.log2(max(1, a) / max(1, b)))
        cost *= 1.0 + 0.05 * dist
    return cost


def _cuda_cost(features: CudaFeatures, reference: CudaFeatures | None) -> float:
    """Rank CUDA neighbours: stay near the reference's blocks, threads and shared memory."""
    if reference is None:
        return 1.0
    dist = 0.0
    for a, b in (
        (features.thread_blocks, reference.thread_blocks),
        (features.threads_per_block, reference.threads_per_block),
        (features.shared_bytes_per_block, reference.shared_bytes_per_block),
    ):
        dist += abs(math.log2(max(1, a) / max(1, b)))
    return 1.0 + 0.1 * dist


# ---------------------------------------------------------------------------------------------
# Skeletons (a source trace without its postprocessing) and candidates.


@dataclass(frozen=True)
class _Site:
    """A sampling instruction of a skeleton."""

    index: int
    kind: str  # "tile", "categorical", "compute_location"
    role: str  # tiles: "spatial", "reduction", "other"
    n: int = 0  # tile levels, or categorical choices
    max_innermost: int = -1


class _Skeleton:
    """One source trace cut at ``EnterPostproc``, with its sampling sites."""

    def __init__(self, source: int, trace: Any) -> None:
        insts, decisions = decode_trace(trace)
        cut = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
        self.source = source
        self.insts: list[Any] = insts[:cut]
        self.decisions: dict[int, Any] = {int(i): v for i, v in decisions if i < cut}
        self.digest = hashlib.sha256(
            json.dumps(self.insts, sort_keys=True).encode()
        ).hexdigest()[:16]
        structure = ""
        for inst in self.insts:
            if inst[0] == "Annotate" and inst[2] == ["meta_schedule.tiling_structure"]:
                structure = str(inst[1][1]).strip('"')
        n_s, n_r = structure.count("S"), structure.count("R")
        self.sites: dict[int, _Site] = {}
        for i, (kind, _inputs, attrs, _outputs) in enumerate(self.insts):
            if kind == "SamplePerfectTile":
                n, mif = int(attrs[0]), int(attrs[1])
                role = "spatial" if n == n_s else "reduction" if n == n_r else "other"
                self.sites[i] = _Site(i, "tile", role, n, mif)
            elif kind == "SampleCategorical":
                self.sites[i] = _Site(i, "categorical", "", len(attrs[0]))
            elif kind == "SampleComputeLocation":
                self.sites[i] = _Site(i, "compute_location", "")

    def trace_json(self, decisions: dict[int, Any]) -> list[Any]:
        return [self.insts, [[i, decisions[i]] for i in sorted(decisions)]]

    @property
    def open_sites(self) -> list[int]:
        """Compute-location sites with no decision from the source (a ``pad_temp`` the source's
        sketch did not have): :func:`_open_picks` chooses their locations."""
        return [i for i, site in sorted(self.sites.items()) if site.kind == "compute_location" and i not in self.decisions]


_GET_BLOCK = ("GetSBlock", "GetBlock")


def _structure(insts: Sequence[Any]) -> list[str]:
    """A sketch's instructions without block names, one string each (for comparing sketches).

    Queries whose result nothing uses (``GetConsumers`` with no outputs: a design-space sketch
    has them, a tuned trace has them simplified away) are left out.
    """
    return [json.dumps([kind, inputs, [] if kind in _GET_BLOCK else attrs, outputs])
            for kind, inputs, attrs, outputs in insts if outputs or not kind.startswith("Get")]


def _block_order(insts: Sequence[Any]) -> list[str]:
    """Distinct block names of a trace's ``GetSBlock`` instructions, in first-use order."""
    out: list[str] = []
    for kind, _inputs, attrs, _outputs in insts:
        if kind in _GET_BLOCK and attrs and str(attrs[0]) not in out:
            out.append(str(attrs[0]))
    return out


def _map_blocks(names: Sequence[str], order: Sequence[str]) -> dict[str, str] | None:
    """Map beta's block names to alpha's: ``{}`` if alpha has them all, ``None`` if no mapping.

    Same number of blocks: position by position (same sketch, same visiting order). Otherwise
    (e.g. alpha has one more epilogue block that beta's trace never touched) each missing name
    goes to the first unused alpha name it is a prefix of, or that is a prefix of it
    (``T_sub`` -> ``T_subtract``).
    """
    missing = [n for n in names if n not in order]
    if not missing:
        return {}
    if len(order) == len(names):
        return {b: a for b, a in zip(names, order) if b != a}
    free = [a for a in order if a not in names]
    mapping = {}
    for n in missing:
        match = next((a for a in free if a.startswith(n) or n.startswith(a)), None)
        if match is None:
            return None
        mapping[n] = match
        free.remove(match)
    return mapping


def _align_sites(beta: Sequence[Any], alpha: Sequence[Any]) -> list[tuple[int, int]]:
    """Pairs ``(beta index, alpha index)`` of the sampling instructions two sketches share.

    The two lists of sampling instructions (kind and structural attributes:
    :func:`~tunecache.tvm_layer.sketch.site_lines`) are matched in order; an instruction one sketch
    has and the other lacks (a compute location) is left out.
    """
    from tunecache.tvm_layer.sketch import SAMPLE_KINDS, site_lines

    b_sites = [i for i, inst in enumerate(beta) if inst[0] in SAMPLE_KINDS]
    a_sites = [i for i, inst in enumerate(alpha) if inst[0] in SAMPLE_KINDS]
    matcher = difflib.SequenceMatcher(None, site_lines(beta), site_lines(alpha), autojunk=False)
    return [(b_sites[blk.a + k], a_sites[blk.b + k]) for blk in matcher.get_matching_blocks() for k in range(blk.size)]


def _key(digest: str, decisions: dict[int, Any]) -> str:
    return digest + json.dumps(sorted(decisions.items()))


@dataclass
class _Candidate:
    skeleton: _Skeleton
    decisions: dict[int, Any]  # as TVM applied them on alpha
    sch: Any
    features: Any
    cost: float = 0.0
    latency_s: float | None = None
    samples: list[float] = field(default_factory=list)


class _Materializer:
    """Replays skeletons with given decisions on alpha and runs the target's postprocessors."""

    def __init__(self, mod: Any, target: Any, seed: int) -> None:
        load_tvm(str(target.kind.name))
        from tvm.s_tir import meta_schedule as ms

        self.mod = mod
        self.target = target
        self.seed = seed % (2**31 - 1) + 1
        ctx = ms.TuneContext(
            mod=mod,
            target=target,
            space_generator=ms.space_generator.PostOrderApply(
                sch_rules=[], postprocs="from-target", mutator_probs={}
            ),
            task_name="narrowed",
        )
        self.postprocs = list(ctx.space_generator.postprocs)
        self.is_cuda = str(target.kind.name) == "cuda"
        self.failed_replay = 0
        self.failed_postproc = 0
        self._alpha_sketches: list[list[Any]] | None = None
        self._renamed: dict[str, list[Any]] = {}

    def alpha_sketches(self) -> list[list[Any]]:
        """The instructions of each of alpha's design-space sketches (trace JSON)."""
        if self._alpha_sketches is None:
            from tunecache.tvm_layer.sketch import _design_space

            try:
                self._alpha_sketches = [decode_trace(s.trace.as_json())[0] for s in _design_space(self.mod, self.target)]
            except Exception:  # noqa: BLE001 - no design space: sources are replayed as they are
                self._alpha_sketches = []
        return self._alpha_sketches

    def alpha_block_orders(self) -> list[list[str]]:
        """Block names of alpha in the order each of its design-space sketches first gets them."""
        return [_block_order(insts) for insts in self.alpha_sketches()]

    def adapt(self, skeleton: _Skeleton) -> _Skeleton:
        """``skeleton`` in a form that replays on alpha.

        Itself, when one of alpha's sketches has its structure (block names aside: see
        :meth:`insts_for_alpha`). Otherwise, when beta's sketch differs from alpha's only in
        instructions that sample nothing (alpha has a fused residual ``add``/``relu`` to inline
        that beta had not, or the other way round) or in compute locations one of them samples
        and the other does not (:data:`~tunecache.tvm_layer.sketch.OPEN_KINDS`: a padded 3x3 conv's
        ``pad_temp``), alpha's own sketch that samples the same decisions (the closest in
        structure when several do; one with exactly beta's sampling instructions first) carrying
        beta's decisions. Sampling instructions are matched in order (:func:`_align_sites`);
        alpha's sites beta had no decision for stay open (:attr:`_Skeleton.open_sites`).
        Itself when there is none: its replay then fails and is counted.
        """
        from tunecache.tvm_layer.sketch import decision_text, reuse_text

        own = _structure(skeleton.insts)
        sketches = self.alpha_sketches()
        if not sketches or any(_structure(a) == own for a in sketches):
            return skeleton
        text = decision_text(skeleton.insts)
        same = [a for a in sketches if decision_text(a) == text]
        if not same:
            same = [a for a in sketches if reuse_text(decision_text(a)) == reuse_text(text)]
        if not same:
            return skeleton
        alpha = max(same, key=lambda a: difflib.SequenceMatcher(None, own, _structure(a), autojunk=False).ratio())
        decisions = [[a, skeleton.decisions[b]] for b, a in _align_sites(skeleton.insts, alpha)
                     if b in skeleton.decisions]
        return _Skeleton(skeleton.source, [alpha, decisions])

    def insts_for_alpha(self, skeleton: _Skeleton) -> list[Any]:
        """``skeleton``'s instructions with its block names mapped to alpha's.

        A TE-built task (e.g. a bridge operator) and a Relax-built one of the same computation
        name their blocks differently (``T_sub`` / ``T_subtract``); the sketch signature ignores
        names, the replay does not. With the same sketch, both traces get their blocks in the
        same order, so the k-th block of beta's trace is the k-th of alpha's sketch.
        """
        cached = self._renamed.get(skeleton.digest)
        if cached is not None:
            return cached
        insts = skeleton.insts
        names = _block_order(insts)
        for order in self.alpha_block_orders():
            mapping = _map_blocks(names, order)
            if mapping is None:
                continue
            if mapping:
                insts = [[k, i, [mapping.get(a[0], a[0]), *a[1:]], o] if k in _GET_BLOCK and a else [k, i, a, o]
                         for k, i, a, o in insts]
            break
        self._renamed[skeleton.digest] = insts
        return insts

    def replay(self, skeleton: _Skeleton, decisions: dict[int, Any], *,
               probe: bool = False) -> tuple[Any, dict[int, Any]] | None:
        """Replay without postprocessing; return ``(schedule, applied decisions)`` or ``None``.

        A failure is counted in :attr:`failed_replay` unless ``probe`` (a replay that only asks
        TVM what it would apply, e.g. :func:`_open_locations`)."""
        from tvm.s_tir.schedule import Schedule, Trace

        try:
            sch = Schedule(self.mod, seed=self.seed)
            trace = [self.insts_for_alpha(skeleton), [[i, decisions[i]] for i in sorted(decisions)]]
            Trace.apply_json_to_schedule(trace, sch)
            insts, applied = decode_trace(sch.trace.as_json())
        except Exception:  # noqa: BLE001 - a trace that does not fit alpha is data
            insts = None
        if insts is None or len(insts) != len(skeleton.insts):
            if not probe:
                self.failed_replay += 1
            return None
        return sch, {int(i): v for i, v in applied}

    def materialize(self, skeleton: _Skeleton, decisions: dict[int, Any]) -> _Candidate | None:
        out = self.replay(skeleton, decisions)
        if out is None:
            return None
        sch, applied = out
        try:
            sch.enter_postproc()
            ok = all(p.apply(sch) for p in self.postprocs)
        except Exception:  # noqa: BLE001
            ok = False
        if not ok:
            self.failed_postproc += 1
            return None
        try:
            feats = cuda_features(sch) if self.is_cuda else cpu_features(sch)
        except Exception:  # noqa: BLE001 - features only rank candidates
            feats = None
        return _Candidate(skeleton, applied, sch, feats)


def _neighbour_decisions(skeleton: _Skeleton, applied: dict[int, Any], phase: str) -> list[dict[int, Any]]:
    """Decision sets one move away from ``applied`` (decisions valid on alpha) for ``phase``."""
    out: list[dict[int, Any]] = []
    for idx, site in sorted(skeleton.sites.items()):
        if idx not in applied:
            continue
        value = applied[idx]
        new_values: list[Any] = []
        if site.kind == "tile":
            n = len(value)
            if phase == "outer":
                pairs = [(0, 1)] if site.role in ("spatial", "other") else []
            elif phase == "inner":
                if site.role == "reduction":
                    pairs = [(i, i + 1) for i in range(n - 1)]
                else:
                    pairs = [(i, i + 1) for i in range(1, n - 1)]
            else:
                pairs = []
            new_values = [list(t) for t in tile_moves(value, pairs, site.max_innermost)]
        elif site.kind == "categorical" and phase == "annotation":
            new_values = [v for v in (int(value) - 1, int(value) + 1) if 0 <= v < site.n]
        elif site.kind == "compute_location" and phase == "annotation":
            new_values = [v for v in (int(value) - 1, int(value) + 1, -1) if v >= -2 and v != value]
        for nv in new_values:
            d = dict(applied)
            d[idx] = nv
            out.append(d)
    return out


def _open_locations(mat: _Materializer, skeleton: _Skeleton, applied: dict[int, Any], idx: int) -> list[int]:
    """The compute locations TVM accepts at open site ``idx`` of ``skeleton`` on alpha, given
    the other decisions ``applied``.

    A location is an index into the loops a block may be computed at (``-1`` its root, ``-2``
    inlined); TVM replays an index it rejects as a nearby accepted one, so every index up to the
    number of instructions (more than there are loops) is tried and the results de-duplicated.
    """
    found: list[int] = []
    for value in range(-2, len(skeleton.insts)):
        got = mat.replay(skeleton, {**applied, idx: value}, probe=True)
        location = None if got is None else got[1].get(idx)
        if location is not None and location not in found:
            found.append(int(location))
    return found


def _open_picks(mat: _Materializer, skeleton: _Skeleton, applied: dict[int, Any], count: int) -> list[dict[int, Any]]:
    """Up to ``count`` decision sets for ``skeleton``'s open sites, in the order to try them.

    The source had no decision for these sites (a padded conv's ``pad_temp`` when the source was
    a 1x1 conv). Left to TVM, replay samples one at random: it inlined the padding, 1.3-2.9x
    slower than the best location on three resnet50 3x3 convs reusing a 1x1 conv's program (two
    source programs; ``tools/bench_locations.py``), while no single other location was best.
    So: the block's root (one padded copy of the input), the deepest loop (pad per innermost
    tile), then the middle of the loop locations; inlining only when nothing else is accepted.
    The best of those three was within 1.6% of the best location in all six measurements.
    """
    orders = {}
    for idx in skeleton.open_sites:
        if count == 1:  # the root comes first wherever it is accepted: no need to probe the rest
            got = mat.replay(skeleton, {**applied, idx: -1}, probe=True)
            if got is not None and got[1].get(idx) == -1:
                orders[idx] = [-1]
                continue
        locations = _open_locations(mat, skeleton, applied, idx)
        loops = sorted(x for x in locations if x >= 0)
        order = ([-1] if -1 in locations else []) + ([loops[-1], loops[len(loops) // 2]] if loops else [])
        orders[idx] = list(dict.fromkeys(order)) or locations
    picks: list[dict[int, Any]] = []
    for rank in range(count):
        chosen = {**applied, **{idx: order[min(rank, len(order) - 1)] for idx, order in orders.items() if order}}
        if chosen not in picks:
            picks.append(chosen)
    return picks


def _fitted_decisions(skeleton: _Skeleton, applied: dict[int, Any]) -> dict[int, Any] | None:
    """Beta's tile decisions fitted to alpha by :func:`fit_tiles`, or ``None`` if TVM's replay
    kept every inner tile beta asked for (then the fit equals the replay)."""
    out = dict(applied)
    changed = False
    for idx, site in skeleton.sites.items():
        if site.kind != "tile" or idx not in applied or idx not in skeleton.decisions:
            continue
        want = [int(x) for x in skeleton.decisions[idx]]
        got = [int(x) for x in applied[idx]]
        if want[1:] == got[1:]:
            continue
        fitted = list(fit_tiles(want, math.prod(got), site.max_innermost))
        if fitted != got:
            out[idx] = fitted
            changed = True
    return out if changed else None


def _as_ir_module(mod: Any) -> Any:
    tvm = load_tvm()
    if isinstance(mod, tvm.tirx.PrimFunc):
        return tvm.IRModule({"main": mod})
    return mod


def _trace_of(source: Any) -> Any:
    """A source may be a store Record, a MetaSchedule TuningRecord, a Trace or trace JSON."""
    if hasattr(source, "trace") and not isinstance(source, (list, tuple)):
        trace = source.trace
        return trace.as_json() if hasattr(trace, "as_json") else trace
    if hasattr(source, "as_json"):
        return source.as_json()
    return source


def _source_on(trace: Any, mod: Any, target: Any, seed: int) -> tuple[_Materializer, _Skeleton] | None:
    """A source trace decoded and made ready to replay on ``mod`` (moved onto ``mod``'s own
    sketch where only the epilogue differs: :meth:`_Materializer.adapt`), with the materializer
    for ``mod``; ``None`` if the trace does not decode."""
    try:
        skeleton = _Skeleton(0, _trace_of(trace))
    except InvalidRecordError:
        return None
    mat = _Materializer(_as_ir_module(mod), target, seed)
    return mat, mat.adapt(skeleton)


def replay_on(trace: Any, mod: Any, target: Any, *, seed: int = 0) -> Any | None:
    """Replay a (source) trace on ``mod`` with its own decisions, then postprocess.

    A compute location the source had no decision for (a padded conv's ``pad_temp`` reusing a
    1x1 conv's program) is the first of :func:`_open_picks`: the block's root where allowed.
    Returns the postprocessed ``Schedule``, or ``None`` if the trace does not replay or a
    postprocessor rejects it. This is the zero-trial reuse of a trace.
    """
    on = _source_on(trace, mod, target, seed)
    if on is None:
        return None
    mat, skeleton = on
    cand = mat.materialize(skeleton, _open_picks(mat, skeleton, dict(skeleton.decisions), 1)[0])
    return None if cand is None else cand.sch


def sketch_on(trace: Any, mod: Any, target: Any) -> list[Any] | None:
    """Return a source trace's sketch for ``mod``: instructions before postprocessing, block
    names mapped to ``mod``'s, no decisions (replaying it samples fresh ones). ``None`` if the
    trace does not decode."""
    on = _source_on(trace, mod, target, 0)
    if on is None:
        return None
    mat, skeleton = on
    return [mat.insts_for_alpha(skeleton), []]


def propose_neighbours(trace: Any, mod: Any, target: Any, phase: str, *, seed: int = 0) -> list[list[Any]]:
    """Return the traces one move of kind ``phase`` away from ``trace`` replayed on ``mod``.

    ``trace`` is replayed on ``mod`` first (TVM rescales tilings that do not fit), so the moves
    start from decisions valid for ``mod``'s extents. Each result is a trace JSON without
    postprocessing whose decisions replay unchanged on ``mod`` (products equal the extents).
    Nothing is measured or postprocessed. Returns ``[]`` if the trace does not replay.

    Raises
    ------
    ConfigError
        If ``phase`` is not one of :data:`PHASES`.
    """
    if phase not in PHASES:
        raise ConfigError(f"phase must be one of {PHASES}, got {phase!r}")
    on = _source_on(trace, mod, target, seed)
    if on is None:
        return []
    mat, skeleton = on
    out = mat.replay(skeleton, _open_picks(mat, skeleton, dict(skeleton.decisions), 1)[0])
    if out is None:
        return []
    _, applied = out
    seen = {_key(skeleton.digest, applied)}
    result = []
    for d in _neighbour_decisions(skeleton, applied, phase):
        k = _key(skeleton.digest, d)
        if k not in seen:
            seen.add(k)
            result.append(skeleton.trace_json(d))
    return result


# ---------------------------------------------------------------------------------------------
# The search.


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


class _Search:
    def __init__(self, mod: Any, target: Any, builder: Any, runner: Any, database: Any,
                 seed: int, progress: Any, max_trials: int, task_name: str) -> None:
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
        self.mat = _Materializer(mod, target, seed)
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
        self.measured_valid: list[_Candidate] = []
        self.remeasured = 0
        self.best: _Candidate | None = None
        self.start = time.perf_counter()

    # -- measuring ---------------------------------------------------------------------------
    def _args_info(self, cand: _Candidate) -> Any:
        """The candidate's own arguments: a schedule that re-lays a weight out (``RewriteLayout``)
        takes it in the new layout once the builder removes the re-layout block."""
        return self.ms.arg_info.ArgInfo.from_entry_func(cand.sch.mod, remove_preproc=True)

    def measure(self, cands: list[_Candidate]) -> int:
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
            for i, fut in zip(run_idx, futures):
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
            elif b.artifact_path:
                shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
        valid = 0
        for i, cand in enumerate(cands):
            self.trials += 1
            secs = run_secs[i]
            if secs is not None:
                valid += 1
                src = cand.skeleton.source
                self.source_valid[src] = self.source_valid.get(src, 0) + 1
                cand.samples.append(_median(secs))
                cand.latency_s = cand.samples[0]
                self.measured_valid.append(cand)
                if self.best is None or cand.latency_s < (self.best.latency_s or math.inf):
                    self.best = cand
            if self.database is not None:
                self.database.commit_tuning_record(
                    self.ms.database.TuningRecord(
                        cand.sch.trace,
                        self.workload,
                        secs if secs is not None else [_FAILED_RUN_SECS],
                        self.target,
                        self._args_info(cand),
                    )
                )
        self.valid += valid
        if self.progress is not None:
            from tunecache.search.full import SearchProgress

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

    def remeasure(self, top_k: int, rounds: int, also: _Candidate | None = None) -> None:
        """Measure the ``top_k`` fastest candidates (and ``also``) ``rounds`` more times,
        interleaved, and re-pick the best by the median of all its measurements (the minimum of
        many single noisy measurements is biased towards lucky ones)."""
        from tvm.s_tir.meta_schedule.builder import BuilderInput
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        top = sorted(self.measured_valid, key=lambda c: c.latency_s or math.inf)[:top_k]
        if also is not None and also.latency_s is not None and all(c is not also for c in top):
            top.append(also)
        if rounds < 1 or len(top) < 2:
            return
        built = self.builder.build([BuilderInput(c.sch.mod, self.target) for c in top])
        ok = [(c, b) for c, b in zip(top, built) if b.error_msg is None and b.artifact_path]
        try:
            for _ in range(rounds):
                futures = self.runner.run(
                    [RunnerInput(str(b.artifact_path), self.device, self._args_info(c)) for c, b in ok]
                )
                for (cand, _), fut in zip(ok, futures):
                    res = fut.result()
                    if res.error_msg is None and res.run_secs is not None:
                        secs = [float(x) for x in res.run_secs]
                        if secs and max(secs) < INVALID_RUN_SECS:
                            cand.samples.append(_median(secs))
                            self.remeasured += 1
        finally:
            for _, b in ok:
                shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
        for cand in top:
            cand.latency_s = float(statistics.median(cand.samples))
        self.best = min(self.measured_valid, key=lambda c: c.latency_s or math.inf)

    # -- proposing ---------------------------------------------------------------------------
    def materialize_new(self, skeleton: _Skeleton, decisions: dict[int, Any]) -> _Candidate | None:
        req = _key(skeleton.digest, decisions)
        if req in self.seen:
            return None
        self.seen.add(req)
        cand = self.mat.materialize(skeleton, decisions)
        if cand is None:
            return None
        applied = _key(skeleton.digest, cand.decisions)
        if applied != req:
            if applied in self.seen:
                return None
            self.seen.add(applied)
        return cand

    def rank(self, cands: list[_Candidate]) -> list[_Candidate]:
        ref = self.best.features if self.best is not None else None
        for c in cands:
            if c.features is None:
                c.cost = math.inf
            elif self.mat.is_cuda:
                c.cost = _cuda_cost(c.features, ref)
            else:
                c.cost = cpu_cost(c.features, ref, cores=self.cores, simd_lanes=self.lanes)
        ties = {id(c): self.rng.random() for c in cands}
        return sorted(cands, key=lambda c: (c.cost, ties[id(c)]))


def _first_prim_func(mod: Any) -> Any:
    tvm = load_tvm()
    for _, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            return func
    raise ConfigError("narrowed_search needs a module holding one PrimFunc (the task)")


def _validate(sources: Sequence[Any], max_trials: int, round_size: int) -> None:
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

    Returns
    -------
    NarrowResult

    Raises
    ------
    ConfigError
        If ``sources`` is empty, ``max_trials`` or ``round_size`` is below 1, or ``mod`` has
        no PrimFunc.

    Examples
    --------
    >>> res = narrowed_search([beta_best.trace], alpha_mod, target,
    ...                       builder=builder, runner=runner, max_trials=16)  # doctest: +SKIP
    >>> res.best_latency_s <= res.zero_trial_latency_s                         # doctest: +SKIP
    True
    """
    _validate(sources, max_trials, round_size)
    mod = _as_ir_module(mod)
    search = _Search(mod, target, builder, runner, database, int(seed), progress, max_trials, task_name)
    history: list[RoundSummary] = []
    mat = search.mat

    # Round 0: replay the sources with their own decisions, best first.
    skeletons: list[_Skeleton] = []
    for i, src in enumerate(sources):
        try:
            skeletons.append(mat.adapt(_Skeleton(i, _trace_of(src))))
        except (InvalidRecordError, TypeError, ValueError, IndexError):
            mat.failed_replay += 1
    first: list[_Candidate] = []
    limit = min(round_size, max_trials)
    for sk in skeletons:
        if len(first) >= limit:
            break
        # Sites beta had no decision for get a few compute locations (the best source's replay)
        # or the first of them (the other sources).
        picks = _open_picks(mat, sk, dict(sk.decisions), OPEN_TRIES if not first else 1)
        cands = [c for c in (search.materialize_new(sk, d) for d in picks[: limit - len(first)]) if c is not None]
        if not cands:
            continue
        first.extend(cands)
        # Where TVM's rescaling degenerated an inner tile (it does not divide alpha's extent),
        # also try the nearest perfect tiling to what beta asked for.
        fitted = _fitted_decisions(sk, cands[0].decisions)
        if fitted is not None and len(first) < limit:
            fit = search.materialize_new(sk, fitted)
            if fit is not None:
                first.append(fit)
    valid = search.measure(first)
    zero_cand = next((c for c in first if c.latency_s is not None), None)
    history.append(RoundSummary(0, "replay", len(first), len(first), valid,
                                None if search.best is None else search.best.latency_s, False))

    # Rounds of hierarchical neighbourhoods around the best so far.
    stale, step = 0, 0
    while search.best is not None and search.trials < max_trials and stale < len(PHASES):
        phase = PHASES[step % len(PHASES)]
        step += 1
        best = search.best
        assert best.latency_s is not None
        cands = []
        for d in _neighbour_decisions(best.skeleton, best.decisions, phase):
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
    best = search.best
    source_valid = [search.source_valid.get(i, 0) for i in range(len(sources))]
    return NarrowResult(
        best_trace=None if best is None else decode_trace(best.sch.trace.as_json()),
        best_latency_s=None if best is None else best.latency_s,
        trials=search.trials,
        valid_trials=search.valid,
        seconds=time.perf_counter() - search.start,
        zero_trial_latency_s=zero,
        best_source=None if best is None else best.skeleton.source,
        source_valid=tuple(source_valid),
        failed_replay=mat.failed_replay,
        failed_postproc=mat.failed_postproc,
        failed_build=search.failed_build,
        failed_run=search.failed_run,
        history=tuple(history),
        remeasured=search.remeasured,
    )
