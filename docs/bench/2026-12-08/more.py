"""Search a zoo model's largest tasks further (one task-scheduler run, the store's records seed
it), up to FULL records a task and MAX_TOTAL trials in all: what a larger warm budget buys."""
import sys, time, json
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
from tunecache.warming import collect_model_tasks
from tunecache.tvm_layer.target import resolve_target, hardware_key
from tunecache.store import open_store
from tunecache.search.execute import NodeSpec, search_context, search_full
spec, db, full, max_total, min_share = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
tgt = resolve_target(None); hw = hardware_key(tgt); st = open_store(db)
tasks = collect_model_tasks([spec], tgt)
cost = {t.key: t.weight * st.best_k(t.key, hw, 1)[0].latency_s for t in tasks if st.best_k(t.key, hw, 1)}
total = sum(cost.values())
big = [t for t in tasks if cost.get(t.key, 0) >= min_share * total]
print(len(big), "tasks:", [(t.name[:30], round(cost[t.key] / total, 3)) for t in big], flush=True)
specs = [NodeSpec(t.name, t.name, t.key, t.mod, float(t.weight)) for t in big]
t0 = time.time()
with search_context(tgt, st, hw, full_trials=full, reuse_trials=12, seed=1) as ctx:
    outs = search_full(specs, ctx, note="more trials", max_total=max_total)
print(json.dumps({"wall_s": time.time() - t0, "trials": sum(o.trials for o in outs),
                  "tasks": [(o.name[:40], o.trials, o.latency_s) for o in outs]}, indent=1))
