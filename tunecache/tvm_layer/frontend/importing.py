"""Model import: a PyTorch module, a ``torch.export`` program, an ONNX model or a Relax module
becomes an :class:`ImportedModel` (a Relax module plus its weights), step 1 of
:mod:`tunecache.tvm_layer.frontend`."""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from tunecache.errors import DependencyError, UnsupportedModelError
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.frontend.failures import WHAT_TO_DO, ModelStageError, stage

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import tvm

__all__ = ["Source", "TensorSpec", "ImportedModel", "import_model"]

Source = Literal["torch", "exported_program", "onnx", "relax"]

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
        empty) the weights by name; :func:`~tunecache.tvm_layer.frontend.prepare_for_tuning`
        binds them.
    params
        Weights by Relax parameter name (``tvm.runtime.Tensor``); empty when they are constants
        inside ``mod`` already (ONNX) or the caller gave none.
    inputs
        The model inputs, in call order.
    torch_io
        True when the model came from PyTorch: :func:`~tunecache.tvm_layer.frontend.run` then
        returns torch tensors by default.
    source
        ``"torch"``, ``"exported_program"``, ``"onnx"`` or ``"relax"``.
    notes
        What import changed so that TVM computes what the model computes (e.g. empty 1-D
        operands dropped from ``torch.cat``, as PyTorch skips them); reports show them.
    """

    mod: tvm.IRModule
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[TensorSpec, ...] = ()
    torch_io: bool = False
    source: Source = "relax"
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))



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


def _input_specs(mod: tvm.IRModule, num_input: int | None) -> tuple[TensorSpec, ...]:
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


def _num_input(mod: tvm.IRModule) -> int | None:
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

    from tunecache.tvm_layer.frontend.fx_rewrites import give_torch_semantics

    ep = _decompose(ep)  # a new program: the caller's is left as it is
    notes = give_torch_semantics(ep.graph_module)
    try:
        with stage("import"):
            mod = from_exported_program(ep, keep_params_as_input=True, run_ep_decomposition=False)
    except ModelStageError as err:
        if isinstance(err.__cause__, AssertionError):  # the importer reports missing converters by assertion
            match = re.search(r"Unsupported function types (\[.*\])", str(err.__cause__))
            if match:
                raise ModelStageError(
                    f"import failed: TVM {tvm.__version__} cannot import PyTorch operators {match.group(1)}; "
                    "rewrite the model without them or export it to ONNX and import that",
                    stage="import", operator=match.group(1),
                ) from err.__cause__
        raise
    num_input = _num_input(mod)
    mod, detached = relax.frontend.detach_params(mod)
    names = [str(v.name) for v in mod["main"].params]
    weights = list(detached.get("main", []))
    n = len(names) - len(weights) if num_input is None else num_input
    params = dict(zip(names[n:], weights, strict=False))
    specs = _input_specs(mod, n)
    _check_static(specs, "the exported program")
    return ImportedModel(mod=mod, params=params, inputs=specs, torch_io=True, source=source, notes=tuple(notes))


#: A warning torch raises from its own code while decomposing an exported program.
TORCH_OWN_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


def _decompose(ep: Any) -> Any:
    """``ep`` decomposed to core ATen operators, as TVM's importer would (it skips programs with
    sparse weights), so that tunecache's rewrites see the graph TVM converts."""
    torch = _require_torch()
    tensors = [*ep.state_dict.values(), *ep.constants.values()]
    if any(isinstance(t, torch.Tensor) and t.layout != torch.strided for t in tensors):
        return ep
    try:
        with warnings.catch_warnings():
            # torch 2.13 warns about its own pytree internals while it copies the program: once
            # per compile from Python, and nothing a user can change (the CLI hides it anyway).
            warnings.filterwarnings("ignore", message=TORCH_OWN_WARNING, category=FutureWarning)
            return ep.run_decompositions()
    except Exception as err:  # torch's tracing raises many unrelated types; all mean "not decomposable"
        raise ModelStageError(
            f"export failed: decomposing the exported program to core ATen operators raised "
            f"{type(err).__name__}: {err}. What to do: {WHAT_TO_DO['export']}", stage="export",
        ) from err


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
        if not _returns_a_kv_cache(model, err):
            raise _export_failed(model, err) from err
        # A transformers decoder with its default use_cache=True returns its key/value cache, an
        # object the export cannot flatten (and an ahead-of-time compiled model has no use for).
        try:
            ep = torch.export.export(_without_cache(torch, model), example_inputs)
        except Exception as again:  # noqa: BLE001 - the first failure is the one to report
            raise _export_failed(model, err) from again
        imported = _from_exported_program(ep, "torch")
        return replace(imported, notes=(KV_CACHE_NOTE, *imported.notes))
    return _from_exported_program(ep, "torch")


#: The report's note when a model was exported without its key/value cache.
KV_CACHE_NOTE = ("import: exported with use_cache=False: the model returns a transformers key/value cache, "
                 "which a compiled model cannot return; it returns the model's tensor outputs (e.g. logits)")


def _returns_a_kv_cache(model: Any, err: BaseException) -> bool:
    """Whether ``err`` is torch.export refusing a ``transformers`` cache object in the output of
    a model whose config asks for one (``use_cache=True``)."""
    config = getattr(model, "config", None)
    return getattr(config, "use_cache", False) is True and "cache_utils" in str(err)


def _without_cache(torch: Any, model: Any) -> Any:
    """``model`` called with ``use_cache=False`` (a module: a keyword that is not a tensor would
    be an input of the exported program, which TVM's importer takes for a tensor)."""

    class WithoutCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(*args, use_cache=False)

    return WithoutCache().eval()


def _export_failed(model: Any, err: BaseException) -> ModelStageError:
    return ModelStageError(
        f"export failed: torch.export.export failed on {type(model).__name__}: {type(err).__name__}: {err}. "
        "Make the model exportable (see the torch.export docs) or pass an ExportedProgram",
        stage="export",
    )


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

    from tunecache.tvm_layer.frontend.onnx_rewrites import fold_static_shapes

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
        shape_dict = {n: list(a.shape) for n, a in zip(graph_inputs, arrays, strict=False)}
        dtype_dict = {n: str(a.dtype) for n, a in zip(graph_inputs, arrays, strict=False)}
    model, folded = fold_static_shapes(model, shape_dict)
    notes = (f"import: {folded} ONNX shape computation(s) folded to constants for the static input shapes",
             ) if folded else ()
    try:
        with stage("import"):
            mod = from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict, keep_params_in_input=False)
    except ModelStageError as err:
        if isinstance(err.__cause__, tvm.error.OpNotImplemented):
            msg = str(err.__cause__).strip().splitlines()[0] if str(err.__cause__).strip() else repr(err.__cause__)
            ops = msg.split(":", 1)[1].strip() if ":" in msg else msg
            raise ModelStageError(
                f"import failed: TVM {tvm.__version__} has no converter for the ONNX operator(s) {ops}; replace "
                "them in the model (or export it again with another opset)", stage="import", operator=ops,
            ) from err.__cause__
        raise
    specs = _input_specs(mod, _num_input(mod))
    _check_static(specs, "the ONNX model")
    return ImportedModel(mod=mod, params={}, inputs=specs, torch_io=False, source="onnx", notes=notes)


def _import_relax(mod: tvm.IRModule, params: Mapping[str, Any] | None) -> ImportedModel:
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


def _as_numpy_tuple(inputs: Any) -> tuple[np.ndarray, ...]:
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
