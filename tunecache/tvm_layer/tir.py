"""Reading TIR: the PrimFuncs of a module, the blocks of a PrimFunc, walks over expressions.

TVM is not imported at module import time (``import tunecache`` must not import TVM): the
functions import it when called, :func:`primfuncs` and :func:`first_primfunc` through
:func:`tunecache.tvm_layer.load_tvm`; the block and expression helpers expect their caller to
have loaded TVM already (they receive TVM objects). Used by the loop-nest analysis of
:mod:`tunecache.tvm_layer.loopnest` and by every module that needs "the task's PrimFunc".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tunecache.tvm_layer import load_tvm

__all__ = [
    "primfuncs",
    "first_primfunc",
    "Block",
    "collect_blocks",
    "reads_along_innermost",
    "region_buffer",
    "iter_sblocks",
    "const_int",
    "load_class",
    "call_class",
    "load_buffer",
    "buffer_shape",
    "buffer_dtype",
    "argument_bytes",
    "estimated_flops",
    "expr_children",
    "walk_expr",
    "buffer_loads",
    "vars_in",
    "linear_form",
]

# --------------------------------------------------------------------------------------------
# PrimFuncs of a module


def primfuncs(mod: Any) -> list[tuple[str, Any]]:
    """Return the PrimFuncs of an IRModule with their global names, in the module's order.

    Parameters
    ----------
    mod
        A ``tvm.IRModule``.

    Returns
    -------
    list of (str, tvm.tirx.PrimFunc)
        Empty when the module holds no PrimFunc (e.g. a Relax module not yet legalized).

    Examples
    --------
    >>> import tvm                                                  # doctest: +SKIP
    >>> from tvm import te                                          # doctest: +SKIP
    >>> a = te.placeholder((4,), name="a")                          # doctest: +SKIP
    >>> b = te.compute((4,), lambda i: a[i] * 2, name="b")          # doctest: +SKIP
    >>> mod = tvm.IRModule({"main": te.create_prim_func([a, b])})   # doctest: +SKIP
    >>> [name for name, _ in primfuncs(mod)]                        # doctest: +SKIP
    ['main']
    """
    tvm = load_tvm()
    return [
        (gv.name_hint, func)
        for gv, func in mod.functions.items()
        if isinstance(func, tvm.tirx.PrimFunc)
    ]


def first_primfunc(mod: Any) -> Any:
    """Return the first PrimFunc of an IRModule, or ``mod`` itself when it is a PrimFunc.

    A task's module (``TaskInfo.mod``, a MetaSchedule workload) holds exactly one PrimFunc;
    this is the one tuning, feature extraction and workload description read.

    Parameters
    ----------
    mod
        A ``tvm.IRModule`` or a ``tvm.tirx.PrimFunc``.

    Returns
    -------
    tvm.tirx.PrimFunc
        The first PrimFunc in the module's order.

    Raises
    ------
    ValueError
        If the module holds no PrimFunc.

    Examples
    --------
    >>> import tvm                                                  # doctest: +SKIP
    >>> from tvm import te                                          # doctest: +SKIP
    >>> a = te.placeholder((4,), name="a")                          # doctest: +SKIP
    >>> b = te.compute((4,), lambda i: a[i] * 2, name="b")          # doctest: +SKIP
    >>> func = te.create_prim_func([a, b])                          # doctest: +SKIP
    >>> first_primfunc(tvm.IRModule({"main": func})).same_as(func)  # doctest: +SKIP
    True
    """
    tvm = load_tvm()
    if isinstance(mod, tvm.tirx.PrimFunc):
        return mod
    for _, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            return func
    raise ValueError("the module holds no PrimFunc")


# --------------------------------------------------------------------------------------------
# Blocks and expressions (TVM imported by the caller, through load_tvm, before these run)


@dataclass
class Block:
    """One block of a PrimFunc with its iterators, their static extents and kinds."""

    block: Any  # tvm.s_tir.SBlock
    name: str
    iters: list[Any]  # IterVar
    extents: list[int]
    kinds: list[str]  # "S" / "R" / "O"
    store: Any | None  # BufferStore or None

    @property
    def work(self) -> int:
        return math.prod(self.extents) if self.extents else 1

    @property
    def is_reduction(self) -> bool:
        return "R" in self.kinds

    @property
    def vars(self) -> list[Any]:
        return [iv.var for iv in self.iters]

    @property
    def extent_of(self) -> dict[Any, int]:
        return {iv.var: e for iv, e in zip(self.iters, self.extents, strict=False)}


def const_int(expr: Any, what: str) -> int:
    """Return a static integer (an ``IntImm`` or int); ``what`` names it in the error.

    Raises
    ------
    UnsupportedModelError
        If ``expr`` is symbolic (a dynamic shape).
    """
    from tvm.tirx import IntImm

    if isinstance(expr, IntImm):
        return int(expr.value)
    if isinstance(expr, int):
        return expr
    from tunecache.errors import UnsupportedModelError

    raise UnsupportedModelError(
        f"{what} is symbolic ({expr}); tunecache only plans reuse for static shapes: "
        "export the model with concrete input shapes"
    )


def iter_sblocks(func: Any) -> Iterator[Any]:
    """Yield every ``SBlock`` of a PrimFunc's body in program order, each before the blocks inside it."""
    from tvm.s_tir import SBlock, SBlockRealize

    def visit(stmt: Any) -> Iterator[Any]:
        if stmt is None:
            return
        if isinstance(stmt, SBlockRealize):
            yield from visit(stmt.block)
            return
        if isinstance(stmt, SBlock):
            yield stmt
            yield from visit(stmt.body)
            return
        if hasattr(stmt, "seq"):
            for s in stmt.seq:
                yield from visit(s)
            return
        for attr in ("body", "then_case", "else_case"):
            if hasattr(stmt, attr):
                yield from visit(getattr(stmt, attr))

    yield from visit(func.body)


