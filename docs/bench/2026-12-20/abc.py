"""Session 44 (#21): one model from two warm stores (all hits) against ONNX Runtime and eager,
alternating rounds in one process (bench_compile's protocol: rounds of CALLS calls, arm order
rotated, medians).

    THREADS=1 ROUNDS=9 CALLS=5 python abc.py MODEL NAME=STORE_DIR [NAME=STORE_DIR ...]

Each STORE_DIR holds warm_128.db (and libs/). Prints JSON: medians, minima, ratios to ORT.
"""
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "tools"))
import _engines  # noqa: E402

threads = int(os.environ.get("THREADS", "1"))
_engines.set_threads(threads)
warnings.simplefilter("ignore")
import torch  # noqa: E402

spec = sys.argv[1]
stores = dict(a.split("=", 1) for a in sys.argv[2:])
module, inputs, name = _engines.load(spec)
calls, info = {}, {}
with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
    want = _engines._first(module(*inputs))
    for arm, d in stores.items():
        cm, info[arm] = _engines.tunecache_arm(module, inputs, spec, 128, Path(d))
        print(arm, info[arm].get("summary"), info[arm].get("error"), file=sys.stderr, flush=True)
        calls[arm] = (lambda c: lambda: c(*inputs))(cm)
    fn, info["ort"] = _engines.ort_arm(module, inputs, tmp, threads)
    calls["ort"] = fn
    calls["eager"] = lambda: module(*inputs)
    err = {a: _engines._rel_err(_engines._first(f()), want) for a, f in calls.items() if a != "eager"}
    _engines.wait_for_quiet(20)
    times, running = _engines.alternate(calls, int(os.environ.get("ROUNDS", "9")),
                                        int(os.environ.get("CALLS", "5")), 0.2)
    st = _engines._stats(times, running)
out = {"model": spec, "threads": threads, "cpu": _engines.cpu_model(), "rel_err": err, "ms": st["ms"],
       "min_ms": st["min_ms"], "vs_ort": {a: round(v / st["ms"]["ort"], 3) for a, v in st["ms"].items()},
       "vs_ort_min": {a: round(v / st["min_ms"]["ort"], 3) for a, v in st["min_ms"].items()},
       "summaries": {a: info[a].get("summary") for a in stores}}
print(json.dumps(out, indent=1))
