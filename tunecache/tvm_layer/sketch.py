"""Sketch signatures: the shape-free structure of the design space MetaSchedule builds for a task.

ETO's first reuse condition (Definition 2) asks that two operators have the same *sketch set*
``K``: the same program skeletons, differing only in tile sizes and other sampled decisions.
MetaSchedule's design space is a list of schedules, each with a trace; a trace without its
decisions, block names and constants that depend on the shape is one sketch. Two tasks have
the same sketch set when these sets are equal.

Each instruction contributes its kind, its structural attributes (``n`` and
``max_innermost_factor`` of ``SamplePerfectTile``, annotation keys, storage scopes, the
candidates of ``SampleCategorical``, ...), and its inputs as references to earlier random
variables (so the dataflow between instructions is part of the structure). Block names
(``GetSBlock``'s ``name`` and ``func_name``) are dropped: they differ between a TE-built and a
Relax-built task of the same computation. Sampled decisions are never part of it.

Nothing is cached on disk. Generating a design space takes 10-40 ms; a compile asks for each
task's twice (describing its tasks, predicting programs for the misses), so the sketches' traces
are memoized in memory per task and target (:func:`design_space_json`).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

__all__ = ["OPEN_KINDS", "SAMPLE_KINDS", "as_target", "decision_digest", "decision_signature", "decision_text",
           "decision_texts", "design_space_json", "reuse_text", "site_lines", "sketch_set", "sketch_signature",
           "sketch_texts"]

#: Attributes of these instruction kinds name things (blocks, functions), not structure.
_DROP_ATTRS = {"GetSBlock": (0, 1), "GetBlock": (0, 1)}


def _digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def as_target(target: Any) -> Any:
    """Return a ``tvm.target.Target`` for ``target`` (a Target, a dict, or a tag string).

    Raises
    ------
    TargetError
        If TVM rejects the target.
    """
    from tunecache.errors import TargetError
    from tunecache.tvm_layer import load_tvm

    kind = None
    if isinstance(target, Mapping):
        kind = str(target.get("kind", "llvm"))
    elif hasattr(target, "kind"):
        kind = str(target.kind.name)
    tvm = load_tvm(kind or "llvm")
    if isinstance(target, tvm.target.Target):
        return target
    try:
        return tvm.target.Target(dict(target) if isinstance(target, Mapping) else target)
    except (ValueError, TypeError) as err:  # what TVM 0.27 raises for a bad target
        raise TargetError(
            f"invalid target {target!r}: {err}. Pass a dict such as "
            "{'kind': 'llvm', 'num-cores': 2} (TVM 0.27 rejects the CLI string form)"
        ) from err


def _as_module(mod: Any) -> Any:
    from tunecache.tvm_layer import load_tvm

    tvm = load_tvm()
    from tvm.tirx import PrimFunc

    if isinstance(mod, PrimFunc):
        return tvm.IRModule({"main": mod.with_attr("global_symbol", "main")})
    if isinstance(mod, tvm.IRModule):
        return mod
    raise TypeError(f"expected a tvm IRModule or PrimFunc, got {type(mod).__name__}")


def _value_text(value: Any) -> str:
    """Render a constant attribute or input value without shape-dependent detail."""
    from tvm.tirx import FloatImm, IntImm

    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, str)):
        return repr(value)
    if isinstance(value, (IntImm, FloatImm)):
        return repr(value.value)
    if hasattr(value, "value") and isinstance(value.value, (str, int, float)):
        return repr(value.value)
    try:
        items = list(value)
    except TypeError:
        return type(value).__name__
    return "[" + ",".join(_value_text(v) for v in items) + "]"


def _trace_text(trace: Any) -> str:
    """Return one line per instruction of ``trace``: kind, attributes, input references."""
    names: dict[Any, str] = {}

    def ref(x: Any) -> str:
        for k, v in names.items():
            if k.same_as(x):
                return v
        return _value_text(x)

    lines = []
    for inst in trace.insts:
        kind = inst.kind.name
        drop = _DROP_ATTRS.get(kind, ())
        attrs = [_value_text(a) for i, a in enumerate(inst.attrs) if i not in drop]
        inputs = []
        for x in inst.inputs:
            inputs.append(ref(x) if x is not None else "None")
        outs = []
        for o in inst.outputs:
            name = f"%{len(names)}"
            names[o] = name
            outs.append(name)
        lines.append(f"{','.join(outs)}={kind}({','.join(inputs)})[{','.join(attrs)}]")
    return "\n".join(lines)


def _design_space(mod: Any, target: Any) -> list[Any]:
    from tunecache.tvm_layer import ms

    meta = ms()
    ctx = meta.TuneContext(
        mod=_as_module(mod),
        target=target,
        space_generator="post-order-apply",
        task_name="sketch",
        rand_state=1,
    )
    return list(ctx.generate_design_space())


#: Design spaces memoized by :func:`design_space_json` (most recently used last).
_SPACES: OrderedDict[tuple[int, str, tuple[str, ...]], tuple[Any, tuple[Any, ...]]] = OrderedDict()
_SPACES_MAX = 512
_SPACES_LOCK = threading.Lock()


def design_space_json(mod: Any, target: Any) -> tuple[Any, ...]:
    """The trace JSON (``[instructions, decisions]``) of every sketch of ``mod``'s design space.

    The space is generated with a fixed random state, so it is the same every time for the
    same task and target; the last :data:`_SPACES_MAX` are memoized (keyed by structural hash,
    target and block names, checked by structural equality).
    """
    import tvm_ffi

    from tunecache.tvm_layer.tir import iter_sblocks

    m = _as_module(mod)
    tgt = as_target(target)
    # Structural hashing and equality ignore block names, which the traces name blocks by: a
    # TE-built bridge (block ``C``) and a Relax task (``matmul_out``) must not share a space.
    names = tuple(b.name_hint for _, f in m.functions_items() if hasattr(f, "body") for b in iter_sblocks(f))
    key = (int(tvm_ffi.structural_hash(m)), str(tgt), names)
    with _SPACES_LOCK:
        hit = _SPACES.get(key)
        if hit is not None and tvm_ffi.structural_equal(hit[0], m):
            _SPACES.move_to_end(key)
            return hit[1]
    traces = tuple(sch.trace.as_json() for sch in _design_space(m, tgt))
    with _SPACES_LOCK:
        _SPACES[key] = (m, traces)
        while len(_SPACES) > _SPACES_MAX:
            _SPACES.popitem(last=False)
    return traces


def sketch_texts(mod: Any, target: Any) -> tuple[str, ...]:
    """Return the readable structure of every sketch in ``mod``'s design space.

    Parameters
    ----------
    mod
        A task: an ``IRModule`` with one PrimFunc, or a ``PrimFunc``.
    target
        A ``tvm.target.Target`` or a target dict (e.g. ``{"kind": "llvm", "num-cores": 2}``).

    Returns
    -------
    tuple of str
        One text per design-space schedule, in generation order (may repeat).
    """
    tgt = as_target(target)
    return tuple(_trace_text(sch.trace) for sch in _design_space(mod, tgt))


def sketch_set(mod: Any, target: Any) -> frozenset[str]:
    """Return the set of per-sketch digests of ``mod``'s design space (ETO's ``K``)."""
    return frozenset(_digest(t) for t in sketch_texts(mod, target))


def sketch_signature(mod: Any, target: Any) -> str:
    """Return a short digest of the sketch set MetaSchedule generates for ``mod`` on ``target``.

    Two tasks satisfy ETO's "same sketch set" condition exactly when their signatures are
    equal. The digest ignores sampled decisions, block names and everything else that changes
    with the shape, so two matmuls of different sizes share it while a matmul and a conv2d
    do not.

    Parameters
    ----------
    mod
        A task: an ``IRModule`` with one PrimFunc (e.g. ``task.dispatched[0]``), or a
        ``PrimFunc``.
    target
        A ``tvm.target.Target`` or a target dict.

    Returns
    -------
    str
        16 hex digits.

    Raises
    ------
    TargetError
        If the target is invalid.

    Examples
    --------
    >>> sig = sketch_signature(matmul_mod, {"kind": "llvm", "num-cores": 2})  # doctest: +SKIP
    >>> len(sig)                                                              # doctest: +SKIP
    16
    """
    return _digest("\n".join(sorted(sketch_set(mod, target))))


#: Instruction kinds that sample a decision.
SAMPLE_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "SamplePartitionedTile")

#: Sampled decisions a reused program may lack or carry in excess: where a producer block is
#: computed. A padded 3x3 convolution samples where its ``pad_temp`` goes, a 1x1 convolution has
#: no ``pad_temp``; their tilings and unroll choices are the same decisions. The narrowed search
#: chooses such a location itself when the source had none for it (``tunecache.search.narrow``).
OPEN_KINDS = ("SampleComputeLocation",)


def _site_line(kind: str, attrs: Any) -> str:
    return f"{kind}{attrs!r}"


def site_lines(insts: Any) -> list[str]:
    """One line per sampling instruction of ``insts`` (trace JSON), in order: its kind and
    structural attributes (tile levels and ``max_innermost_factor``, categorical candidates)."""
    return [_site_line(kind, attrs) for kind, _inputs, attrs, _outputs in insts if kind in SAMPLE_KINDS]


def decision_text(insts: Any) -> str:
    """Return the decisions a sketch samples, one line each, in order.

    A line is a sampling instruction's kind and structural attributes (:func:`site_lines`), plus
    the tiling structure each ``meta_schedule.tiling_structure`` annotation names. Inputs, block
    names and every other instruction are left out: they are what differs between a conv with a
    fused residual ``add``/``relu`` and one without (more blocks to inline), while the decisions
    mean the same thing in both. ``insts`` are trace JSON instructions
    (``[kind, inputs, attrs, outputs]``).
    """
    lines = []
    for kind, _inputs, attrs, _outputs in insts:
        if kind in SAMPLE_KINDS:
            lines.append(_site_line(kind, attrs))
        elif kind == "Annotate" and attrs == ["meta_schedule.tiling_structure"]:
            lines.append(f"tiling {_inputs[1]!s}")
    return "\n".join(lines)


def reuse_text(text: str) -> str:
    """:func:`decision_text` without the :data:`OPEN_KINDS` lines: what two sketches must share
    for one to carry the other's decisions."""
    return "\n".join(line for line in text.split("\n") if not line.startswith(OPEN_KINDS))


