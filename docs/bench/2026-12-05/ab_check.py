"""Session 29: the replay compile (`compile(tune="never")`) with and without the replay's code check,
each in a fresh process, alternating rounds.

    python ab_check.py bert_base:seq_len=256 WARM.db 3
"""
import json, subprocess, sys, time, statistics
CHILD = r'''
import sys, time
import tunecache
from tunecache import replay
from tunecache.models import load_model_spec
from tunecache.tvm_layer import frontend
model, inputs, _ = load_model_spec(sys.argv[2])
inputs = tuple(inputs) if inputs is not None else ()
frontend.import_model(model, inputs)
if sys.argv[1] == "off":
    replay.CODE_CHECKED = frozenset()
t0 = time.perf_counter()
cm = tunecache.compile(model, example_inputs=inputs, store="sqlite:///" + sys.argv[3], tune="never",
                       progress=False, library_cache=False)
dt = time.perf_counter() - t0
print("RESULT", dt, cm.report.count("replayed"), cm.report.count("predicted"))
'''
spec, store, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = {"on": [], "off": []}
for r in range(rounds):
    for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
        p = subprocess.run([sys.executable, "-c", CHILD, arm, spec, store], capture_output=True, text=True)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT")]
        if not line: print(p.stderr[-2000:]); sys.exit(1)
        out[arm].append(float(line[0].split()[1])); print(arm, line[0], flush=True)
print(json.dumps({"spec": spec, **out, "median_on": statistics.median(out["on"]), "median_off": statistics.median(out["off"])}))
