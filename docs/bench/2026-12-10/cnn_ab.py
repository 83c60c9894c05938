"""Full search of SPEC at B trials a task on fresh stores, timed warm (3 runs averaged) and cold
(flushed, 3 single runs), for each seed; then every arm's programs timed alternately in one process."""
import os, sys, tempfile
from pathlib import Path
import warnings, time, json
warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
WORK = os.environ.get("WORK", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import tunecache
import tunecache.tvm_layer.measure as me
from tunecache.models import load_model_spec
from bench_newmodel import measure_latency
spec, budget, seeds, rounds = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
real = me.make_runner
cms, info = {}, {}
for seed in seeds:
    for cold in (True, False):
        me.make_runner = lambda cold=cold, **k: real(**{**k, "cold": cold})
        db = f"{WORK}/cnn_{spec}_{seed}_{cold}.db"
        if os.path.exists(db): os.remove(db)
        t = time.time()
        cm = tunecache.compile(model, example_inputs=inputs, store="sqlite:///" + db, trials_per_task=budget, seed=seed, progress=False, library_cache=False)
        arm = f"{'cold' if cold else 'warm'}_s{seed}"
        cms[arm] = cm
        info[arm] = {"wall": round(time.time() - t, 1), "trials": cm.report.trials}
        print(arm, info[arm], flush=True)
me.make_runner = real
lat = measure_latency(cms, inputs, rounds)
print(json.dumps({"spec": spec, "budget": budget, "info": info, "ms": {n: round(v["latency_s"] * 1e3, 3) for n, v in lat.items()}}))
