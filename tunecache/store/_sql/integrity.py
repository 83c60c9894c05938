"""``tunecache db check``: find what would make a store serve wrong or broken programs.

Checks: the database engine's own integrity check (SQLite), orphan rows (records whose workload
or hardware row is missing), records whose stored JSON no longer decodes, valid records whose
ranking latency disagrees with their measurements without a re-measurement to explain it
(inconsistent best-k), and, with ``replay=True``, records whose trace does not replay on their
workload under this TVM.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import select, text, tuple_

from tunecache.errors import InvalidRecordError, TunecacheError
from tunecache.store._sql.schema import HardwareRow, RecordRow, WorkloadRow
from tunecache.store._sql.store import Store
from tunecache.store.keys import WorkloadKey
from tunecache.store.records import decode_args_info, decode_json_text, decode_run_secs, decode_trace_text, mean_latency

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


#: Rows read per query: the records are checked a page at a time, never all held at once.
PAGE = 1000


def check_store(store: Store, *, replay: TraceReplayer | None = None,
                replay_limit: int | None = None, page: int = PAGE) -> IntegrityReport:
    """Check an SQL store; see the module docstring for what is checked.

    The records are read in pages of ``page`` rows (keyset pagination on the record id, in one
    read transaction), so memory stays bounded by a page, the workload and hardware ids, and
    the problems found, however many records the store holds.

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
    page
        Rows read per query.

    Returns
    -------
    IntegrityReport
        What was found; ``ok`` when nothing.
    """
    if page < 1:
        raise InvalidRecordError(f"page must be >= 1, got {page}")
    with store.session() as sess:
        if store.backend == "sqlite":
            msg = str(sess.execute(text("PRAGMA integrity_check")).scalar())
            engine_ok = msg == "ok"
        else:
            sess.execute(text("SELECT 1"))
            engine_ok, msg = True, "server reachable (PostgreSQL checks its own pages)"
        wl_ids = {i: (s, m) for i, s, m in sess.execute(select(WorkloadRow.id, WorkloadRow.shash, WorkloadRow.mod_eq))}
        hw_ids = set(sess.scalars(select(HardwareRow.id)))
        orphans: list[str] = []
        bad: list[str] = []
        inconsistent: list[str] = []
        bad_uids: set[str] = set()
        n = valid = 0
        cols = (
            select(
                RecordRow.id,
                RecordRow.uid,
                RecordRow.workload_id,
                RecordRow.hardware_id,
                RecordRow.trace_json,
                RecordRow.run_secs_json,
                RecordRow.args_info_json,
                RecordRow.latency_s,
                RecordRow.cv,
            )
            .order_by(RecordRow.id)
            .limit(page)
        )
        after: int | None = None
        while True:
            rows = sess.execute(cols if after is None else cols.where(RecordRow.id > after)).all()
            for row in rows:
                n += 1
                _, uid, wid, hid, trace_json, secs_json, args_json, lat, cv = row
                if wid not in wl_ids or hid not in hw_ids:
                    orphans.append(f"record {uid}: missing {'workload' if wid not in wl_ids else 'hardware'} row")
                    continue
                try:
                    decode_trace_text(trace_json)
                    secs = decode_run_secs(decode_json_text(secs_json, "run_secs"))
                    decode_args_info(decode_json_text(args_json, "args_info"))
                except InvalidRecordError as err:
                    bad.append(f"record {uid}: {err}")
                    bad_uids.add(uid)
                    continue
                problem = _ranking_problem(uid, lat, cv, secs)
                if problem is not None:
                    inconsistent.append(problem)
                if lat is not None:
                    valid += 1
            if len(rows) < page:
                break
            after = rows[-1][0]
    not_replaying: list[str] = []
    notes: list[str] = []
    if replay is not None and valid:
        not_replaying, notes = _replay(store, replay, wl_ids, bad_uids, replay_limit, page)
    return IntegrityReport(
        engine_ok, msg, n, tuple(orphans), tuple(bad), tuple(inconsistent), tuple(not_replaying), tuple(notes)
    )


def _ranking_problem(uid: str, lat: float | None, cv: float | None, secs: tuple[float, ...]) -> str | None:
    """Why a record's ranking latency disagrees with its measurements, or ``None``."""
    measured = mean_latency(secs)
    if (lat is None) != (measured is None) and not (lat is not None and cv is not None):
        return f"record {uid}: ranking latency {lat} but measurements {list(secs)[:4]}"
    if lat is not None and measured is not None and cv is None and abs(lat - measured) > 1e-9 * max(1.0, measured):
        return f"record {uid}: ranking latency {lat} differs from measured {measured} with no re-measurement"
    return None


def _valid_traces(store: Store, skip: set[str], page: int) -> Iterator[tuple[str, int, str]]:
    """Yield ``(uid, workload id, trace JSON)`` of the valid records whose workload and hardware
    rows exist and whose uid is not in ``skip``: per workload (in id order), fastest first.

    Keyset pagination on (workload id, latency, record id), one short read transaction a page,
    so nothing is held open while the caller replays.
    """
    cols = (
        select(RecordRow.workload_id, RecordRow.latency_s, RecordRow.id, RecordRow.uid, RecordRow.trace_json)
        .join(WorkloadRow, RecordRow.workload_id == WorkloadRow.id)
        .join(HardwareRow, RecordRow.hardware_id == HardwareRow.id)
        .where(RecordRow.latency_s.is_not(None))
        .order_by(RecordRow.workload_id, RecordRow.latency_s, RecordRow.id)
        .limit(page)
    )
    after: tuple[Any, ...] | None = None
    while True:
        q = cols
        if after is not None:
            q = q.where(tuple_(RecordRow.workload_id, RecordRow.latency_s, RecordRow.id) > tuple_(*after))
        with store.session() as sess:
            rows = sess.execute(q).all()
        for wid, _lat, _id, uid, trace_json in rows:
            if uid not in skip:
                yield uid, wid, trace_json
        if len(rows) < page:
            return
        after = tuple(rows[-1][:3])


def _replay(
    store: Store, replayer: TraceReplayer, wl_ids: dict[int, tuple[str, str]], skip: set[str],
    limit: int | None, page: int
) -> tuple[list[str], list[str]]:
    from tunecache.store.keys import HardwareKey
    from tunecache.store.records import Record

    mods: dict[int, object] = {}
    failed: list[str] = []
    notes: list[str] = []
    todo = _valid_traces(store, skip, page)
    for uid, wid, trace_json in (todo if limit is None else itertools.islice(todo, limit)):
        if wid not in wl_ids:  # a workload added since the check began
            continue
        if wid not in mods:
            mods.clear()  # records come per workload: one decoded module at a time
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
