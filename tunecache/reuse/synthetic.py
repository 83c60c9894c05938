"""Synthetic workloads and OC graphs for planner tests and benchmarks (no TVM).

A synthetic workload is an operator family plus the loop-extent vector of its major loop nest.
Following ETO (Zhao et al., PVLDB 15(2), 2022): a program tuned for ``s`` can be reused for
``t`` of the same family when ``t`` dominates ``s`` (every extent ``>=``, Definition 2's loop
nest domination), and the 1-hop bridge of two workloads that fail dominance both ways is their
element-wise minimum (Definition 5). Costs follow ETO Section 6.1 in spirit: a full search is a
fixed trial budget; a reuse search costs 10 to 60 trials, more when the shapes are further apart.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from tunecache.errors import ConfigError
from tunecache.reuse.bridge import bridge_extents
from tunecache.reuse.graph import DEFAULT_QUALITY_WEIGHT, CostEdge, build_choice_graph

__all__ = [
    "FAMILIES",
    "SyntheticWorkload",
    "synthetic_workloads",
    "one_hop_bridges",
    "reuse_edges",
    "synthetic_choice_graph",
]

_P2 = (16, 32, 64, 128, 256, 512)
_SPATIAL = (7, 14, 28, 56, 112)

#: Per family, the choices of each loop extent (spatial loops, then reduction loops).
FAMILIES: Mapping[str, tuple[tuple[int, ...], ...]] = {
    # N, K, H, W, C, R, S
    "conv2d": ((1, 4, 16), _P2, _SPATIAL, _SPATIAL, (3,) + _P2, (1, 3, 5), (1, 3, 5)),
    # M, N, K
    "matmul": ((64, 128, 256, 384, 512, 1024, 2048, 4096),) * 3,
    # B, M, N, K
    "batch_matmul": ((1, 4, 12, 16), (64, 128, 256, 384, 512), (64, 128, 256, 384, 512), (64, 128, 256, 512)),
    # N, C, H, W, R, S
    "depthwise_conv2d": ((1, 4, 16), (32, 64, 96, 128, 256, 512, 1024), _SPATIAL, _SPATIAL, (3, 5, 7), (3, 5, 7)),
    # N, K, L, C, R
    "conv1d": ((1, 4, 16), _P2, (64, 128, 256, 512, 1024), _P2, (1, 3, 5, 7)),
}

#: Trials of a full search (ETO's per-operator measurement budget).
FULL_TRIALS = 1000.0


@dataclass(frozen=True)
class SyntheticWorkload:
    """A synthetic workload: a family and its loop extents."""

    family: str
    extents: tuple[int, ...]

    @property
    def name(self) -> str:
        """Return a readable unique name, e.g. ``matmul[64x128x256]``."""
        return f"{self.family}[{'x'.join(map(str, self.extents))}]"


def synthetic_workloads(
    n: int, *, seed: int = 0, exclude: Iterable[SyntheticWorkload] = ()
) -> list[SyntheticWorkload]:
    """Return ``n`` distinct random workloads, families drawn uniformly.

    Parameters
    ----------
    n
        How many workloads.
    seed
        Seed of the private random generator.
    exclude
        Workloads not to return (e.g. ones already drawn as tasks).

    Examples
    --------
    >>> [w.family for w in synthetic_workloads(3, seed=1)]
    ['conv1d', 'depthwise_conv2d', 'batch_matmul']
    """
    rng = random.Random(seed)
    names = sorted(FAMILIES)
    seen = set(exclude)
    out: list[SyntheticWorkload] = []
    while len(out) < n:
        fam = rng.choice(names)
        w = SyntheticWorkload(fam, tuple(rng.choice(c) for c in FAMILIES[fam]))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _by_family(workloads: Iterable[SyntheticWorkload]) -> dict[str, list[SyntheticWorkload]]:
    out: dict[str, list[SyntheticWorkload]] = {}
    for w in workloads:
        out.setdefault(w.family, []).append(w)
    return out


def one_hop_bridges(
    workloads: Sequence[SyntheticWorkload],
    *,
    partners: int = 8,
    per_family: float = 1.0,
    max_ratio: float = 256.0,
) -> list[SyntheticWorkload]:
    """Return candidate 1-hop bridges (ETO Definition 5) of workloads that fail dominance.

    Enumerating all pairs gives ``O(n^2)`` bridges and ``O(n^4)`` edges (ETO Section 6.2 reports
    1.5 hours for 167 conv2d), so candidates are capped, per family:

    * each workload is paired only with its ``partners`` nearest workloads (L1 distance of log2
      extents) that fail dominance both ways: near shapes give cheap reuse on both sides;
    * a bridge whose iteration space is more than ``max_ratio`` times smaller than either
      generator is dropped (no reuse edge would reach it);
    * at most ``per_family * (workloads in the family)`` bridges are kept, those made by the
      most pairs first, then the larger ones (closer to their generators).

    Parameters
    ----------
    workloads
        The workloads to bridge.
    partners
        Nearest non-dominating partners considered per workload.
    per_family
        Cap on bridges per family, as a multiple of the family's workload count.
    max_ratio
        Largest iteration-space ratio a reuse edge may span.

    Returns
    -------
    list of SyntheticWorkload
        Bridges, none equal to an input workload, sorted by name.

    Examples
    --------
    >>> a = SyntheticWorkload("matmul", (64, 256, 128))
    >>> b = SyntheticWorkload("matmul", (128, 128, 128))
    >>> one_hop_bridges([a, b])
    [SyntheticWorkload(family='matmul', extents=(64, 128, 128))]
    """
    known = set(workloads)
    lr = math.log2(max_ratio)
    out: list[SyntheticWorkload] = []
    for fam, ws in sorted(_by_family(workloads).items()):
        if len(ws) < 2:
            continue
        x = np.log2(np.array([w.extents for w in ws], dtype=float))
        ge = (x[:, None, :] >= x[None, :, :]).all(axis=2)  # ge[i, j]: i dominates j
        incomparable = ~(ge | ge.T)
        dist = np.abs(x[:, None, :] - x[None, :, :]).sum(axis=2)
        dist[~incomparable] = np.inf
        counts: dict[tuple[int, ...], int] = {}
        k = min(partners, len(ws) - 1)
        nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]
        for i in range(len(ws)):
            for j in nearest[i]:
                if not incomparable[i, j] or j < i and i in nearest[j]:
                    continue  # not a pair, or already counted from j's side
                m = np.minimum(x[i], x[j])
                if max(x[i].sum(), x[j].sum()) - m.sum() > lr:
                    continue
                ext = bridge_extents(ws[i].extents, ws[j].extents)
                counts[ext] = counts.get(ext, 0) + 1
        ranked = sorted(counts, key=lambda e: (-counts[e], -sum(math.log2(v) for v in e), e))
        kept = [SyntheticWorkload(fam, e) for e in ranked if SyntheticWorkload(fam, e) not in known]
        out.extend(kept[: int(per_family * len(ws))])
    return sorted(out, key=lambda w: w.name)


def reuse_edges(
    sources: Sequence[SyntheticWorkload],
    targets: Sequence[SyntheticWorkload],
    *,
    max_ratio: float = 256.0,
) -> list[CostEdge]:
    """Return a reuse edge ``s -> t`` for every same-family pair where ``t`` dominates ``s``.

    ``trials = 10 + 50 * log(ratio) / log(max_ratio)`` and ``quality = 1 + 0.01 * log2(ratio)``
    where ``ratio`` is the iteration-space ratio ``|t| / |s|`` (at most ``max_ratio``): reusing
    a near shape is cheap and as good as a full search, a far one costs more and is a little
    slower.

    Examples
    --------
    >>> s = SyntheticWorkload("matmul", (64, 64, 64))
    >>> t = SyntheticWorkload("matmul", (128, 64, 64))
    >>> reuse_edges([s], [t])
    [CostEdge(source='matmul[64x64x64]', target='matmul[128x64x64]', trials=16.25, quality=1.01)]
    """
    if max_ratio <= 1:
        raise ConfigError(f"max_ratio must be > 1, got {max_ratio!r}")
    lr = math.log2(max_ratio)
    src_f, tgt_f = _by_family(sources), _by_family(targets)
    out: list[CostEdge] = []
    for fam in sorted(set(src_f) & set(tgt_f)):
        ss, ts = src_f[fam], tgt_f[fam]
        xs = np.log2(np.array([w.extents for w in ss], dtype=float))
        xt = np.log2(np.array([w.extents for w in ts], dtype=float))
        dom = (xt[None, :, :] >= xs[:, None, :]).all(axis=2)
        gap = xt.sum(axis=1)[None, :] - xs.sum(axis=1)[:, None]
        ok = dom & (gap > 0) & (gap <= lr + 1e-12)
        for i, j in zip(*np.nonzero(ok), strict=False):
            g = float(gap[i, j])
            out.append(
                CostEdge(ss[i].name, ts[j].name, trials=10.0 + 50.0 * g / lr, quality=1.0 + 0.01 * g)
            )
    return out


def synthetic_choice_graph(
    n_tasks: int,
    *,
    seed: int = 0,
    n_stored: int = 0,
    bridges: bool = True,
    partners: int = 8,
    per_family: float = 1.0,
    max_ratio: float = 256.0,
    quality_weight: float = DEFAULT_QUALITY_WEIGHT,
) -> tuple[nx.DiGraph, list[str]]:
    """Return a synthetic OC graph and its required task names.

    Parameters
    ----------
    n_tasks
        Required tasks.
    seed
        Seed of the workload generator.
    n_stored
        Extra workloads already in the store.
    bridges
        Whether to add 1-hop bridge candidates (:func:`one_hop_bridges`).
    partners, per_family, max_ratio
        Passed to :func:`one_hop_bridges` and :func:`reuse_edges`.
    quality_weight
        Passed to :func:`~tunecache.reuse.graph.build_choice_graph`.

    Examples
    --------
    >>> g, required = synthetic_choice_graph(20, seed=3)
    >>> len(required)
    20
    """
    tasks = synthetic_workloads(n_tasks, seed=seed)
    stored = synthetic_workloads(n_stored, seed=seed + 1_000_003, exclude=tasks)
    br = (one_hop_bridges(tasks + stored, partners=partners, per_family=per_family, max_ratio=max_ratio)
          if bridges else [])
    edges = reuse_edges(tasks + stored + br, tasks + br, max_ratio=max_ratio)
    g = build_choice_graph(
        {w.name: FULL_TRIALS for w in tasks},
        edges,
        bridges={w.name: FULL_TRIALS for w in br},
        stored=[w.name for w in stored],
        quality_weight=quality_weight,
    )
    return g, [w.name for w in tasks]


def random_choice_graph(rng: random.Random, *, max_bridges: int = 7) -> tuple[nx.DiGraph, list[str]]:
    """Return a small random OC graph (2-7 tasks, 1-``max_bridges`` bridges, 0-2 stored) and its tasks.

    Edge density, costs and qualities are drawn from ``rng``; reuse edges run in every
    direction (cycles included). Used to measure the Steiner approximation against the exact
    optimum (tests and ``tools/bench_plan.py``).
    """
    tasks = {f"t{i}": rng.choice([100.0, 500.0, 1000.0]) for i in range(rng.randint(2, 7))}
    bridges = {f"b{i}": rng.choice([100.0, 500.0, 1000.0]) for i in range(rng.randint(1, max_bridges))}
    stored = [f"s{i}" for i in range(rng.randint(0, 2))]
    p = rng.choice([0.2, 0.4, 0.7])
    edges = [
        CostEdge(s, t, rng.uniform(0, 1000) * rng.random(), rng.choice([1.0, 1.0, 1.1, 1.3]))
        for s in [*tasks, *bridges, *stored]
        for t in [*tasks, *bridges]
        if s != t and rng.random() < p
    ]
    return build_choice_graph(tasks, edges, bridges=bridges, stored=stored), sorted(tasks)
