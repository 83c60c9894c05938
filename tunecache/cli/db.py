"""``tunecache db``: inspect and maintain a store (stats, ls, import, export, gc, check, verify,
rerank, push, upgrade)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from tunecache.cli.common import add_db, add_output_options, at_least, at_least_one
from tunecache.config import RERANK_ROUNDS, RERANK_TOP
from tunecache.report import format_latency, format_table, plural

__all__ = ["register"]


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _non_negative(text: str) -> int:
    """``type=`` of ``--limit``: a whole number >= 0."""
    return at_least(text, 0)


def _table(rows: list[list[str]], header: list[str], wrap: tuple[str, ...] = ()) -> str:
    return format_table(header, [[str(c) for c in r] for r in rows], wrap=wrap)


def _cmd_db_stats(a: argparse.Namespace) -> int:
    from tunecache.store import open_store

    store = open_store(a.db, read_only=a.read_only, create=False)
    st = store.stats()
    models = _kept_models(store, {h: n for h, _d, n in st.by_hardware})
    if a.json:
        print(json.dumps({
            "workloads": st.workloads, "records": st.records, "valid_records": st.valid_records,
            "stale_records": st.stale_records, "size_bytes": st.size_bytes, "schema_version": st.schema_version,
            "by_hardware": [{"id": h, "hardware": d, "records": n, "cost_model": models.get(h)}
                            for h, d, n in st.by_hardware],
            "by_family": [{"family": f, "workloads": n} for f, n in st.by_family],
        }, indent=2))
        return 0
    print(f"workloads {st.workloads}, records {st.records} ({st.valid_records} valid, {st.stale_records} stale), "
          f"size {_fmt_bytes(st.size_bytes)}, schema v{st.schema_version}")
    if st.by_hardware:
        print()
        print(_table([[h, str(n), _kept_cell(models.get(h)), d] for h, d, n in st.by_hardware],
                     ["hardware", "records", "cost model", "description"], wrap=("description",)))
    if st.by_family:
        print()
        print(_table([[f, str(n)] for f, n in st.by_family], ["family", "workloads"]))
    return 0


def _kept_models(store: Any, records: dict[str, int]) -> dict[str, dict[str, Any] | None]:
    """Each hardware key's kept cost model (:func:`tunecache.search.gradient.kept.describe_kept`),
    judged fresh against ``records``, the key's records as the store's stats counted them."""
    from tunecache.search.gradient.kept import describe_kept

    return {hw.id: describe_kept(store, hw, records.get(hw.id, 0)) for hw in store.hardware_keys()}


def _kept_cell(kept: dict[str, Any] | None) -> str:
    """The ``cost model`` column: what the replays' second opinion will read for the key."""
    if kept is None:
        return "-"
    if "error" in kept:
        return "unreadable (refit next)"
    return f"{kept['rows']} rows, {kept['records']} records" + ("" if kept["fresh"] else " (stale: refit next)")


def _cmd_db_queue(a: argparse.Namespace) -> int:
    from tunecache.report import format_seconds, plural
    from tunecache.store import open_store

    st = open_store(a.db, read_only=True, create=False)
    hw = None
    if a.hardware:
        waiting = {e.hardware.id: e.hardware for e in st.queued()}  # a key may have no records yet
        hw = next((h for h in [*waiting.values(), *st.hardware_keys()] if h.id.startswith(a.hardware)), None)
        if hw is None:
            from tunecache.errors import ConfigError

            raise ConfigError(f"--hardware {a.hardware}: no hardware key starts with it (keys with queued tasks: "
                              f"{', '.join(sorted(waiting)) or 'none'}); see `tunecache db stats`")
    entries = st.queued(hw, limit=a.limit or None)
    if a.model:
        entries = [e for e in entries if a.model in e.models]
    if a.json:
        print(json.dumps([{"name": e.name, "workload": str(e.workload), "hardware": e.hardware.id,
                           "weight": e.weight, "priority": e.priority, "served": e.served,
                           "models": list(e.models), "requests": e.requests, "queued_at": e.queued_at,
                           "held_by": st.claim_holder(e.workload, e.hardware)} for e in entries], indent=2))
        return 0
    if not entries:
        print("the tuning queue is empty" + (f" for model {a.model}" if a.model else ""))
        return 0
    import time

    now = time.time()
    rows = [[e.name, f"{e.priority:.3g}", str(e.weight), e.served, ", ".join(e.models) or "-",
             format_seconds(now - e.queued_at), st.claim_holder(e.workload, e.hardware) or "-", e.hardware.id[:12]]
            for e in entries]
    print(_table(rows, ["task", "priority", "w", "served as", "models", "waiting", "tuning now", "hardware"],
                 wrap=("models",)))
    models: dict[str, int] = {}
    for e in entries:
        for m in e.models:
            models[m] = models.get(m, 0) + 1
    per_model = ", ".join(f"{m} {n}" for m, n in sorted(models.items(), key=lambda kv: -kv[1]))
    print(f"\n{plural(len(entries), 'task')} queued" + (f" (by model: {per_model})" if per_model else "")
          + "; `tunecache worker` tunes them")
    return 0


