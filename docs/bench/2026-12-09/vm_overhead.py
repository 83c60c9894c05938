import sys, time, statistics, warnings
warnings.simplefilter("ignore")
import torch
import tunecache
from tunecache import zoo
torch.set_num_threads(2)
name = sys.argv[1]; store = sys.argv[2]
zm = zoo.get(name)
mod, inputs = zm.module, zm.example_inputs
cm = tunecache.compile(mod, example_inputs=inputs, store=store, tune="never", progress=False, library_cache=False)
import tvm
from tvm import relax
for _ in range(5): cm(*inputs)
vm = relax.VirtualMachine(cm.executable, tvm.cpu())
x = tvm.runtime.tensor(inputs[0].numpy())
calls = []
def instrument(func, symbol, before, ret, *args):
    if before: calls.append((func, symbol, args))
    return 0
vm.set_instrument(instrument)
vm["main"](x)
vm.set_instrument(None) if False else None
vm2 = relax.VirtualMachine(cm.executable, tvm.cpu())
print("n calls", len(calls), sorted({s for _, s, _ in calls if not s.startswith("fused") and "conv" not in s})[:20])
def seq():
    for f, s, a in calls: f(*a)
def e2e(): vm2["main"](x)
def cmcall(): cm(*inputs)
for f in (seq, e2e, cmcall): f(); f()
res = {k: [] for k in ("seq", "e2e", "cm")}
for r in range(30):
    for k, f in (("seq", seq), ("e2e", e2e), ("cm", cmcall)):
        t = time.perf_counter(); f(); res[k].append(time.perf_counter() - t)
for k, v in res.items(): print(k, "median ms", round(statistics.median(v)*1e3, 3), "min", round(min(v)*1e3, 3))
# empty python loop overhead
def py():
    for f, s, a in calls: pass
t=time.perf_counter(); py(); print("py loop us", (time.perf_counter()-t)*1e6)
