"""Task extraction: the distinct kernels of a prepared module, with how often the model calls
each and a TVM-free description (step 3 of :mod:`tunecache.tvm_layer.frontend`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tunecache.store.keys import WorkloadDesc, WorkloadKey
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.frontend.failures import stage
from tunecache.tvm_layer.frontend.importing import _static_int
from tunecache.tvm_layer.frontend.prepare import is_prepared, prepare_for_tuning
from tunecache.tvm_layer.target import TargetLike, resolve_target

if TYPE_CHECKING:  # pragma: no cover
    import tvm

__all__ = ["TaskInfo", "extract_tasks", "guess_family"]


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
    mod: tvm.IRModule
    desc: WorkloadDesc
    key: WorkloadKey


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
        family = _conv2d_family(shapes[0], shapes[1])
    if family == "matmul" and len(shapes) >= 2:
        a, b = shapes[0], shapes[1]
        batch_b = 1
        for d in b[:-2]:
            batch_b *= d
        if len(a) >= 3 and len(b) >= 3 and batch_b > 1:
            family = "batch_matmul"
    return family


def _conv2d_family(data: Sequence[int], weight: Sequence[int]) -> str:
    """``depthwise_conv2d`` for one input channel per group, in NCHW/OIHW (the frontends') or
    NHWC/HWIO (tunecache's CPU layout), else ``conv2d``.

    >>> _conv2d_family((1, 32, 56, 56), (32, 1, 3, 3)), _conv2d_family((1, 56, 56, 32), (3, 3, 1, 32))
    ('depthwise_conv2d', 'depthwise_conv2d')
    >>> _conv2d_family((1, 56, 56, 32), (3, 3, 32, 64)), _conv2d_family((1, 32, 56, 56), (64, 32, 3, 3))
    ('conv2d', 'conv2d')
    """
    if weight[1] == data[1]:  # OIHW with every input channel in one group
        return "conv2d"
    if weight[1] == 1 and data[1] > 1 and weight[0] % data[1] == 0:  # OIHW, one channel a group
        return "depthwise_conv2d"
    if weight[2] == 1 and data[3] > 1 and weight[3] % data[3] == 0:  # HWIO, one channel a group
        return "depthwise_conv2d"
    return "conv2d"


def _describe(name: str, mod: tvm.IRModule) -> WorkloadDesc:
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


def extract_tasks(mod: tvm.IRModule, target: TargetLike = None) -> list[TaskInfo]:
    """Return the tuning tasks of a prepared module, heaviest first.

    Parameters
    ----------
    mod
        The output of :func:`~tunecache.tvm_layer.frontend.prepare_for_tuning` (an unprepared
        module is prepared first; it must have its weights bound, or take them as inputs).
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
    >>> from tunecache.tvm_layer.frontend import import_model
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
    with stage("prepare", operator="meta_schedule.relax_integration.extract_tasks"):
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
