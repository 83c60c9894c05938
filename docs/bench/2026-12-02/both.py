import os, sys, time, json, statistics as st, tempfile
sys.path.insert(0, "/work/main/tools")
import _engines
_engines.set_threads(int(os.environ.get("NT", "2")))  # NT=1: one thread (session 40)
import torch, onnxruntime as ort
from pathlib import Path
import tunecache
from tunecache.tvm_layer.frontend import building
import tvm
spec = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
store = sys.argv[2] if len(sys.argv) > 2 else "/tmp/s25/eng4/warm_32.db"
module, inputs, name = _engines.load(spec)
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=32, seed=0, progress=False, library_cache=Path(store).parent / "libs")
vm = building.make_vm(cm.executable)
tin = [tvm.runtime.tensor(x.numpy()) for x in inputs]
seq = []; started = []
def instrument(func, symbol, before, ret, *args):
    if before: started.append(time.perf_counter())
    else: seq.append((symbol, (time.perf_counter() - started.pop()) * 1e3))
    return 0
vm.set_instrument(instrument)
main = vm["main"]
tmp = tempfile.mkdtemp(); p = os.path.join(tmp, "m.onnx")
torch.onnx.export(module, inputs, p, dynamo=False)
opts = ort.SessionOptions(); opts.intra_op_num_threads = int(os.environ.get("NT", "2")); opts.enable_profiling = True
opts.profile_file_prefix = os.path.join(tmp, "ort")
sess = ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"])
feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
ours = []; ore = []
for i in range(5): main(*tin); sess.run(None, feed)
for r in range(8):
    for i in range(6):
        seq.clear(); t0 = time.perf_counter(); main(*tin); ours.append(((time.perf_counter() - t0) * 1e3, list(seq)))
    for i in range(6):
        t0 = time.perf_counter(); sess.run(None, feed); ore.append((time.perf_counter() - t0) * 1e3)
events = json.load(open(sess.end_profiling()))
runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run")[5:]
per = []
for lo, hi in runs:
    per.append([(e["name"].removesuffix("_kernel_time"), e.get("args", {}).get("op_name"), e["dur"] / 1e3) for e in sorted(events, key=lambda e: e["ts"])
                if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and lo <= e["ts"] <= hi])
def q(v, f): v = sorted(v); return round(v[int(f * (len(v) - 1))], 3)
print("e2e ours min/p50", q([o[0] for o in ours], 0), q([o[0] for o in ours], .5), " ort", q(ore, 0), q(ore, .5))
print("kernel sums p50: ours", round(sum(q([o[1][j][1] for o in ours], .5) for j in range(len(ours[0][1]))), 2),
      "ort", round(sum(q([r[j][2] for r in per], .5) for j in range(len(per[0]))), 2))

import collections
if len(sys.argv) > 3:
    oc = [(j, s) for j, (s, _) in enumerate(ours[0][1]) if not s.startswith("vm.")]
    rc = [(j, n + " " + str(op)) for j, (n, op, _) in enumerate(per[0])]
    A = [(s, q([o[1][j][1] for o in ours], .5)) for j, s in oc]
    B = [(n, q([r[k][2] for r in per], .5)) for k, n in rc]
    for i in range(max(len(A), len(B))):
        a = A[i] if i < len(A) else ("", 0); b = B[i] if i < len(B) else ("", 0)
        print(f"{a[0][:50]:50s} {a[1]:7.3f} | {b[0][-50:]:50s} {b[1]:7.3f}")
    sys.exit()
oc = [(j, s) for j, (s, _) in enumerate(ours[0][1]) if "conv" in s or "pool" in s or "matmul" in s]
rc = [(j, n) for j, (n, op, _) in enumerate(per[0]) if op in ("Conv", "MaxPool", "Gemm", "FusedConv")]
print(len(oc), len(rc))
for (j, s), (k, n) in zip(oc, rc):
    a = q([o[1][j][1] for o in ours], .5); b = q([r[k][2] for r in per], .5)
    a0 = q([o[1][j][1] for o in ours], 0); b0 = q([r[k][2] for r in per], 0)
    print(f"{s[:40]:40s} {a:7.3f} {a0:7.3f} | {n[-30:]:30s} {b:7.3f} {b0:7.3f}  {a/b:5.2f} {a0/b0:5.2f}")
