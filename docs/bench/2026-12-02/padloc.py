"""Variants of a task's stored program with its pad_temp at each accepted compute location:
timed alone (warm) and right after the model's producer kernel wrote its input (live buffers)."""
import sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import numpy as np
from pathlib import Path
import tvm, tunecache
from tunecache.tvm_layer.frontend import building
from tunecache.tvm_layer.frontend.importing import import_model
from tunecache.tvm_layer.frontend.prepare import prepare_for_tuning
from tunecache.tvm_layer.frontend.tasks import extract_tasks
from tunecache.tvm_layer.target import hardware_key, resolve_target
from tunecache.store.factory import open_store
from tunecache.search.narrow.align import Materializer, Skeleton, open_locations
spec, prev, cur = sys.argv[1], sys.argv[2], sys.argv[3]
store = "/tmp/s25/eng4/warm_32.db"
module, inputs, name = _engines.load(spec)
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=32, seed=0, progress=False, library_cache=Path(store).parent / "libs")
vm = building.make_vm(cm.executable)
live = {}
def instrument(func, symbol, before, ret, *args):
    for p in (prev, cur):
        if before and symbol.startswith(p) and p not in live:
            live[p] = (symbol, list(args))
    return 0
vm.set_instrument(instrument)
building.run(vm, cm.imported, *inputs)
ex = cm.executable
fp = ex.get_function(live[prev][0], query_imports=True)
ap = live[prev][1]
x_live = live[cur][1][0]
target = resolve_target(None)
mod = prepare_for_tuning(import_model(module, inputs))
task = next(t for t in extract_tasks(mod) if t.name.startswith(cur))
st = open_store(store)
rec = st.best_k(task.key, hardware_key(None), 1)[0]
sk = Skeleton(0, rec.trace)
mat = Materializer(task.mod, target, 0)
sites = [i for i, s in sk.sites.items() if s.kind == "compute_location"]
print(task.name, "sites", sites, {i: sk.decisions.get(i) for i in sites})
idx = sites[0]
locs = open_locations(mat, sk, dict(sk.decisions), idx)
print("locations", locs)
fns = {}
for loc in locs:
    cand = mat.materialize(sk, {**sk.decisions, idx: loc})
    if cand is None: print(loc, "no"); continue
    lib = tvm.compile(cand.sch.mod, target=target)
    fns[loc] = lib["main"]

shapes = [list(s) for s in task.desc.shapes]
rng = np.random.default_rng(0)
args = [tvm.runtime.tensor(rng.standard_normal(s).astype("float32") + (3 if i in (2,) else 0)) for i, s in enumerate(shapes)]
print("shapes", shapes, "live x", x_live.shape)
args_live = [x_live] + args[1:]
def t(f, a):
    t0 = time.perf_counter(); f(*a); return (time.perf_counter() - t0) * 1e3
res = {k: {"alone": [], "after": []} for k in fns}
for rnd in range(6):
    for loc, f in (list(fns.items()) if rnd % 2 == 0 else list(fns.items())[::-1]):
        for _ in range(3): f(*args_live)
        res[loc]["alone"].extend(t(f, args_live) for _ in range(15))
        for _ in range(15):
            fp(*ap); res[loc]["after"].append(t(f, args_live))
for loc, r in res.items():
    a = sorted(r["alone"]); b = sorted(r["after"])
    print(f"loc {loc:3d}{' (stored)' if loc == sk.decisions.get(idx) else '':9s} alone p50 {a[len(a)//2]:.3f} min {a[0]:.3f} | after-producer p50 {b[len(b)//2]:.3f} min {b[0]:.3f}")
