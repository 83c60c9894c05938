"""Per-conv in-model times: tunecache (direct kernel calls in VM order) vs ORT's profiler, ResNet-50."""
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recorded import recorded_calls  # noqa: E402 - the sibling script's recorder

name, store = sys.argv[1], sys.argv[2]
cm, mod, inputs, x, calls, _vm = recorded_calls(name, store)
print(cm.report.summary())
lat = {t.name: t.latency_s for t in cm.report.tasks}
def seq():
    out = []
    for f, s, a in calls:
        t = time.perf_counter(); f(*a); out.append(time.perf_counter() - t)
    return out
# ORT
onnx_path = os.path.join(tempfile.mkdtemp(), "m.onnx")
torch.onnx.export(mod.eval(), inputs, onnx_path, opset_version=17, dynamo=False)
import onnxruntime as ort
def ort_nodes(n=10):
    tmp = tempfile.mkdtemp()
    o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.enable_profiling = True
    o.profile_file_prefix = os.path.join(tmp, "ort")
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(onnx_path, o, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: inputs[0].numpy()}
    for _ in range(n + 1): sess.run(None, feed)
    ev = json.load(open(sess.end_profiling()))
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "Session" and e["name"] == "model_run")[1:]
    per = []
    for lo, hi in runs:
        nodes = sorted((e["ts"], e["name"].removesuffix("_kernel_time"), e["args"].get("op_name"), e["dur"]) for e in ev
                       if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and lo <= e["ts"] <= hi)
        per.append(nodes)
    return per
tc_runs = []; ort_runs = []
for r in range(8):
    seq(); tc_runs.append(seq())
    ort_runs.extend(ort_nodes(3))
tc_med = [statistics.median(r[i] for r in tc_runs) * 1e3 for i in range(len(calls))]
tc = [(s, m) for (f, s, a), m in zip(calls, tc_med) if "conv2d" in s]
on = [[(nm, d / 1e3) for _, nm, op, d in run if op == "Conv"] for run in ort_runs]
ort_med = [(on[0][i][0], statistics.median(r[i][1] for r in on)) for i in range(len(on[0]))]
print("tc convs", len(tc), "ort convs", len(ort_med))
rows = []
for i in range(max(len(tc), len(ort_med))):
    a = tc[i] if i < len(tc) else ("", 0); b = ort_med[i] if i < len(ort_med) else ("", 0)
    st = lat.get(a[0].removesuffix("_prepacked"))
    rows.append((i, a[0][:50], round(a[1], 3), round(st * 1e3, 3) if st else None, b[0][:45], round(b[1], 3)))
    print(*rows[-1])
print("sum tc conv", round(sum(m for _, m in tc), 3), "ort conv", round(sum(m for _, m in ort_med), 3))
print("sum tc all", round(sum(tc_med), 3))
json.dump(rows, open(sys.argv[3], "w"))
