"""All records of some workloads, measured side by side (cold runner, interleaved rounds):
is the stored best (noisy re-measurement) the true best?"""
import sqlite3, json, sys, statistics, warnings
warnings.simplefilter("ignore")
from tunecache.tvm_layer import load_tvm
tvm = load_tvm("llvm")
from tunecache.tvm_layer.convert import workload_from_json
from tunecache.store.keys import WorkloadKey
from tunecache.search.remeasure import measure_side_by_side
from tunecache.tvm_layer.measure import make_builder, make_runner
db = sys.argv[1]; wids = [int(x) for x in sys.argv[2].split(",")]; rounds = int(sys.argv[3])
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
hw = c.execute("select target from tc_hardware").fetchone()[0]
target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
b, r = make_builder(), make_runner()
for wid in wids:
    name, shash, mj = c.execute("select name, shash, mod_json from tc_workload where id=?", (wid,)).fetchone()
    mod = workload_from_json(WorkloadKey(shash, "x"), mj).mod
    recs = c.execute("select id, latency_s, cv, run_secs_json, trace_json from tc_record where workload_id=? and latency_s is not null and stale=0 order by latency_s", (wid,)).fetchall()
    res = measure_side_by_side([(mod, json.loads(t)) for *_, t in recs], target, runner=r, builder=b, repeats=2 * rounds, rounds=rounds)
    out = []
    for (rid, lat, cv, rs, _), m in zip(recs, res):
        if isinstance(m, str): out.append((rid, lat, cv, None, None, None)); continue
        out.append((rid, lat, cv, m.median_s, min(m.samples), m.cv))
    ok = [o for o in out if o[3]]
    best_true = min(o[3] for o in ok)
    print(f"== {wid} {name} ({len(recs)} records)")
    for i, (rid, lat, cv, med, mn, mcv) in enumerate(out):
        if med is None: print("  ", rid, "failed"); continue
        print(f"  {'*' if i == 0 else ' '} {rid} stored {lat*1e6:7.0f} cv {cv if cv is None else round(cv,2)}  now med {med*1e6:7.0f} ({med/best_true:.3f}x) min {mn*1e6:7.0f} cv {mcv:.2f}", flush=True)
