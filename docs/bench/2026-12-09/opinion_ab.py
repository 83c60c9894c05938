"""The replay's second opinion on and off, side by side: ``compile(tune="never")`` of SPEC on two
copies of STORE, one with the shipped opinion, one with the opinion never asked (MODEL_MIN_ROWS
out of reach: what every replay compile on a four-model zoo store did before session 33); then
ROUNDS alternating latency rounds. Prints one JSON line.

    python opinion_ab.py SPEC STORE [ROUNDS]
"""
import json
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch

import tunecache
from tunecache import replay
from tunecache.models import load_model_spec

warnings.simplefilter("ignore")
torch.set_num_threads(2)
spec, store = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 15
model, inputs, _ = load_model_spec(spec)
inputs = tuple(inputs)
tmp = tempfile.mkdtemp()
shipped = replay.MODEL_MIN_ROWS
first_cpu = open("/proc/cpuinfo").read().split("\n\n")[0].splitlines()
info = dict(map(str.strip, line.split(":", 1)) for line in first_cpu if ":" in line)
cpu = f"{info['model name']}, family {info['cpu family']} model {info['model']}"
cms, out = {}, {"spec": spec, "cpu": cpu}
for arm, min_rows in (("opinion", shipped), ("no_opinion", 10**12)):
    replay.MODEL_MIN_ROWS = min_rows
    db = shutil.copy(store, f"{tmp}/{arm}.db")
    t0 = time.time()
    cms[arm] = tunecache.compile(model, example_inputs=inputs, store=db, tune="never", progress=False,
                                 library_cache=False)
    out[f"compile_s_{arm}"] = round(time.time() - t0, 2)
    out[f"outcomes_{arm}"] = {o: cms[arm].report.count(o) for o in ("replayed", "predicted", "hit", "fallback")}
replay.MODEL_MIN_ROWS = shipped
times = {a: [] for a in cms}
names = list(cms)
for r in range(rounds):
    for arm in (names if r % 2 == 0 else names[::-1]):
        cms[arm](*inputs)
        t0 = time.perf_counter()
        cms[arm](*inputs)
        cms[arm](*inputs)
        times[arm].append((time.perf_counter() - t0) / 2)
out["ms"] = {a: round(statistics.median(v) * 1e3, 3) for a, v in times.items()}
out["opinion_vs_none"] = round(out["ms"]["opinion"] / out["ms"]["no_opinion"], 4)
print(json.dumps(out))
