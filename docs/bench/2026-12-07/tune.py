import sys, time, json, os
sys.path.insert(0, os.environ.get("TOOLS", "/work/main/tools"))
import _engines
_engines.set_threads(2)
import tunecache
spec, store, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, inputs, name = _engines.load(spec)
t0 = time.time()
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=budget, seed=0, progress=False, library_cache=False)
print(json.dumps({"file": tunecache.__file__, "wall": time.time() - t0, "summary": cm.report.summary() if hasattr(cm.report, "summary") else None}))
for t in cm.report.tasks:
    print(f"{t.name[:60]:60s} {t.outcome:8s} {t.trials:4d} {t.latency_s and t.latency_s*1e6 or 0:9.1f}us  {t.note[:200] if t.note else ''}")
