"""From a user's model to MetaSchedule tasks and back to something that runs.

The four steps of ``tunecache.compile`` that touch the model, in order:

1. :func:`import_model` — a PyTorch module (with example inputs), a ``torch.export``
   ``ExportedProgram``, an ONNX model (``ModelProto`` or path) or a Relax ``IRModule`` becomes an
   :class:`ImportedModel` (a Relax module plus its weights).
2. :func:`prepare_for_tuning` — weights are bound as constants, and the module is legalized and
   fused so that every kernel is a TIR ``PrimFunc``: the exact functions MetaSchedule tunes.
3. :func:`extract_tasks` — one :class:`TaskInfo` per distinct kernel, with its weight (how many
   times the model calls it) and a :class:`~tunecache.store.keys.WorkloadDesc`.
4. :func:`build` then :func:`run` — compile the prepared module, applying tuned programs from a
   MetaSchedule database, and call it with numpy arrays or torch tensors.

Why one prepared module serves both extraction and building
------------------------------------------------------------
``MetaScheduleApplyDatabase`` looks each ``PrimFunc`` of the module up by structural hash. The
lookups hit only if the functions it sees are the ones tasks were extracted from, so
:func:`build` never re-fuses a prepared module: it applies the database to the same functions
:func:`extract_tasks` returned, then lowers (see ``tests/test_frontend.py``, which checks that the
workloads the database is asked about are exactly the extracted ones).

Pipeline of :func:`prepare_for_tuning` (TVM's own ``static_shape_tuning_pipeline`` with
``cpu_weight_prepack``, for weights bound as constants): ``BindParams`` → the target's library
dispatch passes → ``DecomposeOpsForInference`` (batch norm becomes scale/shift arithmetic that
fuses into the convolution before it) → on CPU, ``ConvertLayout`` of convolutions to NHWC
(:data:`CONV_LAYOUTS`) → on CPU, ``FastMathTransform`` (:data:`FAST_MATH`) → ``LegalizeOps`` → ``AnnotateTIROpPattern`` → ``FoldConstant`` (with
weights bound, weight transposes and bias reshapes are computed once here instead of being
tasks) → ``FuseOps`` → ``FuseTIR`` → on CPU, weights marked layout-free
(:data:`WEIGHT_PREPACK`). :func:`build` applies the database, then ``SplitLayoutRewritePreproc``
and ``FoldConstant``: a tuned kernel's weight re-layout runs once, at build time.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from tunecache.errors import DependencyError, TargetError, UnsupportedModelError
from tunecache.store.keys import WorkloadDesc, WorkloadKey
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.target import TargetLike, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import tvm

__all__ = [
    "Source",
    "TensorSpec",
    "ImportedModel",
    "TaskInfo",
    "import_model",
    "prepare_for_tuning",
    "is_prepared",
    "model_hash",
    "extract_tasks",
    "guess_family",
    "build",
    "make_vm",
    "run",
    "export_library",
    "load_library",
]

Source = Literal["torch", "exported_program", "onnx", "relax"]

#: Module attribute set by :func:`prepare_for_tuning`; its value is the target kind.
PREPARED_ATTR = "tunecache_prepared"

_ACCEPTED_MODELS = (
    "a torch.nn.Module with example_inputs, a torch.export.ExportedProgram, an onnx.ModelProto, "
    "a path to a .onnx file, or a Relax tvm.IRModule with a 'main' function (and optional params)"
)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """Name, static shape and dtype of one model input.

    Attributes
    ----------
    name
        The Relax parameter name (``"x"``, ``"input_ids"``).
    shape
        Static shape; a symbolic dimension is ``-1``.
    dtype
        TVM dtype string (``"float32"``, ``"int64"``).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True, eq=False)
class ImportedModel:
    """A model turned into Relax, with its weights.

    Holds TVM objects (it is the output of the TVM layer, consumed by the TVM layer), so equality
    is identity.

    Attributes
    ----------
    mod
        The Relax ``IRModule``. Its ``main`` takes the inputs, then (when ``params`` is not
        empty) the weights by name; :func:`prepare_for_tuning` binds them.
    params
        Weights by Relax parameter name (``tvm.runtime.Tensor``); empty when they are constants
        inside ``mod`` already (ONNX) or the caller gave none.
    inputs
        The model inputs, in call order.
    torch_io
        True when the model came from PyTorch: :func:`run` then returns torch tensors by default.
    source
        ``"torch"``, ``"exported_program"``, ``"onnx"`` or ``"relax"``.
    """

    mod: "tvm.IRModule"
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()
    torch_io: bool = False
    source: Source = "relax"

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


