"""The TIR side of loop-nest analysis: :func:`analyze` walks a PrimFunc and returns the
TVM-free :class:`~tunecache.reuse.loopnest.LoopNest` of its major block (ETO Definition 1; the
families and canonical extents are documented in :mod:`tunecache.reuse.loopnest`).

This module classifies the operator (anchor selection, convolution and matmul roles, padding,
epilogue, the shape-independent signature); reading TIR (blocks, loads, linear index forms) is
in :mod:`tunecache.tvm_layer.tir`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tunecache.reuse.loopnest import _CANONICAL, LoopNest
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.tir import (
    Block,
    buffer_dtype,
    buffer_loads,
    buffer_shape,
    call_class,
    collect_blocks,
    expr_children,
    linear_form,
    load_buffer,
    load_class,
    primfuncs,
    vars_in,
    walk_expr,
)

__all__ = ["analyze"]

# --------------------------------------------------------------------------------------------
# The PrimFunc to analyze (no TVM import at module level: callers import TVM through load_tvm)


def _as_primfunc(mod_or_func: Any) -> Any:
    """Return the PrimFunc to analyze: ``mod_or_func`` itself, the module's only PrimFunc, or
    the one named ``main`` (stricter than :func:`~tunecache.tvm_layer.tir.first_primfunc`,
    which takes the first: a module of several kernels is ambiguous here)."""
    tvm = load_tvm()
    from tvm.tirx import PrimFunc

    if isinstance(mod_or_func, PrimFunc):
        return mod_or_func
    if isinstance(mod_or_func, tvm.IRModule):
        funcs = primfuncs(mod_or_func)
        if not funcs:
            raise ValueError("analyze: the IRModule holds no PrimFunc (legalize and fuse it first)")
        for name, f in funcs:
            if name == "main":
                return f
        if len(funcs) > 1:
            raise ValueError(
                f"analyze: the IRModule holds {len(funcs)} PrimFuncs "
                f"({', '.join(n for n, _ in funcs)}) and none is named 'main'; pass one PrimFunc"
            )
        return funcs[0][1]
    raise TypeError(f"analyze expects a tvm IRModule or PrimFunc, got {type(mod_or_func).__name__}")


# --------------------------------------------------------------------------------------------
# Anchor selection

_NAME_HINTS = ("conv", "matmul", "dense", "gemm", "bmm")


def _pick_anchor(blocks: list[Block]) -> Block:
    if not blocks:
        raise ValueError("analyze: the PrimFunc has no computation block")
    reductions = [b for b in blocks if b.is_reduction and b.store is not None]
    pool = reductions or [b for b in blocks if b.store is not None] or blocks

    def score(b: Block) -> tuple[int, int]:
        hinted = any(h in b.name.lower() for h in _NAME_HINTS)
        return (b.work, int(hinted))

    return max(pool, key=score)


# --------------------------------------------------------------------------------------------
# Classification


@dataclass
class _Result:
    family: str
    roles: dict[Any, str]  # iter var -> role
    layout: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    dtype: str = ""
    role_sizes: dict[str, int] = field(default_factory=dict)  # overrides per-loop products


def _strip_operand(expr: Any) -> Any | None:
    """Return the single BufferLoad an operand of the product reads (through casts etc.)."""
    loads = buffer_loads(expr)
    return loads[0] if len(loads) == 1 else None


def _product_operands(store: Any) -> tuple[Any, Any] | None:
    """For ``out = out + x * y`` return the loads ``x`` and ``y``, else ``None``."""
    from tvm.tirx import Add, Cast, Mul

    BufferLoad = load_class()
    value = store.value
    if not isinstance(value, Add):
        return None
    acc, term = value.a, value.b
    if not (isinstance(acc, BufferLoad) and load_buffer(acc).same_as(store.buffer)):
        acc, term = term, acc
        if not (isinstance(acc, BufferLoad) and load_buffer(acc).same_as(store.buffer)):
            return None
    while isinstance(term, Cast):
        term = term.value
    if not isinstance(term, Mul):
        return None
    x, y = _strip_operand(term.a), _strip_operand(term.b)
    if x is None or y is None:
        return None
    if load_buffer(x).same_as(store.buffer) or load_buffer(y).same_as(store.buffer):
        return None
    return x, y


def _producer(blocks: list[Block], buffer: Any) -> Block | None:
    for b in blocks:
        if b.store is not None and b.store.buffer.same_as(buffer):
            return b
    return None


def _is_flipped_kernel(blocks: list[Block], weight_load: Any) -> bool:
    """True when the weight is a block's copy of another buffer read as ``const - var``."""
    prod = _producer(blocks, load_buffer(weight_load))
    if prod is None:
        return False
    assert prod.store is not None  # _producer only returns blocks that store
    for load in buffer_loads(prod.store.value):
        for idx in load.indices:
            lin = linear_form(idx)
            if lin and len(lin[0]) == 1 and next(iter(lin[0].values())) < 0 and lin[1] > 0:
                return True
    return False


