"""Convert between TVM objects (IRModule, MetaSchedule Workload/TuningRecord) and store values.

This module and :mod:`tunecache.tvm_layer.database` are the only places where store values meet
TVM objects. TVM is imported lazily through :func:`tunecache.tvm_layer.load_tvm`.
"""

from __future__ import annotations

import json
from typing import Any

from tunecache.errors import InvalidRecordError
from tunecache.store.keys import DEFAULT_MOD_EQ, HardwareKey, WorkloadDesc, WorkloadKey
from tunecache.store.records import Provenance, Record, decode_trace
from tunecache.tvm_layer import load_tvm
from tunecache.tvm_layer.tir import primfuncs

__all__ = [
    "workload_of",
    "describe_module",
    "record_from_tvm",
    "record_to_tvm",
    "workload_from_json",
    "stored_module",
    "trace_replays",
]


def _ms() -> Any:
    load_tvm()
    from tvm.s_tir import meta_schedule as ms

    return ms


def workload_of(mod: Any, mod_eq: str = DEFAULT_MOD_EQ) -> tuple[WorkloadKey, str, Any]:
    """Return ``(key, mod_json, ms_workload)`` for a task's IRModule.

    The key's hash is MetaSchedule's own (``Workload.as_json()[0]``), so keys agree with any
    MetaSchedule database.
    """
    ms = _ms()
    wl = ms.database.Workload(mod)
    shash, mod_json = wl.as_json()
    return WorkloadKey(str(shash), mod_eq), str(mod_json), wl


def workload_from_json(key: WorkloadKey, mod_json: str) -> Any:
    """Rebuild a MetaSchedule ``Workload`` from stored JSON.

    Raises
    ------
    InvalidRecordError
        If the JSON does not decode to a module (corrupt or from an incompatible TVM).
    """
    ms = _ms()
    if not mod_json:
        raise InvalidRecordError(f"workload {key} has no stored module; re-commit it from its task")
    try:
        return ms.database.Workload.from_json([key.shash, mod_json])
    except Exception as err:  # TVM raises its own error types from C++
        raise InvalidRecordError(f"workload {key}: stored module does not decode ({error_line(err)})") from err


def stored_module(store: Any, key: WorkloadKey) -> Any | None:
    """Return the TIR module ``store`` holds for workload ``key``, or ``None`` where it holds
    none or this TVM cannot decode it."""
    stored = store.get_workload(key)
    if stored is None or not stored.mod_json:
        return None
    try:
        return workload_from_json(stored.key, stored.mod_json).mod
    except InvalidRecordError:
        return None


