import sys, time, json
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import tunecache
spec, store, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, inputs, name = _engines.load(spec)
t0 = time.time()
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=budget, seed=1, progress=True, library_cache=False, tune="always")
print(json.dumps({"wall": time.time() - t0, "summary": cm.report.summary()}))
print(cm.report)