def collect_blocks(func: Any) -> list[Block]:
    """Return the blocks of a PrimFunc that have iterators or store a value, in program order."""
    from tvm.tirx import BufferStore, IterVar

    out: list[Block] = []
    for stmt in iter_sblocks(func):
        if stmt.iter_vars or isinstance(stmt.body, BufferStore):
            iters = list(stmt.iter_vars)
            kinds = []
            for iv in iters:
                t = int(iv.iter_type)
                kinds.append("S" if t == IterVar.DataPar else "R" if t == IterVar.CommReduce else "O")
            extents = [
                const_int(iv.dom.extent, f"extent of {iv.var} in block {stmt.name_hint}")
                for iv in iters
            ]
            store = stmt.body if isinstance(stmt.body, BufferStore) else None
            out.append(Block(stmt, str(stmt.name_hint), iters, extents, kinds, store))
    return out


def region_buffer(region: Any) -> Any:
    """The buffer of a block's read or write region (``source`` in TVM 0.27, ``buffer`` before)."""
    return region.source if hasattr(region, "source") else region.buffer


def reads_along_innermost(mod: Any, consumer: str, producer: str) -> bool | None:
    """Whether block ``consumer`` reads what block ``producer``, a padding (a condition in its
    value), writes along its innermost spatial iterator (the axis a CPU schedule vectorizes), in
    dimensions that condition does not test; ``None`` when either block is missing. ``False``
    for a producer with no condition (a transpose inlined might be read against its layout).

    A depthwise NHWC convolution reads its padded input ``pad_temp[n, y + ry, x + rx, c]`` along
    its output channel ``c``, which no padding bound tests: inlined, one condition serves a
    whole vector load. A dense NHWC convolution reads ``pad_temp[n, y + ry, x + rx, rc]``: a
    scalar per multiply-add, whatever its vector axis; an NCHW one along ``x``, which the
    padding tests lane by lane.
    """
    from tvm.tirx import BufferStore, IterVar, Select

    Call = call_class()
    func = first_primfunc(mod)
    blocks = {str(b.name_hint): b for b in iter_sblocks(func)}
    cons, prod = blocks.get(consumer), blocks.get(producer)
    if cons is None or prod is None:
        return None
    spatial = [iv.var for iv in cons.iter_vars if int(iv.iter_type) == IterVar.DataPar]
    if not spatial or not isinstance(prod.body, BufferStore):
        return False
    tested: set[Any] = set()  # the producer's variables its conditions read
    for e in walk_expr(prod.body.value):
        if isinstance(e, Select):
            tested |= vars_in(e.condition)
        elif isinstance(e, Call) and str(getattr(e.op, "name", "")).endswith(".if_then_else"):
            tested |= vars_in(e.args[0])
    if not tested:
        return False
    padded = {k for k, index in enumerate(prod.body.indices) if any(v in tested for v in vars_in(index))}
    inner = spatial[-1]
    along = False
    for region in cons.reads:
        if not region_buffer(region).same_as(prod.body.buffer):
            continue
        for k, rng in enumerate(region.region):
            if any(inner.same_as(v) for v in vars_in(rng.min)):
                if k in padded:
                    return False
                along = True
    return along