@dataclass(frozen=True, eq=False)
class TaskInfo:
    """One tuning task of a model: a distinct kernel and how often the model calls it.

    Attributes
    ----------
    name
        Task name, the fused function's name (``"fused_conv2d1_add_relu"``).
    weight
        How many call sites of the model use this kernel.
    mod
        The task's TIR ``IRModule`` exactly as MetaSchedule sees it (a TVM object; tuning
        and the workload hash use it).
    desc
        TVM-independent description: name, family guess, buffer shapes and dtypes.
    key
        MetaSchedule's workload key (structural hash of ``mod``).
    """

    name: str
    weight: int
    mod: "tvm.IRModule"
    desc: WorkloadDesc
    key: WorkloadKey


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------


def _torch_or_none() -> Any:
    """Return the torch module if the caller's process has imported it (never imports it)."""
    return sys.modules.get("torch")


def _require_torch() -> Any:
    try:
        import torch
    except ImportError as err:
        raise DependencyError(
            "importing PyTorch models needs PyTorch: run `pip install tunecache[torch]`"
        ) from err
    return torch


def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError as err:
        raise DependencyError(
            "importing ONNX models needs onnx: run `pip install tunecache[onnx]`"
        ) from err
    return onnx


def _is_onnx_model(model: Any) -> bool:
    mod_name = type(model).__module__ or ""
    return mod_name.startswith("onnx") and type(model).__name__ == "ModelProto"


def _input_specs(mod: "tvm.IRModule", num_input: int | None) -> tuple[TensorSpec, ...]:
    main = mod["main"]
    params = list(main.params)
    n = len(params) if num_input is None else num_input
    specs = []
    for var in params[:n]:
        ty = var.ty
        shape_expr = getattr(ty, "shape", None)
        values = getattr(shape_expr, "values", None) if shape_expr is not None else None
        shape = tuple(_static_int(v) for v in values) if values is not None else ()
        dtype = str(getattr(ty, "dtype", ""))
        specs.append(TensorSpec(str(var.name), shape, dtype))
    return tuple(specs)


def _static_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _num_input(mod: "tvm.IRModule") -> int | None:
    attrs = mod["main"].attrs
    if attrs is not None and "num_input" in attrs:
        return int(attrs["num_input"])
    return None


def _check_static(specs: Sequence[TensorSpec], what: str) -> None:
    dynamic = [s.name for s in specs if any(d < 0 for d in s.shape)]
    if dynamic:
        raise UnsupportedModelError(
            f"{what} has inputs with symbolic dimensions ({', '.join(dynamic)}); MetaSchedule "
            "tunes static shapes only: pass example_inputs (one array or tensor per input) to fix them"
        )


def _from_exported_program(ep: Any, source: Source) -> ImportedModel:
    tvm = load_tvm()
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    try:
        mod = from_exported_program(ep, keep_params_as_input=True)
    except AssertionError as err:  # the importer reports missing converters by assertion
        msg = str(err)
        match = re.search(r"Unsupported function types (\[.*\])", msg)
        what = f"PyTorch operators {match.group(1)}" if match else msg
        raise UnsupportedModelError(
            f"TVM {tvm.__version__} cannot import {what}; rewrite the model without them or export "
            "it to ONNX and import that"
        ) from err
    except (NotImplementedError, ValueError, KeyError) as err:
        raise UnsupportedModelError(
            f"TVM {tvm.__version__} cannot import this ExportedProgram: {err}"
        ) from err
    num_input = _num_input(mod)
    mod, detached = relax.frontend.detach_params(mod)
    names = [str(v.name) for v in mod["main"].params]
    weights = list(detached.get("main", []))
    n = len(names) - len(weights) if num_input is None else num_input
    params = dict(zip(names[n:], weights))
    specs = _input_specs(mod, n)
    _check_static(specs, "the exported program")
    return ImportedModel(mod=mod, params=params, inputs=specs, torch_io=True, source=source)


