# Ran against make_runner(enable_cpu_cache_flush=...), which session 34 replaced: make_runner(cold=...).
"""ResNet-18 tuned at B trials a task: runner as shipped vs cache flushed before each run only for
large candidates (their data read from memory in the model).

``python flush_resnet18.py B args``: flush where all arguments together exceed 1 MiB (L2);
``python flush_resnet18.py B weights``: flush where the largest argument exceeds 4 MiB."""
import sys, time, json, math, numpy as np, torch
import tunecache
from tunecache import zoo
from tunecache.tvm_layer import load_tvm
import tunecache.tvm_layer.measure as measure
import tunecache.search.execute as execute
import tunecache.search.full.tune as ftune
import tunecache.search.remeasure as remeasure
tvm = load_tvm()
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner
B = int(sys.argv[1]) if len(sys.argv) > 1 else 32
MODE = sys.argv[2] if len(sys.argv) > 2 else "args"
LIMIT = (1 << 20) if MODE == "args" else (4 << 20)
orig = measure.make_runner
stats = {"flushed": 0, "warm": 0}

def nbytes(inp):
    sizes = [math.prod(int(d) for d in a.shape) * 4 for a in inp.args_info]
    return sum(sizes) if MODE == "args" else max(sizes)

class Pools:
    def __init__(self, *ps): self.ps = ps
    def shutdown(self, wait=True):
        for p in self.ps: p.shutdown(wait=wait)

@derived_object
class Split(PyRunner):
    def __init__(self, warm, cold):
        super().__init__()
        self.warm, self.cold = warm, cold
        self.pool = Pools(warm.pool, cold.pool)
    def run(self, inputs):
        inputs = list(inputs)
        big = [i for i, x in enumerate(inputs) if nbytes(x) > LIMIT]
        small = [i for i in range(len(inputs)) if i not in set(big)]
        out = [None] * len(inputs)
        for idx, r in ((small, self.warm), (big, self.cold)):
            if idx:
                for i, f in zip(idx, r.run([inputs[i] for i in idx])): out[i] = f
        stats["flushed"] += len(big); stats["warm"] += len(small)
        return out

def split(**kw):
    warm = orig(**kw)
    ck = dict(kw)
    if ck.get("number", 3) == 3 and ck.get("repeat", 1) == 1:
        ck.update(number=1, repeat=3)
    elif ck.get("number", 3) == 3:
        ck.update(number=1)
    ck["enable_cpu_cache_flush"] = True
    return Split(warm, orig(**ck))

torch.set_num_threads(2)
zm = zoo.get("resnet18")
ref = zm.module(*zm.example_inputs)
arms = {}
for arm, seed in [("warm", 0), ("flush-large", 0), ("warm", 1), ("flush-large", 1)]:
    f = split if arm == "flush-large" else orig
    for mod in (measure, execute, ftune, remeasure):
        if hasattr(mod, "make_runner"):
            mod.make_runner = f
    t0 = time.time()
    cm = tunecache.compile(zm.module, example_inputs=zm.example_inputs, tune="auto", trials_per_task=B,
                           store=f"/tmp/s18/fl_{MODE}_{arm}_{seed}_{B}.db", progress=False, seed=seed, library_cache=False)
    r = cm.report
    arms[f"{arm}/{seed}"] = cm
    print(arm, seed, "s", round(time.time() - t0, 1), "err", float((cm(*zm.example_inputs) - ref).abs().max()),
          "trials", sum(t.trials for t in r.tasks), "stored ms", round(sum((t.latency_s or 0) * t.weight for t in r.tasks) * 1e3, 2), stats, flush=True)
res = {}
for rnd in range(9):
    keys = list(arms) if rnd % 2 == 0 else list(arms)[::-1]
    for key in keys:
        cm = arms[key]; xs = zm.example_inputs
        time.sleep(0.2); cm(*xs)
        t0 = time.perf_counter()
        for _ in range(5):
            cm(*xs)
        res.setdefault(key, []).append((time.perf_counter() - t0) / 5 * 1e3)
print(json.dumps({k: round(float(np.median(v)), 3) for k, v in res.items()}))
