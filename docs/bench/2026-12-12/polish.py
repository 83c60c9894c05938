"""Narrowed search from a task's own best stored program (a self-polish), then side by side with it."""
import os, sys, statistics, warnings, time
warnings.simplefilter("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stored import stored  # noqa: E402
from tunecache.search.narrow import narrowed_search
from tunecache.search.narrow.replay import replay_on
from tunecache.tvm_layer.measure import make_builder, make_runner, measure_mods
db, name, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
mod, target, recs, _ = stored(db, name, 2)
b, r = make_builder(), make_runner()
t0 = time.time()
res = narrowed_search(recs, mod, target, builder=b, runner=r, max_trials=trials, seed=0)
print("search", round(time.time() - t0, 1), "s", res.trials, "trials; rounds:",
      [(h.phase, round(h.best_latency_s * 1e6)) for h in res.history])
best = res.best_trace if hasattr(res, "best_trace") else None
print([k for k in dir(res) if not k.startswith("_")])
from tunecache.search.narrow.align import Skeleton
print("stored", Skeleton(0, recs[0]).decisions)
bt = res.best_trace.as_json() if hasattr(res.best_trace, "as_json") else res.best_trace
print("found ", Skeleton(0, bt).decisions)
mods = [replay_on(recs[0], mod, target).mod, replay_on(bt, mod, target).mod]
for rep in range(2):
    ms = measure_mods(mods, target, builder=b, runner=r, rounds=15)
    print("stored p50 %.1f min %.1f | polished p50 %.1f min %.1f" % tuple(x for m in ms for x in (statistics.median(m.run_secs) * 1e6, min(m.run_secs) * 1e6)))
