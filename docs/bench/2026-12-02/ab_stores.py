"""Same model compiled from several stores (all hits), timed alternating in one process; per-kernel p50 side by side."""
import os, sys, time, statistics as st
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import warnings; warnings.simplefilter("ignore")
import torch
from pathlib import Path
import tunecache
from tunecache.tvm_layer.frontend import building
import tvm
spec = sys.argv[1]; stores = sys.argv[2:]
module, inputs, name = _engines.load(spec)
tin = [tvm.runtime.tensor(x.numpy()) for x in inputs]
arms = {}
for s in stores:
    cm = tunecache.compile(module, example_inputs=inputs, store=s, trials_per_task=32, seed=0, progress=False, library_cache=Path(s).parent / "libs", tune="never" if False else "auto")
    print(s, cm.report.summary(), file=sys.stderr)
    arms[s] = cm
vms = {s: building.make_vm(cm.executable) for s, cm in arms.items()}
ivms = {s: building.make_vm(cm.executable) for s, cm in arms.items()}
seqs = {s: [] for s in arms}
def mk(s):
    started = []; cur = []
    def instrument(func, symbol, before, ret, *args):
        if symbol.startswith("vm."): return 0
        if before: started.append(time.perf_counter())
        else: cur.append((symbol, (time.perf_counter() - started.pop()) * 1e3))
        return 0
    return instrument, cur
curs = {}
for s, vm in ivms.items():
    ins, cur = mk(s); vm.set_instrument(ins); curs[s] = cur
E = {s: [] for s in arms}; K = {s: {} for s in arms}
for r in range(int(os.environ.get("ROUNDS", "10"))):
    order = list(arms) if r % 2 == 0 else list(arms)[::-1]
    for s in order:
        m = vms[s]["main"]
        for _ in range(2): m(*tin)
        for _ in range(5):
            t0 = time.perf_counter(); m(*tin); E[s].append((time.perf_counter() - t0) * 1e3)
        mi = ivms[s]["main"]
        for _ in range(3):
            curs[s].clear(); mi(*tin)
            agg = {}
            for sym, ms in curs[s]: agg[sym] = agg.get(sym, 0) + ms
            for sym, ms in agg.items(): K[s].setdefault(sym, []).append(ms)
for s in arms:
    v = sorted(E[s]); print(f"{s}: e2e min {v[0]:.3f} p50 {v[len(v)//2]:.3f}  kernel-sum {sum(st.median(x) for x in K[s].values()):.3f}")
syms = sorted(set().union(*[K[s] for s in arms]), key=lambda y: -max(st.median(K[s].get(y, [0])) for s in arms))
for y in syms[:40]:
    print(f"{y[:44]:44s} " + " ".join(f"{st.median(K[s][y]) if y in K[s] else float('nan'):8.3f}" for s in arms))
