"""Moves of the narrowed search: neighbouring tilings and annotations, and a cheap ranking.

Pure pieces over decision values: :func:`tile_moves` (move a prime factor between two tile
levels, so the loop's extent never changes), :func:`fit_tiles` (the perfect tiling of an extent
nearest to a requested one), :func:`neighbour_decisions` (the decision sets one move of a phase
away, ETO's B, T/L and unroll rounds) and :func:`cpu_cost` / :func:`cuda_cost` (rank neighbours
before anything is built). Nothing here needs TVM.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tunecache.tvm_layer.features import CpuFeatures, CudaFeatures

if TYPE_CHECKING:
    from tunecache.search.narrow.align import Skeleton

__all__ = [
    "PHASES",
    "cpu_cost",
    "cuda_cost",
    "fit_tiles",
    "fitted_decisions",
    "neighbour_decisions",
    "tile_moves",
]

#: Kinds of moves, in the order the search cycles through them (ETO: B, then T/L, then unroll).
PHASES: tuple[str, ...] = ("outer", "inner", "annotation")


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


def cuda_cost(features: CudaFeatures, reference: CudaFeatures | None) -> float:
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


def neighbour_decisions(skeleton: Skeleton, applied: dict[int, Any], phase: str) -> list[dict[int, Any]]:
    """Decision sets one move away from ``applied`` (decisions valid on alpha) for ``phase``.

    ``"outer"`` moves a prime factor between the two outermost levels of a spatial tiling;
    ``"inner"`` between neighbouring inner levels (every pair of levels for a reduction);
    ``"annotation"`` steps each categorical choice (unroll) and compute location by one.

    Parameters
    ----------
    skeleton
        The skeleton whose sampling sites (:attr:`~tunecache.search.narrow.align.Skeleton.sites`)
        say what kind of decision each index holds.
    applied
        Site index -> decision, as TVM applied them on alpha.
    phase
        One of :data:`PHASES`.

    Returns
    -------
    list of dict
        One decision set per move, each differing from ``applied`` at one site, in site order.
    """
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


def fitted_decisions(skeleton: Skeleton, applied: dict[int, Any]) -> dict[int, Any] | None:
    """Beta's tile decisions fitted to alpha by :func:`fit_tiles`, or ``None`` if TVM's replay
    kept every inner tile beta asked for (then the fit equals the replay).

    Parameters
    ----------
    skeleton
        The source skeleton; its :attr:`~tunecache.search.narrow.align.Skeleton.decisions` are
        what beta asked for.
    applied
        The decisions TVM applied when replaying ``skeleton`` on alpha.

    Returns
    -------
    dict or None
        ``applied`` with every rescaled tiling replaced by its fit, or ``None``.
    """
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
