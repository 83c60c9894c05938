"""Search-cost estimates for the reuse planner (ETO Section 6.1, re-derived for CPU traces).

Full search of a task costs the configured trial budget. Reusing beta's program for alpha costs
the expected number of measurements of the narrowed search, which starts from beta's decisions
and measures their neighbourhood (moving one prime factor between adjacent tile levels of a
loop, neighbouring unroll choices, compute-location choices) round by round. As in ETO, the
estimate comes from the size of the candidate set that search would enumerate for the pair —
averaged over sampled tilings of beta when beta is not tuned yet — times the fraction of that
set the search really measures, calibrated from the store's provenance of reused records.

Every estimate is in trials; :attr:`CostModel.seconds_per_trial` (learned per hardware key
from the store) turns trials into seconds.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from tunecache.reuse.loopnest import LoopNest

__all__ = ["CostModel", "neighbourhood_size", "reuse_cost", "calibrate", "tile_levels"]


@dataclass(frozen=True)
class CostModel:
    """Parameters of the cost estimates (all in trials unless named otherwise).

    Attributes
    ----------
    full_trials
        Trial budget of a full search (the cost of a task tuned from scratch).
    max_reuse_trials
        Cap on a narrowed search's measurements.
    measured_fraction
        Fraction of the enumerated neighbourhood the narrowed search measures (calibrated).
    seconds_per_trial
        Wall seconds per measured trial on this hardware (calibrated).
    samples
        Sampled tilings of beta averaged over when beta is not tuned yet.
    target_kind
        ``llvm`` (4 space / 2 reduction tile levels) or ``cuda`` (5 / 3).
    """

    full_trials: float = 1000.0
    max_reuse_trials: float = 64.0
    measured_fraction: float = 0.35
    seconds_per_trial: float = 0.5
    samples: int = 8
    target_kind: str = "llvm"


def tile_levels(kind: str) -> tuple[int, int]:
    """Return (space, reduction) tile levels of MetaSchedule's multi-level tiling for a target."""
    return (5, 3) if kind in ("cuda", "rocm", "metal", "vulkan") else (4, 2)


@lru_cache(maxsize=4096)
def _primes(n: int) -> tuple[int, ...]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


def _sample_tiling(extent: int, levels: int, rng: random.Random) -> list[int]:
    tiles = [1] * levels
    for p in _primes(extent):
        tiles[rng.randrange(levels)] *= p
    return tiles


def _moves(tiles: Sequence[int]) -> int:
    """Count the tilings one prime factor away (between adjacent levels)."""
    n = 0
    for i in range(len(tiles) - 1):
        n += len(set(_primes(tiles[i]))) + len(set(_primes(tiles[i + 1])))
    return n


def neighbourhood_size(nest: LoopNest, cm: CostModel, seed: int = 0) -> float:
    """Return the expected size of the narrowed search's candidate set on ``nest``.

    Averaged over :attr:`CostModel.samples` random tilings (beta's decisions are unknown
    before it is tuned), plus the unroll neighbours (2) and, for convolutions, the
    compute-location alternatives (2).
    """
    sp, rd = tile_levels(cm.target_kind)
    rng = random.Random(seed)
    sizes = []
    for _ in range(max(1, cm.samples)):
        n = sum(_moves(_sample_tiling(e, sp, rng)) for e in nest.space if e > 1)
        n += sum(_moves(_sample_tiling(e, rd, rng)) for e in nest.reduction if e > 1)
        sizes.append(n)
    extra = 2 + (2 if "conv" in nest.family else 0)
    return statistics.fmean(sizes) + extra


#: Doublings of work between source and target beyond which a source is far (8x; the reports'
#: :data:`FAR_RATIO` is derived from it).
FAR_LOG2 = 3.0
#: Expected quality lost per doubling of work beyond :data:`FAR_LOG2`.
FAR_PENALTY = 0.25
#: The same distance as a ratio of work (8x): the compile report calls such a source far
#: (``search.execute``), and a replay predicts the miss instead (``tunecache.replay``).
FAR_RATIO = 2.0**FAR_LOG2