def _import_torch_module(model: Any, example_inputs: Any) -> ImportedModel:
    torch = _require_torch()
    if example_inputs is None:
        raise UnsupportedModelError(
            f"a torch.nn.Module ({type(model).__name__}) needs example_inputs to be exported: "
            "pass example_inputs=(tensor, ...) with the shapes and dtypes to compile for"
        )
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    bad = [type(x).__name__ for x in example_inputs if not isinstance(x, torch.Tensor)]
    if bad:
        raise UnsupportedModelError(
            f"example_inputs of a torch.nn.Module must be torch tensors, got {', '.join(bad)}"
        )
    try:
        ep = torch.export.export(model, example_inputs)
    except Exception as err:  # torch.export raises many unrelated types; all mean "not exportable"
        raise UnsupportedModelError(
            f"torch.export.export failed on {type(model).__name__}: {type(err).__name__}: {err}. "
            "Make the model exportable (see the torch.export docs) or pass an ExportedProgram"
        ) from err
    return _from_exported_program(ep, "torch")


def _import_onnx(model: Any, example_inputs: Any) -> ImportedModel:
    onnx = _require_onnx()
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise UnsupportedModelError(f"ONNX file {str(path)!r} does not exist")
        from google.protobuf.message import DecodeError

        try:
            model = onnx.load(str(path))
        except (OSError, DecodeError) as err:
            raise UnsupportedModelError(f"cannot read ONNX file {str(path)!r}: {err}") from err
    tvm = load_tvm()
    from tvm.relax.frontend.onnx import from_onnx

    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i.name for i in model.graph.input if i.name not in initializers]
    shape_dict: dict[str, list[int]] | None = None
    dtype_dict: dict[str, str] | None = None
    if example_inputs is not None:
        arrays = _as_numpy_tuple(example_inputs)
        if len(arrays) != len(graph_inputs):
            raise UnsupportedModelError(
                f"the ONNX graph has {len(graph_inputs)} inputs ({', '.join(graph_inputs)}) but "
                f"{len(arrays)} example_inputs were given"
            )
        shape_dict = {n: list(a.shape) for n, a in zip(graph_inputs, arrays)}
        dtype_dict = {n: str(a.dtype) for n, a in zip(graph_inputs, arrays)}
    try:
        mod = from_onnx(
            model, shape_dict=shape_dict, dtype_dict=dtype_dict, keep_params_in_input=False
        )
    except tvm.error.OpNotImplemented as err:
        msg = str(err).strip().splitlines()[0] if str(err).strip() else repr(err)
        ops = msg.split(":", 1)[1].strip() if ":" in msg else msg
        raise UnsupportedModelError(
            f"TVM {tvm.__version__} has no converter for the ONNX operator(s) {ops}; replace them "
            "in the model (or export it again with another opset)"
        ) from err
    except (NotImplementedError, ValueError, KeyError, AssertionError) as err:
        raise UnsupportedModelError(
            f"TVM {tvm.__version__} cannot import this ONNX model: {err}"
        ) from err
    specs = _input_specs(mod, _num_input(mod))
    _check_static(specs, "the ONNX model")
    return ImportedModel(mod=mod, params={}, inputs=specs, torch_io=False, source="onnx")


def _import_relax(mod: "tvm.IRModule", params: Mapping[str, Any] | None) -> ImportedModel:
    tvm = load_tvm()
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise UnsupportedModelError("a Relax IRModule must have a function named 'main' to import")
    names = [str(v.name) for v in mod["main"].params]
    converted: dict[str, Any] = {}
    for name, value in (params or {}).items():
        if name not in names:
            raise UnsupportedModelError(
                f"params has {name!r}, which is not a parameter of main ({', '.join(names)})"
            )
        if not isinstance(value, tvm.runtime.Tensor):
            value = tvm.runtime.tensor(value)
        converted[name] = value
    num_input = _num_input(mod)
    if num_input is None:
        n_inputs = len([n for n in names if n not in converted])
    else:
        n_inputs = num_input
    if any(n in converted for n in names[:n_inputs]) or len(names) - n_inputs != len(converted):
        missing = [n for n in names[n_inputs:] if n not in converted]
        if missing:
            raise UnsupportedModelError(
                f"main's parameters {', '.join(missing)} come after its {n_inputs} inputs but have "
                "no value in params: pass them, or mark the inputs with the 'num_input' attribute"
            )
        raise UnsupportedModelError(
            f"params must name the last parameters of main, after its {n_inputs} inputs; got "
            f"{', '.join(converted)}"
        )
    specs = _input_specs(mod, n_inputs)
    _check_static(specs, "the Relax module")
    return ImportedModel(mod=mod, params=converted, inputs=specs, torch_io=False, source="relax")


