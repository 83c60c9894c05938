"""Code generation on every core: a Relax build whose kernels LLVM compiles in parallel.

``tvm.compile`` lowers a model's kernels and hands them to LLVM as one module: one thread
generates IR for every kernel, optimizes it, and, when the module is first used, compiles it to
machine code (the "JIT" of the module's first ``get_function``). For a model served with tuned,
replayed or predicted programs this is most of a compile: their kernels are unrolled and
vectorized, and cost several times a default kernel to generate (``docs/NOTES.md``, session 10:
1.8 s of a 3.3 s background compile of a 2-layer BERT was the build).

:func:`compile_relax` does what ``relax.build`` does, except that the kernels are split into
groups, each group lowered and code-generated as its own LLVM module in a thread of its own
(TVM's FFI releases the GIL in its calls), and each module is compiled to machine code at once,
in parallel, instead of on the first call. The first module imports the others, so the Relax
VM finds every kernel through its library's imports, and ``export_library`` writes one object
file per module into the same shared library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.threads import thread_map

__all__ = ["GROUPS_PER_WORKER", "MIN_KERNELS", "apply_database", "compile_relax", "in_scopes", "kernel_groups"]

T = TypeVar("T")
R = TypeVar("R")

#: Kernel groups per worker thread: more groups balance the threads better (a group's cost is
#: not known in advance), fewer cost less per-module overhead (an LLVM context, a JIT engine).
GROUPS_PER_WORKER = 4
#: Below this many kernels a model's kernels are one LLVM module, as ``tvm.compile`` makes them.
MIN_KERNELS = 2


def kernel_groups(costs: Sequence[float], groups: int) -> list[list[int]]:
    """Split kernels into at most ``groups`` groups of similar total cost.

    Greedy longest-first: each kernel, heaviest first, joins the group with the least cost so
    far (ties: the lowest group). Returns the kernels' indices per group, empty groups dropped.

    Examples
    --------
    >>> kernel_groups([5, 1, 1, 3], 2)
    [[0], [3, 1, 2]]
    """
    bins: list[list[int]] = [[] for _ in range(max(1, groups))]
    load = [0.0] * len(bins)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        g = min(range(len(bins)), key=lambda b: (load[b], b))
        bins[g].append(i)
        load[g] += costs[i]
    return [b for b in bins if b]


def _cost(func: Any) -> float:
    """A kernel's code-generation cost, roughly: a scheduled kernel (tiled, unrolled, vectorized)
    cost ~3.9x a default one to generate (``docs/NOTES.md``, session 10). Nothing finer is known
    before generating it; the groups (several per thread) absorb the rest."""
    attrs = func.attrs or {}
    return 4.0 if "tirx.is_scheduled" in attrs else 1.0


def in_scopes(fn: Callable[[T], R]) -> Callable[[T], R]:
    """``fn`` run under the calling thread's pass context and target, wherever it runs.

    TVM keeps both per thread: a worker thread would otherwise lower with the default pass
    context (``opt_level`` 2, no config) and no current target.
    """
    tvm = load_tvm()

    ctx = tvm.transform.PassContext.current()
    target = tvm.target.Target.current(allow_none=True)

    def run(x: T) -> R:
        with ctx, (target if target is not None else contextlib.nullcontext()):
            return fn(x)

    return run


def apply_database(mod: Any, database: Any, *, workers: int | None = None) -> Any:
    """``MetaScheduleApplyDatabase`` over ``mod``'s kernels, split over ``workers`` threads.

    Each thread applies the pass to a module of some of the kernels (the database's records are
    decoded and their traces replayed there); the scheduled kernels replace the originals in a
    copy of ``mod``. A kernel this process scheduled from its record already (a replayed or
    predicted program, :mod:`tunecache.tvm_layer.scheduled`) is taken as it is, not replayed
    again. Call it inside the target's scope (the pass reads ``Target.current()``).
    """
    tvm = load_tvm()
    from tvm import relax, tirx

    from tunecache.tvm_layer.threads import workers as default_workers

    out = mod.clone()
    kernels = []
    for gv, f in mod.functions_items():
        if isinstance(f, tirx.PrimFunc):
            known = _already_scheduled(database, f)
            if known is None:
                kernels.append(gv)
            else:
                out[gv] = known
    if not kernels:
        return out
    groups = kernel_groups([1.0] * len(kernels), (workers or default_workers()) * GROUPS_PER_WORKER)

    def apply(group: list[int]) -> Any:
        with database:
            return relax.transform.MetaScheduleApplyDatabase()(tvm.IRModule({kernels[i]: mod[kernels[i]]
                                                                             for i in group}))

    for part in thread_map(in_scopes(apply), groups, threads=workers, name="tunecache-apply"):
        for gv, f in part.functions_items():
            out[gv] = f
    return out


def _already_scheduled(database: Any, func: Any) -> Any | None:
    """``func`` scheduled as ``MetaScheduleApplyDatabase`` would schedule it, when ``database``
    holds that very kernel already (a replayed or predicted program, scheduled where it was
    chosen), else ``None``: the pass replays the record's trace."""
    import tvm_ffi

    lookup = getattr(database, "scheduled_kernel", None)
    if lookup is None:
        return None
    normalized = tvm_ffi.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(func)
    known = lookup(normalized)
    if known is None:
        return None
    (scheduled,) = [f for _, f in known.functions_items()]
    # as the pass leaves it: the kernel's own attributes (normalizing named it "main"; a private
    # kernel stays private), marked scheduled
    own = dict(func.attrs) if func.attrs is not None else {}
    if "global_symbol" not in own:
        scheduled = scheduled.without_attr("global_symbol")
    return scheduled.with_attrs(own).with_attr("tirx.is_scheduled", True)


