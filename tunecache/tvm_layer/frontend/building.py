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

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.frontend.codegen import apply_database, compile_relax
from tunecache.tvm_layer.frontend.failures import ModelStageError, stage
from tunecache.tvm_layer.frontend.importing import (
    ImportedModel,
    TensorSpec,
    _require_torch,
    _torch_or_none,
)
from tunecache.tvm_layer.frontend.numpy_fold import kernel_values, substitute_constants
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

__all__ = ["build", "caller", "degraded_kernels", "make_vm", "run", "export_library", "load_library"]

log = logging.getLogger("tunecache")

# Where build() reports the kernels it degraded, while a degraded_kernels() block is open.
_DEGRADED: ContextVar[dict[str, str] | None] = ContextVar("tunecache_degraded_kernels", default=None)


@contextlib.contextmanager
def degraded_kernels() -> Iterator[dict[str, str]]:
    """Collect the kernels :func:`build` degrades inside the block: ``{kernel name: why}``.

    A kernel is degraded when the database has a record for it that TVM cannot build as it is
    (its weight re-layout cannot be split off): it gets TVM's default schedule, and the model
    still builds. The compile report turns each into a ``fallback`` with the reason.
    """
    found: dict[str, str] = {}
    token = _DEGRADED.set(found)
    try:
        yield found
    finally:
        _DEGRADED.reset(token)


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
        targets DLight schedules them). A kernel whose record re-lays a weight out that TVM
        cannot split off is built with its default schedule instead (logged, and collected by
        :func:`degraded_kernels`).

    Returns
    -------
    tvm.relax.VMExecutable
        Call it through :func:`run` or :func:`make_vm`; save it with :func:`export_library`.

    Raises
    ------
    TargetError
        If ``mod`` was prepared for another kind of target.
    ModelStageError
        If TVM fails to build the model (stage ``"build"``).
    """
    # Applying CUDA records may replay tensorize instructions: their intrinsics must be real.
    tvm = load_tvm(_kind_of(target) if database is not None else "llvm")

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
        prepared = applied = mod
        if database is not None:
            with stage("build", operator="relax.transform.MetaScheduleApplyDatabase"):
                # Inside the target scope: the pass reads Target.current(). A copy: degraded in place.
                applied = apply_database(mod, database)
            mod = _prepack(applied, prepared, t)
        passes: list[Any] = []
        if "gpu" in [str(k) for k in t.keys]:
            from tvm.s_tir import dlight as dl

            passes.append(
                dl.ApplyDefaultSchedule(
                    dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                    dl.gpu.GeneralReduction(), dl.gpu.Fallback(),
                )  # fmt: skip
            )
        pipeline = tvm.transform.Sequential(passes + lower + finalize)
        try:
            with stage("build"):
                return compile_relax(mod, t, pipeline)
        except ModelStageError:
            if database is None:
                raise
            # A failure confined to kernels built from records degrades those kernels (their
            # default schedule), not the model; one that is not fails as it did.
            broken = _kernels_failing_alone(applied, t)
            if not broken:
                raise
            for name, reason in broken.items():
                _degrade(applied, prepared, name, f"degraded: its record does not build ({reason}); built with "
                                                  "TVM's default schedule")
            mod = _prepack(applied, prepared, t)
            with stage("build"):
                return compile_relax(mod, t, pipeline)


def _prepack(applied: tvm.IRModule, prepared: tvm.IRModule, target: Any) -> tvm.IRModule:
    """``applied`` with its kernels' weight re-layouts split off where the target prepacks."""
    if str(target.kind.name) not in WEIGHT_PREPACK:
        return applied
    return _prepack_weights(applied, prepared)


def _degrade(applied: tvm.IRModule, prepared: tvm.IRModule, name: str, note: str) -> None:
    """Give kernel ``name`` of ``applied`` its unscheduled function back (in place), logged and
    collected by :func:`degraded_kernels`."""
    log.warning("kernel %s %s", name, note)
    sink = _DEGRADED.get()
    if sink is not None:
        sink[name] = note
    applied[applied.get_global_var(name)] = prepared[prepared.get_global_var(name)]


