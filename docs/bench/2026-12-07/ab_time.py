"""Compile a zoo model (all hits) from each store given, time them and ORT side by side."""
import sys, time, statistics as st, os, tempfile
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(2)
import torch, tunecache
spec = sys.argv[1]; stores = sys.argv[2:]
module, inputs, name = _engines.load(spec)
calls = {}
for s in stores:
    cm = tunecache.compile(module, example_inputs=inputs, store=s, tune="never", progress=False, library_cache=False)
    print(s, cm.report.summary() if hasattr(cm.report, "summary") else "", flush=True)
    calls[os.path.basename(s)] = (lambda cm=cm: cm(*inputs))
ort_call, info = _engines.ort_arm(module, inputs, tempfile.mkdtemp(), 2)
calls["ort"] = ort_call
with torch.no_grad():
    times, _ = _engines.alternate(calls, rounds=int(os.environ.get("ROUNDS", 9)), per_round=5, gap=0.2)
o = st.median(times["ort"])
for k, v in times.items():
    print(f"{k:20s} median {st.median(v)*1e3:8.3f} ms  min {min(v)*1e3:8.3f}  vs ort {st.median(v)/o:.3f} (min {min(v)/min(times['ort']):.3f})")
