"""Import and export MetaSchedule ``JSONDatabase`` directories.

A JSONDatabase directory holds ``database_workload.json`` (one ``[shash, module_json]`` per
line) and ``database_tuning_record.json`` (one ``[workload_line, [trace, run_secs, target,
args_info]]`` per line). Records point at workloads by line number, and carry their target but
no host fingerprint, so tunecache writes a sidecar ``tunecache_hardware.json`` with the full
hardware key and provenance of every record line on export, and reads it back on import.
Without a sidecar, imported records get the record's own target plus the fingerprint and TVM
version given to :func:`import_jsondb` (by default this host's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunecache.errors import ImportFormatError, InvalidRecordError, TunecacheError
from tunecache.store.contract import BaseStore
from tunecache.store.keys import HardwareKey, HostFingerprint, WorkloadKey
from tunecache.store.records import Provenance, Record, decode_json_text

__all__ = ["ImportReport", "import_jsondb", "export_jsondb", "WORKLOAD_FILE", "RECORD_FILE", "SIDECAR_FILE"]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
SIDECAR_FILE = "tunecache_hardware.json"


@dataclass(frozen=True)
class ImportReport:
    """What an import did: counts, and one message per rejected line."""

    workloads: int
    records: int
    new_records: int
    errors: tuple[str, ...]

    def summary(self) -> str:
        """Return a one-line summary."""
        return (
            f"imported {self.new_records} new records ({self.records} read) for {self.workloads} workloads; "
            f"{len(self.errors)} bad entries skipped"
        )


def _lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError as err:
        raise ImportFormatError(f"cannot read {path}: {err}") from err


def import_jsondb(
    store: BaseStore,
    directory: str | os.PathLike[str],
    *,
    fingerprint: HostFingerprint | None = None,
    tvm_version: str | None = None,
    check_replay: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import a MetaSchedule JSONDatabase directory into ``store``.

    Good lines are imported even when others are bad; each bad line is reported with its file,
    line number and reason, and nothing of it is written.

    Parameters
    ----------
    store
        Destination store.
    directory
        A directory with ``database_workload.json`` and ``database_tuning_record.json``.
    fingerprint, tvm_version
        Hardware to attribute records to when there is no tunecache sidecar (default: this host
        and this TVM).
    check_replay
        Replay every trace on its workload and reject those that fail.

    Raises
    ------
    ImportFormatError
        If ``directory`` is not a JSONDatabase directory.
    """
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import describe_module, trace_replays, workload_from_json, workload_of
    from tunecache.tvm_layer.target import hardware_key

    d = Path(directory)
    wpath, rpath = d / WORKLOAD_FILE, d / RECORD_FILE
    if not d.is_dir():
        raise ImportFormatError(f"{d} is not a directory; give a MetaSchedule JSONDatabase directory")
    if not wpath.is_file() or not rpath.is_file():
        raise ImportFormatError(
            f"{d} is not a MetaSchedule JSONDatabase directory: it needs {WORKLOAD_FILE} and {RECORD_FILE}"
        )
    tvm = load_tvm()
    errors: list[str] = []
    sidecar: list[Any] | None = None
    if (d / SIDECAR_FILE).is_file():
        try:
            sidecar = decode_json_text((d / SIDECAR_FILE).read_text(encoding="utf-8"), SIDECAR_FILE)
            if not isinstance(sidecar, list):
                raise InvalidRecordError(f"{SIDECAR_FILE}: expected a list")
        except (InvalidRecordError, OSError) as err:
            errors.append(f"{SIDECAR_FILE}: ignored ({err})")
            sidecar = None

    # Workloads: key recomputed on this TVM (hashes in the file may come from another platform).
    workloads: dict[int, tuple[WorkloadKey, Any, Any]] = {}
    for i, line in enumerate(_lines(wpath)):
        if not line.strip():
            continue
        try:
            js = decode_json_text(line, f"{WORKLOAD_FILE}:{i + 1}")
            if not (isinstance(js, list) and len(js) == 2 and all(isinstance(x, str) for x in js)):
                raise InvalidRecordError(f"{WORKLOAD_FILE}:{i + 1}: expected [hash, module_json]")
            wl = workload_from_json(WorkloadKey(js[0]), js[1])
            key, mod_json, _ = workload_of(wl.mod)
            store.commit_workload(key, describe_module(wl.mod), mod_json)
            workloads[i] = (key, wl, wl.mod)
        except TunecacheError as err:
            errors.append(f"{WORKLOAD_FILE}:{i + 1}: {err}")

    records: list[Record] = []
    default_fp = fingerprint
    hw_cache: dict[str, HardwareKey] = {}
    lines = _lines(rpath)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        where = f"{RECORD_FILE}:{i + 1}"
        try:
            js = decode_json_text(line, where)
            if not (isinstance(js, list) and len(js) == 2 and isinstance(js[0], int) and isinstance(js[1], list)):
                raise InvalidRecordError(f"{where}: expected [workload_index, record]")
            idx, body = js
            if idx not in workloads:
                raise InvalidRecordError(f"{where}: refers to workload line {idx + 1}, which is missing or bad")
            if len(body) != 4:
                raise InvalidRecordError(f"{where}: record must be [trace, run_secs, target, args_info]")
            trace, run_secs, target_json, args_info = body
            key, _wl, mod = workloads[idx]
            meta = sidecar[i] if sidecar is not None and i < len(sidecar) and isinstance(sidecar[i], dict) else None
            if meta is not None and "hardware" in meta:
                try:
                    hw = HardwareKey.from_dict(meta["hardware"])
                except (KeyError, TypeError, ValueError, AttributeError) as err:
                    raise InvalidRecordError(f"{where}: bad hardware key in {SIDECAR_FILE} ({err!r})") from err
                prov = Provenance.from_dict(meta.get("provenance", {}))
            else:
                if not isinstance(target_json, dict) or "kind" not in target_json:
                    raise InvalidRecordError(f"{where}: record has no target")
                tkey = json.dumps(target_json, sort_keys=True)
                cached = hw_cache.get(tkey)
                if cached is None:
                    try:
                        target = tvm.target.Target(target_json)
                    except Exception as err:  # noqa: BLE001 - TVM rejects bad targets with its own errors
                        raise InvalidRecordError(f"{where}: bad target {target_json!r}") from err
                    hw = hardware_key(target)
                    if default_fp is not None:
                        hw = replace(hw, fingerprint=default_fp)
                    if tvm_version is not None:
                        hw = replace(hw, tvm_version=tvm_version)
                    hw_cache[tkey] = hw
                else:
                    hw = cached
                prov = Provenance(kind="imported", tvm_version=hw.tvm_version)
            kept = replace(prov, kind="imported") if prov.kind == "tuned" and meta is None else prov
            rec = Record.from_measurement(key, hw, trace, run_secs, args_info, kept)
            if meta is not None and isinstance(meta.get("uid"), str) and len(meta["uid"]) <= 32:
                rec = replace(rec, uid=meta["uid"])
            if meta is not None and isinstance(meta.get("latency_s"), (int, float)) and rec.latency_s is not None:
                rec = replace(rec, latency_s=float(meta["latency_s"]))
            if check_replay:
                replay_err = trace_replays(rec, mod)
                if replay_err is not None:
                    raise InvalidRecordError(f"{where}: trace does not replay on its workload: {replay_err}")
            records.append(rec)
        except TunecacheError as err:
            errors.append(f"{where}: {err}" if not str(err).startswith(where) else str(err))
        if progress is not None:
            progress(i + 1, len(lines))
    new = store.commit_records(records) if records else 0
    return ImportReport(workloads=len(workloads), records=len(records), new_records=new, errors=tuple(errors))


