import os, sys, tempfile
from pathlib import Path
import warnings, time, json, shutil
warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
WORK = os.environ.get("WORK", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import tunecache
import tunecache.tvm_layer.measure as me
from tunecache.models import load_model_spec
from bench_newmodel import measure_latency
spec, warm_full, out = sys.argv[1], sys.argv[2], sys.argv[3]
model, inputs, _ = load_model_spec(spec); inputs = tuple(inputs)
real = me.make_runner
me.make_runner = lambda **k: real(**{**k, "cold": True})
t = time.time()
cm = tunecache.compile(model, example_inputs=inputs, store="sqlite:///" + out, trials_per_task=128, seed=0, progress=False, library_cache=False)
print("cold full", round(time.time() - t, 1), cm.report.trials, cm.report.summary(), flush=True)
me.make_runner = real
cms = {"full_cold": tunecache.compile(model, example_inputs=inputs, store="sqlite:///" + shutil.copy(out, out + ".copy"), tune="never", progress=False, library_cache=False),
       "full_warm": tunecache.compile(model, example_inputs=inputs, store="sqlite:///" + shutil.copy(warm_full, out + ".w.copy"), tune="never", progress=False, library_cache=False)}
lat = measure_latency(cms, inputs, 20)
print(json.dumps({n: round(v["latency_s"] * 1e3, 2) for n, v in lat.items()}))
