"""Time a consumer kernel right after its producer wrote its input (both stored programs, alone)."""
import sys, time, statistics as st
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import numpy as np, tvm
from tunecache.tvm_layer import frontend as fe
from tunecache.tvm_layer.target import hardware_key, resolve_target
from tunecache.store import open_store
from tunecache.search.predict import predict_program
from tunecache.search.narrow.replay import as_ir_module
from tunecache.tvm_layer.convert import record_to_tvm
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
spec, store, prod_pat, cons_pat = sys.argv[1:5]
module, inputs, name = _engines.load(spec)
t = resolve_target(None)
tasks = fe.extract_tasks(fe.prepare_for_tuning(fe.import_model(module, inputs), t), t)
S = open_store(store); hw = hardware_key(t); dev = tvm.cpu()
def task(p): return [x for x in tasks if p in x.name][0]
def build(m):
    f = tvm.compile(m, target=t)["main"]
    bufs = [a.as_json() for a in ArgInfo.from_entry_func(m, remove_preproc=False)]
    return f, [tvm.runtime.tensor(np.random.rand(*[int(d) for d in b[2]]).astype(b[1]), dev) for b in bufs]
def sched(mod, rec):
    sch = tvm.s_tir.Schedule(mod)
    record_to_tvm(rec, ms.database.Workload(mod), t).trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod
P = task(prod_pat); C = task(cons_pat)
pm = as_ir_module(P.mod); cm = as_ir_module(C.mod)
pf, pargs = build(sched(pm, S.best_k(P.key, hw, 1)[0]))
variants = {}
for i, rec in enumerate(S.best_k(C.key, hw, 3)):
    variants[f"rec{i}:{rec.latency_s*1e6:.0f}us"] = build(sched(cm, rec))
variants["predicted"] = build(predict_program(cm, t).sch.mod)
for k, (f, a) in variants.items():
    a[0] = pargs[-1]  # the consumer reads what the producer writes
res = {k: {"warm": [], "after_producer": []} for k in variants}
for r in range(30):
    for k, (f, a) in variants.items():
        f(*a)
        t0 = time.perf_counter(); f(*a); res[k]["warm"].append((time.perf_counter() - t0) * 1e3)
        pf(*pargs)
        t0 = time.perf_counter(); f(*a); res[k]["after_producer"].append((time.perf_counter() - t0) * 1e3)
t0 = time.perf_counter(); [pf(*pargs) for _ in range(50)]; print("producer", (time.perf_counter() - t0) / 50 * 1e3)
for k, v in res.items():
    print(f"  {k:22s} warm {st.median(v['warm']):.4f}  after producer {st.median(v['after_producer']):.4f}")