def _kernels_failing_alone(applied: tvm.IRModule, target: Any) -> dict[str, str]:
    """The kernels of ``applied`` scheduled from records that fail to compile on their own, with
    TVM's reason."""
    tvm = load_tvm()
    from tvm import tirx

    broken = {}
    for gv, func in applied.functions_items():
        if not isinstance(func, tirx.PrimFunc) or "tirx.is_scheduled" not in (func.attrs or {}):
            continue
        try:
            with stage("build", operator=gv.name_hint):
                tvm.tirx.build(tvm.IRModule({gv: func.with_attr("global_symbol", gv.name_hint)}), target=target)
        except ModelStageError as err:
            broken[gv.name_hint] = str(err.__cause__).strip().splitlines()[0] if err.__cause__ else str(err)
    return broken


#: Annotation of the blocks MetaSchedule's ``RewriteLayout`` adds to re-lay a weight out.
_LAYOUT_REWRITE = "meta_schedule.layout_rewrite_preproc"


def _rewrites_layout(func: Any) -> bool:
    """Whether a scheduled ``PrimFunc`` re-lays a weight out (has a layout-rewrite block)."""
    from tunecache.tvm_layer.tir import iter_sblocks

    return any(_LAYOUT_REWRITE in (block.annotations or {}) for block in iter_sblocks(func))


def _prepack_weights(applied: tvm.IRModule, prepared: tvm.IRModule) -> tvm.IRModule:
    """Split each weight re-layout off the kernels whose records re-lay a weight out, so that
    ``FoldConstant`` computes it once (TVM's ``SplitLayoutRewritePreproc``).

    Only those kernels are given to the pass: it checks every ``PrimFunc`` of a module and
    refuses some that have nothing to split (a ``cumsum`` computing position ids has no compute
    block under its root: RoBERTa failed to build with an empty store). A kernel it cannot split
    is degraded, not the model: it gets its default schedule back (no record, no prepack), with
    the reason (:func:`degraded_kernels`).
    """
    tvm = load_tvm()
    from tvm import relax, tirx

    candidates = [gv for gv, f in applied.functions_items() if isinstance(f, tirx.PrimFunc) and _rewrites_layout(f)]
    if not candidates:
        return applied
    try:  # all at once; only when that fails is each kernel tried alone (half the time on ResNet-18)
        return _split_layout_rewrites(applied, candidates)
    except ModelStageError:
        pass
    splittable = []
    for gv in candidates:
        try:
            with stage("build", operator=f"relax.transform.SplitLayoutRewritePreproc on {gv.name_hint}"):
                relax.transform.SplitLayoutRewritePreproc()(tvm.IRModule({gv: applied[gv]}))
        except ModelStageError as err:
            reason = str(err.__cause__).strip().splitlines()[0] if err.__cause__ else str(err)
            _degrade(applied, prepared, gv.name_hint,
                     f"degraded: its record re-lays a weight out, but TVM cannot split that off ({reason}); "
                     "built with TVM's default schedule and no weight prepack")
        else:
            splittable.append(gv)
    if not splittable:
        return applied
    return _split_layout_rewrites(applied, splittable)


def _split_layout_rewrites(applied: tvm.IRModule, splittable: list[Any]) -> tvm.IRModule:
    """``applied`` with the weight re-layouts of kernels ``splittable`` split off and folded
    (``applied`` itself is not changed)."""
    tvm = load_tvm()
    from tvm import relax, tirx

    # The pass sees the Relax functions and the kernels to split; the other kernels are set aside
    # and put back (the call sites it rewrites are only those of the split kernels).
    keep = {gv.name_hint for gv in splittable}
    aside = {gv: f for gv, f in applied.functions_items() if isinstance(f, tirx.PrimFunc) and gv.name_hint not in keep}
    work = tvm.IRModule({gv: f for gv, f in applied.functions_items() if gv not in aside}, attrs=applied.attrs,
                        global_infos=applied.global_infos)
    before = {gv.name_hint for gv in work.get_global_vars()}
    with stage("build", operator="relax.transform.SplitLayoutRewritePreproc"):
        work = relax.transform.SplitLayoutRewritePreproc()(work)
        # The re-layouts the pass split off, computed with numpy (FoldConstant compiles each with
        # LLVM: ~0.1 s a kernel); what numpy declines is folded by FoldConstant as before.
        split = {gv.name_hint for gv in work.get_global_vars()} - before
        work, folded = substitute_constants(work, kernel_values(work, split))
        if folded:  # the calls they replace, dead now, would be compiled by FoldConstant all the same
            for gv, f in list(work.functions_items()):
                if isinstance(f, relax.Function):
                    work[gv] = relax.analysis.remove_all_unused(f)
        work = relax.transform.FoldConstant()(work)
    for gv, f in aside.items():
        work[gv] = f
    return relax.transform.DeadCodeElimination()(work)


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
        arr = _copy_out(value)  # a copy: the VM may reuse its buffers on the next call
        return torch.from_numpy(arr) if as_torch and torch is not None else arr
    if hasattr(value, "__len__") and hasattr(value, "__getitem__"):
        return tuple(_from_tvm(v, as_torch) for v in value)
    return value