def import_model(
    model: Any,
    example_inputs: Any = None,
    *,
    params: Mapping[str, Any] | None = None,
) -> ImportedModel:
    """Import a model into Relax.

    Parameters
    ----------
    model
        A ``torch.nn.Module`` (put it in eval mode first: it is exported as it is), a
        ``torch.export.ExportedProgram``, an ``onnx.ModelProto``, a path to a ``.onnx`` file, or
        a Relax ``tvm.IRModule`` with a ``main`` function.
    example_inputs
        A tensor or tuple of tensors. Required for a ``torch.nn.Module`` (its shapes and dtypes
        are the ones compiled); for ONNX, numpy arrays or tensors that fix symbolic input shapes.
    params
        Relax only: values of ``main``'s trailing weight parameters, by name (numpy arrays or
        ``tvm.runtime.Tensor``).

    Returns
    -------
    ImportedModel
        The Relax module, its weights and its input signature.

    Raises
    ------
    UnsupportedModelError
        If the model is of no accepted type, a torch module has no example inputs, an operator
        has no TVM converter (the message names it), or an input shape is symbolic.
    DependencyError
        If PyTorch or onnx is needed and missing (the message names the pip extra).

    Examples
    --------
    >>> from tunecache import zoo
    >>> m = zoo.get("small_cnn")
    >>> imported = import_model(m.module, m.example_inputs)
    >>> imported.source, imported.inputs[0].shape
    ('torch', (1, 3, 16, 16))
    """
    torch = _torch_or_none()
    if torch is not None:
        if isinstance(model, torch.export.ExportedProgram):
            return _from_exported_program(model, "exported_program")
        if isinstance(model, torch.nn.Module):
            return _import_torch_module(model, example_inputs)
    if _is_onnx_model(model):
        return _import_onnx(model, example_inputs)
    if isinstance(model, (str, os.PathLike)):
        if str(model).lower().endswith(".onnx"):
            return _import_onnx(model, example_inputs)
        raise UnsupportedModelError(
            f"cannot tell the format of {str(model)!r} from its name (only .onnx files are read); "
            f"accepted: {_ACCEPTED_MODELS}"
        )
    if type(model).__module__.startswith("tvm"):
        tvm = load_tvm()
        if isinstance(model, tvm.IRModule):
            return _import_relax(model, params)
    kind = f"{type(model).__module__}.{type(model).__name__}"
    raise UnsupportedModelError(f"cannot import a {kind}; accepted: {_ACCEPTED_MODELS}")


# ---------------------------------------------------------------------------------------------
# Preparing and extracting tasks
# ---------------------------------------------------------------------------------------------


def _backend_passes(target: "tvm.target.Target") -> tuple[list[Any], list[Any], list[Any]]:
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
#: :func:`build` folds each kernel's weight re-layout into the constants once.
WEIGHT_PREPACK: frozenset[str] = frozenset({"llvm"})


def _bind(mod: "tvm.IRModule", params: Mapping[str, Any]) -> "tvm.IRModule":
    if not params:
        return mod
    from tvm import relax

    return relax.transform.BindParams("main", dict(params))(mod)


