"""``tunecache db``: inspect and maintain a store (stats, ls, import, export, gc, check, verify,
push, upgrade)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tunecache.cli.common import add_db, add_output_options, at_least_one
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


def _table(rows: list[list[str]], header: list[str], wrap: tuple[str, ...] = ()) -> str:
    return format_table(header, [[str(c) for c in r] for r in rows], wrap=wrap)


def _cmd_db_stats(a: argparse.Namespace) -> int:
    from tunecache.store import open_store

    st = open_store(a.db, read_only=a.read_only, create=False).stats()
    if a.json:
        print(json.dumps({
            "workloads": st.workloads, "records": st.records, "valid_records": st.valid_records,
            "stale_records": st.stale_records, "size_bytes": st.size_bytes, "schema_version": st.schema_version,
            "by_hardware": [{"id": h, "hardware": d, "records": n} for h, d, n in st.by_hardware],
            "by_family": [{"family": f, "workloads": n} for f, n in st.by_family],
        }, indent=2))
        return 0
    print(f"workloads {st.workloads}, records {st.records} ({st.valid_records} valid, {st.stale_records} stale), "
          f"size {_fmt_bytes(st.size_bytes)}, schema v{st.schema_version}")
    if st.by_hardware:
        print()
        print(_table([[h, str(n), d] for h, d, n in st.by_hardware], ["hardware", "records", "description"],
                     wrap=("description",)))
    if st.by_family:
        print()
        print(_table([[f, str(n)] for f, n in st.by_family], ["family", "workloads"]))
    return 0


def _cmd_db_ls(a: argparse.Namespace) -> int:
    from tunecache.store import open_store

    store = open_store(a.db, read_only=True)
    names = {w.key: w.desc for w in store.workloads(family=a.family)}
    recs = [r for r in store.records(hardware=a.hardware, family=a.family, valid_only=not a.all) if r.workload in names]
    if a.best:
        best: dict[Any, Any] = {}
        for r in recs:
            k = (r.workload, r.hardware.id)
            if r.latency_s is not None and (k not in best or r.latency_s < best[k].latency_s):
                best[k] = r
        recs = list(best.values())
    recs = recs[: a.limit] if a.limit else recs
    if a.json:
        print(json.dumps([{
            "uid": r.uid, "workload": str(r.workload), "name": names[r.workload].name,
            "family": names[r.workload].family,
            "hardware": r.hardware.id, "latency_s": r.latency_s, "kind": r.provenance.kind,
            "source": r.provenance.source_workload, "trials": r.provenance.trials, "stale": r.stale,
        } for r in recs], indent=2))
        return 0
    # "trial #": which measurement of its search the record was (not how many trials were spent).
    rows = [[r.uid[:8], names[r.workload].name, names[r.workload].family, r.hardware.id,
             format_latency(r.latency_s) if r.latency_s is not None else "failed",
             r.provenance.kind + (" (stale)" if r.stale else ""), str(r.provenance.trials)] for r in recs]
    print(_table(rows, ["uid", "workload", "family", "hardware", "latency", "how", "trial #"]))
    print(plural(len(rows), "record"))
    return 0


def _cmd_db_import(a: argparse.Namespace) -> int:
    from tunecache.store import open_store
    from tunecache.tvm_layer.jsondb import import_jsondb

    report = import_jsondb(open_store(a.db), a.directory, check_replay=not a.no_replay_check)
    for e in report.errors:
        print(f"skipped: {e}", file=sys.stderr)
    print(report.summary())
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


def _removable(store: Any, keep_top: int) -> int:
    """How many records ``gc(keep_top)`` removes: all but the best ``keep_top`` valid, fresh
    records per workload and hardware (failed and stale records included)."""
    kept: dict[tuple[Any, str], int] = {}
    total = 0
    for r in store.records(valid_only=False):
        total += 1
        if r.latency_s is not None and not r.stale:
            k = (r.workload, r.hardware.id)
            kept[k] = min(keep_top, kept.get(k, 0) + 1)
    return total - sum(kept.values())


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
        print(f"would remove {plural(_removable(store, a.keep_top), 'record')} (keeping {what}); nothing changed")
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


def _cmd_db_upgrade(a: argparse.Namespace) -> int:
    from tunecache.store import upgrade_store as upgrade

    old, new = upgrade(a.db)
    print(f"schema v{old} -> v{new}" if old != new else f"schema already at v{new}")
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
    s = dbs.add_parser("ls", help="list records")
    add_db(s)
    s.add_argument("--hardware", help="hardware key id")
    s.add_argument("--family", help="operator family (conv2d, matmul, ...)")
    s.add_argument("--best", action="store_true", help="only the best record per workload and hardware")
    s.add_argument("--all", action="store_true", help="include failed measurements")
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--json", action="store_true")
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
    s = dbs.add_parser("push", help="copy a local overlay's records to the team store (--db)")
    add_db(s)
    s.add_argument("--overlay", required=True, metavar="URL", help="the local overlay store")
    s.set_defaults(fn=_cmd_db_push)
    s = dbs.add_parser("upgrade", help="upgrade the store's schema to this tunecache's version")
    add_db(s)
    s.set_defaults(fn=_cmd_db_upgrade)
    for parser in dbs.choices.values():
        add_output_options(parser)
