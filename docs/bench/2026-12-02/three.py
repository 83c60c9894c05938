import sys, os, statistics, warnings
warnings.simplefilter("ignore")
from tunecache.models import load_model_spec
from tunecache.tvm_layer import frontend
from tunecache.tvm_layer.target import resolve_target, hardware_key
from tunecache.search.predict import predicted_trace
from tunecache.search.remeasure import measure_side_by_side
from tunecache.tvm_layer.measure import make_builder, make_runner
from tunecache.store.factory import open_store
from tunecache.store.records import decode_trace
model, inputs, name = load_model_spec(sys.argv[1])
stores = sys.argv[3:]
pat = sys.argv[2].split(",")
target = resolve_target(None); hw = hardware_key(None)
mod = frontend.prepare_for_tuning(frontend.import_model(model, tuple(inputs)), target)
tasks = frontend.extract_tasks(mod, target)
b = make_builder(); r = make_runner()
sts = [open_store(s) for s in stores]
tot = [0.0] * (1 + len(stores))
for t in tasks:
    if not any(p in t.name for p in pat): continue
    trs = [predicted_trace(t.mod, target)] + [decode_trace(s.best_k(t.key, hw, 1)[0].trace) for s in sts]
    got = measure_side_by_side([(t.mod, tr) for tr in trs], target, runner=r, builder=b, rounds=int(os.environ.get("ROUNDS", "6")))
    med = [statistics.median(g.samples) * 1e3 if not isinstance(g, str) else float("nan") for g in got]
    for i, m in enumerate(med): tot[i] += m * t.weight
    print(f"{t.name[:40]:40s} w{t.weight} {[list(s) for s in t.desc.shapes][:2]} pred/stores: " + " ".join(f"{m:.3f}" for m in med), flush=True)
print("weighted", [round(x, 3) for x in tot])
