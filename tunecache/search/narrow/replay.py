"""Zero-trial reuse: a source trace replayed on a target task, its sketch, its neighbours.

Each function takes one source trace (a store record, a MetaSchedule record or trace, or trace
JSON) and a target module, and measures nothing: :func:`replay_on` is the program zero-trial
reuse serves, :func:`sketch_on` the source's sketch for the target (decisions left to sample),
:func:`propose_neighbours` the traces one move away.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tunecache.errors import ConfigError, InvalidRecordError
from tunecache.search.narrow.align import Materializer, Skeleton, cap_unroll, decisions_key, open_picks
from tunecache.search.narrow.moves import PHASES, neighbour_decisions
from tunecache.store.keys import HardwareKey, WorkloadKey
from tunecache.store.records import Provenance, Record
from tunecache.tvm_layer import load_tvm

__all__ = ["as_ir_module", "propose_neighbours", "replay_on", "replayed_record", "sketch_on", "source_on", "trace_of"]


def as_ir_module(mod: Any) -> Any:
    """``mod`` as an ``IRModule``: a ``PrimFunc`` becomes the module's ``main``.

    Parameters
    ----------
    mod
        A TIR ``IRModule`` or ``PrimFunc``.

    Returns
    -------
    tvm.IRModule
        ``mod`` itself unless it was a ``PrimFunc``.
    """
    tvm = load_tvm()
    if isinstance(mod, tvm.tirx.PrimFunc):
        return tvm.IRModule({"main": mod})
    return mod


def trace_of(source: Any) -> Any:
    """A source may be a store Record, a MetaSchedule TuningRecord, a Trace or trace JSON."""
    if hasattr(source, "trace") and not isinstance(source, (list, tuple)):
        trace = source.trace
        return trace.as_json() if hasattr(trace, "as_json") else trace
    if hasattr(source, "as_json"):
        return source.as_json()
    return source


def source_on(trace: Any, mod: Any, target: Any, seed: int) -> tuple[Materializer, Skeleton] | None:
    """A source trace decoded and made ready to replay on ``mod`` (moved onto ``mod``'s own
    sketch where only the epilogue differs: :meth:`Materializer.adapt`), with the materializer
    for ``mod``; ``None`` if the trace does not decode."""
    try:
        skeleton = Skeleton(0, trace_of(trace))
    except InvalidRecordError:
        return None
    mat = Materializer(as_ir_module(mod), target, seed)
    return mat, mat.adapt(skeleton)


def replay_on(trace: Any, mod: Any, target: Any, *, seed: int = 0, max_unroll: int | None = None) -> Any | None:
    """Replay a (source) trace on ``mod`` with its own decisions, then postprocess.

    A compute location the source had no decision for (a padded conv's ``pad_temp`` reusing a
    1x1 conv's program) is the first of :func:`~tunecache.search.narrow.align.open_picks`: the
    block's root where allowed. This is the zero-trial reuse of a trace.

    Parameters
    ----------
    trace
        The source: a store record, a MetaSchedule ``TuningRecord`` or ``Trace``, or trace JSON.
    mod
        The target task's TIR ``IRModule`` (or ``PrimFunc``).
    target
        A ``tvm.target.Target`` (its postprocessors run on the replay).
    seed
        Seeds the replay schedule.
    max_unroll
        When given, unroll choices above this many steps are lowered to the deepest within it
        (:func:`~tunecache.search.narrow.align.cap_unroll`).

    Returns
    -------
    tvm.s_tir.Schedule or None
        The postprocessed schedule, or ``None`` if the trace does not decode or replay, or a
        postprocessor rejects it.
    """
    on = source_on(trace, mod, target, seed)
    if on is None:
        return None
    mat, skeleton = on
    decisions = open_picks(mat, skeleton, dict(skeleton.decisions), 1)[0]
    if max_unroll is not None:
        decisions = cap_unroll(skeleton, decisions, max_unroll)
    cand = mat.materialize(skeleton, decisions)
    return None if cand is None else cand.sch


def replayed_record(source: Record, mod: Any, key: WorkloadKey, hardware: HardwareKey, target: Any, *,
                    seed: int = 0, max_unroll: int | None = None) -> Record | str:
    """Return a stored program replayed on another task as that task's record, or why it is not.

    The program is :func:`replay_on`'s (the narrowed search's round 0, measured nothing). The
    record carries the source's run times (it was never run as this task) and provenance
    ``replayed`` naming the source; its uid derives from the source record and the task, so the
    same replay is the same record (a library cached from it is found again). It is meant to be
    served, never stored as a measurement.

    Parameters
    ----------
    source
        A stored record of the source workload (with a latency).
    mod
        The target task's TIR ``IRModule``.
    key, hardware
        The target task's workload key and the hardware key of the record.
    target
        A ``tvm.target.Target``.
    seed
        Seeds the replay schedule.
    max_unroll
        As in :func:`replay_on` (the record's uid says so).

    Returns
    -------
    Record or str
        The record, or a one-line reason the program cannot be replayed on ``mod``.
    """
    import hashlib

    from tunecache.tvm_layer import scheduled
    from tunecache.tvm_layer.convert import record_from_tvm

    sch = replay_on(source, mod, target, seed=seed, max_unroll=max_unroll)
    if sch is None:
        return f"its program (record {source.uid}) does not replay on this task, or a postprocessor rejects it"
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    try:
        tr = ms.database.TuningRecord(
            sch.trace, ms.database.Workload(as_ir_module(mod)), [float(x) for x in source.run_secs] or None, target,
            ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
        prov = Provenance(kind="replayed", source_workload=str(source.workload), source_record=source.uid,
                          tvm_version=hardware.tvm_version)
        rec = record_from_tvm(tr, key, hardware, prov)
    except (InvalidRecordError, TypeError, ValueError) as err:
        return f"the replayed program of record {source.uid} cannot be recorded: {err}"
    scheduled.remember(key.shash, rec.trace, target, sch.mod)  # the build takes it as it is
    capped = "" if max_unroll is None else f"|unroll<={max_unroll}"
    uid = hashlib.sha256(f"replay/1|{source.uid}|{key}|{hardware.id}{capped}".encode()).hexdigest()[:32]
    return replace(rec, uid=uid)


def sketch_on(trace: Any, mod: Any, target: Any) -> list[Any] | None:
    """Return a source trace's sketch for ``mod``: instructions before postprocessing, block
    names mapped to ``mod``'s, no decisions (replaying it samples fresh ones).

    Parameters
    ----------
    trace
        The source: a store record, a MetaSchedule ``TuningRecord`` or ``Trace``, or trace JSON.
    mod
        The target task's TIR ``IRModule`` (or ``PrimFunc``).
    target
        A ``tvm.target.Target``.

    Returns
    -------
    list or None
        Trace JSON ``[instructions, []]``, or ``None`` if the trace does not decode.
    """
    on = source_on(trace, mod, target, 0)
    if on is None:
        return None
    mat, skeleton = on
    return [mat.insts_for_alpha(skeleton), []]


def propose_neighbours(trace: Any, mod: Any, target: Any, phase: str, *, seed: int = 0) -> list[list[Any]]:
    """Return the traces one move of kind ``phase`` away from ``trace`` replayed on ``mod``.

    ``trace`` is replayed on ``mod`` first (TVM rescales tilings that do not fit), so the moves
    start from decisions valid for ``mod``'s extents. Each result is a trace JSON without
    postprocessing whose decisions replay unchanged on ``mod`` (products equal the extents).
    Nothing is measured or postprocessed.

    Parameters
    ----------
    trace
        The source: a store record, a MetaSchedule ``TuningRecord`` or ``Trace``, or trace JSON.
    mod
        The target task's TIR ``IRModule`` (or ``PrimFunc``).
    target
        A ``tvm.target.Target``.
    phase
        The kind of move: one of :data:`~tunecache.search.narrow.moves.PHASES`.
    seed
        Seeds the replay schedule.

    Returns
    -------
    list of list
        Distinct neighbour traces (JSON), ``[]`` if the trace does not replay.

    Raises
    ------
    ConfigError
        If ``phase`` is not one of :data:`PHASES`.
    """
    if phase not in PHASES:
        raise ConfigError(f"phase must be one of {PHASES}, got {phase!r}")
    on = source_on(trace, mod, target, seed)
    if on is None:
        return []
    mat, skeleton = on
    out = mat.replay(skeleton, open_picks(mat, skeleton, dict(skeleton.decisions), 1)[0])
    if out is None:
        return []
    _, applied = out
    seen = {decisions_key(skeleton.digest, applied)}
    result = []
    for d in neighbour_decisions(skeleton, applied, phase):
        k = decisions_key(skeleton.digest, d)
        if k not in seen:
            seen.add(k)
            result.append(skeleton.trace_json(d))
    return result