def _dilate_factors(blocks: list[Block], buffer: Any, rank: int) -> tuple[int, ...]:
    from tvm.tirx import FloorDiv, IntImm

    seen = 0
    while seen < 4:
        prod = _producer(blocks, buffer)
        if prod is None:
            break
        assert prod.store is not None  # _producer only returns blocks that store
        factors = [
            int(e.b.value)
            for ld in buffer_loads(prod.store.value)
            for idx in ld.indices
            for e in walk_expr(idx)
            if isinstance(e, FloorDiv) and isinstance(e.b, IntImm)
        ]
        if len(factors) >= rank:
            return tuple(factors[-rank:])
        srcs = buffer_loads(prod.store.value)
        if len(srcs) != 1:
            break
        buffer, seen = load_buffer(srcs[0]), seen + 1
    return (1,) * rank


def _among(v: Any, items: Any) -> bool:
    return any(v.same_as(x) for x in items)


def _classify_conv(
    blocks: list[Block], anchor: Block, kind: dict[Any, str], x: Any, w: Any
) -> _Result | None:
    """Classify a product whose operand ``x`` has window indices (``oh*s + kh*d``)."""
    windows: list[tuple[Any, Any, int, int]] = []  # (space var, red var, stride, dilation)
    window_dims: list[int] = []
    w_vars = set().union(set(), *(vars_in(i) for i in w.indices))
    for dim, idx in enumerate(x.indices):
        lin = linear_form(idx)
        if lin is None:
            continue
        coefs = lin[0]
        sp = [v for v in coefs if kind.get(v) == "S"]
        rd = [v for v in coefs if kind.get(v) == "R"]
        # A window pairs an output position (absent from the weight) with a kernel offset;
        # ``ff + rc`` in a depthwise conv pairs the output channel (read by the weight).
        if (
            len(sp) == 1
            and len(rd) == 1
            and len(coefs) == 2
            and coefs[sp[0]] > 0
            and coefs[rd[0]] > 0
            and sp[0] not in w_vars
        ):
            windows.append((sp[0], rd[0], coefs[sp[0]], coefs[rd[0]]))
            window_dims.append(dim)
    rank = len(windows)
    if not 1 <= rank <= 3:
        return None
    assert anchor.store is not None  # analyze() only classifies an anchor that stores
    out_vars = list(anchor.store.indices)
    if not all(kind.get(v) == "S" for v in out_vars if hasattr(v, "name")):
        return None
    window_space = [s for s, _, _, _ in windows]
    window_red = [r for _, r, _, _ in windows]
    roles: dict[Any, str] = {}
    space_names = ("OD", "OH", "OW")[3 - rank:]
    kernel_names = ("KD", "KH", "KW")[3 - rank:]
    for (s, r, _, _), sn, kn in zip(windows, space_names, kernel_names, strict=False):
        roles[s], roles[r] = sn, kn
    # The output channel: the one space variable (outside the windows) the weight reads.
    out_chan = [
        v for v in anchor.vars if kind[v] == "S" and v in w_vars and not _among(v, window_space)
    ]
    if len(out_chan) != 1:
        return None
    k_var = out_chan[0]
    roles[k_var] = "K"
    # The other dims of x: the input-channel dim (a reduction variable, or the output channel
    # itself in a grouped conv) and the batch dims.
    chan_dim, chan_vars = None, set()
    for d, idx in enumerate(x.indices):
        if d in window_dims:
            continue
        vs = vars_in(idx)
        if any(kind.get(v) == "R" for v in vs) or _among(k_var, vs):
            if chan_dim is not None:
                return None
            chan_dim, chan_vars = d, vs
        else:
            for v in vs:
                if kind.get(v) == "S":
                    roles[v] = "N"
    red_chan = [v for v in chan_vars if kind.get(v) == "R" and not _among(v, window_red)]
    grouped = _among(k_var, chan_vars)
    if len(red_chan) > 1 or chan_dim is None:
        return None
    for v in red_chan:
        roles[v] = "C"
    if any(v not in roles for v in anchor.vars):
        return None  # a loop with no role in a convolution
    params: dict[str, Any] = {
        "strides": tuple(s for _, _, s, _ in windows),
        "dilations": tuple(d for _, _, _, d in windows),
        "padding": _padding(blocks, x, window_dims) or (0,) * (2 * rank),
    }
    # layouts from the order of dims in the output and weight indices
    letters = {"N": "N", "K": "C", "OD": "D", "OH": "H", "OW": "W"}
    layout_out = "".join(letters.get(roles.get(v, ""), "?") for v in out_vars if hasattr(v, "name"))
    if "N" not in layout_out:
        layout_out = "N" + layout_out  # unbatched conv: treat as batch 1 at the front
    w_letters = {"K": "O", "C": "I", "KD": "D", "KH": "H", "KW": "W"}
    layout_w = ""
    for idx in w.indices:
        vs = vars_in(idx)
        rs = [roles.get(v) for v in vs]
        layout_w += "".join(w_letters.get(r, "") for r in rs if r in w_letters) or "I"
    layout = f"{layout_out}/{layout_w}"
    family = {1: "conv1d", 2: "conv2d", 3: "conv3d"}[rank]
    role_sizes: dict[str, int] = {}
    if grouped:
        if rank != 2:
            return None
        c_total = buffer_shape(load_buffer(x))[chan_dim]
        c_per_group = anchor.extent_of[red_chan[0]] if red_chan else 1
        groups = c_total // c_per_group
        k_total = anchor.extent_of[k_var]
        params["groups"] = groups
        if c_per_group == 1:
            family = "depthwise_conv2d"
            params["channel_multiplier"] = k_total // groups
        else:
            family = "group_conv2d"
            role_sizes = {"G": groups, "K": k_total // groups}
    elif _is_flipped_kernel(blocks, w):
        if rank != 2:
            return None
        family = "conv2d_transpose"
        # The anchor is a stride-1 conv over the dilated input; the transpose's stride is the
        # dilation factor of the data (``x[h // s]`` in the producer chain).
        params["strides"] = _dilate_factors(blocks, load_buffer(x), rank)
    return _Result(family, roles, layout, params, buffer_dtype(load_buffer(x)), role_sizes)


def _classify_matmul(anchor: Block, kind: dict[Any, str], a: Any, b: Any) -> _Result | None:
    a_vars = set().union(set(), *(vars_in(i) for i in a.indices))
    b_vars = set().union(set(), *(vars_in(i) for i in b.indices))
    roles: dict[Any, str] = {}
    for v in anchor.vars:
        in_a, in_b = v in a_vars, v in b_vars
        if kind[v] == "R":
            if not (in_a and in_b):
                return None
            roles[v] = "K"
        elif kind[v] == "S":
            if in_a and in_b:
                roles[v] = "B"
            elif in_a:
                roles[v] = "M"
            elif in_b:
                roles[v] = "N"
            else:
                return None
        else:
            return None
    present = set(roles.values())
    if "K" not in present or not ({"M", "N"} & present):
        return None
    if "B" in present and not ({"M", "N"} <= present):
        return None
    family = "batch_matmul" if "B" in present else "matmul"

    def operand_layout(load: Any, letters: str) -> str:
        text = ""
        for idx in load.indices:
            vs = vars_in(idx)
            rs = {roles.get(v) for v in vs}
            text += "".join(r for r in ("B", "M", "N", "K") if r in rs and r in letters) or "1"
        return text

    layout = f"{operand_layout(a, 'BMK')}/{operand_layout(b, 'BNK')}"
    return _Result(family, roles, layout, {}, buffer_dtype(load_buffer(a)))


# --------------------------------------------------------------------------------------------
# Structural text (shape independent)


def _expr_text(expr: Any, names: dict[Any, str], bufs: dict[Any, str]) -> str:
    from tvm.tirx import Cast, FloatImm, IntImm, Var

    BufferLoad, Call = load_class(), call_class()
    if isinstance(expr, BufferLoad):
        key = _buf_key(load_buffer(expr), bufs)
        return f"{key}[{','.join(_expr_text(i, names, bufs) for i in expr.indices)}]"
    if isinstance(expr, Var):
        return names.get(expr, "v")
    if isinstance(expr, (IntImm, FloatImm)):
        return f"#{expr.ty}"
    if isinstance(expr, Cast):
        return f"cast<{expr.ty}>({_expr_text(expr.value, names, bufs)})"
    if isinstance(expr, Call):
        op = getattr(expr.op, "name", str(expr.op))
        return f"{op}({','.join(_expr_text(a, names, bufs) for a in expr.args)})"
    kids = expr_children(expr)
    return f"{type(expr).__name__}({','.join(_expr_text(k, names, bufs) for k in kids)})"


def _buf_key(buffer: Any, bufs: dict[Any, str]) -> str:
    for k, v in bufs.items():
        if k.same_as(buffer):
            return v
    name = f"b{len(bufs)}"
    bufs[buffer] = name
    return name


def _block_text(block: Block, names: dict[Any, str], bufs: dict[Any, str]) -> str:
    if block.store is None:
        return f"{''.join(block.kinds)}:?"
    store = block.store
    init = ""
    if block.block.init is not None and hasattr(block.block.init, "value"):
        init = "|init=" + _expr_text(block.block.init.value, names, bufs)
    index = ",".join(_expr_text(i, names, bufs) for i in store.indices)
    lhs = f"{_buf_key(store.buffer, bufs)}[{index}]"
    return f"{''.join(block.kinds)}:{lhs}={_expr_text(store.value, names, bufs)}{init}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# Epilogue (blocks that consume the anchor's output)


def _broadcast_pattern(operand_shape: list[int], out_shape: list[int]) -> str:
    """Describe how an operand broadcasts against the output, aligned at the trailing dims.

    ``x``: the operand spans that output dim; ``1``: it is broadcast (unit). A bias of shape
    ``(1, C, 1, 1)`` against ``(1, C, H, W)`` gives ``"1x11"``; a residual gives ``"1xxx"``.
    """
    if len(operand_shape) > len(out_shape):
        return "?" * len(operand_shape)
    tail = out_shape[len(out_shape) - len(operand_shape):]
    if len(tail) != len(operand_shape):
        return "?" * len(operand_shape)
    return "".join(
        "x" if o == t and t != 1 else "1" if o == 1 else "?" for o, t in zip(operand_shape, tail, strict=False)
    )


def _epilogue(blocks: list[Block], anchor: Block) -> tuple[str, ...]:
    """Describe the blocks computed from the anchor's output, in order (shape independent)."""
    from tvm.tirx import FloatImm, IntImm, Max

    Call = call_class()
    idx = next(i for i, b in enumerate(blocks) if b is anchor)
    produced = [anchor.store.buffer] if anchor.store is not None else []
    out_shape = buffer_shape(anchor.store.buffer) if anchor.store is not None else []
    ops: list[str] = []
    for b in blocks[idx + 1:]:
        if b.store is None:
            ops.append("other")
            continue
        value = b.store.value
        loads = buffer_loads(value)
        if not any(any(load_buffer(ld).same_as(p) for p in produced) for ld in loads):
            continue
        produced.append(b.store.buffer)
        others = [ld for ld in loads if not any(load_buffer(ld).same_as(p) for p in produced)]
        opname = type(value).__name__.lower()
        consts = [c for c in (getattr(value, "a", None), getattr(value, "b", None))
                  if isinstance(c, (FloatImm, IntImm))]
        if isinstance(value, Max) and consts:
            ops.append("relu")
        elif len(others) == 1 and hasattr(value, "a") and hasattr(value, "b"):
            pattern = _broadcast_pattern(buffer_shape(load_buffer(others[0])), out_shape)
            ops.append(f"{opname}:{pattern}")
        elif not others and isinstance(value, Call):
            ops.append(str(getattr(value.op, "name", "call")).split(".")[-1])
        elif not others:
            ops.append(opname)
        else:
            ops.append("other")
    return tuple(ops)


def _padding(blocks: list[Block], x: Any, window_dims: list[int]) -> tuple[int, ...] | None:
    """Return ``(before..., after...)`` padding of the data operand, or ``None`` if unpadded.

    Read from the block producing the data (``pad_temp``): it reads the input at
    ``h - before`` under an ``if_then_else``; ``after`` follows from the two shapes.
    """
    prod = _producer(blocks, load_buffer(x))
    if prod is None:
        return None
    assert prod.store is not None  # _producer only returns blocks that store
    srcs = buffer_loads(prod.store.value)
    if len(srcs) != 1 or len(srcs[0].indices) != len(prod.store.indices):
        return None
    src = srcs[0]
    pad_shape, src_shape = buffer_shape(prod.store.buffer), buffer_shape(load_buffer(src))
    before, after = [], []
    for d in window_dims:
        lin = linear_form(src.indices[d])
        b = -lin[1] if lin is not None else 0
        before.append(b)
        after.append(pad_shape[d] - src_shape[d] - b)
    if not any(before) and not any(after):
        return None
    return tuple(before + after)


# --------------------------------------------------------------------------------------------


def analyze(mod_or_primfunc: Any) -> LoopNest:
    """Find the major loop nest of a task and classify its operator family.

    Parameters
    ----------
    mod_or_primfunc
        A ``tvm.IRModule`` holding one PrimFunc (or one named ``main``), e.g. a task's
        ``dispatched[0]`` from ``ms.relax_integration.extract_tasks``, or a ``PrimFunc`` (e.g.
        from ``te.create_prim_func``).

    Returns
    -------
    LoopNest
        The family, canonical extents and structure of the anchor block.

    Raises
    ------
    ValueError
        If the module holds no PrimFunc or no computation block.
    UnsupportedModelError
        If a loop extent of the function is symbolic (dynamic shapes).

    Examples
    --------
    >>> from tvm import te                                           # doctest: +SKIP
    >>> A, B = te.placeholder((64, 32)), te.placeholder((32, 16))     # doctest: +SKIP
    >>> k = te.reduce_axis((0, 32))                                   # doctest: +SKIP
    >>> C = te.compute((64, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k))  # doctest: +SKIP
    >>> analyze(te.create_prim_func([A, B, C])).extents               # doctest: +SKIP
    (64, 16, 32)
    """
    func = _as_primfunc(mod_or_primfunc)
    blocks = collect_blocks(func)
    anchor = _pick_anchor(blocks)
    kind = {iv.var: k for iv, k in zip(anchor.iters, anchor.kinds, strict=False)}

    result: _Result | None = None
    if anchor.store is not None and anchor.is_reduction:
        ops = _product_operands(anchor.store)
        if ops is not None:
            x, y = ops
            result = _classify_conv(blocks, anchor, kind, x, y)
            result = result or _classify_conv(blocks, anchor, kind, y, x)
            if result is None and not any(_is_window(i, kind) for ld in ops for i in ld.indices):
                result = _classify_matmul(anchor, kind, x, y)

    out_dtype = buffer_dtype(anchor.store.buffer) if anchor.store is not None else ""
    if result is None:
        roles = tuple(anchor.kinds)
        space = tuple(e for e, k in zip(anchor.extents, anchor.kinds, strict=False) if k != "R")
        red = tuple(e for e, k in zip(anchor.extents, anchor.kinds, strict=False) if k == "R")
        names = {v: f"{k}{i}" for i, (v, k) in enumerate(zip(anchor.vars, anchor.kinds, strict=False))}
        text = ";".join(_block_text(b, names, {}) for b in blocks)
        return LoopNest(
            family="other",
            space=space,
            reduction=red,
            dtype=out_dtype,
            anchor=anchor.name,
            signature=_digest(f"other|{_block_text(anchor, names, {})}|{text}"),
            roles=roles,
            iter_extents=tuple(anchor.extents),
            params=(("out_dtype", out_dtype),),
        )

    fam = result.family
    space_roles, red_roles = _CANONICAL[fam]
    per_role: dict[str, int] = {}
    for v in anchor.vars:
        role = result.roles[v]
        per_role[role] = per_role.get(role, 1) * anchor.extent_of[v]
    per_role.update(result.role_sizes)  # a grouped conv splits its K loop into G x K/G
    space = tuple(per_role.get(r, 1) for r in space_roles)
    red = tuple(per_role.get(r, 1) for r in red_roles)
    roles = tuple(result.roles[v] for v in anchor.vars)
    params = dict(result.params)
    params["out_dtype"] = out_dtype
    # Strides, dilations and padding are parameters, not structure (ETO bridges default them).
    struct = (
        f"{fam}|{result.layout}|{'.'.join(roles)}|{result.dtype}->{out_dtype}|"
        f"mult={params.get('channel_multiplier', '')}"
    )
    return LoopNest(
        family=fam,
        space=space,
        reduction=red,
        dtype=result.dtype,
        anchor=anchor.name,
        signature=_digest(struct),
        layout=result.layout,
        roles=roles,
        iter_extents=tuple(anchor.extents),
        params=tuple(sorted(params.items())),
        epilogue=_epilogue(blocks, anchor),
    )


def _is_window(idx: Any, kind: dict[Any, str]) -> bool:
    lin = linear_form(idx)
    if lin is None:
        return False
    ks = [kind.get(v) for v in lin[0]]
    return "S" in ks and "R" in ks
