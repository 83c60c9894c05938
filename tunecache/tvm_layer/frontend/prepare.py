"""Preparing an imported model for tuning: weights bound as constants, convolutions converted to
NHWC on CPU, the module legalized and fused so that every kernel is the TIR ``PrimFunc``
MetaSchedule tunes (step 2 of :mod:`tunecache.tvm_layer.frontend`).

Pipeline of :func:`prepare_for_tuning` (TVM's own ``static_shape_tuning_pipeline`` with
``cpu_weight_prepack``, for weights bound as constants): ``BindParams`` → the target's library
dispatch passes → ``DecomposeOpsForInference`` (batch norm becomes scale/shift arithmetic that
fuses into the convolution before it) → on CPU, ``ConvertLayout`` of convolutions to NHWC
(:data:`CONV_LAYOUTS`) → on CPU, ``FastMathTransform`` (:data:`FAST_MATH`) → on CPU, the columns
of a matmul by a constant padded to a SIMD multiple (:data:`PAD_COLUMNS`) → ``LegalizeOps`` →
``AnnotateTIROpPattern`` → ``FoldConstant`` (with weights bound, weight transposes and bias
reshapes are computed once here instead of being tasks) → ``FuseOps`` → ``FuseTIR`` → on CPU, weights marked layout-free
(:data:`WEIGHT_PREPACK`). :func:`~tunecache.tvm_layer.frontend.building.build` applies the
database, then ``SplitLayoutRewritePreproc`` and ``FoldConstant``: a tuned kernel's weight
re-layout runs once, at build time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from tunecache.errors import TargetError
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.frontend.failures import ModelStageError, stage
from tunecache.tvm_layer.frontend.importing import ImportedModel
from tunecache.tvm_layer.frontend.numpy_fold import constant_values, substitute_constants
from tunecache.tvm_layer.target import TargetLike, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    import tvm

__all__ = [
    "PREPARED_ATTR",
    "NOTES_ATTR",
    "CONV_LAYOUTS",
    "FAST_MATH",
    "WEIGHT_PREPACK",
    "PAD_COLUMNS",
    "prepare_for_tuning",
    "is_prepared",
    "model_hash",
    "preparation_notes",
]

log = logging.getLogger("tunecache")

#: Module attribute set by :func:`prepare_for_tuning`; its value is the target kind.
PREPARED_ATTR = "tunecache_prepared"

#: Module attribute set by :func:`prepare_for_tuning` when import or preparation changed or left
#: something out (:func:`preparation_notes`).
NOTES_ATTR = "tunecache_notes"


def _backend_passes(target: tvm.target.Target) -> tuple[list[Any], list[Any], list[Any]]:
    """Return (library dispatch, dataflow lowering, finalize) passes of the target's backend.

    ``tvm.relax.pipeline.dataflow_lower_passes`` is broken in TVM 0.27 for CPU and CUDA (the
    backend packages do not re-export it), so the backend's ``pipeline`` module is used
    directly.
    """
    import importlib

    kind = str(target.kind.name)
    backend = {"llvm": "cpu_generic", "cuda": "cuda", "rocm": "rocm"}.get(kind, "gpu_generic")
    pipeline = importlib.import_module(f"tvm.relax.backend.{backend}.pipeline")
    return (
        list(pipeline.library_dispatch_passes(target)),
        list(pipeline.dataflow_lower_passes(target)),
        list(pipeline.finalize_passes(target)),
    )


#: Layouts 2-D convolutions are converted to before legalization, per target kind. NHWC with
#: HWIO weights puts channels innermost, so MetaSchedule vectorizes along them: at 64 trials a
#: resnet18 3x3 conv (64 ch, 56x56) went from 2.32 ms in NCHW to 1.47 ms, one of layer 4
#: (512 ch, 7x7, where NCHW's innermost loop has 7 iterations) from 3.31 ms to 1.16 ms; PyTorch
#: eager takes 1.80 and 1.22 ms (docs/NOTES.md). Weights are transposed once, by FoldConstant;
#: the model's inputs and outputs keep their layout (a transpose task at each end).
CONV_LAYOUTS: dict[str, dict[str, list[str]]] = {"llvm": {"relax.nn.conv2d": ["NHWC", "HWIO"]}}

#: Target kinds on which ``exp``, ``erf``, ``tanh`` and ``softmax`` use TVM's fast approximations
#: (``relax.transform.FastMathTransform``: vectorizable polynomials). Without it, LLVM calls the
#: C library's scalar ``erff`` per element: BERT-base's GELU took 6.2 ms a call on 128x3072
#: values, a quarter of the model's time, against ~0.2 ms for PyTorch (docs/NOTES.md).
FAST_MATH: frozenset[str] = frozenset({"llvm"})

#: Target kinds whose kernels may choose their weights' layout (MetaSchedule's ``RewriteLayout``
#: postprocessor, Ansor's layout rewrite): weights are marked layout-free before tuning, and
#: :func:`~tunecache.tvm_layer.frontend.building.build` folds each kernel's weight re-layout
#: into the constants once.
WEIGHT_PREPACK: frozenset[str] = frozenset({"llvm"})

#: Target kinds on which a matmul by a constant whose column count ``N`` is not a multiple of
#: :data:`COLUMN_ALIGN_BELOW` computes ``N`` rounded up to :func:`padded_columns` columns (zero
#: weights) and slices the result (:func:`_pad_matmul_columns`). MetaSchedule tiles a loop by
#: divisors of its extent only, so GPT-2's LM head (50,257 = 29 x 1733 columns) could be
#: vectorized by 29 or 1733 at best: its full search at 128 trials reached 142 GMAC/s where the
#: model's 768- and 3072-column layers reached 250 (docs/newmodel.md, session 17).
PAD_COLUMNS: frozenset[str] = frozenset({"llvm"})

#: Column counts that are multiples of this are left as they are: every x86 float32 vector
#: (8 lanes in AVX2) divides them.
COLUMN_ALIGN_BELOW = 8


def padded_columns(n: int) -> int:
    """The column count a matmul by a constant with ``n`` columns computes (:data:`PAD_COLUMNS`).

    ``n`` itself when it is a multiple of :data:`COLUMN_ALIGN_BELOW` or when padding would add
    more than an eighth of the work; else ``n`` rounded up to a multiple of 16 (an AVX-512
    float32 vector), or of 64 from 4,096 columns on, whose quotient has more divisors for the
    outer tiles (50,257 -> 50,304 = 2^7 x 3 x 131, 0.09% more work).
    """
    if n % COLUMN_ALIGN_BELOW == 0:
        return n
    multiple = 64 if n >= 4096 else 16
    padded = -(-n // multiple) * multiple
    return padded if 8 * (padded - n) <= n else n


#: The model rewrites :func:`prepare_for_tuning` applies, by name, in :func:`model_hash`'s digest:
#: a rewrite added or changed gets a new name here, so the tasks a library cache remembers for a
#: model (``tunecache.libcache``) are not those of an older preparation.
_REWRITES = ("layout_agnostic_activations", "fast_gelu", "pad_matmul_columns")


def _bind(mod: tvm.IRModule, params: Mapping[str, Any]) -> tvm.IRModule:
    if not params:
        return mod
    from tvm import relax

    return relax.transform.BindParams("main", dict(params))(mod)


def model_hash(imported: ImportedModel | tvm.IRModule, target: TargetLike = None) -> str:
    """Identify what :func:`prepare_for_tuning` would start from and how it would prepare it.

    A digest of the imported module with its weights bound (TVM's structural hash covers
    constant data: BERT-base's 440 MB in ~0.25 s) and of the preparation settings for the
    target's kind (:data:`CONV_LAYOUTS`, :data:`FAST_MATH`, :data:`WEIGHT_PREPACK`,
    :data:`PAD_COLUMNS`). Equal
    digests give equal prepared modules, hence equal tasks, with the same TVM and tunecache.
    """
    import hashlib
    import json

    import tvm_ffi

    load_tvm()
    kind = str(resolve_target(target).kind.name)
    if isinstance(imported, ImportedModel):
        mod, params = imported.mod, imported.params
    else:
        mod, params = imported, {}
    doc = {
        "model": str(tvm_ffi.structural_hash(_bind(mod, params))),
        "kind": kind,
        "conv_layouts": CONV_LAYOUTS.get(kind),
        "fast_math": kind in FAST_MATH,
        "weight_prepack": kind in WEIGHT_PREPACK,
        "pad_columns": kind in PAD_COLUMNS,
        "rewrites": list(_REWRITES),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def is_prepared(mod: tvm.IRModule) -> bool:
    """Return whether ``mod`` came out of :func:`prepare_for_tuning`."""
    attrs = mod.attrs
    return attrs is not None and PREPARED_ATTR in attrs


def prepare_for_tuning(
    imported: ImportedModel | tvm.IRModule, target: TargetLike = None
) -> tvm.IRModule:
    """Bind weights, legalize and fuse: every kernel becomes the TIR function MetaSchedule tunes.

    Parameters
    ----------
    imported
        An :class:`~tunecache.tvm_layer.frontend.ImportedModel` (its ``params`` are bound), or
        a Relax ``IRModule`` whose weights, if any, are constants already.
    target
        Anything :func:`~tunecache.tvm_layer.target.resolve_target` accepts. Legalization and
        library dispatch depend on it, so tasks are for this target.

    Returns
    -------
    tvm.IRModule
        A module whose ``main`` calls fused ``PrimFunc`` s; it carries the attribute
        ``tunecache_prepared`` (the target kind) so that
        :func:`~tunecache.tvm_layer.frontend.building.build` does not fuse it again. Preparing
        it again returns it unchanged. What import or preparation changed or left out, and
        why, is in :func:`preparation_notes`.

    Raises
    ------
    ModelStageError
        If a TVM pass fails on the model (stage ``"prepare"``, the pass named). A failed
        layout conversion is not an error: the model keeps its layout, with a note.
    """
    tvm = load_tvm()  # legalizing and fusing need no tensor intrinsics, whatever the target
    from tvm import relax

    t = resolve_target(target)
    if isinstance(imported, ImportedModel):
        mod, params = imported.mod, imported.params
    else:
        mod, params = imported, {}
    if is_prepared(mod):
        _check_prepared_for(mod, t)
        return mod
    dispatch, _, _ = _backend_passes(t)
    notes = list(imported.notes) if isinstance(imported, ImportedModel) else []
    kind = str(t.kind.name)
    with t, tvm.transform.PassContext(opt_level=3):
        mod = _run_passes(_bind(mod, params), [
            *dispatch, relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
        ])  # fmt: skip
        mod = _convert_conv_layout(mod, CONV_LAYOUTS.get(kind), notes)
        if kind in FAST_MATH:
            with stage("prepare", operator="fast GELU"):
                mod = _fast_gelu(mod)
            mod = _run_passes(mod, [relax.transform.FastMathTransform()])
        values = None
        if kind in PAD_COLUMNS:
            with stage("prepare", operator="matmul column padding"):
                mod, values = _pad_matmul_columns(mod, notes)
        with stage("prepare", operator="numpy constant folding"):
            if values is None:
                values = constant_values(mod)  # what FoldConstant would compile kernel by kernel
        mod = _run_passes(mod, [relax.transform.LegalizeOps()])
        with stage("prepare", operator="numpy constant folding"):
            mod, _ = substitute_constants(mod, values)
        mod = _run_passes(mod, [
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
        ])  # fmt: skip
        if kind in WEIGHT_PREPACK:
            mod = _mark_layout_free_weights(mod)
    mod = mod.with_attr(PREPARED_ATTR, kind)
    return mod.with_attr(NOTES_ATTR, notes) if notes else mod


def _run_passes(mod: tvm.IRModule, passes: list[Any]) -> tvm.IRModule:
    """Apply ``passes`` in order; a TVM failure names the pass (stage ``"prepare"``)."""
    for p in passes:
        with stage("prepare", operator=f"relax.transform.{p.info.name}"):
            mod = p(mod)
    return mod


def preparation_notes(mod: tvm.IRModule) -> tuple[str, ...]:
    """What import and :func:`prepare_for_tuning` changed or left out for this model, and why
    (e.g. a layout conversion that failed), for the compile report."""
    attrs = mod.attrs
    if attrs is None or NOTES_ATTR not in attrs:
        return ()
    return tuple(str(n) for n in attrs[NOTES_ATTR])


def _mark_layout_free_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """Mark each kernel parameter that every caller passes a constant (a weight) as
    ``layout_free_buffers``, which lets MetaSchedule's ``RewriteLayout`` choose its layout.

    TVM's ``AttachAttrLayoutFreeBuffers`` does the same but copies every kernel under a new
    name (``mean`` becomes ``mean1``), and task names are what reports show.
    """
    tvm = load_tvm()
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    constant_args: dict[str, set[int]] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            v = binding.value
            if isinstance(v, relax.Call) and v.op.same_as(call_tir):
                name = v.args[0].name_hint
                here = {i for i, a in enumerate(v.args[1].fields) if isinstance(a, tvm.ir.expr.Constant)}
                constant_args[name] = constant_args.get(name, here) & here
    for name, idx in constant_args.items():
        if idx:  # `mod` is the fresh output of this module's own passes: update it in place
            gv = mod.get_global_var(name)
            mod[gv] = mod[gv].with_attr("layout_free_buffers", sorted(idx))
    return mod


def _count_permutes(mod: tvm.IRModule) -> int:
    """Count the transposes in ``mod``'s ``main`` of data that depends on the model's inputs
    (a transposed weight or bias is folded once, not run)."""
    tvm = load_tvm()
    from tvm import relax

    permute = tvm.ir.Op.get("relax.permute_dims")
    main = mod["main"]
    live = {v.__chandle__() for v in main.params}  # variables computed from the inputs
    n = 0
    for block in main.body.blocks:
        for binding in block.bindings:
            if any(u.__chandle__() in live for u in relax.analysis.free_vars(binding.value)):
                live.add(binding.var.__chandle__())
                v = binding.value
                n += isinstance(v, relax.Call) and v.op.same_as(permute)
    return n


def _mutate_functions(mod: tvm.IRModule, mutator: Any) -> tvm.IRModule:
    """``mod`` with every Relax function rewritten by ``mutator`` (a ``PyExprMutator`` on ``mod``)."""
    from tvm import relax

    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator.builder_.update_func(gv, mutator.visit_expr(func))
    return mutator.builder_.get()


def _fast_gelu(mod: tvm.IRModule) -> tvm.IRModule:
    """Write float32 ``nn.gelu`` / ``nn.gelu_tanh`` with TVM's fast ``erf`` / ``tanh``.

    ``FastMathTransform`` replaces ``relax.erf`` and ``relax.tanh`` calls, but GELU is one
    operator whose legalization calls the scalar C library ``erff`` inside: measured on one
    128x3072 GELU here, 3.1 ms with ``erf`` vs 0.13 ms with ``fast_erf``.
    """
    tvm = load_tvm()
    from tvm import relax, topi
    from tvm.relax import expr_functor

    def gelu(x: Any) -> Any:
        return topi.multiply(x, topi.add(topi.multiply(topi.fast_erf(topi.multiply(x, 0.7071067811865476)), 0.5), 0.5))

    def gelu_tanh(x: Any) -> Any:
        inner = topi.multiply(topi.add(x, topi.multiply(topi.multiply(topi.multiply(x, x), x), 0.044715)),
                              0.7978845608028654)
        return topi.multiply(x, topi.add(topi.multiply(topi.fast_tanh(inner), 0.5), 0.5))

    fast = {"relax.nn.gelu": gelu, "relax.nn.gelu_tanh": gelu_tanh}

    @expr_functor.mutator
    class _Gelu(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            op = call.op
            if isinstance(op, tvm.ir.Op) and op.name in fast and call.args[0].ty.dtype == "float32":
                return self.builder_.call_te(fast[op.name], call.args[0])
            return call

    return _mutate_functions(mod, _Gelu(mod))


def _has_op(mod: tvm.IRModule, names: Collection[str]) -> bool:
    """Whether any Relax function of ``mod`` calls one of the operators ``names``."""
    return _has_call(mod, lambda call: getattr(call.op, "name", None) in names)


def _has_call(mod: tvm.IRModule, wanted: Callable[[Any], bool]) -> bool:
    """Whether any Relax function of ``mod`` has a call for which ``wanted`` is true."""
    load_tvm()
    from tvm import relax

    found = False

    def visit(expr: Any) -> None:
        nonlocal found
        found = found or (isinstance(expr, relax.Call) and wanted(expr))

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func, visit)
    return found


def _convert_conv_layout(mod: tvm.IRModule, layouts: Mapping[str, list[str]] | None,
                         notes: list[str] | None = None) -> tvm.IRModule:
    """Convert convolutions to ``layouts`` when that adds transposes only near the model's ends
    (at most two per input and output).

    A model without such convolutions is left as it is (the conversion has nothing to do, and on
    DeBERTa-v2 it ran out of memory). Two activations TVM 0.27's conversion has no layout rule
    for are written with ones it has first (:func:`_layout_agnostic_activations`: MobileNetV2's
    ReLU6 as ``minimum(maximum(x, 0), 6)``). Any other operator the conversion does not know
    gets a transpose on each side, a copy of the activations at every layer that costs more than
    the layout wins: then the module is returned unchanged, activations included. Where TVM's
    conversion fails, the model keeps its own layout and ``notes`` gets the reason.
    """
    if not layouts or not _has_op(mod, layouts):
        return mod
    from tvm import relax

    original = mod
    if _has_op(mod, _NO_LAYOUT_RULE):
        with stage("prepare", operator="layout-agnostic activations"):
            mod = _layout_agnostic_activations(mod)
    try:
        with stage("prepare", operator="relax.transform.ConvertLayout"):
            converted = relax.transform.ConvertLayout(dict(layouts))(mod)
    except ModelStageError as err:
        reason = str(err.__cause__).strip().splitlines()[0] if err.__cause__ else str(err)
        note = (f"prepare: convolutions kept in the model's own layout: converting them to "
                f"{'/'.join(next(iter(layouts.values())))} failed in TVM ({type(err.__cause__).__name__}: {reason})")
        log.warning(note)
        if notes is not None:
            notes.append(note)
        return original
    main = mod["main"]
    ends = len(main.params) + max(1, len(getattr(main.ret_ty, "fields", ())))
    # Count what survives dead-code elimination: PyTorch's max pool exports an indices output
    # TVM fills with a placeholder nobody reads, and the conversion gives it a transpose (VGG-16
    # had 7 such, 2 live). resnet18 gets 2 (its input, the output of the last conv block),
    # MobileNetV2 34.
    dce = relax.transform.DeadCodeElimination()
    added = _count_permutes(dce(converted)) - _count_permutes(dce(mod))
    return converted if added <= 2 * ends else original


#: Elementwise activations without a layout rule in TVM 0.27's ``ConvertLayout``
#: (``FRelaxInferLayout``) that :func:`_layout_agnostic_activations` rewrites.
_NO_LAYOUT_RULE = frozenset({"relax.clip", "relax.nn.leakyrelu"})


def _layout_agnostic_activations(mod: tvm.IRModule) -> tvm.IRModule:
    """Write float ``clip`` and ``nn.leakyrelu`` (slope in [0, 1]) with ``maximum``/``minimum``,
    which ``ConvertLayout`` carries through any layout.

    Without it every ReLU6 of MobileNetV2 got a transpose on each side, so the model kept NCHW;
    in NHWC its predicted (``tune="never"``) latency went from 4.39 to 3.52 ms (AMD Zen 5, 2 cores).
    The two forms compute the same values (``clip`` is ``min(max(x, lo), hi)``; for a slope
    ``a`` in [0, 1], ``leakyrelu(x) = max(x, a * x)``) and fuse into the convolution before them
    as ``clip`` does.
    """
    load_tvm()
    from tvm import relax
    from tvm.relax import expr_functor

    def scalar(v: Any) -> float | None:
        v = getattr(v, "value", v)  # a PrimValue holds a FloatImm / IntImm
        v = getattr(v, "value", v)
        return float(v) if isinstance(v, int | float) else None

    @expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            name = getattr(call.op, "name", None)
            dtype = str(getattr(call.args[0].ty, "dtype", "")) if call.args else ""
            if name not in _NO_LAYOUT_RULE or not dtype.startswith(("float", "bfloat")):
                return call
            x = call.args[0]
            if name == "relax.clip":
                lo, hi = scalar(call.args[1]), scalar(call.args[2])
                if lo is None or hi is None:
                    return call
                low = self.builder_.emit(relax.op.maximum(x, relax.const(lo, dtype)))
                return relax.op.minimum(low, relax.const(hi, dtype))
            alpha = scalar(call.attrs.alpha)
            if alpha is None or not 0.0 <= alpha <= 1.0:
                return call
            scaled = self.builder_.emit(relax.op.multiply(x, relax.const(alpha, dtype)))
            return relax.op.maximum(x, scaled)

    return _mutate_functions(mod, _Rewrite(mod))


def _pad_matmul_columns(mod: tvm.IRModule,
                        notes: list[str] | None = None) -> tuple[tvm.IRModule, dict[Any, Any] | None]:
    """Write ``matmul(x, W)`` with a constant ``W`` of awkward column count ``N`` as
    ``strided_slice(matmul(x, W_padded), last axis, 0, N)`` (:func:`padded_columns`).

    The padded weight is a new constant (zeros in the extra columns), so the matmul is a task of
    a well-tiled shape: GPT-2's and RoBERTa's LM heads (50,257 and 50,265 columns) are both the
    50,304-column task. ``FuseOps`` fuses the slice into the matmul as its epilogue (GPT-2's
    ``fused_matmul6_strided_slice2``): the padded columns are computed and never stored.
    Weights are found with :func:`~tunecache.tvm_layer.frontend.numpy_fold.constant_values`;
    one it cannot compute (too large, an operator it does not fold) is left as it is. Each padded
    column count goes to ``notes`` once (the compile report's preparation notes).

    Returns the module and, when it computed them, the constant values, which stay valid for it
    (the rewrite keeps every variable; it adds no constant-derived binding): computing them again
    took 0.65 s of GPT-2's (2 layers) 1.9 s preparation.
    """
    tvm = load_tvm()
    import numpy as np
    from tvm import relax
    from tvm.relax import expr_functor

    matmul = tvm.ir.Op.get("relax.matmul")
    const_type = tvm.ir.expr.Constant

    def columns(expr: Any) -> int | None:
        shape = getattr(expr.ty, "shape", None)
        dims = getattr(shape, "values", None)
        if not dims or len(dims) < 2 or not isinstance(dims[-1], tvm.tirx.IntImm):
            return None
        return int(dims[-1])

    def candidate(expr: Any) -> bool:
        n = columns(expr)
        return (n is not None and padded_columns(n) != n
                and str(getattr(expr.ty, "dtype", "")).startswith("float"))

    if not _has_call(mod, lambda call: call.op.same_as(matmul) and candidate(call.args[1])):
        return mod, None
    values = constant_values(mod)

    def weight(expr: Any) -> Any:
        if isinstance(expr, const_type):
            return expr.value.numpy()
        return values.get(expr) if isinstance(expr, relax.Var) else None

    @expr_functor.mutator
    class _Pad(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            w = weight(call.args[1]) if call.op.same_as(matmul) and candidate(call.args[1]) else None
            call = super().visit_call_(call)
            if w is None:
                return call
            n = int(w.shape[-1])
            note = (f"prepare: a matmul by a constant of {n} columns computes {padded_columns(n)} (zero-padded, "
                    f"sliced off): no SIMD vector divides {n}, and a tile must divide its loop")
            if notes is not None and note not in notes:
                notes.append(note)
            pad = [(0, 0)] * (w.ndim - 1) + [(0, padded_columns(n) - n)]
            wide = self.builder_.emit(relax.op.matmul(call.args[0], relax.const(np.pad(w, pad)),
                                                      out_dtype=call.attrs.out_dtype))
            return relax.op.strided_slice(wide, axes=[len(wide.ty.shape.values) - 1], begin=[0], end=[n])

    return _mutate_functions(mod, _Pad(mod)), values


def _check_prepared_for(mod: tvm.IRModule, target: tvm.target.Target) -> None:
    prepared_kind = str(mod.attrs[PREPARED_ATTR])
    if prepared_kind != str(target.kind.name):
        raise TargetError(
            f"this module was prepared for a {prepared_kind} target and cannot be built for "
            f"{target.kind.name}: call prepare_for_tuning on the imported model with this target"
        )
