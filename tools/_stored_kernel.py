"""One stored kernel as the per-kernel scripts of issue 21 read it (``docs/bench/2026-12-17/
kernel_phases.py``, ``docs/bench/2026-12-19/kernel_variants.py``): a SQLite store's workload by
its row id, its fastest valid record's trace, and the store's target on one core.

Reads the file read-only and by the store's tables, as those scripts did: they name workloads by
the ids `sqlite3` shows, which the store contract does not expose.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any


def stored_kernel(db: str, wid: int) -> tuple[Any, Any, Any]:
    """``(target, mod, best_trace_json)`` of workload ``wid`` in the SQLite store ``db``.

    ``target`` is the store's (first) hardware target with ``num-cores`` 1; ``mod`` the
    workload's TIR module; ``best_trace_json`` the trace of its fastest non-stale record with
    a latency.
    """
    from tunecache.store.keys import WorkloadKey
    from tunecache.tvm_layer import load_tvm
    from tunecache.tvm_layer.convert import workload_from_json

    tvm = load_tvm("llvm")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        hw = con.execute("select target from tc_hardware").fetchone()[0]
        target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
        target = tvm.target.Target({**target.export(), "num-cores": 1})
        shash, mod_json = con.execute("select shash, mod_json from tc_workload where id=?", (wid,)).fetchone()
        mod = workload_from_json(WorkloadKey(shash, "x"), mod_json).mod
        best = json.loads(con.execute(
            "select trace_json from tc_record where workload_id=? and latency_s is not null and stale=0 "
            "order by latency_s limit 1", (wid,)).fetchone()[0])
    finally:
        con.close()
    return target, mod, best