def model_hash(imported: ImportedModel | "tvm.IRModule", target: TargetLike = None) -> str:
    """Identify what :func:`prepare_for_tuning` would start from and how it would prepare it.

    A digest of the imported module with its weights bound (TVM's structural hash covers
    constant data: BERT-base's 440 MB in ~0.25 s) and of the preparation settings for the
    target's kind (:data:`CONV_LAYOUTS`, :data:`FAST_MATH`, :data:`WEIGHT_PREPACK`). Equal
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
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def is_prepared(mod: "tvm.IRModule") -> bool:
    """Return whether ``mod`` came out of :func:`prepare_for_tuning`."""
    attrs = mod.attrs
    return attrs is not None and PREPARED_ATTR in attrs


def prepare_for_tuning(
    imported: ImportedModel | "tvm.IRModule", target: TargetLike = None
) -> "tvm.IRModule":
    """Bind weights, legalize and fuse: every kernel becomes the TIR function MetaSchedule tunes.

    Parameters
    ----------
    imported
        An :class:`ImportedModel` (its ``params`` are bound), or a Relax ``IRModule`` whose
        weights, if any, are constants already.
    target
        Anything :func:`~tunecache.tvm_layer.target.resolve_target` accepts. Legalization and
        library dispatch depend on it, so tasks are for this target.

    Returns
    -------
    tvm.IRModule
        A module whose ``main`` calls fused ``PrimFunc`` s; it carries the attribute
        ``tunecache_prepared`` (the target kind) so that :func:`build` does not fuse it again.
        Preparing it again returns it unchanged.
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
    with t, tvm.transform.PassContext(opt_level=3):
        mod = tvm.transform.Sequential([
            *dispatch, relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(),
        ])(_bind(mod, params))  # fmt: skip
        mod = _convert_conv_layout(mod, CONV_LAYOUTS.get(str(t.kind.name)))
        if str(t.kind.name) in FAST_MATH:
            mod = relax.transform.FastMathTransform()(_fast_gelu(mod))
        mod = tvm.transform.Sequential([
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(),
        ])(mod)  # fmt: skip
        if str(t.kind.name) in WEIGHT_PREPACK:
            mod = _mark_layout_free_weights(mod)
    return mod.with_attr(PREPARED_ATTR, str(t.kind.name))


def _mark_layout_free_weights(mod: "tvm.IRModule") -> "tvm.IRModule":
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


def _count_permutes(mod: "tvm.IRModule") -> int:
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


def _fast_gelu(mod: "tvm.IRModule") -> "tvm.IRModule":
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
    class _Gelu(relax.PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            op = call.op
            if isinstance(op, tvm.ir.Op) and op.name in fast and call.args[0].ty.dtype == "float32":
                return self.builder_.call_te(fast[op.name], call.args[0])
            return call

    rewriter = _Gelu(mod)
    for gv, func in mod.functions_items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    return rewriter.builder_.get()


def _convert_conv_layout(mod: "tvm.IRModule", layouts: Mapping[str, list[str]] | None) -> "tvm.IRModule":
    """Convert convolutions to ``layouts`` when that adds transposes only near the model's ends
    (at most two per input and output).

    An operator the conversion does not know (e.g. ``clip``, MobileNet's ReLU6) gets a
    transpose on each side, a copy of the activations at every layer that costs more than the
    layout wins: then the module is returned unchanged.
    """
    if not layouts:
        return mod
    from tvm import relax

    converted = relax.transform.ConvertLayout(dict(layouts))(mod)
    main = mod["main"]
    ends = len(main.params) + max(1, len(getattr(main.ret_ty, "fields", ())))
    # resnet18 gets 3 (its input, the output of the last conv block and one more), MobileNetV2 34.
    return converted if _count_permutes(converted) - _count_permutes(mod) <= 2 * ends else mod


def _kind_of(target: TargetLike) -> str:
    """Guess the target kind cheaply (to import only the tensor intrinsics it needs)."""
    if target is None:
        return "llvm"
    if isinstance(target, str):
        low = target.strip().lower()
        if low in ("cuda", "gpu", "nvidia") or low.startswith(("nvidia/", "cuda ")):
            return "cuda"
        if '"cuda"' in low:
            return "cuda"
        return "llvm"
    if isinstance(target, Mapping):
        return "cuda" if target.get("kind") == "cuda" else "llvm"
    kind = getattr(getattr(target, "kind", None), "name", "llvm")
    return "cuda" if kind == "cuda" else "llvm"


def _check_prepared_for(mod: "tvm.IRModule", target: "tvm.target.Target") -> None:
    prepared_kind = str(mod.attrs[PREPARED_ATTR])
    if prepared_kind != str(target.kind.name):
        raise TargetError(
            f"this module was prepared for a {prepared_kind} target and cannot be built for "
            f"{target.kind.name}: call prepare_for_tuning on the imported model with this target"
        )


_FAMILY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("conv2d_transpose", "other"),
    ("batch_matmul", "batch_matmul"),
    ("conv2d", "conv2d"),
    ("matmul", "matmul"),
    ("dense", "dense"),
)


