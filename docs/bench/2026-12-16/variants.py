import sqlite3, json, sys, warnings, os, copy
warnings.simplefilter("ignore")
from tunecache.tvm_layer import load_tvm
tvm = load_tvm("llvm")
from tunecache.tvm_layer.convert import workload_from_json
from tunecache.store.keys import WorkloadKey
from tunecache.search.remeasure import measure_side_by_side
from tunecache.tvm_layer.measure import make_builder, make_runner
db, wid = sys.argv[1], int(sys.argv[2])
variants = json.loads(sys.argv[3])  # list of {idx: decision}
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
hw = c.execute("select target from tc_hardware").fetchone()[0]
target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
if os.environ.get("NT"): target = tvm.target.Target({**target.export(), "num-cores": int(os.environ["NT"])})
name, shash, mj = c.execute("select name, shash, mod_json from tc_workload where id=?", (wid,)).fetchone()
mod = workload_from_json(WorkloadKey(shash, "x"), mj).mod
lat, tj = c.execute("select latency_s, trace_json from tc_record where workload_id=? and latency_s is not null and stale=0 order by latency_s limit 1", (wid,)).fetchone()
tr = json.loads(tj)
progs = [(mod, tr)]
for v in variants:
    t2 = copy.deepcopy(tr)
    d = {i: x for i, x in t2[1]}
    for k, x in v.items(): d[int(k)] = x
    t2[1] = [[i, d[i]] for i, _ in tr[1]]
    progs.append((mod, t2))
if os.environ.get("PRED"):
    from tunecache.search.predict import predicted_trace
    progs.append((mod, predicted_trace(mod, target))); variants.append("PRED")
b, r = make_builder(), make_runner()
rounds = int(os.environ.get("ROUNDS", "8"))
ms = measure_side_by_side(progs, target, runner=r, builder=b, repeats=2 * rounds, rounds=rounds)
for i, m in enumerate(ms):
    if isinstance(m, str): print(i, "FAILED", m[:200]); continue
    print(i, "base" if i == 0 else variants[i-1], f"median {m.median_s*1e6:.0f} us min {min(m.samples)*1e6:.0f}", flush=True)
