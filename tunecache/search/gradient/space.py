"""A multi-level tiling sketch as a smooth function of its tile sizes (Felix's relaxation, on CPU).

Felix (Zhao et al., ASPLOS'24, Section 4) writes a program's features as expressions of its
schedule's tile sizes and descends on them. MetaSchedule on CPU tiles the main block of a dense,
matmul, batch matmul or convolution ``SSRSRS``: four levels for every spatial axis, two for every
reduction axis, in that loop order. This module gives, for one sketch of one task:

* the **variables**: for every tile site of the main block and every prime ``p`` of its
  extent (``p`` to the power ``m``), a logit per level; level ``j`` gets the relaxed exponent
  ``m * softmax(z)[j]``, so the log tile sizes are smooth in ``z`` and always multiply to the
  extent (:meth:`TiledSpace.log_tiles`);
* the **rounding** of a point to integer exponents (largest remainder per prime), so every
  rounded tile divides its loop and replays unchanged (a tile that does not divide is silently
  replaced at replay), then a repair of the innermost factor bound (:meth:`TiledSpace.round`);
* the **features** (:meth:`TiledSpace.features`): each a log-sum-exp of linear forms in the log
  tile sizes (a linear form where there is one term), so a feature and its gradient are exact
  and cheap: loop extents per tiling level (the first is the parallel extent before the
  postprocessor fuses), the register tile and its vector length, the bytes each loop level's
  body touches (the sum over the block's buffers of the product of the tiles inside), the
  block's floating-point work, and categorical descriptors of the sketch (the unroll bound,
  where the output's cache write sits) that the descent keeps fixed.

Footprints of a convolution's input (``h + rh``) are taken as products of the axes' tiles: an
overestimate of the halo, the same for every candidate of a task.

Nothing here imports TVM at import time; :func:`tiled_spaces` reads the block's reads with TVM.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FEATURE_VERSION", "N_FEATURES", "Slot", "TiledSpace", "footprint_feature", "prime_factors", "tiled_space",
           "tiled_spaces"]

#: Bumped whenever the features change meaning; cost model weights are kept per version.
FEATURE_VERSION = 1
#: Loop positions of the tiling structure given a feature each (``SSRSRS`` has six).
_POSITIONS = 6
#: Sketch kinds by where the output's cache write is computed: none, or after loop position k.
_WRITE_KINDS = _POSITIONS + 1
#: Features: work, extent per position, vector tile, row tile, bytes per level body, unroll,
#: cache-write one-hot.
N_FEATURES = 1 + _POSITIONS + 2 + (_POSITIONS - 1) + 1 + _WRITE_KINDS
_BYTES = 4.0  # float32; the log of the element size only shifts every footprint alike
_EPS = 0.1  # weight of an empty level when a point is made from integer exponents


def footprint_feature(position: int) -> int:
    """Index of the feature holding the log bytes one iteration of loop ``position - 1`` touches
    (everything at loop positions ``>= position``), for ``1 <= position < 6``."""
    return 1 + _POSITIONS + 2 + position - 1


def prime_factors(n: int) -> dict[int, int]:
    """``{prime: multiplicity}`` of ``n`` (empty for 1).

    Examples
    --------
    >>> prime_factors(768)
    {2: 8, 3: 1}
    """
    out: dict[int, int] = {}
    d, n = 2, int(n)
    while d * d <= n:
        while n % d == 0:
            out[d] = out.get(d, 0) + 1
            n //= d
        d += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


@dataclass(frozen=True)
class Slot:
    """One prime of one tile site: ``prime ** count`` is shared among the site's ``levels``."""

    site: int  # trace instruction index of the SamplePerfectTile
    axis: int  # index into TiledSpace.axes
    prime: int
    count: int
    levels: int


@dataclass
class _Axis:
    site: int
    extent: int
    levels: int
    max_innermost: int
    positions: list[int]  # loop position of each level, outermost first
    spatial: bool


