"""tunecache arm of SPEC on copies of WARM, searched with the shipped runner (3 warm runs averaged)
and with a cold runner (weights and output flushed before each of 3 runs, median), then both,
the replay and FULL's programs timed alternately in one process (bench_newmodel.measure_latency)."""
import os, sys, tempfile
from pathlib import Path
import shutil, statistics, time, warnings, json
warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
WORK = os.environ.get("WORK", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import tunecache
from tunecache.models import load_model_spec
import tunecache.tvm_layer.measure as me
from bench_newmodel import measure_latency
spec, warm, full_db, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
real = me.make_runner
cms, info = {}, {}
configs = {"warm_runner": {"cold": False}, "cold_runner": {"cold": True}}  # first run before 40cb4a3, as EvaluatorConfig(number=3) and (flush, number=1, repeat=3)
for arm in sys.argv[5].split(",") if len(sys.argv) > 5 else configs:
    cfg = configs[arm]
    me.make_runner = lambda cfg=cfg, **k: real(**{**k, **cfg})
    db = shutil.copy(warm, f"{WORK}/{spec}_{arm}.db")
    t = time.time()
    cms[arm] = tunecache.compile(model, example_inputs=inputs, store=db, trials_per_task=128, seed=0, progress=False, library_cache=False)
    r = cms[arm].report
    info[arm] = {"wall": round(time.time() - t, 1), "tuning": round(r.seconds_tuning, 1), "trials": r.trials, "summary": r.summary()}
    print(arm, info[arm], flush=True)
me.make_runner = real
cms["replay"] = tunecache.compile(model, example_inputs=inputs, store=shutil.copy(warm, f"{WORK}/{spec}_replay.db"), tune="never", progress=False, library_cache=False)
cms["full"] = tunecache.compile(model, example_inputs=inputs, store=shutil.copy(full_db, f"{WORK}/{spec}_full.db"), tune="never", progress=False, library_cache=False)
lat = measure_latency(cms, inputs, rounds)
ms = {n: round(v["latency_s"] * 1e3, 2) for n, v in lat.items()}
print(json.dumps({"spec": spec, "info": info, "ms": ms, "vs_full": {n: round(v / ms["full"], 3) for n, v in ms.items()}}))
from _engines import tunecache_profile
prof = {n: tunecache_profile(cm, inputs, calls=5) for n, cm in cms.items()}
per = {}
for n, p in prof.items():
    for row in p["top_kernels"]:
        per.setdefault(row["kernel"], {})[n] = (row["ms"], row["outcome"])
for k, v in sorted(per.items(), key=lambda kv: -kv[1].get("full", (0,))[0]):
    print(k[:40].ljust(40), "  ".join(f"{n}={v[n][0]:.3f}/{(v[n][1] or '-')[:4]}" if n in v else f"{n}=-" for n in cms))
print({n: p["kernels_ms"] for n, p in prof.items()})
