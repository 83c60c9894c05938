"""Hardware features of one scheduled tensor program, read from its postprocessed TIR.

ETO (Zhao et al., PVLDB 15(2), 2022, Section 4) describes a GPU program by three numbers: the
thread blocks it launches, the threads per block, and the shared memory a block requests. Its
reuse-based tuner keeps those within ranges derived from the source program. This module
computes those features for CUDA candidates and their CPU analogues for LLVM candidates:

============================  ============================================================
ETO (GPU)                     CPU analogue here
============================  ============================================================
thread blocks (BShape)        ``parallel_extent``: extent of the outermost parallel loop,
                              *as the parallel postprocessor fused it*
threads per block (TShape)    ``work_per_item``: iterations of the main block per parallel
                              item, and ``vector_lanes`` of its innermost vectorized loop
shared memory per block       ``item_footprint_bytes`` (what one parallel item touches, vs
(LShape / M)                  L2) and ``inner_footprint_bytes`` (what one iteration of the
                              outermost reduction tile touches, vs L1)
============================  ============================================================

Everything is read from the TIR, never from the trace's decisions: MetaSchedule's postprocessor
decides how many outer tiles it fuses into the parallel loop (until ~16 jobs per core, or until
a loop is not perfectly nested), so the sampled tiles alone do not give the parallel extent.

TVM is needed only for the argument (a ``Schedule`` or ``IRModule``); this module imports
nothing from TVM at import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.tir import first_primfunc, region_buffer

__all__ = ["CpuFeatures", "CudaFeatures", "cpu_features", "cuda_features"]

_SHARED_SCOPES = frozenset({"shared", "shared.dyn"})


@dataclass(frozen=True)
class CpuFeatures:
    """CPU features of one postprocessed LLVM candidate.

    Attributes
    ----------
    parallel_extent
        Extent of the outermost ``parallel`` loop around the main block (1 if none).
    vector_lanes
        Extent of the innermost vectorized loop around the main block (1 if none).
    unroll_max_step
        Largest ``pragma_auto_unroll_max_step`` annotation in the function (0 if none).
    work_per_item
        Iterations of the main block's body per parallel item.
    total_work
        Iterations of the main block's body in all.
    item_footprint_bytes
        Bytes of the distinct buffer elements (inputs, outputs, caches) that one parallel item's
        blocks touch: the per-core working set, to compare with L2.
    inner_footprint_bytes
        Bytes touched by one iteration of the outermost reduction loop inside the parallel item
        (the tile swept while the reduction advances), to compare with L1; equals
        ``item_footprint_bytes`` when the main block has no reduction loop inside the item.
    main_block
        Name of the block taken as the main block (the one with reduction iterators and the
        deepest loop nest).
    """

    parallel_extent: int
    vector_lanes: int
    unroll_max_step: int
    work_per_item: int
    total_work: int
    item_footprint_bytes: int
    inner_footprint_bytes: int
    main_block: str


@dataclass(frozen=True)
class CudaFeatures:
    """GPU features of one postprocessed CUDA candidate (its largest kernel).

    Attributes
    ----------
    thread_blocks
        Product of the extents of the loops bound to ``blockIdx.*`` (ETO's B).
    threads_per_block
        Product over ``threadIdx.*`` tags of the largest extent bound to each (ETO's T).
    shared_bytes_per_block
        Bytes of the ``shared`` / ``shared.dyn`` buffers a block allocates, after TVM compacts
        each buffer to the region the block uses (ETO's M per block).
    vthreads
        Product of the extents bound to ``vthread.*`` (1 if none).
    kernels
        Number of kernels (outermost ``blockIdx`` nests) in the function.
    """

    thread_blocks: int
    threads_per_block: int
    shared_bytes_per_block: int
    vthreads: int
    kernels: int


# ---------------------------------------------------------------------------------------------
# The TIR walk shared by both feature sets.


@dataclass(frozen=True)
class _Loop:
    var: Any
    extent: int
    kind: str  # "serial", "parallel", "vectorized", "unrolled", "thread_binding"
    tag: str  # thread tag for thread bindings, "" otherwise
    annotations: dict[str, Any]


@dataclass(frozen=True)
class _BlockSite:
    realize: Any  # SBlockRealize
    loops: tuple[_Loop, ...]  # outermost first


def _prim_func(sch_or_mod: Any) -> Any:
    mod = sch_or_mod.mod if hasattr(sch_or_mod, "mod") and hasattr(sch_or_mod, "trace") else sch_or_mod
    return first_primfunc(mod)


def _int(expr: Any) -> int | None:
    if isinstance(expr, int):
        return expr
    value = getattr(expr, "value", None)
    return int(value) if isinstance(value, int) else None


_KINDS = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}


def _walk(func: Any) -> tuple[list[_BlockSite], list[_Loop], list[tuple[Any, tuple[_Loop, ...]]]]:
    """Return every block with its enclosing loops, every loop, and every (block, loops) pair
    that allocates buffers."""
    tvm = load_tvm()
    from tvm.s_tir import SBlockRealize

    blocks: list[_BlockSite] = []
    loops_seen: list[_Loop] = []
    allocs: list[tuple[Any, tuple[_Loop, ...]]] = []

    def visit(stmt: Any, stack: tuple[_Loop, ...]) -> None:
        if stmt is None:
            return
        if isinstance(stmt, tvm.tirx.For):
            kind = _KINDS.get(int(stmt.kind), str(stmt.kind))
            tag = str(stmt.thread_binding.thread_tag) if stmt.thread_binding is not None else ""
            ext = _int(stmt.extent)
            loop = _Loop(stmt.loop_var, ext if ext is not None else 1, kind, tag,
                         dict(stmt.annotations.items()))
            loops_seen.append(loop)
            visit(stmt.body, stack + (loop,))
        elif isinstance(stmt, SBlockRealize):
            blocks.append(_BlockSite(stmt, stack))
            block = stmt.block
            if len(block.alloc_buffers):
                allocs.append((block, stack))
            if block.init is not None:
                visit(block.init, stack)
            visit(block.body, stack)
        elif isinstance(stmt, tvm.tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, stack)
        elif isinstance(stmt, tvm.tirx.IfThenElse):
            visit(stmt.then_case, stack)
            visit(stmt.else_case, stack)
        else:
            body = getattr(stmt, "body", None)
            if body is not None:
                visit(body, stack)

    visit(func.body, ())
    return blocks, loops_seen, allocs


def _is_reduce_iter(iv: Any) -> bool:
    return int(iv.iter_type) == 2  # IterVar.CommReduce


def _main_block(blocks: list[_BlockSite]) -> _BlockSite | None:
    """The block with reduction iterators and the most loops, else the deepest block."""
    real = [b for b in blocks if len(b.realize.block.iter_vars) > 0]
    if not real:
        return None
    return max(
        real,
        key=lambda b: (any(_is_reduce_iter(iv) for iv in b.realize.block.iter_vars), len(b.loops)),
    )


def _free_vars(expr: Any) -> list[Any]:
    """Variables in an index expression (Var, Add, Mul, FloorDiv, ... trees)."""
    tvm = load_tvm()
    out: list[Any] = []
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, tvm.tirx.Var):
            out.append(e)
            continue
        for name in ("a", "b", "value", "condition", "true_value", "false_value"):
            sub = getattr(e, name, None)
            if sub is not None and not isinstance(sub, (int, float, str)):
                stack.append(sub)
        args = getattr(e, "args", None)
        if args is not None:
            stack.extend(args)
    return out


def _footprint(sites: list[tuple[_BlockSite, int]]) -> int:
    """Bytes of the distinct buffer elements the blocks touch.

    For each ``(site, inner_from)``, the site's loops from depth ``inner_from`` inwards run over
    their full range and the outer loops are fixed at 0. Accesses are bounding boxes per buffer
    (the union of all sites' boxes), computed with TVM's interval analysis: the block iterators'
    ranges from their bindings, then the regions' ranges from the iterators.
    """
    tvm = load_tvm()
    from tvm import sym

    analyzer = sym.Analyzer()
    boxes: dict[Any, tuple[Any, list[tuple[int, int]]]] = {}
    for site, inner_from in sites:
        loop_dom = {}
        for depth, loop in enumerate(site.loops):
            top = loop.extent - 1 if depth >= inner_from else 0
            loop_dom[loop.var] = sym.IntervalSet(0, max(0, top))
        block = site.realize.block
        iter_dom = {}
        for iv, value in zip(block.iter_vars, site.realize.iter_values, strict=False):
            s = analyzer.int_set(value, loop_dom)
            lo, hi = _int(s.min_value), _int(s.max_value)
            if lo is None or hi is None:
                lo, hi = 0, (_int(iv.dom.extent) or 1) - 1
            iter_dom[iv.var] = sym.IntervalSet(lo, hi)
        for region in list(block.reads) + list(block.writes):
            buf = region_buffer(region)
            box: list[tuple[int, int]] = []
            for dim, rng in enumerate(region.region):
                s = analyzer.int_set(rng.min, iter_dom)
                lo, hi = _int(s.min_value), _int(s.max_value)
                if lo is None or hi is None:
                    lo, hi = 0, (_int(buf.shape[dim]) or 1) - 1
                box.append((lo, hi + (_int(rng.extent) or 1) - 1))
            prev = boxes.get(buf)
            if prev is None:
                boxes[buf] = (buf, box)
            else:
                merged = [(min(a[0], b[0]), max(a[1], b[1])) for a, b in zip(prev[1], box, strict=False)]
                boxes[buf] = (buf, merged)
    total = 0
    for buf, box in boxes.values():
        n = 1
        for lo, hi in box:
            n *= max(1, hi - lo + 1)
        total += n * max(1, tvm.DataType(str(buf.dtype)).bits // 8)
    return total


def cpu_features(sch_or_mod: Any, target: Any = None) -> CpuFeatures:
    """Read :class:`CpuFeatures` from a postprocessed LLVM candidate.

    Parameters
    ----------
    sch_or_mod
        A ``tvm.s_tir.Schedule`` after postprocessing, its ``IRModule``, or a ``PrimFunc``.
    target
        Unused for now (kept so CPU and GPU feature functions have one signature).

    Returns
    -------
    CpuFeatures

    Raises
    ------
    ValueError
        If the module holds no PrimFunc or no block with iterators.

    Examples
    --------
    >>> f = cpu_features(sch)            # doctest: +SKIP
    >>> f.parallel_extent, f.vector_lanes  # doctest: +SKIP
    (32, 8)
    """
    del target
    func = _prim_func(sch_or_mod)
    blocks, loops, _ = _walk(func)
    main = _main_block(blocks)
    if main is None:
        raise ValueError("no block with iterators: nothing to describe")
    par_depth = next((i for i, lp in enumerate(main.loops) if lp.kind == "parallel"), None)
    parallel_extent = main.loops[par_depth].extent if par_depth is not None else 1
    vec = [lp.extent for lp in main.loops if lp.kind == "vectorized"]
    vector_lanes = vec[-1] if vec else 1
    unroll = 0
    for lp in loops:
        v = lp.annotations.get("pragma_auto_unroll_max_step")
        if v is not None:
            unroll = max(unroll, _int(v) or 0)
    total = 1
    for lp in main.loops:
        total *= lp.extent
    item_from = (par_depth + 1) if par_depth is not None else 0
    per_item = 1
    for lp in main.loops[item_from:]:
        per_item *= lp.extent
    # One parallel item: every block under the same parallel loop, its inner loops varying.
    if par_depth is not None:
        par_var = main.loops[par_depth].var
        item_sites = [
            (b, next(i for i, lp in enumerate(b.loops) if lp.var.same_as(par_var)) + 1)
            for b in blocks
            if len(b.realize.block.iter_vars) and any(lp.var.same_as(par_var) for lp in b.loops)
        ]
    else:
        item_sites = [(b, 0) for b in blocks if len(b.realize.block.iter_vars)]
    item_bytes = _footprint(item_sites)
    # Inner tile: everything under one iteration of the outermost reduction loop in the item.
    reduce_vars = [
        v
        for iv, value in zip(main.realize.block.iter_vars, main.realize.iter_values, strict=False)
        if _is_reduce_iter(iv)
        for v in _free_vars(value)
    ]
    red_depth = next(
        (
            i
            for i, lp in enumerate(main.loops)
            if i >= item_from and lp.extent > 1 and any(lp.var.same_as(v) for v in reduce_vars)
        ),
        None,
    )
    inner_bytes = (
        _footprint([(main, red_depth + 1)]) if red_depth is not None else item_bytes
    )
    return CpuFeatures(
        parallel_extent=int(parallel_extent),
        vector_lanes=int(vector_lanes),
        unroll_max_step=int(unroll),
        work_per_item=int(per_item),
        total_work=int(total),
        item_footprint_bytes=int(item_bytes),
        inner_footprint_bytes=int(inner_bytes),
        main_block=str(main.realize.block.name_hint),
    )


def cuda_features(sch_or_mod: Any, target: Any = None) -> CudaFeatures:
    """Read :class:`CudaFeatures` from a postprocessed CUDA candidate (no GPU needed).

    Thread blocks and threads come from the loops bound to ``blockIdx.*`` / ``threadIdx.*``;
    shared memory from the ``shared`` buffers after ``CompactBufferAllocation`` (before it,
    MetaSchedule's cache buffers are allocated at full size in the root block).

    Parameters
    ----------
    sch_or_mod
        A postprocessed ``Schedule``, its ``IRModule``, or a ``PrimFunc``.
    target
        Unused (kept for a uniform signature).

    Returns
    -------
    CudaFeatures
        Of the kernel with the most thread blocks.
    """
    del target
    tvm = load_tvm()  # no CUDA intrinsics needed to read TIR
    func = _prim_func(sch_or_mod)
    from tvm.s_tir import transform as st

    mod = tvm.IRModule({"main": func})
    for name in ("LowerInitBlock", "PlanAndUpdateBufferAllocationLocation", "ConvertBlocksToOpaque",
                 "CompactBufferAllocation"):
        pass_fn = getattr(st, name, None)
        if pass_fn is not None:
            try:
                mod = pass_fn()(mod)
            except Exception:  # noqa: BLE001 - compaction is best effort; fall back to raw sizes
                break
    func = mod["main"]
    blocks, loops, allocs = _walk(func)
    del blocks, loops
    kernels: list[dict[str, Any]] = []

    def visit(stmt: Any, in_kernel: dict[str, Any] | None) -> None:
        if stmt is None:
            return
        if isinstance(stmt, tvm.tirx.For):
            tag = str(stmt.thread_binding.thread_tag) if stmt.thread_binding is not None else ""
            ext = _int(stmt.extent) or 1
            k = in_kernel
            if tag.startswith("blockIdx") and k is None:
                k = {"blocks": {}, "threads": {}, "vthreads": {}, "shared": 0}
                kernels.append(k)
            if k is not None and tag:
                bucket = ("blocks" if tag.startswith("blockIdx") else
                          "threads" if tag.startswith("threadIdx") else
                          "vthreads" if tag.startswith("vthread") else None)
                if bucket:
                    k[bucket][tag] = max(k[bucket].get(tag, 1), ext)
            visit(stmt.body, k)
            return
        from tvm.s_tir import SBlockRealize

        if isinstance(stmt, SBlockRealize):
            block = stmt.block
            if in_kernel is not None:
                in_kernel["shared"] += _shared_bytes(block.alloc_buffers)
            if block.init is not None:
                visit(block.init, in_kernel)
            visit(block.body, in_kernel)
            return
        if isinstance(stmt, tvm.tirx.SeqStmt):
            for s in stmt.seq:
                visit(s, in_kernel)
            return
        if isinstance(stmt, tvm.tirx.IfThenElse):
            visit(stmt.then_case, in_kernel)
            visit(stmt.else_case, in_kernel)
            return
        buf = getattr(stmt, "buffer", None)
        if in_kernel is not None and buf is not None and type(stmt).__name__ in ("AllocBuffer", "DeclBuffer"):
            in_kernel["shared"] += _shared_bytes([buf])
        body = getattr(stmt, "body", None)
        if body is not None:
            visit(body, in_kernel)

    visit(func.body, None)
    if not kernels:
        return CudaFeatures(0, 0, 0, 1, 0)

    def prod(d: dict[str, int]) -> int:
        out = 1
        for v in d.values():
            out *= v
        return out

    main = max(kernels, key=lambda k: (prod(k["blocks"]), prod(k["threads"])))
    return CudaFeatures(
        thread_blocks=prod(main["blocks"]),
        threads_per_block=prod(main["threads"]),
        shared_bytes_per_block=int(main["shared"]),
        vthreads=prod(main["vthreads"]),
        kernels=len(kernels),
    )


def _shared_bytes(buffers: Any) -> int:
    tvm = load_tvm()
    total = 0
    for buf in buffers:
        if str(buf.scope()) not in _SHARED_SCOPES:
            continue
        n = 1
        for d in buf.shape:
            n *= _int(d) or 1
        total += n * max(1, tvm.DataType(str(buf.dtype)).bits // 8)
    return total