class TiledSpace:
    """The relaxed tile sizes and the features of one multi-level tiling sketch on one task.

    Parameters
    ----------
    skeleton
        A :class:`~tunecache.search.narrow.align.Skeleton` of the task's design space.
    axes
        ``(site, extent, spatial)`` of the main block's tile sites, in loop order.
    reads
        For each site, the indices of the block's reads its iterator appears in.
    structure
        The tiling structure annotated on the block, e.g. ``"SSRSRS"``.
    """

    def __init__(self, skeleton: Any, axes: Sequence[tuple[int, int, bool]], reads: dict[int, frozenset[int]],
                 structure: str) -> None:
        self.skeleton = skeleton
        self.structure = structure
        s_pos = [i for i, c in enumerate(structure) if c == "S"]
        r_pos = [i for i, c in enumerate(structure) if c == "R"]
        self.axes: list[_Axis] = []
        for site, extent, spatial in axes:
            info = skeleton.sites[site]
            pos = s_pos if spatial else r_pos
            self.axes.append(_Axis(site, int(extent), int(info.n), int(info.max_innermost), list(pos[: info.n]),
                                   spatial))
        self.slots: list[Slot] = []
        for a, ax in enumerate(self.axes):
            for p, m in sorted(prime_factors(ax.extent).items()):
                self.slots.append(Slot(ax.site, a, p, m, ax.levels))
        # Flattened log tiles: one entry per (axis, level).
        self.offsets = np.cumsum([0] + [ax.levels for ax in self.axes])
        self.n_logs = int(self.offsets[-1])
        self.n_vars = sum(s.levels for s in self.slots)
        spatial_real = [a for a, ax in enumerate(self.axes) if ax.spatial and ax.extent > 1]
        self.vec = spatial_real[-1] if spatial_real else None
        self.work = float(sum(math.log(ax.extent) for ax in self.axes))
        self._forms = self._feature_forms(reads)

    # -- variables ---------------------------------------------------------------------------
    def log_tiles(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log tile sizes at ``z`` (flattened by axis and level) and the softmax per slot.

        Returns
        -------
        tuple of numpy.ndarray
            ``(log_tiles, sigma)``: ``sigma`` holds each slot's softmax, concatenated like ``z``.
        """
        logs = np.zeros(self.n_logs)
        sigma = np.empty(self.n_vars)
        at = 0
        for s in self.slots:
            zs = z[at: at + s.levels]
            e = np.exp(zs - zs.max())
            e /= e.sum()
            sigma[at: at + s.levels] = e
            base = self.offsets[s.axis]
            logs[base: base + s.levels] += s.count * e * math.log(s.prime)
            at += s.levels
        return logs, sigma

    def grad_z(self, sigma: np.ndarray, g_logs: np.ndarray) -> np.ndarray:
        """Chain rule: a gradient on the log tiles as a gradient on ``z``."""
        out = np.empty(self.n_vars)
        at = 0
        for s in self.slots:
            base = self.offsets[s.axis]
            g = g_logs[base: base + s.levels] * (s.count * math.log(s.prime))
            sg = sigma[at: at + s.levels]
            out[at: at + s.levels] = sg * (g - float(sg @ g))
            at += s.levels
        return out

    def point(self, decisions: dict[int, Any]) -> np.ndarray:
        """The ``z`` whose rounding gives ``decisions``' tiles (the sites of the main block)."""
        z = np.empty(self.n_vars)
        at = 0
        for s in self.slots:
            tiles = [int(t) for t in decisions[s.site]]
            for j in range(s.levels):
                e, t = 0, tiles[j]
                while t % s.prime == 0:
                    t //= s.prime
                    e += 1
                z[at + j] = math.log(e + _EPS)
            at += s.levels
        return z

    def random_point(self, rng: np.random.Generator, scale: float = 1.5) -> np.ndarray:
        """A random point (Gaussian logits): every level likely to get some of each prime."""
        return rng.normal(0.0, scale, self.n_vars)

    @property
    def write_kind(self) -> int:
        """Where the sketch's output cache write sits: 0 for none, else 1 + its loop position."""
        return _write_kind(self.skeleton.insts, self.structure)

    def round(self, z: np.ndarray) -> dict[int, list[int]]:
        """Integer tiles at ``z``: largest remainder per prime, then the innermost bound repaired.

        Returns
        -------
        dict
            ``{site: [tile per level]}`` for the main block's sites; each product is the extent.
        """
        _, sigma = self.log_tiles(z)
        exps: dict[tuple[int, int], list[int]] = {}
        at = 0
        for s in self.slots:
            want = s.count * sigma[at: at + s.levels]
            base = np.floor(want).astype(int)
            left = s.count - int(base.sum())
            order = np.argsort(-(want - base), kind="stable")
            for j in order[:left]:
                base[j] += 1
            exps[(s.axis, s.prime)] = [int(x) for x in base]
            at += s.levels
        out: dict[int, list[int]] = {}
        for a, ax in enumerate(self.axes):
            tiles = [1] * ax.levels
            for (axis, p), e in exps.items():
                if axis == a:
                    for j in range(ax.levels):
                        tiles[j] *= p ** e[j]
            if ax.max_innermost > 0 and ax.levels > 1:
                while tiles[-1] > ax.max_innermost:  # move the smallest prime one level out
                    p = min(prime_factors(tiles[-1]))
                    tiles[-1] //= p
                    tiles[-2] *= p
            out[ax.site] = tiles
        return out

    # -- features ----------------------------------------------------------------------------
    def _feature_forms(self, reads: dict[int, frozenset[int]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each differentiable feature as ``(W, c)``: the feature is ``logsumexp(W @ logs + c)``."""
        n = self.n_logs

        def form(pick: Any) -> np.ndarray:
            w = np.zeros(n)
            for a, ax in enumerate(self.axes):
                for j in range(ax.levels):
                    if pick(a, ax, j):
                        w[self.offsets[a] + j] = 1.0
            return w

        forms: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros((1, n)), np.array([self.work]))]
        for p in range(_POSITIONS):
            forms.append((form(lambda a, ax, j, p=p: ax.positions[j] == p)[None, :], np.zeros(1)))
        vec = self.vec
        forms.append((form(lambda a, ax, j: a == vec and j == ax.levels - 1)[None, :], np.zeros(1)))
        forms.append((form(lambda a, ax, j: ax.spatial and a != vec and j == ax.levels - 1)[None, :], np.zeros(1)))
        # Buffers: each read, by the axes whose iterators index it, and the output (spatial axes).
        n_reads = 1 + max((max(r) for r in reads.values() if r), default=-1)
        buffers = [frozenset(a for a, ax in enumerate(self.axes) if b in reads.get(ax.site, frozenset()))
                   for b in range(n_reads)]
        buffers.append(frozenset(a for a, ax in enumerate(self.axes) if ax.spatial))
        buffers = [b for b in buffers if b]
        for p in range(1, _POSITIONS):
            rows = [form(lambda a, ax, j, b=b, p=p: a in b and ax.positions[j] >= p) for b in buffers]
            forms.append((np.array(rows) if rows else np.zeros((1, n)),
                          np.full(max(1, len(rows)), math.log(_BYTES))))
        return forms

    def features(self, logs: np.ndarray, categorical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Features at ``logs`` and their Jacobian with respect to ``logs``.

        Parameters
        ----------
        logs
            Log tile sizes (:meth:`log_tiles`).
        categorical
            :meth:`categorical` of the decisions the descent keeps fixed.

        Returns
        -------
        tuple of numpy.ndarray
            The :data:`N_FEATURES` features, and the ``(N_FEATURES, n_logs)`` Jacobian (zero rows
            for the categorical ones).
        """
        vals = np.empty(N_FEATURES)
        jac = np.zeros((N_FEATURES, self.n_logs))
        for k, (w, c) in enumerate(self._forms):
            v = w @ logs + c
            top = float(v.max())
            e = np.exp(v - top)
            total = float(e.sum())
            vals[k] = top + math.log(total)
            jac[k] = (e / total) @ w
        vals[len(self._forms):] = categorical
        return vals, jac

    def categorical(self, decisions: dict[int, Any]) -> np.ndarray:
        """The sketch's fixed descriptors: log2(1 + unroll bound), where the cache write sits."""
        out = np.zeros(N_FEATURES - len(self._forms))
        sk = self.skeleton
        for idx, site in sk.sites.items():
            if site.kind == "categorical" and idx in decisions:
                values = _categorical_values(sk.insts[idx])
                choice = int(decisions[idx])
                if values and 0 <= choice < len(values):
                    out[0] = math.log2(1.0 + float(values[choice]))
        out[1 + self.write_kind] = 1.0
        return out

    def feature_values(self, decisions: dict[int, Any]) -> np.ndarray:
        """The features of concrete ``decisions`` (the main block's tiles and the categorical)."""
        logs = np.zeros(self.n_logs)
        for a, ax in enumerate(self.axes):
            tiles = [int(t) for t in decisions[ax.site]]
            logs[self.offsets[a]: self.offsets[a] + ax.levels] = np.log(np.maximum(tiles, 1))
        return self.features(logs, self.categorical(decisions))[0]


def _categorical_values(inst: Any) -> list[float]:
    """The candidate values of a ``SampleCategorical`` instruction (its first attribute)."""
    attrs = inst[2]
    try:
        return [float(v) for v in attrs[0]]
    except (TypeError, ValueError, IndexError):
        return []


def _write_kind(insts: Sequence[Any], structure: str) -> int:
    """0 without a cache write; else 1 + the loop position its ``ReverseComputeAt`` targets."""
    if not any(inst[0] == "CacheWrite" for inst in insts):
        return 0
    split_outputs: dict[str, int] = {}
    level_of_split: list[list[str]] = []
    for inst in insts:
        if inst[0] == "Split":
            level_of_split.append([str(o) for o in inst[3]])
    # Split outputs in sketch order; the k-th loop of the tiled nest is the one ReverseComputeAt names.
    s_pos = [i for i, c in enumerate(structure) if c == "S"]
    r_pos = [i for i, c in enumerate(structure) if c == "R"]
    for outs in level_of_split:
        pos = s_pos if len(outs) == len(s_pos) else r_pos if len(outs) == len(r_pos) else []
        for j, o in enumerate(outs):
            if j < len(pos):
                split_outputs[o] = pos[j]
    for inst in insts:
        if inst[0] == "ReverseComputeAt" and len(inst[1]) > 1:
            p = split_outputs.get(str(inst[1][1]))
            if p is not None:
                return 1 + min(p, _WRITE_KINDS - 2)
    return _WRITE_KINDS - 1


def tiled_space(skeleton: Any, mod: Any, reads_cache: dict[Any, Any] | None = None) -> TiledSpace | None:
    """The :class:`TiledSpace` of ``skeleton``'s main block on ``mod``, or ``None`` when the
    sketch has no multi-level tiling (an elementwise or injective task).

    ``reads_cache`` keeps the block's reads per module and sketch across calls (reading them
    builds a TVM ``Schedule``: what many records of one workload would repeat).
    """
    from tunecache.search.predict import _site_reads, _tile_groups

    structure = ""
    for inst in skeleton.insts:
        if inst[0] == "Annotate" and inst[2] == ["meta_schedule.tiling_structure"]:
            structure = str(inst[1][1]).strip('"')
    if not structure or set(structure) - {"S", "R"}:
        return None
    groups = _tile_groups(skeleton.insts, skeleton.decisions, skeleton.sites)
    if not groups:
        return None
    main = max(groups, key=lambda g: len(g.spatial) + len(g.reduction))
    if not main.spatial:
        return None
    key = (id(mod), skeleton.digest)
    if reads_cache is not None and key in reads_cache:
        reads = reads_cache[key]
    else:
        reads = _site_reads(main, skeleton.insts, mod) or {}
        if reads_cache is not None:
            reads_cache[key] = reads
    order = {str(loop): i for i, loop in enumerate(main.loops or [])}

    def loop_index(idx: int) -> int:
        return order.get(str(skeleton.insts[idx][1][0]), idx)

    axes = sorted([(i, e, True) for i, e in main.spatial] + [(i, e, False) for i, e in main.reduction],
                  key=lambda t: loop_index(t[0]))
    return TiledSpace(skeleton, axes, reads, structure)


def tiled_spaces(mod: Any, target: Any) -> list[TiledSpace]:
    """The :class:`TiledSpace` of every multi-level tiling sketch of ``mod``'s design space."""
    from tunecache.search.narrow.align import Skeleton
    from tunecache.tvm_layer.sketch import design_space_json

    out = []
    for i, trace in enumerate(design_space_json(mod, target)):
        space = tiled_space(Skeleton(i, trace), mod)
        if space is not None:
            out.append(space)
    return out