def guess_family(name: str, shapes: Sequence[Sequence[int]] = ()) -> str:
    """Guess the operator family of a task from its name and buffer shapes.

    A first guess from names such as ``fused_conv2d1_add_relu``; grouped convolutions with one
    input channel per group are ``depthwise_conv2d``, and matmuls whose both operands have batch
    dimensions are ``batch_matmul``. Anything else is ``other``.

    Parameters
    ----------
    name
        The task name.
    shapes
        Buffer shapes in parameter order (the anchor's operands first, as Relax fuses them).

    Returns
    -------
    str
        ``conv2d``, ``depthwise_conv2d``, ``matmul``, ``batch_matmul``, ``dense`` or ``other``.

    Examples
    --------
    >>> guess_family("fused_conv2d3_add_relu", [(1, 32, 56, 56), (32, 1, 3, 3)])
    'depthwise_conv2d'
    >>> guess_family("matmul1", [(12, 128, 64), (12, 64, 128)])
    'batch_matmul'
    >>> guess_family("fused_matmul_add1", [(1, 128, 768), (768, 768)])
    'matmul'
    """
    tokens = re.sub(r"\d+(?=_|$)", "", name).split("_")
    joined = "_" + "_".join(tokens) + "_"
    family = "other"
    for pattern, fam in _FAMILY_PATTERNS:
        if f"_{pattern}_" in joined:
            family = fam
            break
    if family == "conv2d" and len(shapes) >= 2 and len(shapes[0]) == 4 and len(shapes[1]) == 4:
        data, weight = shapes[0], shapes[1]
        channels = data[1]
        if weight[1] == 1 and channels > 1 and weight[0] % channels == 0:
            family = "depthwise_conv2d"
    if family == "matmul" and len(shapes) >= 2:
        a, b = shapes[0], shapes[1]
        batch_b = 1
        for d in b[:-2]:
            batch_b *= d
        if len(a) >= 3 and len(b) >= 3 and batch_b > 1:
            family = "batch_matmul"
    return family


def _describe(name: str, mod: "tvm.IRModule") -> WorkloadDesc:
    func = mod["main"]
    shapes: list[tuple[int, ...]] = []
    dtypes: list[str] = []
    buffer_map = getattr(func, "buffer_map", None)  # TVM < 0.27; 0.27 params are buffers
    for param in func.params:
        buf = buffer_map.get(param) if buffer_map is not None else param
        if buf is None or type(getattr(buf, "ty", None)).__name__ not in ("BufferType", "NoneType"):
            continue  # a scalar parameter
        shapes.append(tuple(_static_int(d) for d in buf.shape))
        dtypes.append(str(buf.dtype))
    return WorkloadDesc(
        name=name, family=guess_family(name, shapes), shapes=tuple(shapes), dtypes=tuple(dtypes)
    )


def extract_tasks(mod: "tvm.IRModule", target: TargetLike = None) -> list[TaskInfo]:
    """Return the tuning tasks of a prepared module, heaviest first.

    Parameters
    ----------
    mod
        The output of :func:`prepare_for_tuning` (an unprepared module is prepared first; it
        must have its weights bound, or take them as inputs).
    target
        The target the module was prepared for.

    Returns
    -------
    list of TaskInfo
        One per distinct kernel (MetaSchedule deduplicates structurally equal ones, so identical
        transformer layers share tasks), sorted by weight then name.

    Examples
    --------
    >>> from tunecache import zoo
    >>> m = zoo.get("small_cnn")
    >>> mod = prepare_for_tuning(import_model(m.module, m.example_inputs))
    >>> sorted(t.desc.family for t in extract_tasks(mod))[:3]
    ['conv2d', 'conv2d', 'conv2d']
    """
    load_tvm()  # extraction creates no TuneContext: no tensor intrinsics needed
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    t = resolve_target(target)
    if not is_prepared(mod):
        mod = prepare_for_tuning(mod, t)
    tasks = ms.relax_integration.extract_tasks(mod, t)
    out = [
        TaskInfo(
            name=str(task.task_name),
            weight=int(task.weight),
            mod=task.mod,
            desc=_describe(str(task.task_name), task.mod),
            key=WorkloadKey(str(tvm_ffi.structural_hash(task.mod))),
        )
        for task in tasks
    ]
    out.sort(key=lambda ti: (-ti.weight, ti.name))
    return out


