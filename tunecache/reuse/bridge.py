"""Bridge operators (ETO Definition 5): extra tasks that let two non-dominating tasks reuse.

When neither of two same-type, same-sketch tasks ``a`` and ``b`` dominates the other, ETO
(Zhao et al., PVLDB 15(2), 2022, Section 6.2) adds a *bridge* ``g`` whose loop extents are the
element-wise minimum of theirs: both ``a`` and ``b`` dominate ``g``, so ``g`` can be tuned once
and reused by both. Parameters the loops do not determine take defaults (stride 1, dilation 1).

* :func:`bridge_extents` / :func:`bridge_candidates` are pure (no TVM);
* :func:`tunecache.tvm_layer.bridges.materialize_bridge` builds a real PrimFunc for a bridge,
  mirroring the source's layout, dtype, padding and fused epilogue (bias add, residual add,
  ReLU), because those change the sketch set MetaSchedule generates, and
  :func:`~tunecache.tvm_layer.bridges.check_bridge` verifies the bridge samples the decisions of
  the tasks it bridges.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from tunecache.reuse.loopnest import LoopNest

__all__ = ["bridge_candidates", "bridge_extents", "bridge_nest"]


def _extents_of(x: LoopNest | Sequence[int]) -> tuple[int, ...]:
    return x.extents if isinstance(x, LoopNest) else tuple(int(v) for v in x)


def bridge_extents(a: LoopNest | Sequence[int], b: LoopNest | Sequence[int]) -> tuple[int, ...]:
    """Return the extents of the bridge operator of ``a`` and ``b``: the element-wise minimum.

    Raises
    ------
    ValueError
        If the two loop nests have different lengths.

    Examples
    --------
    >>> bridge_extents([1, 64, 14, 14, 64, 3, 3], [1, 64, 28, 28, 64, 1, 1])
    (1, 64, 14, 14, 64, 1, 1)
    """
    ea, eb = _extents_of(a), _extents_of(b)
    if len(ea) != len(eb):
        raise ValueError(f"bridge_extents: loop nests differ in length: {list(ea)} vs {list(eb)}")
    return tuple(min(x, y) for x, y in zip(ea, eb, strict=False))


def bridge_nest(a: LoopNest, b: LoopNest) -> LoopNest:
    """Return the bridge of two same-type loop nests: ``a`` with :func:`bridge_extents` of both.

    Layout, dtype, padding and epilogue come from ``a`` (the planner only bridges nests of one
    reuse group, which agree on them).

    Examples
    --------
    >>> a = LoopNest("matmul", (64, 256), (128,), "float32", "C", "mm")
    >>> bridge_nest(a, LoopNest("matmul", (128, 128), (128,), "float32", "C", "mm")).extents
    (64, 128, 128)
    """
    ext = bridge_extents(a, b)
    nsp = len(a.space)
    return replace(a, space=tuple(ext[:nsp]), reduction=tuple(ext[nsp:]))


def bridge_candidates(
    extents: Iterable[LoopNest | Sequence[int]], hops: int = 1
) -> list[tuple[int, ...]]:
    """Return the ``hops``-hop bridge set of a group of same-type, same-sketch loop nests.

    ETO defines ``B_k`` as the bridges of every pair in ``A ∪ B_1 ∪ ... ∪ B_{k-1}`` that are
    not already in that union; it uses ``hops=1`` (the closure is at most ``m - 1`` hops for
    ``m`` loops, and grows fast). The caller groups nests by family, layout and sketch first:
    this function only compares extents.

    Parameters
    ----------
    extents
        Loop nests (or their extents), all of one length.
    hops
        How many rounds of bridging; ``1`` is ETO's default.

    Returns
    -------
    list of tuple of int
        New bridge extents in discovery order (hop 1 first), without duplicates and without
        any extents of the input.

    Examples
    --------
    >>> bridge_candidates([[1, 64, 14, 14, 64, 3, 3], [1, 64, 28, 28, 64, 1, 1]])
    [(1, 64, 14, 14, 64, 1, 1)]
    """
    if hops < 1:
        raise ValueError(f"bridge_candidates: hops must be >= 1, got {hops}")
    known: list[tuple[int, ...]] = []
    for e in extents:
        t = _extents_of(e)
        if t not in known:
            known.append(t)
    if len({len(t) for t in known}) > 1:
        raise ValueError("bridge_candidates: all loop nests must have the same number of loops")
    found: list[tuple[int, ...]] = []
    for _ in range(hops):
        new: list[tuple[int, ...]] = []
        pool = known + found
        for i in range(len(pool)):
            for j in range(i + 1, len(pool)):
                g = bridge_extents(pool[i], pool[j])
                if g not in pool and g not in new:
                    new.append(g)
        if not new:
            break
        found.extend(new)
    return found
