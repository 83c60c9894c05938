# Ran against make_runner(enable_cpu_cache_flush=...), which session 34 replaced: make_runner(cold=...).
"""tunecache arm of SPEC on copies of the warm store, searched with the default runner and with
TVM's cache flush (every argument but the first: weights and output cold, input warm), then the
two, the replay and FULL_DB's programs timed alternately in one process."""
import sys, shutil, statistics, time, warnings, json
warnings.simplefilter("ignore")
import torch; torch.set_num_threads(2)
import tunecache
from tunecache.models import load_model_spec
import tunecache.search.execute as ex
import tunecache.tvm_layer.measure as me
spec, warm, full_db = sys.argv[1], sys.argv[2], sys.argv[3]
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
real = me.make_runner
cms, info = {}, {}
for arm, flush in (("warm_runner", False), ("flush_runner", True)):
    me.make_runner = lambda flush=flush, **k: real(enable_cpu_cache_flush=flush, **k)
    db = shutil.copy(warm, f"/tmp/exp/fl_{arm}.db")
    t = time.time()
    cms[arm] = tunecache.compile(model, example_inputs=inputs, store=db, trials_per_task=128, seed=0, progress=False, library_cache=False)
    info[arm] = (round(time.time() - t, 1), cms[arm].report.summary())
me.make_runner = real
cms["replay"] = tunecache.compile(model, example_inputs=inputs, store=shutil.copy(warm, "/tmp/exp/fl_replay.db"), tune="never", progress=False, library_cache=False)
cms["full"] = tunecache.compile(model, example_inputs=inputs, store=shutil.copy(full_db, "/tmp/exp/fl_full.db"), tune="never", progress=False, library_cache=False)
names = list(cms); ts = {n: [] for n in names}
for r in range(int(sys.argv[4]) if len(sys.argv) > 4 else 12):
    k = r % len(names)
    for n in names[k:] + names[:k]:
        cms[n](*inputs); t = time.perf_counter(); cms[n](*inputs); cms[n](*inputs); ts[n].append((time.perf_counter() - t) / 2)
print(json.dumps({"info": info, "ms": {n: round(statistics.median(v) * 1e3, 2) for n, v in ts.items()}}))
for n in names: print(n, [round(x * 1e3, 1) for x in ts[n]])
