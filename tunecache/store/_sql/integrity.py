"""``tunecache db check``: find what would make a store serve wrong or broken programs.

Checks: the database engine's own integrity check (SQLite), orphan rows (records whose workload
or hardware row is missing), records whose stored JSON no longer decodes, valid records whose
ranking latency disagrees with their measurements without a re-measurement to explain it
(inconsistent best-k), and, with ``replay=True``, records whose trace does not replay on their
workload under this TVM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select, text

from tunecache.errors import InvalidRecordError, TunecacheError
from tunecache.store._sql.schema import HardwareRow, RecordRow, WorkloadRow
from tunecache.store._sql.store import Store
from tunecache.store.keys import WorkloadKey
from tunecache.store.records import decode_args_info, decode_json_text, decode_run_secs, decode_trace, mean_latency

__all__ = ["IntegrityReport", "check_store"]


@dataclass(frozen=True)
class IntegrityReport:
    """Findings of :func:`check_store`; ``ok`` when there are none."""

    engine_ok: bool
    engine_message: str
    records: int
    orphans: tuple[str, ...] = ()
    undecodable: tuple[str, ...] = ()
    inconsistent: tuple[str, ...] = ()
    not_replaying: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Return whether nothing is wrong."""
        return self.engine_ok and not (self.orphans or self.undecodable or self.inconsistent or self.not_replaying)

    def summary(self) -> str:
        """Return a short human report."""
        lines = [
            f"engine check: {'ok' if self.engine_ok else 'FAILED'} ({self.engine_message})",
            f"records: {self.records}",
            f"orphans: {len(self.orphans)}",
            f"undecodable records: {len(self.undecodable)}",
            f"inconsistent rankings: {len(self.inconsistent)}",
            f"traces that do not replay: {len(self.not_replaying)}",
        ]
        for name, items in (
            ("orphan", self.orphans),
            ("undecodable", self.undecodable),
            ("inconsistent", self.inconsistent),
            ("no replay", self.not_replaying),
        ):
            lines += [f"  {name}: {x}" for x in items[:20]]
        lines += list(self.notes)
        lines.append("OK" if self.ok else "PROBLEMS FOUND")
        return "\n".join(lines)


class TraceReplayer(Protocol):
    """What replaying stored traces needs from TVM (:data:`tunecache.tvm_layer.convert.TVM_REPLAYER`)."""

    def workload(self, key: WorkloadKey, mod_json: str) -> Any:
        """Decode a stored workload's module; raise a :class:`TunecacheError` if it cannot be."""

    def replays(self, record: Any, mod: Any) -> str | None:
        """Replay ``record``'s trace on ``mod``: ``None`` if it replays, else why not."""


def check_store(store: Store, *, replay: TraceReplayer | None = None,
                replay_limit: int | None = None) -> IntegrityReport:
    """Check an SQL store; see the module docstring for what is checked.

    Parameters
    ----------
    store
        The SQL store (read access suffices): the checks read its rows.
    replay
        Also replay every valid record's trace on its workload with this replayer (TVM's:
        :data:`tunecache.tvm_layer.convert.TVM_REPLAYER`; a few ms each). The store itself
        imports no TVM, so the caller hands it in.
    replay_limit
        Replay at most this many records (the best ones per workload first).

    Returns
    -------
    IntegrityReport
        What was found; ``ok`` when nothing.
    """
    with store.session() as sess:
        if store.backend == "sqlite":
            msg = str(sess.execute(text("PRAGMA integrity_check")).scalar())
            engine_ok = msg == "ok"
        else:
            sess.execute(text("SELECT 1"))
            engine_ok, msg = True, "server reachable (PostgreSQL checks its own pages)"
        wl_ids = {i: (s, m) for i, s, m in sess.execute(select(WorkloadRow.id, WorkloadRow.shash, WorkloadRow.mod_eq))}
        hw_ids = set(sess.scalars(select(HardwareRow.id)))
        orphans, bad, inconsistent = [], [], []
        n = 0
        valid: list[tuple[str, int, float, str]] = []
        for row in sess.execute(
            select(
                RecordRow.uid,
                RecordRow.workload_id,
                RecordRow.hardware_id,
                RecordRow.trace_json,
                RecordRow.run_secs_json,
                RecordRow.args_info_json,
                RecordRow.latency_s,
                RecordRow.cv,
            )
        ):
            n += 1
            uid, wid, hid, trace_json, secs_json, args_json, lat, cv = row
            if wid not in wl_ids or hid not in hw_ids:
                orphans.append(f"record {uid}: missing {'workload' if wid not in wl_ids else 'hardware'} row")
                continue
            try:
                trace = decode_trace(decode_json_text(trace_json, "trace"))
                secs = decode_run_secs(decode_json_text(secs_json, "run_secs"))
                decode_args_info(decode_json_text(args_json, "args_info"))
            except InvalidRecordError as err:
                bad.append(f"record {uid}: {err}")
                continue
            measured = mean_latency(secs)
            if (lat is None) != (measured is None) and not (lat is not None and cv is not None):
                inconsistent.append(f"record {uid}: ranking latency {lat} but measurements {list(secs)[:4]}")
            elif (
                lat is not None
                and measured is not None
                and cv is None
                and abs(lat - measured) > 1e-9 * max(1.0, measured)
            ):
                inconsistent.append(
                    f"record {uid}: ranking latency {lat} differs from measured {measured} with no re-measurement"
                )
            if lat is not None:
                valid.append((uid, wid, lat, trace_json))
            del trace
    not_replaying: list[str] = []
    notes: list[str] = []
    if replay is not None and valid:
        not_replaying, notes = _replay(store, replay, valid, wl_ids, replay_limit)
    return IntegrityReport(
        engine_ok, msg, n, tuple(orphans), tuple(bad), tuple(inconsistent), tuple(not_replaying), tuple(notes)
    )


def _replay(
    store: Store, replayer: TraceReplayer, valid: list[tuple[str, int, float, str]],
    wl_ids: dict[int, tuple[str, str]], limit: int | None
) -> tuple[list[str], list[str]]:
    from tunecache.store.keys import HardwareKey
    from tunecache.store.records import Record

    valid.sort(key=lambda v: (v[1], v[2]))
    if limit is not None:
        valid = valid[:limit]
    mods: dict[int, object] = {}
    failed: list[str] = []
    notes: list[str] = []
    for uid, wid, _lat, trace_json in valid:
        if wid not in mods:
            sw = store.get_workload(WorkloadKey(*wl_ids[wid]))
            try:
                mods[wid] = replayer.workload(sw.key, sw.mod_json) if sw else None
            except TunecacheError as err:
                mods[wid] = None
                notes.append(f"workload {wl_ids[wid][0]}: {err}")
        mod = mods[wid]
        if mod is None:
            continue
        rec = Record(WorkloadKey(*wl_ids[wid]), HardwareKey("{}"), decode_json_text(trace_json, "trace"))
        problem = replayer.replays(rec, mod)
        if problem is not None:
            failed.append(f"record {uid}: {problem}")
    return failed, notes
