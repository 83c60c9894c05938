"""A stored workload's module and its best programs, read straight from a SQLite store (session 36 scripts)."""
import json
import sqlite3

import tvm

from tunecache.store.keys import WorkloadKey
from tunecache.tvm_layer.convert import workload_from_json


def stored(db, name, k=1):
    """(task module, target, best k traces as JSON, their stored latencies) of workload ``name``."""
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    wid, mod_json, shash = c.execute("select id, mod_json, shash from tc_workload where name=?", (name,)).fetchone()
    rows = c.execute("select trace_json, latency_s from tc_record where workload_id=? and latency_s is not null "
                     "order by latency_s limit ?", (wid, k)).fetchall()
    hw = c.execute("select target from tc_hardware").fetchone()[0]
    target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
    mod = workload_from_json(WorkloadKey(shash, "x"), mod_json).mod
    return mod, target, [json.loads(t) for t, _ in rows], [lat for _, lat in rows]
