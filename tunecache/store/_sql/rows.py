"""Between the store's frozen values and its table rows.

Rows never leave :mod:`tunecache.store._sql`: reads decode them into values here, validating
every JSON text (nothing is unpickled), and writes build the column dicts here.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tunecache.errors import InvalidRecordError
from tunecache.store._sql.schema import HardwareRow, RecordRow, ReuseRow, WorkloadRow
from tunecache.store.keys import HardwareKey, HostFingerprint, WorkloadDesc, WorkloadKey, canonical_json
from tunecache.store.records import (
    Provenance,
    Record,
    decode_args_info,
    decode_json_text,
    decode_run_secs,
    decode_trace_text,
)
from tunecache.store.values import ReuseEntry, StoredWorkload

__all__ = [
    "hardware_columns",
    "hardware_value",
    "provenance_value",
    "record_columns",
    "record_value",
    "reuse_columns",
    "reuse_value",
    "workload_columns",
    "workload_value",
]


def workload_value(row: WorkloadRow) -> StoredWorkload:
    """Return the workload of a row (a description that does not decode becomes name + family)."""
    try:
        desc = WorkloadDesc.from_dict(decode_json_text(row.desc_json, "workload description"))
    except (InvalidRecordError, TypeError, ValueError):
        desc = WorkloadDesc(name=row.name, family=row.family)
    return StoredWorkload(WorkloadKey(row.shash, row.mod_eq), desc, row.mod_json)


def workload_columns(key: WorkloadKey, desc: WorkloadDesc, mod_json: str) -> dict[str, Any]:
    """Return the columns of a new workload row."""
    return dict(
        shash=key.shash,
        mod_eq=key.mod_eq,
        name=desc.name[:256],
        family=desc.family,
        desc_json=canonical_json(desc.to_dict()),
        mod_json=mod_json,
        created_at=time.time(),
    )


def reuse_value(row: ReuseRow, workload: WorkloadRow) -> ReuseEntry:
    """Return the reuse-index entry of a row and its workload's row."""
    return ReuseEntry(
        workload=WorkloadKey(workload.shash, workload.mod_eq),
        target_id=row.target_id,
        name=workload.name,
        family=row.family,
        group=row.group_key,
        log_work=float(row.log_work),
        nest_json=row.nest_json,
        sketch=row.sketch,
        trivial=bool(row.trivial),
    )


def reuse_columns(entry: ReuseEntry, workload_id: int) -> dict[str, Any]:
    """Return the columns of a new reuse-index row."""
    return dict(
        workload_id=workload_id,
        target_id=entry.target_id,
        group_key=entry.group,
        family=entry.family,
        log_work=float(entry.log_work),
        nest_json=entry.nest_json,
        sketch=entry.sketch,
        trivial=bool(entry.trivial),
        created_at=time.time(),
    )


def hardware_value(row: HardwareRow) -> HardwareKey:
    """Return the hardware key of a row.

    Raises
    ------
    InvalidRecordError
        If the stored fingerprint does not decode.
    """
    fp = decode_json_text(row.fingerprint_json, "hardware fingerprint")
    return HardwareKey(target=row.target, fingerprint=HostFingerprint.from_dict(fp), tvm_version=row.tvm_version)


def hardware_columns(hw: HardwareKey) -> dict[str, Any]:
    """Return the columns of a new hardware row."""
    return dict(
        id=hw.id,
        target=hw.target,
        target_kind=hw.target_kind,
        cpu_model=hw.fingerprint.cpu_model,
        fingerprint_json=canonical_json(hw.fingerprint.to_dict()),
        tvm_version=hw.tvm_version,
        created_at=time.time(),
    )


def record_value(row: RecordRow, workload: WorkloadKey, hardware: HardwareKey) -> Record:
    """Return the record of a row, its JSON validated.

    Raises
    ------
    InvalidRecordError
        If the stored trace, run times or args info do not decode.
    """
    return Record(
        workload=workload,
        hardware=hardware,
        trace=decode_trace_text(row.trace_json),
        run_secs=decode_run_secs(decode_json_text(row.run_secs_json, "run_secs")),
        latency_s=row.latency_s,
        args_info=decode_args_info(decode_json_text(row.args_info_json, "args_info")),
        provenance=provenance_value(row),
        uid=row.uid,
        stale=bool(row.stale),
        cv=row.cv,
    )


def provenance_value(row: Any) -> Provenance:
    """Return the provenance of a record row (or of a row of its provenance columns)."""
    return Provenance(
        kind=row.kind,
        source_workload=row.source_workload,
        source_record=row.source_record,
        trials=row.trials,
        seconds=row.seconds,
        host=row.host,
        user=row.user,
        tunecache_version=row.tunecache_version,
        tvm_version=row.tvm_version,
        created_at=row.created_at,
    )


def record_columns(r: Record, workload_id: int, hardware_id: str) -> dict[str, Any]:
    """Return the columns of a new record row."""
    p = r.provenance
    return dict(
        uid=r.uid,
        workload_id=workload_id,
        hardware_id=hardware_id,
        trace_json=json.dumps(r.trace, separators=(",", ":")),
        run_secs_json=json.dumps(list(r.run_secs)),
        latency_s=r.latency_s,
        cv=r.cv,
        args_info_json=json.dumps(r.args_info, separators=(",", ":")),
        kind=p.kind,
        source_workload=p.source_workload,
        source_record=p.source_record,
        trials=p.trials,
        seconds=p.seconds,
        host=p.host[:256],
        user=p.user[:128],
        tunecache_version=p.tunecache_version,
        tvm_version=p.tvm_version,
        created_at=p.created_at,
        stale=r.stale,
    )
