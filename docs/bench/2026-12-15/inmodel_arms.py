"""VGG-16 (or any zoo spec): each kernel's time inside the model for two or more compiled arms,
alternating runs in one process (VM instrument hook), plus each kernel alone on the args it got.
Usage: inmodel_arms.py SPEC ROUNDS ARM=STORE_OR_topk:WARM ..."""
import sys, time, shutil, statistics as st, json
sys.path.insert(0, "/work/main/tools")
from pathlib import Path
import bench_newmodel as bn
from tunecache.models import load_model_spec
from tunecache.tvm_layer.frontend import building
import tvm
spec, rounds = sys.argv[1], int(sys.argv[2])
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
arms = {}
for a in sys.argv[3:]:
    name, path = a.split("=", 1)
    if path.startswith("topk:"):
        cm, info = bn.topk_arm(model, inputs, bn.sqlite_copy(Path(path[5:]), Path(f"/tmp/s39/im/{name}.db")))
    else:
        cm, info = bn.compile_arm(model, inputs, bn.sqlite_copy(Path(path), Path(f"/tmp/s39/im/{name}.db")),
                                  tune="never", budget=128, seed=0, progress=False)
    print(name, cm.report.summary(), file=sys.stderr, flush=True)
    arms[name] = cm
state = {}
def make(name, cm):
    vm = building.make_vm(cm.executable)
    spent, started = {}, []
    def instrument(func, symbol, before, ret, *args):
        if before: started.append(time.perf_counter())
        else: spent.setdefault(symbol, []).append((time.perf_counter() - started.pop()) * 1e3)
        return 0
    vm.set_instrument(instrument)
    building.run(vm, cm.imported, *inputs)
    return vm, spent
vms = {n: make(n, cm) for n, cm in arms.items()}
per = {n: {} for n in arms}; e2e = {n: [] for n in arms}
for r in range(rounds):
    for n, (vm, spent) in (list(vms.items()) if r % 2 == 0 else list(vms.items())[::-1]):
        spent.clear(); t0 = time.perf_counter(); building.run(vm, arms[n].imported, *inputs)
        e2e[n].append((time.perf_counter() - t0) * 1e3)
        for s, v in spent.items():
            if not s.startswith("vm."): per[n].setdefault(s, []).append(sum(v))
names = list(arms)
syms = sorted(set().union(*[per[n].keys() for n in names]), key=lambda s: -st.median(per[names[0]].get(s, [0])))
print(f"{'kernel':44s}", "  ".join(f"{n:>9s}" for n in names))
for s in syms:
    print(f"{s[:44]:44s}", "  ".join(f"{st.median(per[n][s]):9.3f}" if s in per[n] else "        -" for n in names))
print("sum kernels", {n: round(sum(st.median(v) for v in per[n].values()), 2) for n in names})
print("e2e median ", {n: round(st.median(e2e[n]), 2) for n in names})
print("e2e min    ", {n: round(min(e2e[n]), 2) for n in names})
json.dump({"per": per, "e2e": e2e}, open(f"/tmp/s39/im/{spec.replace(':','_')}.json", "w"))