def _copy_out(tensor: Any) -> Any:
    """A numpy copy of a VM output: through DLPack where numpy can read it (a CPU tensor of a
    dtype numpy has), else ``Tensor.numpy()``. Right after a model call ``numpy()``'s Python
    lines ran 100-160 us on MobileNetV2's 1000 floats (its second call on the same tensor: 10 us),
    the DLPack copy 30 us (session 31)."""
    import numpy as np

    try:
        return np.from_dlpack(tensor).copy()
    except (TypeError, BufferError, RuntimeError, ValueError):
        return tensor.numpy()


class _Caller:
    """:func:`run` on one VM with its lookups done once. A call whose inputs are all torch
    tensors goes to ``main`` through DLPack with no other Python work: what DLPack or the VM
    refuses (a tensor on another device, not contiguous or not 64-byte aligned, of another shape
    or dtype: the VM checks its inputs) raises, and the call is made again by :func:`run`, which
    copies what it must or raises the error a user can act on. Right after a model call every
    Python line runs slowly (its caches cold): on MobileNetV2 (4 ms), :func:`run` took 0.3-0.4 ms
    a call more than ``main`` itself, this path 0.15 ms (session 31)."""

    def __init__(self, vm: Any, imported: ImportedModel | None, device: Any = None) -> None:
        tvm = load_tvm()
        torch = _torch_or_none()
        self.vm, self.imported, self.device = vm, imported, device
        self.main = vm["main"]
        self.from_dlpack = tvm.runtime.from_dlpack
        self.tensor_out = tvm.runtime.Tensor
        self.tensor_in: Any = torch.Tensor if torch is not None else None
        self.from_numpy: Any = torch.from_numpy if torch is not None else None
        self.inputs = len(imported.inputs) if imported is not None else None
        self.fast = torch is not None and _device(device).dlpack_device_type() == 1

    def __call__(self, *inputs: Any) -> Any:
        if (self.fast and len(inputs) == self.inputs
                and all(type(x) is self.tensor_in for x in inputs)):  # fmt: skip
            try:
                result = self.main(*[self.from_dlpack(x) for x in inputs])
            except Exception:  # noqa: BLE001 - the general path converts, or raises what to do
                return run(self.vm, self.imported, *inputs, device=self.device)
            if isinstance(result, self.tensor_out):
                return self.from_numpy(_copy_out(result))
            if hasattr(result, "__len__") and all(isinstance(v, self.tensor_out) for v in result):
                out = tuple(self.from_numpy(_copy_out(v)) for v in result)  # _from_tvm's, fewer lines
            else:
                out = _from_tvm(result, True)
            return out[0] if isinstance(out, tuple) and len(out) == 1 else out
        return run(self.vm, self.imported, *inputs, device=self.device)


def caller(vm: Any, imported: ImportedModel | None, device: Any = None) -> Any:
    """Return a callable that runs ``vm`` as :func:`run` does, its lookups done once (keep one
    per model and call it for every inference).

    Parameters
    ----------
    vm
        A ``VirtualMachine`` from :func:`make_vm`.
    imported
        The model's :class:`~tunecache.tvm_layer.frontend.ImportedModel` (inputs checked against
        its shapes and dtypes), or ``None``.
    device
        The device ``vm`` was made for (default: the CPU).
    """
    return _Caller(vm, imported, device)


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
    with stage("run"):
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
