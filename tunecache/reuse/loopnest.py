"""The major loop nest of a task (ETO Definition 1): which operator it is and its loop extents.

ETO (Zhao et al., PVLDB 15(2), 2022, Section 3) compares operators by their *major loop nest*
``L = sL ∪ rL``: the space loops and reduction loops of the block that does the main
computation. :func:`tunecache.tvm_layer.loopnest.analyze` finds that block in a TIR PrimFunc (what
MetaSchedule tunes) and returns a :class:`LoopNest`: a frozen, TVM-free value the reuse conditions
(:mod:`tunecache.reuse.conditions`) and bridge operators (:mod:`tunecache.reuse.bridge`) work on.

The operator family is read from the anchor block's iteration variables and buffer accesses,
not from names: a convolution reads its data with an index ``oh * stride + kh * dilation`` (a
space variable plus a reduction variable), a matmul multiplies two operands that share only the
reduction variable, a batch matmul's operands also share a space variable, a grouped convolution
reads input channels through the output-channel variable, a transposed convolution reads a
flipped kernel (``KH - 1 - kh``). Names only break ties between equally large blocks.

Canonical extents (space loops first, then reduction loops):

==================  ==================================================
family              extents
==================  ==================================================
conv1d              ``[N, K, OW, C, KW]``
conv2d              ``[N, K, OH, OW, C, KH, KW]`` (NCHW and NHWC alike)
conv3d              ``[N, K, OD, OH, OW, C, KD, KH, KW]``
conv2d_transpose    ``[N, K, OH, OW, C, KH, KW]`` (of the equivalent direct conv)
depthwise_conv2d    ``[N, K, OH, OW, KH, KW]``
group_conv2d        ``[N, G, K/G, OH, OW, C/G, KH, KW]``
matmul              ``[M, N, K]``
batch_matmul        ``[B, M, N, K]``
other               the anchor block's space then reduction extents, in block order
==================  ==================================================

``K`` is the number of output channels and ``C`` of input channels. A role spread over
several loops (a Linear layer on a ``[1, 128, 768]`` input has two ``M`` loops) contributes
the product of its loops; :attr:`LoopNest.roles` keeps the per-loop view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAMILIES", "LoopNest", "canonical_roles", "describe"]

#: Every family :func:`tunecache.tvm_layer.loopnest.analyze` can return.
FAMILIES = (
    "conv1d",
    "conv2d",
    "conv3d",
    "depthwise_conv2d",
    "group_conv2d",
    "conv2d_transpose",
    "matmul",
    "batch_matmul",
    "other",
)

_CONV_SPACE = {1: ("N", "K", "OW"), 2: ("N", "K", "OH", "OW"), 3: ("N", "K", "OD", "OH", "OW")}
_CONV_RED = {1: ("C", "KW"), 2: ("C", "KH", "KW"), 3: ("C", "KD", "KH", "KW")}
_CANONICAL: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "conv1d": (_CONV_SPACE[1], _CONV_RED[1]),
    "conv2d": (_CONV_SPACE[2], _CONV_RED[2]),
    "conv3d": (_CONV_SPACE[3], _CONV_RED[3]),
    "conv2d_transpose": (_CONV_SPACE[2], _CONV_RED[2]),
    "depthwise_conv2d": (_CONV_SPACE[2], ("KH", "KW")),
    "group_conv2d": (("N", "G", "K", "OH", "OW"), ("C", "KH", "KW")),
    "matmul": (("M", "N"), ("K",)),
    "batch_matmul": (("B", "M", "N"), ("K",)),
}


def canonical_roles(family: str) -> tuple[str, ...]:
    """Return the role names of ``family``'s canonical extents (empty for ``other``).

    Examples
    --------
    >>> canonical_roles("conv2d")
    ('N', 'K', 'OH', 'OW', 'C', 'KH', 'KW')
    >>> canonical_roles("batch_matmul")
    ('B', 'M', 'N', 'K')
    """
    space, red = _CANONICAL.get(family, ((), ()))
    return space + red


@dataclass(frozen=True)
class LoopNest:
    """The major loop nest of one task, as plain values.

    Attributes
    ----------
    family
        One of :data:`FAMILIES`.
    space, reduction
        Canonical space and reduction extents (see the module docstring).
    dtype
        Dtype of the anchor block's first input operand (its output dtype for ``other``).
    anchor
        Name of the anchor block (informational; never used for matching).
    signature
        Short digest of the shape-independent structure: for a recognised family, the layout,
        the role of every loop in block order, the dtypes and the channel multiplier (strides,
        dilations and padding are parameters, not structure); for ``other``, every block's
        computation with loop variables renamed and constants elided. Two nests with equal
        signatures compute "the same operator" at other sizes.
    layout
        Operand layouts, e.g. ``"NCHW/OIHW"``, ``"NHWC/HWIO"`` or ``"MK/KN"`` (transposed weight:
        ``"MK/NK"``); empty for ``other``.
    roles
        Role of each anchor iteration variable, in block order (``("N", "OH", "OW", "K", "KH",
        "KW", "C")`` for NHWC conv2d). ``"S"``/``"R"`` for ``other``.
    iter_extents
        Extent of each anchor iteration variable, in block order.
    params
        ``(name, value)`` pairs the loops do not determine: strides, dilations, padding
        (``(before..., after...)``), groups, channel multiplier, output dtype. Reuse never
        requires them equal; padding decides whether MetaSchedule inlines ``pad_temp``, so
        bridges mirror it.
    epilogue
        Shape-independent descriptions of the blocks fused after the anchor, in execution
        order: ``"relu"``, or ``"<op>:<broadcast>"`` for a binary op with another input, where
        the broadcast pattern aligns the input with the output's trailing dims (``x`` spans the
        dim, ``1`` is broadcast): ``"add:1x11"`` is a conv bias, ``"add:1xxx"`` a residual,
        ``"add:x"`` a dense bias. Used to mirror a fused task when materializing a bridge.
    """

    family: str
    space: tuple[int, ...]
    reduction: tuple[int, ...]
    dtype: str
    anchor: str
    signature: str
    layout: str = ""
    roles: tuple[str, ...] = ()
    iter_extents: tuple[int, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    epilogue: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"LoopNest.family must be one of {FAMILIES}, got {self.family!r}")
        for name in ("space", "reduction", "iter_extents"):
            value = getattr(self, name)
            if not all(isinstance(x, int) and x >= 1 for x in value):
                raise ValueError(f"LoopNest.{name} must hold integers >= 1, got {value!r}")

    @property
    def extents(self) -> tuple[int, ...]:
        """Return the canonical extents: space loops, then reduction loops."""
        return self.space + self.reduction

    @property
    def work(self) -> int:
        """Return the size of the iteration space (product of the extents)."""
        return math.prod(self.extents)

    def param(self, name: str, default: Any = None) -> Any:
        """Return the value of parameter ``name`` (see :attr:`params`)."""
        return dict(self.params).get(name, default)


def describe(nest: LoopNest) -> str:
    """Return a one-line human description, e.g. ``conv2d NCHW/OIHW [1, 64, ...] float32``."""
    return f"{nest.family} {nest.layout} {list(nest.extents)} {nest.dtype}".replace("  ", " ")
