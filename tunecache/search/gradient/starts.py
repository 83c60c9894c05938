"""Starts from stored neighbours: a similar task's best tiles, carried to this task's extents.

A store that has tuned other workloads on the same hardware holds good tilings of sketches with
the same structure (a 512x512 matmul's best for a 1024x1024 one, a 56x56 convolution's for a
28x28 one). The issue's search starts from them beside random points. A :class:`Tiling` is what
one measured program says about its sketch: the structure, each axis's extent and tiles, the
categorical choices. :func:`carry` moves its tiles onto another task's :class:`TiledSpace` of
the same structure: the inner levels keep their sizes (they are bound to the registers, the
vector width and the caches, not to the problem's size) as far as this task's extent allows,
the outermost level takes the rest, every tile a divisor. :func:`neighbour_starts` picks the nearest few.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tunecache.search.gradient.space import TiledSpace

__all__ = ["NEIGHBOURS", "Tiling", "best_tilings", "carry", "neighbour_starts", "tiling_of"]

#: Stored neighbours a sketch starts from at most.
NEIGHBOURS = 3


@dataclass(frozen=True)
class Tiling:
    """One measured program's tiles of a multi-level tiling sketch.

    Attributes
    ----------
    structure
        The tiling structure, e.g. ``"SSRSRS"``.
    axes
        ``(spatial, levels, extent)`` of the main block's tile sites, in loop order.
    tiles
        The tiles of each axis, outermost level first.
    categorical
        The choice at each categorical site (the unroll bound), in sketch order.
    write_kind
        Where the output's cache write sits (:attr:`TiledSpace.write_kind`).
    log_cost
        ``log(seconds / work)`` measured (lower is better).
    """

    structure: str
    axes: tuple[tuple[bool, int, int], ...]
    tiles: tuple[tuple[int, ...], ...]
    categorical: tuple[int, ...]
    write_kind: int
    log_cost: float


def _categorical_sites(space: TiledSpace) -> list[int]:
    return [i for i, s in sorted(space.skeleton.sites.items()) if s.kind == "categorical"]


def tiling_of(space: TiledSpace, decisions: dict[int, Any], latency_s: float) -> Tiling | None:
    """The :class:`Tiling` of ``decisions`` on ``space`` measured at ``latency_s`` (``None`` if a
    tile site has no decision)."""
    if latency_s <= 0 or not all(ax.site in decisions for ax in space.axes):
        return None
    cats = tuple(int(decisions[i]) for i in _categorical_sites(space) if i in decisions)
    return Tiling(space.structure, tuple((ax.spatial, ax.levels, ax.extent) for ax in space.axes),
                  tuple(tuple(int(t) for t in decisions[ax.site]) for ax in space.axes), cats, space.write_kind,
                  math.log(latency_s) - space.work)


def best_tilings(keyed: Iterable[tuple[Hashable, Tiling]]) -> tuple[Tiling, ...]:
    """The lowest-cost :class:`Tiling` of each key (a workload and its sketch), in first-seen order."""
    best: dict[Hashable, Tiling] = {}
    for key, t in keyed:
        if key not in best or t.log_cost < best[key].log_cost:
            best[key] = t
    return tuple(best.values())


def _same_shape(tiling: Tiling, space: TiledSpace) -> bool:
    return tiling.structure == space.structure and len(tiling.axes) == len(space.axes) and all(
        (sp, lv) == (ax.spatial, ax.levels) for (sp, lv, _), ax in zip(tiling.axes, space.axes, strict=True))


def carry(tiling: Tiling, space: TiledSpace) -> dict[int, list[int]] | None:
    """Tiles for ``space`` that keep ``tiling``'s inner tiles, or ``None`` for another shape.

    Per axis, from the innermost level out, each level takes the divisor of what is left of this
    axis's extent nearest its stored tile (:func:`~tunecache.search.narrow.moves.fit_tiles`), so
    a smaller extent shrinks the outer ones of them first; the outermost level gets what is left.
    """
    from tunecache.search.narrow.moves import fit_tiles

    if not _same_shape(tiling, space):
        return None
    return {ax.site: list(fit_tiles(tiling.tiles[a], ax.extent, ax.max_innermost))
            for a, ax in enumerate(space.axes)}


def _distance(tiling: Tiling, space: TiledSpace) -> float:
    """How far ``tiling``'s task is from ``space``'s: log extents apart, plus one for another cache-write kind."""
    far = sum(abs(math.log(e) - math.log(ax.extent)) for (_, _, e), ax in zip(tiling.axes, space.axes, strict=True))
    return far + (0.0 if tiling.write_kind == space.write_kind else 1.0)


def neighbour_starts(space: TiledSpace, tilings: Sequence[Tiling], *, k: int = NEIGHBOURS) -> list[dict[int, Any]]:
    """Decisions for ``space`` carried from the ``k`` nearest of ``tilings`` of its shape.

    Each start is the sketch's own decisions with the main block's tiles replaced (carried)
    and, when the neighbour's sketch has as many categorical sites, its categorical choices;
    distinct starts only, nearest first.
    """
    from tunecache.search.narrow.align import decisions_key

    near = sorted((t for t in tilings if _same_shape(t, space)), key=lambda t: (_distance(t, space), t.log_cost))
    cat_sites = _categorical_sites(space)
    out: list[dict[int, Any]] = []
    seen: set[str] = set()
    for t in near:
        if len(out) >= k:
            break
        tiles = carry(t, space)
        if tiles is None:
            continue
        d = dict(space.skeleton.decisions)
        d.update(tiles)
        if len(t.categorical) == len(cat_sites):
            for site, choice in zip(cat_sites, t.categorical, strict=True):
                if 0 <= choice < space.skeleton.sites[site].n:
                    d[site] = choice
        key = decisions_key(space.skeleton.digest, d)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
