"""Which round-0 sources give BERT 64's FFN the best 12-trial narrowed search?"""
import sqlite3, json, sys, warnings, time
warnings.simplefilter("ignore")
from tunecache.tvm_layer import load_tvm
tvm = load_tvm("llvm")
from tunecache.tvm_layer.convert import workload_from_json
from tunecache.store.keys import WorkloadKey
from tunecache.search.remeasure import measure_side_by_side
from tunecache.search.narrow import narrowed_search
from tunecache.search.predict import predicted_trace
from tunecache.tvm_layer.measure import make_builder, make_runner

tc_db, full_db, alpha_shash = sys.argv[1], sys.argv[2], sys.argv[3]
srcs = dict(a.split("=") for a in sys.argv[4].split(","))   # label=db:shash
seeds = [int(x) for x in sys.argv[5].split(",")]
def conn(p): return sqlite3.connect(f"file:{p}?mode=ro", uri=True)
c = conn(tc_db)
hw = c.execute("select target from tc_hardware").fetchone()[0]
target = tvm.target.Target(json.loads(hw) if hw.startswith("{") else hw)
name, mj = c.execute("select name, mod_json from tc_workload where shash=?", (alpha_shash,)).fetchone()
mod = workload_from_json(WorkloadKey(alpha_shash, "x"), mj).mod
def best(db, shash, k):
    cc = conn(db)
    rows = cc.execute("select r.latency_s, r.trace_json from tc_record r join tc_workload w on r.workload_id=w.id where w.shash=? and r.latency_s is not null and r.stale=0 order by r.latency_s limit ?", (shash, k)).fetchall()
    return [json.loads(t) for _, t in rows], [l for l, _ in rows]
own = predicted_trace(mod, target)
b, r = make_builder(), make_runner()
configs = {}
for label, spec in srcs.items():
    parts = spec.split("+")
    progs = []
    for p in parts:
        db, sh, k = p.split(":")
        tr, lats = best({"tc": tc_db, "full": full_db, "warm": "/tmp/w40.db"}[db], sh, int(k))
        print(label, db, sh, "stored", [round(x*1e6) for x in lats], flush=True)
        progs.append(tr)
    # as search_reuse: first source's best, the prediction, then the rest
    flat = [progs[0][0], own, *progs[0][1:], *[t for g in progs[1:] for t in g]]
    configs[label] = flat
results = []
for label, flat in configs.items():
    for s in seeds:
        t0 = time.time()
        res = narrowed_search(flat, mod, target, builder=b, runner=r, max_trials=12, seed=s, round_size=8 if len(flat) <= 8 else len(flat))
        print(f"{label} seed {s}: best {res.best_latency_s*1e6:.0f} us zero {res.zero_trial_latency_s and res.zero_trial_latency_s*1e6:.0f} src {res.best_source} trials {res.trials} {time.time()-t0:.1f}s hist {[ (h.phase, round((h.best_latency_s or 0)*1e6)) for h in res.history]}", flush=True)
        results.append((label, s, res.best_trace))
ms = measure_side_by_side([(mod, t) for *_, t in results], target, runner=r, builder=b, repeats=20, rounds=10)
best_all = min(m.median_s for m in ms if not isinstance(m, str))
for (label, s, _), m in zip(results, ms):
    print(f"SIDE {label:10s} seed {s}: median {m.median_s*1e6:7.0f} us ({m.median_s/best_all:.3f}x) min {min(m.samples)*1e6:.0f}")