# ---------------------------------------------------------------------------------------------
# Building and running
# ---------------------------------------------------------------------------------------------


def build(
    mod: ImportedModel | "tvm.IRModule",
    target: TargetLike = None,
    params: Mapping[str, Any] | None = None,
    database: Any = None,
) -> Any:
    """Compile a model, with the tuned programs of a MetaSchedule database when one is given.

    Parameters
    ----------
    mod
        A prepared module (:func:`prepare_for_tuning`), an :class:`ImportedModel`, or a Relax
        module (prepared here).
    target
        Anything :func:`~tunecache.tvm_layer.target.resolve_target` accepts.
    params
        Weights to bind into ``main`` (by parameter name), for a module that still takes them.
    database
        A ``tvm.s_tir.meta_schedule.database.Database``; its best record for each kernel
        replaces the default schedule. Kernels it has no record for stay untuned (on GPU
        targets DLight schedules them).

    Returns
    -------
    tvm.relax.VMExecutable
        Call it through :func:`run` or :func:`make_vm`; save it with :func:`export_library`.

    Raises
    ------
    TargetError
        If ``mod`` was prepared for another kind of target.
    """
    # Applying CUDA records may replay tensorize instructions: their intrinsics must be real.
    tvm = load_tvm(_kind_of(target) if database is not None else "llvm")
    from tvm import relax

    t = resolve_target(target)
    if isinstance(mod, ImportedModel):
        mod = prepare_for_tuning(mod, t)
    if params:
        mod = _bind(mod, params)
    if not is_prepared(mod):
        mod = prepare_for_tuning(mod, t)
    _check_prepared_for(mod, t)
    _, lower, finalize = _backend_passes(t)
    with t, tvm.transform.PassContext(opt_level=3):
        passes: list[Any] = []
        if database is not None:
            # Constructed inside the target scope: the pass reads Target.current().
            passes.append(relax.transform.MetaScheduleApplyDatabase())
            if str(t.kind.name) in WEIGHT_PREPACK:
                # A kernel whose record re-lays its weights out reads them in the new layout:
                # split that re-layout off and fold it into the constant weights, once.
                passes += [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()]
        if "gpu" in [str(k) for k in t.keys]:
            from tvm.s_tir import dlight as dl

            passes.append(
                dl.ApplyDefaultSchedule(
                    dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                    dl.gpu.GeneralReduction(), dl.gpu.Fallback(),
                )  # fmt: skip
            )
        pipeline = tvm.transform.Sequential(passes + lower + finalize)
        if database is None:
            return tvm.compile(mod, target=t, relax_pipeline=pipeline)
        with database:
            return tvm.compile(mod, target=t, relax_pipeline=pipeline)


def _device(device: Any) -> Any:
    tvm = load_tvm()
    if device is None:
        return tvm.cpu(0)
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        kind = {"llvm": "cpu"}.get(kind, kind)
        return tvm.device(kind, int(index or 0))
    return device


def make_vm(executable: Any, device: Any = None) -> Any:
    """Return a Relax ``VirtualMachine`` for a built executable or a loaded library.

    Parameters
    ----------
    executable
        The result of :func:`build` or :func:`load_library`.
    device
        ``"cpu"`` (default), ``"cuda"``, ``"cuda:1"`` or a ``tvm.runtime.Device``.
    """
    load_tvm()
    from tvm import relax

    return relax.VirtualMachine(executable, _device(device))


def _as_numpy_tuple(inputs: Any) -> tuple["np.ndarray", ...]:
    import numpy as np

    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    torch = _torch_or_none()
    out = []
    for x in inputs:
        if torch is not None and isinstance(x, torch.Tensor):
            out.append(x.detach().cpu().numpy())
        else:
            out.append(np.asarray(x))
    return tuple(out)