def export_jsondb(
    store: BaseStore,
    directory: str | os.PathLike[str],
    *,
    hardware: HardwareKey | str | None = None,
    valid_only: bool = True,
) -> int:
    """Write the store's records (of one hardware key, if given) as a JSONDatabase directory.

    Returns the number of records written. The directory is created; existing files in it are
    replaced atomically (written to a temporary name first).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    recs = store.records(hardware=hardware, valid_only=valid_only)
    wl_index: dict[WorkloadKey, int] = {}
    wl_lines: list[str] = []
    rec_lines: list[str] = []
    side: list[Any] = []
    for r in recs:
        if r.workload not in wl_index:
            sw = store.get_workload(r.workload)
            if sw is None or not sw.mod_json:
                continue  # a workload without its module cannot be exported
            wl_index[r.workload] = len(wl_lines)
            wl_lines.append(json.dumps([r.workload.shash, sw.mod_json]))
        run_secs = list(r.run_secs) if r.run_secs else ([r.latency_s] if r.latency_s is not None else [])
        rec_lines.append(
            json.dumps([wl_index[r.workload], [r.trace, run_secs, json.loads(r.hardware.target), r.args_info]],
                       separators=(",", ":"))
        )
        side.append(
            {"uid": r.uid, "hardware": r.hardware.to_dict(), "provenance": r.provenance.to_dict(),
             "latency_s": r.latency_s}
        )
    for name, content in (
        (WORKLOAD_FILE, "\n".join(wl_lines) + ("\n" if wl_lines else "")),
        (RECORD_FILE, "\n".join(rec_lines) + ("\n" if rec_lines else "")),
        (SIDECAR_FILE, json.dumps(side)),
    ):
        tmp = d / (name + ".tmp")
        tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, d / name)
    return len(rec_lines)
