"""BERT (2 layers) at 256 tokens, tune="never" from BERT-128's store: replay with and without the recompute check."""
import statistics, sys, time, json, sqlite3
import torch
import tunecache, tunecache.replay as R
from tunecache.models import load_model_spec
from tunecache.tvm_layer import scheduled
db = sys.argv[1]; spec = sys.argv[2]
model, inputs, _ = load_model_spec(spec)
arms = {}
for name, thr in (("check", 1.10), ("no_check", 1e9)):
    R.RECOMPUTE_GROWTH = thr
    scheduled.clear()
    t0 = time.time()
    cm = tunecache.compile(model, example_inputs=inputs, store=db, tune="never", progress=False, library_cache=False)
    arms[name] = (cm, time.time() - t0)
    sm = [t for t in cm.report.tasks if "softmax" in t.name]
    print(name, "compile %.1fs" % (time.time() - t0), [t.note[-120:] for t in sm], file=sys.stderr)
with torch.no_grad():
    ref = model(*inputs)
for cm, _ in arms.values():
    for _ in range(3): cm(*inputs)
rounds = {k: [] for k in arms}
for r in range(7):
    for k in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
        xs = []
        for _ in range(5):
            t = time.perf_counter(); arms[k][0](*inputs); xs.append(time.perf_counter() - t)
        rounds[k].append(statistics.median(xs))
out = {k: {"latency_ms": round(statistics.median(v) * 1e3, 2), "rounds_ms": [round(x * 1e3, 2) for x in v],
           "compile_s": round(arms[k][1], 1)} for k, v in rounds.items()}
print(json.dumps({"model": spec, "store": db, "arms": out}, indent=1))