def decision_texts(mod: Any, target: Any) -> tuple[str, ...]:
    """Return :func:`decision_text` of every sketch in ``mod``'s design space, in order."""
    from tunecache.store.records import decode_trace

    return tuple(decision_text(decode_trace(t)[0]) for t in design_space_json(mod, target))


def decision_signature(mod: Any, target: Any) -> str:
    """Return a short digest of the decisions ``mod``'s sketches sample (:func:`reuse_text`).

    This is the sketch condition tunecache's planner uses: ETO's "same sketch set" (see
    :func:`sketch_signature`) with everything but the sampled decisions ignored, and compute
    locations (:data:`OPEN_KINDS`) left out too. Two tasks with equal decision signatures can
    carry each other's tilings and unroll choices, one to one, in order, even where their
    sketches differ in instructions that sample nothing (a 1x1 convolution with and without a
    fused residual ``add`` and ``relu``) or in where a producer is computed (a padded 3x3
    convolution's ``pad_temp``, which a 1x1 convolution lacks). The narrowed search moves a
    source's decisions onto the target's own sketch and chooses the locations the source did
    not have (``tunecache.search.narrow``).

    Parameters
    ----------
    mod
        A task: an ``IRModule`` with one PrimFunc, or a ``PrimFunc``.
    target
        A ``tvm.target.Target`` or a target dict.

    Returns
    -------
    str
        16 hex digits.
    """
    return decision_digest(decision_texts(mod, target))


def decision_digest(texts: Any) -> str:
    """The :func:`decision_signature` of already computed :func:`decision_texts`."""
    return _digest("\n\n".join(sorted({reuse_text(t) for t in texts})))
