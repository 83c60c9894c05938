import os, sys, time, json, tempfile
sys.path.insert(0, "/work/main/tools")
import _engines
NT=int(os.environ.get("NT","1")); _engines.set_threads(NT)
import torch, onnxruntime as ort, numpy as np
from pathlib import Path
import tunecache
from tunecache.tvm_layer.frontend import building
import tvm
spec, store = sys.argv[1], sys.argv[2]
module, inputs, name = _engines.load(spec)
cm = tunecache.compile(module, example_inputs=inputs, store=store, trials_per_task=128, tune="never", seed=0, progress=False, library_cache=Path(store).parent / "libs")
vm = building.make_vm(cm.executable)
tin = [tvm.runtime.tensor(x.numpy()) for x in inputs]
main = vm["main"]
tmp = tempfile.mkdtemp(); p = os.path.join(tmp, "m.onnx")
torch.onnx.export(module, inputs, p, dynamo=False)
opts = ort.SessionOptions(); opts.intra_op_num_threads = NT
sess = ort.InferenceSession(p, opts, providers=["CPUExecutionProvider"])
feed = {i.name: x.numpy() for i, x in zip(sess.get_inputs(), inputs)}
for i in range(5): main(*tin); sess.run(None, feed)
def t(f):
    t0=time.perf_counter(); f(); return (time.perf_counter()-t0)*1e3
A=np.zeros((10,6)); B=np.zeros((10,6))
for r in range(10):
    for i in range(6): A[r,i]=t(lambda: main(*tin))
    for i in range(6): B[r,i]=t(lambda: sess.run(None, feed))
# solo: 40 in a row each
SA=[t(lambda: main(*tin)) for _ in range(40)]; SB=[t(lambda: sess.run(None, feed)) for _ in range(40)]
pc=lambda v:[round(float(np.percentile(v,q)),1) for q in (0,10,25,50,75,90,100)]
print("alt ours pct", pc(A), "by position med", [round(float(np.median(A[:,i])),1) for i in range(6)])
print("alt ort  pct", pc(B), "by position med", [round(float(np.median(B[:,i])),1) for i in range(6)])
print("solo ours", pc(SA)); print("solo ort ", pc(SB))
print("ours series", [round(x) for x in A.flatten()])
print("ort series", [round(x) for x in B.flatten()])
# CPU time over wall time of 30 calls, twice (a second busy thread would show as > 1.0).
import resource
def cpu(f, n=30):
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    for _ in range(n): f()
    r1 = resource.getrusage(resource.RUSAGE_SELF); w = time.perf_counter() - t0
    return round(w / n * 1e3, 1), round(((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)) / w, 2)
for k in range(2):
    print("ours wall ms, cpu/wall", cpu(lambda: main(*tin)))
    print("ort  wall ms, cpu/wall", cpu(lambda: sess.run(None, feed)))