#: A target loop extent above this that is a prime its source's matching loop does not share
#: cannot take the source's tiles (a tile must divide the extent: it is 1 or the whole loop):
#: ViT-B/16's 197-token layers reused from BERT's 128-token programs ran 0.18-0.51x their
#: sources' throughput and 6 of 8 escalated to a full search after their narrowed one
#: (docs/newmodel.md, sessions 16-17). A replay (``tunecache.replay``) predicts such a miss instead;
#: a narrowed search measures the task's own predicted program in its round 0 beside the
#: source's (its row tiles padded past the prime, ``search.predict``) and searches around the
#: faster.
PRIME_EXTENT_ABOVE = 16
#: Expected quality lost by a source whose tiles a prime extent cannot take
#: (:func:`prime_extent`), as a latency ratio: enough that a source that shares the prime (ViT's
#: own 197-row tasks) is preferred, far less than a full search (``reuse.graph.reuse_weight``):
#: the narrowed search starts from the task's prediction, which on ViT-B/16's prime-197 tasks
#: ran 0.953x a full search end to end (session 29). Session 17 priced it as a full search
#: (1.0), when the prediction had no padded row tiles and 6 of 8 such narrowed searches
#: escalated; measured again in session 30 (docs/newmodel.md).
PRIME_PENALTY = 0.1


def prime_extent(extents: Sequence[int], source: Sequence[int]) -> int | None:
    """The first extent of ``extents`` above :data:`PRIME_EXTENT_ABOVE` that is a prime and not the
    source's extent there, else ``None``.

    >>> prime_extent([197, 768, 768], [128, 768, 768]), prime_extent([64, 768], [128, 768])
    (197, None)
    """
    for e, s in zip(extents, source, strict=False):
        if e > PRIME_EXTENT_ABOVE and e != s and _primes(int(e)) == (int(e),):
            return int(e)
    return None


def reuse_cost(beta: LoopNest, alpha: LoopNest, cm: CostModel) -> tuple[float, float]:
    """Return (expected trials, expected quality) of reusing beta's program for alpha.

    Quality is the expected latency ratio to a full search of alpha (1.0 = as good). It grows
    with the shape ratio, and more for convolutions and for alphas smaller than beta, as
    measured on this CPU (../shared/REUSE_EVIDENCE.md: zero-trial replay was within 2% for most
    matmul pairs, 1.12x for the smallest alpha, 1.43x for the two smaller conv alphas). Past
    :data:`FAR_LOG2` doublings of work it grows by :data:`FAR_PENALTY` a doubling more, so that
    a source some 64x or more away costs a planner about a full search: a classifier's 1-row
    matmul reused by a 128- or 197-row dense ran 4-5x slower than the dense reused from a near
    source (BERT, session 11; ViT-B/16, session 16), and escalation, which compares with the
    source's own low throughput, did not catch it. A target extent that is a prime the source
    does not share adds :data:`PRIME_PENALTY`.
    """
    cand = neighbourhood_size(alpha, cm, seed=hash(alpha.extents) & 0xFFFF)
    trials = min(cm.max_reuse_trials, 1.0 + math.ceil(cand * cm.measured_fraction))
    ratio = abs(math.log2(max(alpha.work, 1) / max(beta.work, 1)))
    quality = 1.0 + 0.02 * ratio + FAR_PENALTY * max(0.0, ratio - FAR_LOG2)
    if prime_extent(alpha.extents, beta.extents) is not None:
        quality += PRIME_PENALTY
    if alpha.work < beta.work:
        quality += 0.03 * ratio
        if "conv" in alpha.family:
            quality += 0.05 * ratio
    return float(trials), float(quality)


def calibrate(cm: CostModel, provenance: Sequence[Any]) -> CostModel:
    """Return ``cm`` calibrated from the provenance of store records (newest first).

    ``seconds_per_trial``: median of seconds/trials over tuned records' final provenance;
    ``measured_fraction`` is kept unless reused records carry the enumerated candidate count
    (a future provenance field), so the estimate tracks what the narrowed search really spent.
    """
    # Per-record seconds are the time since the task's first commit in its search; records of
    # one round land together, so tiny values say nothing about the cost of a trial.
    per_trial = [p.seconds / p.trials for p in provenance
                 if p.kind == "tuned" and p.trials >= 4 and p.seconds / p.trials >= 0.05]
    reused = [p.trials for p in provenance if p.kind == "reused" and p.trials > 0]
    out = cm
    if len(per_trial) >= 5:
        out = replace(out, seconds_per_trial=float(statistics.median(per_trial)))
    if len(reused) >= 5:
        # Scale the measured fraction so the average estimate matches the average spent.
        spent = statistics.fmean(reused)
        out = replace(out, max_reuse_trials=max(out.max_reuse_trials, spent))
    return out
