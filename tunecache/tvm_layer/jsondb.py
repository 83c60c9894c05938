"""Import and export MetaSchedule ``JSONDatabase`` directories.

A JSONDatabase directory holds ``database_workload.json`` (one ``[shash, module_json]`` per
line) and ``database_tuning_record.json`` (one ``[workload_line, [trace, run_secs, target,
args_info]]`` per line). Records point at workloads by line number, and carry their target but
no host fingerprint, so tunecache writes a sidecar ``tunecache_hardware.json`` with the full
hardware key and provenance of every record line on export, and reads it back on import.
Without a sidecar, imported records get the record's own target plus the fingerprint and TVM
version given to :func:`import_jsondb` (by default this host's).

Imports are idempotent. A record keeps the uid its sidecar gives it (it was written by
tunecache); a record without one (a directory written by stock MetaSchedule) gets a uid derived
from its content, :func:`content_uid`: the first 32 hex digits of the SHA-256 of the canonical
JSON of its workload key, hardware key id, trace (as stored), measured ``run_secs`` and
``args_info``. The store skips a uid it already holds, so importing the same directory again,
or from several processes at once, adds nothing new; the same line twice in one file is one
record. Two records that differ in any of those (one measured time is enough) get different
uids. Records imported by a tunecache older than this rule have random uids: importing their
source directory again adds each of them once more.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tunecache.errors import ImportFormatError, InvalidRecordError, TunecacheError
from tunecache.store.contract import BaseStore
from tunecache.store.keys import HardwareKey, HostFingerprint, WorkloadKey, canonical_json
from tunecache.store.records import Provenance, Record, decode_json_text

__all__ = [
    "ImportReport", "import_jsondb", "export_jsondb", "content_uid", "WORKLOAD_FILE", "RECORD_FILE", "SIDECAR_FILE",
]

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
SIDECAR_FILE = "tunecache_hardware.json"
UID_CHARS = 32  # the store's uid column holds at most 32 characters
_UID_SCHEME = "tunecache.jsondb.content_uid/1"  # changing what goes into the digest needs a new tag


def content_uid(record: Record) -> str:
    """Return the uid an imported record without a sidecar uid gets: a digest of its content.

    Parameters
    ----------
    record
        A record as built from a JSONDatabase line (trace, run times and args info decoded).

    Returns
    -------
    str
        The first 32 hex digits of the SHA-256 of the canonical JSON of the record's workload
        key (``str``), hardware key id, trace, measured ``run_secs`` and ``args_info``.
        Provenance (import time, host name, user) is not part of it, so the same line imported
        twice, or by two machines attributing it to the same hardware key, gets the same uid; a
        record differing in any measured time, trace decision or hardware key gets another.
    """
    payload = canonical_json(
        [_UID_SCHEME, str(record.workload), record.hardware.id, record.trace, list(record.run_secs), record.args_info]
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:UID_CHARS]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class ImportReport:
    """What an import did: counts, and one message per rejected line.

    Attributes
    ----------
    workloads
        Good workload lines (each committed; one already stored is a no-op).
    records
        Good record lines read, repeated lines included.
    new_records
        Records the store did not hold before (what the commit added).
    errors
        One message per rejected line (file, line number, reason).
    duplicates
        Good record lines that repeat an earlier line of the same file (the same uid): one
        record, counted once.
    hardware
        Ids of the hardware keys the imported records were attributed to.
    """

    workloads: int
    records: int
    new_records: int
    errors: tuple[str, ...]
    duplicates: int = 0
    hardware: tuple[str, ...] = ()

    @property
    def existing(self) -> int:
        """Distinct records read that the store already held (an earlier or concurrent import)."""
        return max(0, self.records - self.duplicates - self.new_records)

    def summary(self) -> str:
        """Return a one-line summary, e.g. ``imported: 12 records read for 3 workloads, 0 new, 12
        already in the store; 0 bad entries skipped``."""
        parts = [
            f"{_plural(self.records, 'record')} read for {_plural(self.workloads, 'workload')}",
            f"{self.new_records} new",
            f"{self.existing} already in the store",
        ]
        if self.duplicates:
            parts.append(f"{_plural(self.duplicates, 'repeated line')} counted once")
        return f"imported: {', '.join(parts)}; {len(self.errors)} bad entries skipped"


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

    The import is idempotent: a record's uid is its sidecar uid when the directory was written
    by tunecache, else :func:`content_uid` (a digest of its workload key, hardware key id,
    trace, ``run_secs`` and ``args_info``), and the store skips uids it already holds. Importing
    the same directory twice, or from several processes at once, leaves one copy of each
    record; a line repeated in the file is one record (counted in
    :attr:`ImportReport.duplicates`).

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
    progress
        Called as ``progress(line, lines)`` after each record line.

    Returns
    -------
    ImportReport
        Counts (records read, how many were new, how many the store already held, repeated
        lines) and the rejected lines.

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
    seen: set[str] = set()
    duplicates = 0
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
            if meta is not None and isinstance(meta.get("uid"), str) and 0 < len(meta["uid"]) <= UID_CHARS:
                rec = replace(rec, uid=meta["uid"])  # written by tunecache: its own uid
            else:
                rec = replace(rec, uid=content_uid(rec))  # stock MetaSchedule: identity from content
            if rec.uid in seen:
                duplicates += 1  # the same record again: already checked and queued once
            else:
                if meta is not None and isinstance(meta.get("latency_s"), (int, float)) and rec.latency_s is not None:
                    rec = replace(rec, latency_s=float(meta["latency_s"]))
                if check_replay:
                    replay_err = trace_replays(rec, mod)
                    if replay_err is not None:
                        raise InvalidRecordError(f"{where}: trace does not replay on its workload: {replay_err}")
                records.append(rec)
                seen.add(rec.uid)
        except TunecacheError as err:
            errors.append(f"{where}: {err}" if not str(err).startswith(where) else str(err))
        if progress is not None:
            progress(i + 1, len(lines))
    new = store.commit_records(records) if records else 0
    return ImportReport(
        workloads=len(workloads), records=len(records) + duplicates, new_records=new, errors=tuple(errors),
        duplicates=duplicates, hardware=tuple(sorted({r.hardware.id for r in records})),
    )


def export_jsondb(
    store: BaseStore,
    directory: str | os.PathLike[str],
    *,
    hardware: HardwareKey | str | None = None,
    valid_only: bool = True,
) -> int:
    """Write the store's records (of one hardware key, if given) as a JSONDatabase directory.

    Returns the number of records written. The directory is created; existing files in it are
    replaced atomically (written to a temporary name first). Records are streamed from the
    store a page at a time and written as they come: memory does not grow with the store.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    wl_index: dict[WorkloadKey, int | None] = {}
    n_records = n_workloads = 0
    tmps = {name: d / (name + ".tmp") for name in (WORKLOAD_FILE, RECORD_FILE, SIDECAR_FILE)}
    try:
        with (open(tmps[WORKLOAD_FILE], "w", encoding="utf-8") as wl_out,
              open(tmps[RECORD_FILE], "w", encoding="utf-8") as rec_out,
              open(tmps[SIDECAR_FILE], "w", encoding="utf-8") as side_out):
            side_out.write("[")
            for r in store.iter_records(hardware=hardware, valid_only=valid_only):
                if r.workload not in wl_index:
                    sw = store.get_workload(r.workload)
                    if sw is None or not sw.mod_json:
                        wl_index[r.workload] = None  # a workload without its module cannot be exported
                    else:
                        wl_index[r.workload] = n_workloads
                        n_workloads += 1
                        wl_out.write(json.dumps([r.workload.shash, sw.mod_json]) + "\n")
                idx = wl_index[r.workload]
                if idx is None:
                    continue
                run_secs = list(r.run_secs) if r.run_secs else ([r.latency_s] if r.latency_s is not None else [])
                rec_out.write(json.dumps([idx, [r.trace, run_secs, json.loads(r.hardware.target), r.args_info]],
                                         separators=(",", ":")) + "\n")
                side_out.write(("," if n_records else "") + json.dumps(
                    {"uid": r.uid, "hardware": r.hardware.to_dict(), "provenance": r.provenance.to_dict(),
                     "latency_s": r.latency_s}))
                n_records += 1
            side_out.write("]")
        for name, tmp in tmps.items():
            os.replace(tmp, d / name)
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
    return n_records
