"""Session 43 (#21): the predicted program with and without FEW_ROWS_PANEL_L1 against a store's
best, side by side, for each task of a zoo model whose prediction the rule changes.

    ROUNDS=10 python docs/bench/2026-12-19/pred_vs_store.py MODEL STORE

Each changed task's three programs (the store's best record for this machine's hardware key,
the prediction with the rule off, with it on) are timed in the same interleaved rounds on the
runner (2 threads here); prints one line a task (fastest sample and median, ms) and the
weight-weighted sums. Tasks the store has no record of get the two predictions only.
"""
import os
import statistics
import sys

import tunecache.search.predict as P
from tunecache.models import load_model_spec
from tunecache.search.remeasure import measure_side_by_side
from tunecache.store import open_store
from tunecache.tvm_layer import frontend
from tunecache.tvm_layer.convert import workload_of
from tunecache.tvm_layer.measure import make_builder, make_runner
from tunecache.tvm_layer.target import hardware_key, resolve_target

model, inputs, _ = load_model_spec(sys.argv[1])
store = open_store(sys.argv[2])
target = resolve_target(None)
hw = hardware_key(target)
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
tasks = frontend.extract_tasks(mod, target)
shipped = P.FEW_ROWS_PANEL_L1
b, r = make_builder(), make_runner()
arms = ("stored", "rule off", "rule on")
tot = {a: [0.0, 0.0] for a in arms}
for t in tasks:
    traces = {}
    for arm, share in (("rule off", 0.0), ("rule on", shipped)):
        P.FEW_ROWS_PANEL_L1 = share
        traces[arm] = P.predicted_trace(t.mod, target)
    P.FEW_ROWS_PANEL_L1 = shipped
    if traces["rule off"] == traces["rule on"]:
        continue
    key = workload_of(t.mod)[0]
    best = store.best_k(key, hw, 1)
    if best:
        traces["stored"] = best[0].trace
    names = [a for a in arms if a in traces]
    got = measure_side_by_side([(t.mod, traces[a]) for a in names], target, runner=r, builder=b,
                               rounds=int(os.environ.get("ROUNDS", "10")))
    line = []
    for a, g in zip(names, got, strict=True):
        if isinstance(g, str):
            line.append(f"{a} failed: {g[:80]}")
            continue
        lo, med = min(g.samples) * 1e3, statistics.median(g.samples) * 1e3
        if "stored" in traces:
            tot[a][0] += lo * t.weight
            tot[a][1] += med * t.weight
        line.append(f"{a} {lo:.3f} (med {med:.3f})")
    print(f"{t.name[:48]:48s} w{t.weight} " + "; ".join(line), flush=True)
print("weighted sums over tasks with a stored record, (min, median) ms:",
      {a: [round(x, 3) for x in v] for a, v in tot.items()})
