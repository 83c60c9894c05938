"""Session 29: each kernel's total time inside the model (all its calls, VM instrument) for several
arms of one bench_newmodel run, side by side in one process, alternating rounds; plus end to end
without the instrument (which costs ~40 us a call: compare arms, not absolute small-kernel times),
the minor page faults of an end-to-end run, and a 64 MB copy's bandwidth each round (how much of
the memory system the VM's neighbours leave).

    python inmodel_arms.py bert_base:seq_len=64 full=WORK/..-full.db tunecache=WORK/..-tunecache.db \
        predicted=WORK/..-predicted.db
Every arm compiles with tune="never" on (a copy of) its store: the searched arms are all hits.
"""
import resource, shutil, statistics as st, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import _engines
_engines.set_threads(2)
import tunecache
from tunecache.models import load_model_spec
from tunecache.tvm_layer.frontend import building

spec = sys.argv[1]
model, inputs, _ = load_model_spec(spec)
inputs = tuple(inputs)
tmp = Path(tempfile.mkdtemp())
arms = {}
for a in sys.argv[2:]:
    name, path = a.split("=", 1)
    db = tmp / f"{name}.db"; shutil.copy(path, db)
    cm = tunecache.compile(model, example_inputs=inputs, store=str(db), tune="never", progress=False, library_cache=False)
    print(name, cm.report.summary(), file=sys.stderr)
    arms[name] = (cm, building.make_vm(cm.executable))
spent = {}
started = []
def instrument(func, symbol, before, ret, *args):
    if before:
        started.append(time.perf_counter())
    else:
        spent[symbol] = spent.get(symbol, 0.0) + (time.perf_counter() - started.pop()) * 1e3
    return 0
import numpy as np
src, dst = np.ones(16 << 20, dtype="float32"), np.empty(16 << 20, dtype="float32")
probe = []  # a 64 MB copy each round: GB/s of memory bandwidth left to this VM
per = {n: {} for n in arms}
e2e = {n: [] for n in arms}
faults = {n: [] for n in arms}
for rnd in range(8):
    order = list(arms) if rnd % 2 == 0 else list(reversed(arms))
    t0 = time.perf_counter(); np.copyto(dst, src); probe.append(2 * src.nbytes / (time.perf_counter() - t0) / 1e9)
    for n in order:
        cm, vm = arms[n]
        vm.set_instrument(None) if hasattr(vm, "set_instrument") else None
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter(); building.run(vm, cm.imported, *inputs); e2e[n].append((time.perf_counter() - t0) * 1e3)
        faults[n].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        vm.set_instrument(instrument); spent.clear()
        building.run(vm, cm.imported, *inputs)
        for s, v in spent.items():
            per[n].setdefault(s, []).append(v)
        vm.set_instrument(None)
names = list(arms)
syms = sorted({s for n in names for s in per[n] if not s.startswith("vm.")}, key=lambda s: -st.median(per[names[0]].get(s, [0])))
print("kernel".ljust(58), *[n.rjust(10) for n in names])
for s in syms:
    print(s[:58].ljust(58), *[f"{st.median(per[n][s]):10.3f}" if s in per[n] else " " * 10 for n in names])
print("sum".ljust(58), *[f"{sum(st.median(v) for s, v in per[n].items() if not s.startswith('vm.')):10.3f}" for n in names])
print("e2e median".ljust(58), *[f"{st.median(e2e[n]):10.3f}" for n in names])
print("minor faults a run".ljust(58), *[f"{st.median(faults[n]):10.0f}" for n in names])
print("per round: copy GB/s, then e2e ms of", names)
for r in range(len(probe)):
    print(f"  {probe[r]:6.1f}", *[f"{e2e[n][r]:8.2f}" for n in names])