def _to_tvm(x: Any, dev: Any, spec: TensorSpec | None) -> tuple[Any, bool]:
    import numpy as np

    tvm = load_tvm()
    torch = _torch_or_none()
    is_torch = torch is not None and isinstance(x, torch.Tensor)
    if is_torch:
        shape, dtype = tuple(x.shape), str(x.dtype).removeprefix("torch.")
    elif isinstance(x, tvm.runtime.Tensor):
        shape, dtype = tuple(x.shape), str(x.dtype)
    else:
        x = np.asarray(x)
        shape, dtype = tuple(x.shape), str(x.dtype)
    if spec is not None and (shape != spec.shape or dtype != spec.dtype):
        raise ValueError(
            f"input {spec.name!r} must be {spec.dtype}{list(spec.shape)} (the shape it was "
            f"compiled for), got {dtype}{list(shape)}"
        )
    if is_torch:
        t = x.detach()
        if t.device.type == "cpu" and dev.dlpack_device_type() == 1:
            t = t.contiguous()
            if t.data_ptr() % 64 == 0:  # TVM refuses less aligned DLPack data
                return tvm.runtime.from_dlpack(t), True
            return tvm.runtime.tensor(t.numpy(), dev), True
        return tvm.runtime.tensor(t.cpu().numpy(), dev), True
    if isinstance(x, tvm.runtime.Tensor):
        return x, False
    return tvm.runtime.tensor(np.ascontiguousarray(x), dev), False


def _from_tvm(value: Any, as_torch: bool) -> Any:
    tvm = load_tvm()
    torch = _torch_or_none()
    if torch is not None and isinstance(value, torch.Tensor):  # tvm_ffi may hand back torch
        return value.clone() if as_torch else value.detach().cpu().numpy()
    if isinstance(value, tvm.runtime.Tensor):
        arr = value.numpy()  # a copy: the VM may reuse its buffers on the next call
        return torch.from_numpy(arr) if as_torch and torch is not None else arr
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return tuple(_from_tvm(v, as_torch) for v in value)
    return value


def run(
    executable: Any,
    imported: ImportedModel | None,
    *inputs: Any,
    device: Any = None,
    as_torch: bool | None = None,
) -> Any:
    """Run a compiled model once.

    Parameters
    ----------
    executable
        The result of :func:`build`, a loaded library (:func:`load_library`) or a
        ``VirtualMachine`` from :func:`make_vm` (reuse one to avoid re-creating it per call).
    imported
        The model's :class:`ImportedModel`: inputs are checked against its shapes and dtypes.
        ``None`` skips the check.
    *inputs
        One numpy array, torch tensor or ``tvm.runtime.Tensor`` per model input. The weights
        are not passed: :func:`build` binds them into the executable.
    device
        Where to run: ``"cpu"`` (default), ``"cuda"``, ...; with a VM, the device it was made
        for.
    as_torch
        Return torch tensors; default: when any input is a torch tensor.

    Returns
    -------
    numpy.ndarray or torch.Tensor, or a tuple of them
        A single output is returned bare, several as a tuple.

    Raises
    ------
    TypeError
        If the number of inputs is wrong.
    ValueError
        If an input's shape or dtype is not the one compiled for.
    """
    tvm = load_tvm()
    from tvm import relax

    dev = _device(device)
    vm = executable if isinstance(executable, relax.VirtualMachine) else make_vm(executable, dev)
    specs: Sequence[TensorSpec | None]
    if imported is not None:
        if len(inputs) != len(imported.inputs):
            names = ", ".join(s.name for s in imported.inputs)
            raise TypeError(
                f"the model takes {len(imported.inputs)} inputs ({names}), got {len(inputs)}"
            )
        specs = imported.inputs
    else:
        specs = [None] * len(inputs)
    converted = [_to_tvm(x, dev, s) for x, s in zip(inputs, specs)]
    torch_in = any(flag for _, flag in converted)
    want_torch = torch_in if as_torch is None else as_torch
    if want_torch:
        _require_torch()
    result = vm["main"](*[c for c, _ in converted])
    out = _from_tvm(result, want_torch)
    if isinstance(out, tuple) and len(out) == 1:
        return out[0]
    return out


def export_library(executable: Any, path: str | os.PathLike[str]) -> Path:
    """Write a built executable as a shared library (``.so``) that :func:`load_library` reads.

    The weights are inside (they are bound constants), so the file is all a deployment needs
    besides the TVM runtime.
    """
    out = Path(path)
    executable.export_library(str(out))
    return out


def load_library(path: str | os.PathLike[str]) -> Any:
    """Load a library written by :func:`export_library`; pass it to :func:`run`."""
    tvm = load_tvm()
    if not Path(path).is_file():
        raise FileNotFoundError(f"no compiled model at {str(path)!r}")
    return tvm.runtime.load_module(str(path))
