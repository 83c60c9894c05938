"""In one process: each kernel's time inside the model (VM instrument) vs the same kernel alone
(time_evaluator on the args it got in the model), alternating; plus e2e."""
import os, sys, time, json, statistics as st
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import numpy as np, torch
from pathlib import Path
import tunecache
from tunecache.tvm_layer.frontend import building
import tvm

spec = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
store = sys.argv[2] if len(sys.argv) > 2 else "/tmp/s25/eng4/warm_32.db"
module, inputs, name = _engines.load(spec)
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=32, seed=0,
                       progress=False, library_cache=Path(store).parent / "libs")
print(cm.report.summary(), file=sys.stderr)
vm = building.make_vm(cm.executable)
captured = {}
spent = {}
started = []
mode = ["capture"]
def instrument(func, symbol, before, ret, *args):
    if before:
        if mode[0] == "capture" and symbol not in captured and not symbol.startswith("vm."):
            captured[symbol] = [tvm.runtime.tensor(a.numpy()) if hasattr(a, "numpy") else a for a in args]
        started.append(time.perf_counter())
    else:
        spent.setdefault(symbol, []).append((time.perf_counter() - started.pop()) * 1e3)
    return 0
vm.set_instrument(instrument)
building.run(vm, cm.imported, *inputs)
mode[0] = "time"
ex = cm.executable
lib = ex.mod if hasattr(ex, "mod") else ex
def _mods(m):
    yield m
    for sub in list(getattr(m, "imports", None) or getattr(m, "imported_modules", [])):
        yield from _mods(sub)
def _find(name):  # the (sub)module that exports kernel ``name`` (tunecache links kernels in several)
    for sub in _mods(lib):
        try:
            if sub.implements_function(name): return sub
        except Exception: pass
    return lib
dev = tvm.cpu()
kern = [s for s in captured]
owner = {s: _find(s) for s in kern}  # looked up once, not every round
alone = {s: [] for s in kern}
inmodel = {s: [] for s in kern}
e2e = []
for rnd in range(6):
    spent.clear()
    t0 = time.perf_counter(); building.run(vm, cm.imported, *inputs); e2e.append((time.perf_counter()-t0)*1e3)
    for s in kern:
        if s in spent: inmodel[s].append(spent[s][0])  # first call of the symbol
    for s in kern:
        try:  # a kernel the library does not export by name (BERT's fused_cast_reshape): in-model only
            f = owner[s].time_evaluator(s, dev, number=1, repeat=5)
        except Exception:
            continue
        r = f(*captured[s])
        alone[s].extend(x * 1e3 for x in r.results)
rows = []
for s in kern:
    if not inmodel[s] or not alone[s]: continue
    rows.append((s[:60], round(st.median(inmodel[s]), 3), round(st.median(alone[s]), 3), round(min(alone[s]), 3)))
rows.sort(key=lambda r: -r[1])
for r in rows: print(*r, round(r[1]/r[2], 2))
print("sum inmodel", round(sum(r[1] for r in rows), 2), "sum alone median", round(sum(r[2] for r in rows), 2), "e2e median", round(st.median(e2e), 2))
