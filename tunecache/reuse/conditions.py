"""ETO's reuse conditions (Definition 2): when one task may reuse another's tuned program.

Zhao et al., "Efficient Tensor Program Optimization via Information Reuse", PVLDB 15(2), 2022,
Section 3. Two operators form a *reuse pair* when

1. they are of the same type and have the same sketch set, and
2. the extents of one major loop nest dominate the other's, loop by loop.

Here "same type" means the same :attr:`LoopNest.family`, dtype, layout and structural
signature (a conv2d in NCHW and one in NHWC compute the same thing, but a trace tiles their
loops in another order). The sketch sets are compared through their decision signatures
(:func:`tunecache.tvm_layer.sketch.decision_signature`): ETO's sketch condition with the sketch
instructions that sample nothing left out, so a convolution with a fused residual ``add`` and
``relu`` and one without can reuse each other (the narrowed search carries the decisions onto
the target's own sketch). :func:`tunecache.tvm_layer.sketch.sketch_signature` is the strict form.
Pure functions, no TVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tunecache.reuse.loopnest import LoopNest

__all__ = ["ReuseVerdict", "dominates", "can_reuse"]


@dataclass(frozen=True)
class ReuseVerdict:
    """Whether two tasks satisfy ETO's reuse conditions, and why.

    Attributes
    ----------
    ok
        True when the pair is a reuse pair.
    reason
        When ``ok``: ``"a dominates b"``, ``"b dominates a"`` or ``"same extents"``.
        Otherwise the first condition that failed: ``"different family"``,
        ``"different dtype"``, ``"different layout"``, ``"different structure"``,
        ``"different sketch"``, ``"different rank"`` or ``"no dominance"``.
    detail
        The values that differed, for a person reading a plan.
    """

    ok: bool
    reason: str
    detail: str = ""

    def __bool__(self) -> bool:
        return self.ok


def dominates(a_extents: Sequence[int], b_extents: Sequence[int]) -> bool:
    """Return True when every extent of ``a`` is >= the matching extent of ``b``.

    Loop nests of different lengths never dominate each other.

    Examples
    --------
    >>> dominates([1, 64, 28, 28, 64, 3, 3], [1, 64, 14, 14, 64, 3, 3])
    True
    >>> dominates([1, 64, 14, 14, 64, 3, 3], [1, 64, 28, 28, 64, 1, 1])
    False
    """
    a, b = tuple(a_extents), tuple(b_extents)
    return len(a) == len(b) and all(x >= y for x, y in zip(a, b, strict=False))


def can_reuse(a: LoopNest, b: LoopNest, sketch_a: str, sketch_b: str) -> ReuseVerdict:
    """Check ETO's reuse conditions (Definition 2) for the pair ``(a, b)``.

    The conditions are symmetric: the verdict says which side dominates.

    Parameters
    ----------
    a, b
        Major loop nests, from :func:`tunecache.reuse.loopnest.analyze`.
    sketch_a, sketch_b
        Their decision signatures, from :func:`tunecache.tvm_layer.sketch.decision_signature`
        (or the strict :func:`tunecache.tvm_layer.sketch.sketch_signature`; either way, for
        the same target).

    Returns
    -------
    ReuseVerdict
        ``ok`` and the reason (the first failed condition, checked in the order family,
        dtype, layout, structure, sketch, rank, dominance).

    Examples
    --------
    >>> x = LoopNest("conv2d", (1, 64, 14, 14), (64, 3, 3), "float32", "conv", "s")
    >>> y = LoopNest("conv2d", (1, 64, 28, 28), (64, 1, 1), "float32", "conv", "s")
    >>> can_reuse(x, y, "k", "k").reason
    'no dominance'
    """
    checks = (
        ("different family", a.family, b.family),
        ("different dtype", a.dtype, b.dtype),
        ("different layout", a.layout, b.layout),
        ("different structure", a.signature, b.signature),
        ("different sketch", sketch_a, sketch_b),
    )
    for reason, va, vb in checks:
        if va != vb:
            return ReuseVerdict(False, reason, f"{va!r} vs {vb!r}")
    ea, eb = a.extents, b.extents
    if len(ea) != len(eb):
        return ReuseVerdict(False, "different rank", f"{len(ea)} loops vs {len(eb)}")
    a_dom, b_dom = dominates(ea, eb), dominates(eb, ea)
    if a_dom and b_dom:
        return ReuseVerdict(True, "same extents", str(list(ea)))
    if a_dom:
        return ReuseVerdict(True, "a dominates b", f"{list(ea)} >= {list(eb)}")
    if b_dom:
        return ReuseVerdict(True, "b dominates a", f"{list(eb)} >= {list(ea)}")
    return ReuseVerdict(False, "no dominance", f"{list(ea)} vs {list(eb)}")
