"""Building and running: compile a prepared module with the tuned programs of a MetaSchedule
database, run it on numpy arrays or torch tensors, save and load it as a shared library (step 4
of :mod:`tunecache.tvm_layer.frontend`).

Why one prepared module serves both extraction and building
------------------------------------------------------------
``MetaScheduleApplyDatabase`` looks each ``PrimFunc`` of the module up by structural hash. The
lookups hit only if the functions it sees are the ones tasks were extracted from, so
:func:`build` never re-fuses a prepared module: it applies the database to the same functions
:func:`~tunecache.tvm_layer.frontend.tasks.extract_tasks` returned, then lowers (see
``tests/test_frontend.py``, which checks that the workloads the database is asked about are
exactly the extracted ones).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.frontend.importing import (
    ImportedModel,
    TensorSpec,
    _require_torch,
    _torch_or_none,
)
from tunecache.tvm_layer.frontend.prepare import (
    WEIGHT_PREPACK,
    _backend_passes,
    _bind,
    _check_prepared_for,
    is_prepared,
    prepare_for_tuning,
)
from tunecache.tvm_layer.target import TargetLike, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    import tvm

__all__ = ["build", "make_vm", "run", "export_library", "load_library"]


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


def build(
    mod: ImportedModel | tvm.IRModule,
    target: TargetLike = None,
    params: Mapping[str, Any] | None = None,
    database: Any = None,
) -> Any:
    """Compile a model, with the tuned programs of a MetaSchedule database when one is given.

    Parameters
    ----------
    mod
        A prepared module (:func:`~tunecache.tvm_layer.frontend.prepare_for_tuning`), an
        :class:`~tunecache.tvm_layer.frontend.ImportedModel`, or a Relax module (prepared
        here).
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
        The model's :class:`~tunecache.tvm_layer.frontend.ImportedModel`: inputs are checked
        against its shapes and dtypes.
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
    load_tvm()
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
    converted = [_to_tvm(x, dev, s) for x, s in zip(inputs, specs, strict=False)]
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
