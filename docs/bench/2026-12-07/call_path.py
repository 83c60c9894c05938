import sys, time, statistics as st
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import numpy as np, torch, tunecache, tvm
spec, store = sys.argv[1], sys.argv[2]
module, inputs, name = _engines.load(spec)
cm = tunecache.compile(module, example_inputs=inputs, store=store, tune="never", progress=False)
cm(*inputs)
main = cm._vm["main"]
tin = [tvm.runtime.from_dlpack(inputs[0].contiguous())]
Tensor = tvm.runtime.Tensor
def fast():
    xs = [tvm.runtime.from_dlpack(x) for x in inputs]
    r = main(*xs)
    if isinstance(r, Tensor):
        return torch.from_numpy(np.from_dlpack(r).copy())
    out = tuple(torch.from_numpy(np.from_dlpack(t).copy()) for t in r)
    return out[0] if len(out) == 1 else out
def fast_torch():
    xs = [tvm.runtime.from_dlpack(x) for x in inputs]
    r = main(*xs)
    out = tuple(torch.from_dlpack(t).clone() for t in r)
    return out[0] if len(out) == 1 else out
ref = cm(*inputs)
assert torch.equal(fast(), ref)
from tunecache.tvm_layer.frontend import building
arms = {"raw": lambda: main(*tin), "new": lambda: cm(*inputs), "old_run": lambda: building.run(cm._vm, cm.imported, *inputs)}
res = {k: [] for k in arms}
with torch.no_grad():
  for r in range(300):
    ks = list(arms); ks = ks[r % len(ks):] + ks[:r % len(ks)]
    for k in ks:
        t0 = time.perf_counter(); arms[k](); res[k].append(time.perf_counter() - t0)
for k, v in res.items(): print(f"{k:12s} median {st.median(v)*1e3:.4f} ms min {min(v)*1e3:.4f}")