def error_line(err: BaseException) -> str:
    """Return the last non-empty line of an error (TVM puts the message last), at most 300 chars."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(err).__name__


def _prim_func(mod: Any) -> tuple[str, Any]:
    funcs = primfuncs(mod)
    if not funcs:
        raise InvalidRecordError("module has no PrimFunc")
    return funcs[0]


def describe_module(mod: Any, name: str | None = None) -> WorkloadDesc:
    """Describe a task module: name, operator family and loop extents when known, shapes, dtypes."""
    gname, func = _prim_func(mod)
    shapes, dtypes = [], []
    for p in func.params:
        # TVM 0.27: a PrimFunc parameter is the buffer itself (no buffer_map in Python).
        buf = getattr(func, "buffer_map", {}).get(p, p) if hasattr(func, "buffer_map") else p
        if not hasattr(buf, "shape"):
            continue
        shapes.append(tuple(int(x) if hasattr(x, "value") or isinstance(x, int) else -1 for x in buf.shape))
        dtypes.append(str(buf.dtype))
    family = "other"
    extents: tuple[int, ...] = ()
    try:
        from tunecache.tvm_layer.loopnest import analyze

        nest = analyze(mod)
        family, extents = nest.family, tuple(int(e) for e in nest.extents)
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - analysis is best effort for a description
        family, extents = "other", ()
    if name is None:
        attr = func.attrs.get("global_symbol") if func.attrs is not None else None
        name = str(attr) if attr is not None else gname
    return WorkloadDesc(name=name, family=family, shapes=tuple(shapes), dtypes=tuple(dtypes), extents=extents)


def record_from_tvm(rec: Any, workload: WorkloadKey, hardware: HardwareKey, provenance: Provenance) -> Record:
    """Convert a MetaSchedule ``TuningRecord`` into a store :class:`Record`."""
    trace_json, run_secs, _target, args_info = tuning_record_json(rec)
    return Record.from_measurement(workload, hardware, trace_json, run_secs, args_info, provenance)


def tuning_record_json(rec: Any) -> list[Any]:
    """Return ``TuningRecord.as_json()``, also for traces that re-lay a buffer out.

    TVM 0.27's ``TuningRecord.as_json`` raises ``TypeError: Not supported type: IndexMap`` for
    a trace with a ``TransformLayout`` instruction (what the ``RewriteLayout`` postprocessor
    adds for weight prepacking). The trace's own ``as_json`` writes the index map as TVM JSON
    text, which ``Trace.apply_json_to_schedule`` reads back; this does the same.
    """
    load_tvm()
    import tvm
    from tvm.s_tir.meta_schedule import _ffi_api

    def plain(obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj if not isinstance(obj, str) else str(obj)
        if isinstance(obj, tvm.tirx.IndexMap):
            return tvm.ir.save_json(obj)
        if hasattr(obj, "items"):  # Map
            return {plain(k): plain(v) for k, v in obj.items()}
        if hasattr(obj, "value") and isinstance(obj.value, (int, float)):  # IntImm, FloatImm
            return obj.value
        if hasattr(obj, "__len__") and hasattr(obj, "__getitem__"):  # Array
            return [plain(x) for x in obj]
        raise TypeError(f"unexpected {type(obj).__name__} in a tuning record")

    return plain(_ffi_api.TuningRecordAsJSON(rec))


def record_to_tvm(record: Record, workload: Any, target: Any) -> Any:
    """Convert a store :class:`Record` into a MetaSchedule ``TuningRecord`` for ``workload``.

    ``run_secs`` handed to MetaSchedule is ``[latency_s]`` (the trusted, possibly re-measured
    latency) so that its own ranking agrees with the store's.
    """
    ms = _ms()
    run_secs = [record.latency_s] if record.latency_s is not None else list(record.run_secs) or None
    target_json = json.loads(target.export_json()) if hasattr(target, "export_json") else target.export()
    js = [record.trace, run_secs, _plain_target(target_json), record.args_info]
    try:
        return ms.database.TuningRecord.from_json(js, workload)
    except Exception as err:  # C++ errors for unknown instructions etc.
        raise InvalidRecordError(f"record {record.uid}: trace does not load ({error_line(err)})") from err


def _plain_target(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _plain_target(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_plain_target(v) for v in d]
    return d


def trace_replays(record: Record, mod: Any) -> str | None:
    """Replay a record's trace on ``mod``; return ``None`` if it replays, else the error text."""
    load_tvm()
    from tvm.s_tir.schedule import Schedule, Trace

    try:
        sch = Schedule(mod)
        Trace.apply_json_to_schedule(decode_trace(record.trace), sch)
    except InvalidRecordError as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 - any TVM failure means "does not replay"
        return error_line(err)
    return None


class _TVMReplayer:
    """Replays stored traces with TVM, for :func:`tunecache.store._sql.integrity.check_store`."""

    def workload(self, key: WorkloadKey, mod_json: str) -> Any:
        return workload_from_json(key, mod_json).mod

    def replays(self, record: Record, mod: Any) -> str | None:
        return trace_replays(record, mod)


#: The replayer ``tunecache db check --replay`` hands to the store's integrity check.
TVM_REPLAYER = _TVMReplayer()