def compile_relax(mod: Any, target: Any, pipeline: Any, *, workers: int | None = None) -> Any:
    """Build a Relax module into a ``VMExecutable`` with its kernels compiled on ``workers`` threads.

    Parameters
    ----------
    mod
        A Relax ``IRModule`` (its kernels already scheduled or not).
    target
        A ``tvm.target.Target``; anything but ``llvm`` is built by ``tvm.compile`` as it is.
    pipeline
        The Relax pipeline (a ``tvm.transform.Pass``), as ``tvm.compile``'s ``relax_pipeline``.
    workers
        Threads; default: :func:`tunecache.tvm_layer.threads.workers`. One worker builds with
        ``tvm.compile``; fewer than :data:`MIN_KERNELS` kernels are one LLVM module.

    Returns
    -------
    tvm.relax.VMExecutable
        Every kernel already compiled to machine code.
    """
    tvm = load_tvm()
    from tvm import relax, tirx
    from tvm.relax import vm_build

    from tunecache.tvm_layer.threads import workers as default_workers

    workers = workers or default_workers()
    if str(target.kind.name) != "llvm" or workers < 2:
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)
    with target:
        mod = pipeline(mod)
    attrs = dict(mod.attrs) if mod.attrs else {}
    ext_libs = list(attrs.get("external_mods", []))
    params = dict(attrs.get("const_name_to_constant", {}))
    builder = relax.ExecBuilder()
    mod = vm_build._vmcodegen(builder, mod, "bytecode")
    kernels = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)]
    if len(kernels) < MIN_KERNELS:  # one module (none without kernels), built on this thread
        groups = [list(range(len(kernels)))] if kernels else []
    else:
        groups = kernel_groups([_cost(f) for _, f in kernels], workers * GROUPS_PER_WORKER)
    parts = [tvm.IRModule({kernels[i][0]: kernels[i][1] for i in g}, attrs=mod.attrs) for g in groups]
    firsts = [kernels[g[0]][0].name_hint for g in groups]

    def build(i: int) -> Any:
        part = tvm.tirx.build(parts[i], target=target)
        part.get_function(firsts[i])  # compiles the module to machine code now, on this thread
        return part

    libs = thread_map(in_scopes(build), range(len(parts)), threads=workers, name="tunecache-codegen")
    for other in libs[1:]:
        libs[0].import_module(other)
    lib = libs[0] if libs else None
    return vm_build.VMExecutable(vm_build._ffi_api.VMLink(builder, target, lib, ext_libs, params))