#: Rows ``db ls`` prints as a table when no ``--limit`` is given (``--json``: every row).
LS_DEFAULT_LIMIT = 50
#: Rows per printed table chunk: each chunk is formatted and printed as soon as it is read.
_LS_CHUNK = 1000
_LS_HEADER = ["uid", "workload", "family", "hardware", "latency", "how", "trial #"]


class _LsRow(NamedTuple):
    """What ``db ls`` shows of a record (no trace: a row is small, whatever the record's size)."""

    uid: str
    workload: Any
    hardware: str
    latency_s: float | None
    kind: str
    source: str | None
    trials: int
    stale: bool


def _ls_row(r: Any) -> _LsRow:
    p = r.provenance
    return _LsRow(r.uid, r.workload, r.hardware.id, r.latency_s, p.kind, p.source_workload, p.trials, r.stale)


def _best_rows(rows: Iterable[_LsRow]) -> list[_LsRow]:
    """The fastest row per workload and hardware, in the order their groups first appear."""
    best: dict[tuple[Any, str], tuple[float, _LsRow]] = {}
    for r in rows:
        k = (r.workload, r.hardware)
        if r.latency_s is not None and (k not in best or r.latency_s < best[k][0]):
            best[k] = (r.latency_s, r)
    return [r for _, r in best.values()]


