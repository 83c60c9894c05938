"""Every record of some workloads measured side by side in many interleaved rounds, each round
the search's own unit (3 cold samples), every sample kept (session 42, #19 / #21).

    python ranking_samples.py STORE WIDS ROUNDS OUT.json

What it is for: deciding, offline, which statistic of a few rounds picks the truly fastest
record on a VM whose speed switches phase every few tens of milliseconds (``ranking_eval.py``).
"""
import json
import sqlite3
import sys
import time
import warnings

warnings.simplefilter("ignore")
from tunecache.tvm_layer import load_tvm  # noqa: E402

tvm = load_tvm("llvm")
from tunecache.search.remeasure import measure_side_by_side  # noqa: E402
from tunecache.store.keys import WorkloadKey  # noqa: E402
from tunecache.tvm_layer.convert import workload_from_json  # noqa: E402
from tunecache.tvm_layer.measure import make_builder, make_runner  # noqa: E402

db, wids, rounds, out_path = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4]
con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
hw = con.execute("select target from tc_hardware").fetchone()[0]
target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
builder, runner = make_builder(), make_runner()
out = []
for wid in wids:
    name, shash, mj = con.execute("select name, shash, mod_json from tc_workload where id=?", (wid,)).fetchone()
    mod = workload_from_json(WorkloadKey(shash, "x"), mj).mod
    recs = con.execute("select id, latency_s, cv, trace_json from tc_record where workload_id=? and "
                       "latency_s is not null and stale=0 order by latency_s", (wid,)).fetchall()
    t0 = time.time()
    res = measure_side_by_side([(mod, json.loads(t)) for *_, t in recs], target, runner=runner, builder=builder,
                               repeats=3 * rounds, rounds=rounds, number=1)
    out.append({"wid": wid, "name": name, "seconds": time.time() - t0, "records": [
        {"id": rid, "stored_s": lat, "stored_cv": cv,
         "samples": None if isinstance(m, str) else list(m.samples), "error": m if isinstance(m, str) else None}
        for (rid, lat, cv, _), m in zip(recs, res, strict=True)]})
    print(f"{wid} {name}: {len(recs)} records, {time.time() - t0:.0f} s", flush=True)
    with open(out_path, "w") as f:
        json.dump(out, f)