def load_class() -> Any:
    """Return TIR's buffer-load expression class."""
    from tvm.ir.expr import TensorLoad  # TVM 0.27: tirx loads are TensorLoad(source, indices)

    return TensorLoad


def call_class() -> Any:
    """Return TIR's call expression class."""
    from tvm.ir.expr import Call

    return Call


def load_buffer(load: Any) -> Any:
    """Return the buffer a load reads (``source`` in TVM 0.27)."""
    return load.source


def buffer_shape(buffer: Any) -> list[int]:
    """Return a buffer's static shape (``UnsupportedModelError`` when symbolic)."""
    return [const_int(s, "buffer shape") for s in buffer.ty.shape]


def buffer_dtype(buffer: Any) -> str:
    """Return a buffer's dtype string."""
    return str(buffer.ty.dtype)


def argument_bytes(mod: Any) -> int:
    """Return the bytes of a task's arguments (its first PrimFunc's buffer parameters: inputs,
    weights, output), or 0 when a shape is symbolic."""
    tvm = load_tvm()
    total = 0
    for param in first_primfunc(mod).params:
        if not hasattr(param, "shape"):
            continue  # a scalar
        dims = list(param.shape)
        if not all(type(d).__name__ == "IntImm" for d in dims):
            return 0
        dtype = tvm.DataType(str(param.dtype))
        total += math.prod(int(d) for d in dims) * dtype.bits * max(1, dtype.lanes) // 8
    return total


def estimated_flops(mod: Any) -> float | None:
    """Return TVM's static count of the arithmetic a TIR module executes
    (``s_tir.analysis.estimate_tir_flops``: every loop's extent times its body's operations,
    recomputation included), or ``None`` where TVM cannot count it (a symbolic extent)."""
    load_tvm()
    from tvm.s_tir.analysis import estimate_tir_flops

    try:
        flops = float(estimate_tir_flops(mod))
    except Exception:  # noqa: BLE001 - TVM raises TVMError (and others) on what it cannot count
        return None
    return flops if flops > 0 and math.isfinite(flops) else None


def expr_children(expr: Any) -> list[Any]:
    """Return the direct sub-expressions of a TIR expression (a load's indices, not its buffer)."""
    from tvm.tirx import Cast, Let, Select

    BufferLoad, Call = load_class(), call_class()

    if isinstance(expr, BufferLoad):
        return list(expr.indices)
    if isinstance(expr, Cast):
        return [expr.value]
    if isinstance(expr, Call):
        return list(expr.args)
    if isinstance(expr, Select):
        return [expr.condition, expr.true_value, expr.false_value]
    if isinstance(expr, Let):
        return [expr.value, expr.body]
    kids = []
    for attr in ("a", "b"):
        if hasattr(expr, attr):
            kids.append(getattr(expr, attr))
    return kids


def walk_expr(expr: Any) -> Iterator[Any]:
    """Yield ``expr`` and all its sub-expressions, depth first."""
    yield expr
    for c in expr_children(expr):
        yield from walk_expr(c)


def buffer_loads(expr: Any) -> list[Any]:
    """Return the buffer loads in ``expr`` (index expressions included), depth first."""
    BufferLoad = load_class()
    return [e for e in walk_expr(expr) if isinstance(e, BufferLoad)]


def vars_in(expr: Any) -> set[Any]:
    """Return the variables ``expr`` reads."""
    from tvm.tirx import Var

    return {e for e in walk_expr(expr) if isinstance(e, Var)}


def linear_form(expr: Any) -> tuple[dict[Any, int], int] | None:
    """Decompose ``expr`` as ``sum(coef * var) + const``; ``None`` when it is not linear."""
    from tvm.tirx import Add, Cast, IntImm, Mul, Sub, Var

    if isinstance(expr, IntImm):
        return {}, int(expr.value)
    if isinstance(expr, Var):
        return {expr: 1}, 0
    if isinstance(expr, Cast):
        return linear_form(expr.value)
    if isinstance(expr, (Add, Sub)):
        a, b = linear_form(expr.a), linear_form(expr.b)
        if a is None or b is None:
            return None
        sign = 1 if isinstance(expr, Add) else -1
        coefs = dict(a[0])
        for v, c in b[0].items():
            coefs[v] = coefs.get(v, 0) + sign * c
        return {v: c for v, c in coefs.items() if c != 0}, a[1] + sign * b[1]
    if isinstance(expr, Mul):
        a, b = linear_form(expr.a), linear_form(expr.b)
        if a is None or b is None:
            return None
        if not a[0]:
            a, b = b, a
        if b[0]:
            return None  # var * var
        return {v: c * b[1] for v, c in a[0].items()}, a[1] * b[1]
    return None