class _Names:
    """Workload descriptions looked up once per distinct workload, as rows need them."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._descs: dict[Any, tuple[str, str]] = {}

    def __call__(self, key: Any) -> tuple[str, str]:
        got = self._descs.get(key)
        if got is None:
            sw = self._store.get_workload(key)
            got = self._descs[key] = (sw.desc.name, sw.desc.family) if sw is not None else ("?", "?")
        return got


def _print_json_array(items: Iterable[dict[str, Any]]) -> None:
    """Print ``items`` as ``json.dumps(list(items), indent=2)`` does, one item at a time."""
    out = sys.stdout
    n = 0
    for item in items:
        out.write(("[\n" if n == 0 else ",\n") + textwrap.indent(json.dumps(item, indent=2), "  "))
        n += 1
    out.write("[]\n" if n == 0 else "\n]\n")


def _print_table_stream(rows: Iterable[list[str]]) -> int:
    """Print ``rows`` under the ``db ls`` header a chunk at a time; return how many were printed.

    The first chunk is laid out by :func:`format_table` (the whole table when it fits in one
    chunk); later chunks keep the first chunk's column widths. A longer cell there is printed
    whole and shifts the rest of its row (a name is never cut where it cannot be seen whole).
    """
    n = 0
    widths: list[int] = []
    for chunk in _chunks(rows, _LS_CHUNK):
        if not widths:
            text = _table(chunk, _LS_HEADER)
            widths = [len(rule) for rule in text.splitlines()[1].split("  ")]
            print(text)
        else:
            print("\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in chunk))
        n += len(chunk)
    if not widths:
        print(_table([], _LS_HEADER))
    return n


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _cmd_db_ls(a: argparse.Namespace) -> int:
    from tunecache.store import open_store

    store = open_store(a.db, read_only=True)
    limit = a.limit if a.limit is not None else (0 if a.json else LS_DEFAULT_LIMIT)
    # Records stream from the store a page at a time; only a row's few fields are kept, and
    # only until it is printed (--best keeps one row per workload and hardware).
    page = min(1000, limit + 1) if limit and not a.best else 1000
    recs = store.iter_records(hardware=a.hardware, family=a.family, valid_only=not a.all, batch=page)
    rows: Iterable[_LsRow] = (_ls_row(r) for r in recs)
    total: int | None = None
    if a.best:
        best = _best_rows(rows)
        total = len(best)
        rows = best
    more = False
    if limit:  # one row past the limit says whether there are more, without reading them
        head = list(itertools.islice(rows, limit + 1))
        more = len(head) > limit
        rows = head[:limit]
    names = _Names(store)
    if a.json:
        _print_json_array({
            "uid": r.uid, "workload": str(r.workload), "name": names(r.workload)[0], "family": names(r.workload)[1],
            "hardware": r.hardware, "latency_s": r.latency_s, "kind": r.kind,
            "source": r.source, "trials": r.trials, "stale": r.stale,
        } for r in rows)
        return 0
    # "trial #": which measurement of its search the record was (not how many trials were spent).
    n = _print_table_stream([r.uid[:8], *names(r.workload), r.hardware,
                             format_latency(r.latency_s) if r.latency_s is not None else "failed",
                             r.kind + (" (stale)" if r.stale else ""), str(r.trials)] for r in rows)
    if not more:
        print(plural(n, "record"))
    elif total is not None:
        print(f"{n} of {plural(total, 'record')} shown (--limit N for more, --limit 0 for all)")
    else:
        print(f"first {plural(n, 'record')} shown; there are more (--limit N for more, --limit 0 for all)")
    return 0


def _cmd_db_import(a: argparse.Namespace) -> int:
    from tunecache.store import open_store
    from tunecache.tvm_layer.jsondb import import_jsondb

    store = open_store(a.db)
    report = import_jsondb(store, a.directory, check_replay=not a.no_replay_check)
    for e in report.errors:
        print(f"skipped: {e}", file=sys.stderr)
    print(report.summary())
    if report.new_records:  # index what the import added (workloads already indexed are skipped)
        from tunecache.planning import index_store

        made = index_store(store, hardware=report.hardware)
        print(f"reuse index: {sum(n for n in made.values() if n > 0)} workloads indexed")
    return 0 if not report.errors else 3


def _check_export_dir(directory: str) -> None:
    """Refuse a directory that cannot be made: a file, or a path under a file (before any work)."""
    from tunecache.errors import ConfigError

    d = Path(directory)
    for p in (d, *d.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == d else f"is under {p}, which is a file"
                raise ConfigError(f"db export {directory}: {directory} {what}; give a directory path")
            return


def _cmd_db_export(a: argparse.Namespace) -> int:
    from tunecache.store import open_store
    from tunecache.tvm_layer.jsondb import export_jsondb

    _check_export_dir(a.directory)
    n = export_jsondb(open_store(a.db, read_only=True), a.directory, hardware=a.hardware, valid_only=not a.all)
    print(f"exported {plural(n, 'record')} to {a.directory}")
    return 0


def _sqlite_file(store: Any) -> Path | None:
    url = str(getattr(store, "url", ""))
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///"):])
        return path if path.is_file() else None
    return None


def _vacuum(path: Path) -> None:
    """Give the space of deleted records back to the file system (SQLite keeps it otherwise)."""
    import sqlite3

    con = sqlite3.connect(str(path), timeout=30)
    try:
        con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()


def _cmd_db_gc(a: argparse.Namespace) -> int:
    from tunecache.store import open_store

    what = f"the best {a.keep_top} per workload and hardware"
    if a.dry_run:
        store = open_store(a.db, read_only=True)
        print(f"would remove {plural(store.gc(a.keep_top, dry_run=True), 'record')} (keeping {what}); nothing changed")
        return 0
    store = open_store(a.db, create=False)
    path = _sqlite_file(store)
    before = path.stat().st_size if path is not None else None
    n = store.gc(a.keep_top)
    store.close()
    size = ""
    if path is not None and n:
        _vacuum(path)
        size = f"; file {_fmt_bytes(before)} -> {_fmt_bytes(path.stat().st_size)}"
    print(f"removed {plural(n, 'record')} (kept {what}){size}")
    return 0


def _cmd_db_check(a: argparse.Namespace) -> int:
    from tunecache.errors import ConfigError
    from tunecache.store import Store, check_store, open_store

    store = open_store(a.db, read_only=True)
    if not isinstance(store, Store):  # check_store reads the SQL tables themselves
        raise ConfigError("db check needs an SQL store (SQLite or PostgreSQL), not an overlay")
    from tunecache.tvm_layer.convert import TVM_REPLAYER

    rep = check_store(store, replay=TVM_REPLAYER if a.replay else None, replay_limit=a.replay_limit)
    print(rep.summary())
    return 0 if rep.ok else 4


def _cmd_db_push(a: argparse.Namespace) -> int:
    from tunecache.store import open_store
    from tunecache.store.overlay import push

    n, new = push(open_store(a.overlay, create=False), open_store(a.db))
    print(f"pushed {n} records ({new} new) from {a.overlay} to the team store")
    return 0


def _cmd_db_verify(a: argparse.Namespace) -> int:
    from tunecache.search.verify import verify_store
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    target = resolve_target(a.target)
    rep = verify_store(open_store(a.db, create=False), hardware_key(target), target, remeasure=a.remeasure)
    for p in rep.problems[:50]:
        print(p, file=sys.stderr)
    print(rep.summary())
    return 0


def _cmd_db_rerank(a: argparse.Namespace) -> int:
    from tunecache.errors import ConfigError
    from tunecache.interrupt import stop_on_interrupt, stop_requested
    from tunecache.search.remeasure import Reranked, rerank_store
    from tunecache.store import open_store
    from tunecache.tvm_layer.target import hardware_key, resolve_target

    target = resolve_target(a.target)
    hw = hardware_key(target)
    store = open_store(a.db, create=False)
    if store.read_only:
        raise ConfigError(f"{store.display_url} is read-only ({store.read_only_reason}): a re-rank stores new "
                          "ranking latencies; run it where the store can be written")
    if store.count_records(hw) == 0:
        keys = store.hardware_keys()
        raise ConfigError(f"{store.display_url} has no records for this machine's hardware key {hw.id} "
                          f"({len(keys)} other key{'' if len(keys) == 1 else 's'} in it): re-rank on the machine "
                          "that measured them, or pass the --target they were tuned for")

    def shown(i: int, n: int, r: Reranked) -> None:
        what = (f"best changed, {r.gain:.2f}x faster" if r.changed and r.gain else
                "best changed" if r.changed else "best kept")
        print(f"[rerank] {i + 1}/{n} {r.name}: {r.records} records, {what}", file=sys.stderr, flush=True)

    with stop_on_interrupt("stopping after this workload (Ctrl-C again to stop at once)"):
        quiet = getattr(a, "quiet", False)
        done = rerank_store(store, hw, target, top=a.top, rounds=a.rounds, names=a.workload or None,
                            family=a.family, time_limit_s=a.time_limit, on_workload=None if quiet else shown)
        stopped = stop_requested()
    changed = [r for r in done if r.changed]
    if a.json:
        print(json.dumps([{"workload": str(r.workload), "name": r.name, "records": r.records, "failed": r.failed,
                           "changed": r.changed, "before_uid": r.before_uid, "after_uid": r.after_uid,
                           "stored_s": r.stored_s, "before_s": r.before_s, "after_s": r.after_s, "gain": r.gain}
                          for r in done], indent=1))
    else:
        if changed:
            rows = [[r.name, format_latency(r.stored_s), format_latency(r.before_s), format_latency(r.after_s),
                     f"{r.gain:.2f}x" if r.gain else "n/a"] for r in sorted(changed, key=lambda r: -(r.gain or 0))]
            print(format_table(["workload", "old best, stored", "old best, now", "new best, now", "gain"], rows))
        print(f"re-ranked {plural(len(done), 'workload')} on hardware {hw.id}: {len(changed)} changed their best"
              + (f"; {sum(r.failed for r in done)} records failed to build or run" if any(r.failed for r in done)
                 else ""))
    if stopped:
        print("tunecache: stopped; the workloads above keep their new ranking; the same command re-ranks "
              "every workload again", file=sys.stderr)
        return 130
    return 0


def _cmd_db_upgrade(a: argparse.Namespace) -> int:
    from tunecache.store import upgrade_store as upgrade

    old, new = upgrade(a.db)
    print(f"schema v{old} -> v{new}" if old != new else f"schema already at v{new}")
    from tunecache.planning import index_store
    from tunecache.store import open_store

    with open_store(a.db, create=False) as store:
        made = index_store(store, on_progress=lambda hw, n: print(f"  reuse index: {n} workloads of {hw}"))
    for hid, n in made.items():
        if n < 0:
            print(f"reuse index: hardware {hid} skipped (its target cannot be built with this TVM; "
                  "run `tunecache db upgrade` where it can)")
    print(f"reuse index: {sum(n for n in made.values() if n > 0)} workloads indexed")
    return 0


def register(sub: Any) -> None:
    """Add ``tunecache db`` and its subcommands to the parser."""
    db = sub.add_parser("db", help="inspect and maintain a store")
    dbs = db.add_subparsers(dest="dbcmd", metavar="SUBCOMMAND", required=True, parser_class=type(db))
    s = dbs.add_parser("stats", help="counts per hardware key and operator family, size on disk")
    add_db(s)
    s.add_argument("--json", action="store_true")
    s.add_argument("--read-only", action="store_true", help="open without write access")
    s.set_defaults(fn=_cmd_db_stats)
    s = dbs.add_parser("ls", help=f"list records (the first {LS_DEFAULT_LIMIT} unless --limit)")
    add_db(s)
    s.add_argument("--hardware", help="hardware key id")
    s.add_argument("--family", help="operator family (conv2d, matmul, ...)")
    s.add_argument("--best", action="store_true", help="only the best record per workload and hardware")
    s.add_argument("--all", action="store_true", help="include failed measurements")
    s.add_argument("--limit", type=_non_negative, default=None, metavar="N",
                   help=f"print the first N records in commit order (default {LS_DEFAULT_LIMIT}; with --json "
                        "every record; 0: every record). Records are read a page at a time and printed "
                        "as they are read, so --limit 0 on a large store starts at once and holds one "
                        "page; --best reads every record before it prints")
    s.add_argument("--json", action="store_true", help="a JSON array (every record unless --limit)")
    s.set_defaults(fn=_cmd_db_ls)
    s = dbs.add_parser("import", help="import a MetaSchedule JSONDatabase directory")
    add_db(s)
    s.add_argument("directory")
    s.add_argument("--no-replay-check", action="store_true", help="do not replay traces before importing")
    s.set_defaults(fn=_cmd_db_import)
    s = dbs.add_parser("export", help="export records as a MetaSchedule JSONDatabase directory")
    add_db(s)
    s.add_argument("directory")
    s.add_argument("--hardware", help="only this hardware key id")
    s.add_argument("--all", action="store_true", help="include failed measurements")
    s.set_defaults(fn=_cmd_db_export)
    s = dbs.add_parser("gc", help="keep only the best K records per workload and hardware")
    add_db(s)
    s.add_argument("--keep-top", type=at_least_one, required=True, metavar="K")
    s.add_argument("--dry-run", action="store_true", help="say how many records would be removed; change nothing")
    s.set_defaults(fn=_cmd_db_gc)
    s = dbs.add_parser("check", help="integrity check: orphans, undecodable records, inconsistent rankings")
    add_db(s)
    s.add_argument("--replay", action="store_true", help="also replay every valid trace on its workload (needs TVM)")
    s.add_argument("--replay-limit", type=int, default=None, metavar="N")
    s.set_defaults(fn=_cmd_db_check)
    s = dbs.add_parser("verify", help="re-admit records of other TVM versions whose traces still replay")
    add_db(s)
    s.add_argument("--target", default=None, help="the target records were tuned for (default: this host's CPU)")
    s.add_argument("--remeasure", type=int, default=0, metavar="N", help="re-measure a sample of N re-admitted records")
    s.set_defaults(fn=_cmd_db_verify)
    s = dbs.add_parser("rerank", help="re-measure each workload's best records side by side on this machine "
                                      "and rank them by what they take now")
    add_db(s)
    s.add_argument("--target", default=None, help="the target records were tuned for (default: this host's CPU)")
    s.add_argument("--top", type=lambda t: at_least(t, 2), default=RERANK_TOP, metavar="K",
                   help=f"records re-measured a workload, from its best down (default {RERANK_TOP})")
    s.add_argument("--rounds", type=at_least_one, default=RERANK_ROUNDS, metavar="R",
                   help=f"interleaved rounds (default {RERANK_ROUNDS})")
    s.add_argument("--workload", action="append", metavar="NAME",
                   help="only this workload (a name `db ls` shows; repeat for more)")
    s.add_argument("--family", help="only this operator family (conv2d, matmul, ...)")
    s.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="start no workload after this many seconds")
    s.add_argument("--json", action="store_true", help="one entry per workload re-ranked")
    s.set_defaults(fn=_cmd_db_rerank)
    s = dbs.add_parser("push", help="copy a local overlay's records to the team store (--db)")
    add_db(s)
    s.add_argument("--overlay", required=True, metavar="URL", help="the local overlay store")
    s.set_defaults(fn=_cmd_db_push)
    s = dbs.add_parser("queue", help="tasks waiting for `tunecache worker`, highest priority first")
    add_db(s)
    s.add_argument("--hardware", help="only this hardware key (an id or its first characters)")
    s.add_argument("--model", help="only tasks this model asked for")
    s.add_argument("--limit", type=_non_negative, default=None, metavar="N", help="at most N tasks (0: all)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(fn=_cmd_db_queue)
    s = dbs.add_parser("upgrade", help="upgrade the store's schema to this tunecache's version")
    add_db(s)
    s.set_defaults(fn=_cmd_db_upgrade)
    for parser in dbs.choices.values():
        add_output_options(parser)
