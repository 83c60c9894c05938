"""One task's best program from two stores, side by side with the cold runner (many rounds)."""
import json, sqlite3, sys, statistics, warnings
warnings.simplefilter("ignore")
import tvm
from tunecache.tvm_layer.convert import workload_from_json
from tunecache.store.keys import WorkloadKey
from tunecache.search.narrow.replay import replay_on
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
name, dbs = sys.argv[1], sys.argv[2:]
mods = []
for db in dbs:
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    wid, mod_json, shash = c.execute("select id, mod_json, shash from tc_workload where name=?", (name,)).fetchone()
    tr, = c.execute("select trace_json from tc_record where workload_id=? and latency_s is not null order by latency_s limit 1", (wid,)).fetchone()
    hw = c.execute("select target from tc_hardware").fetchone()[0]
    target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
    mod = workload_from_json(WorkloadKey(shash, "x"), mod_json).mod
    mods.append(replay_on(json.loads(tr), mod, target).mod)
b, r = make_builder(), make_runner()
for rep in range(3):
    ms = measure_mods(mods, target, builder=b, runner=r, rounds=15)
    print(" | ".join(f"{db}: p50 {statistics.median(m.run_secs)*1e6:.0f} min {min(m.run_secs)*1e6:.0f}" for db, m in zip(dbs, ms)))
