import os, sys, time, resource, tempfile, threading
sys.path.insert(0, "/work/main/tools")
import _engines
NT=int(os.environ.get("NT","1")); _engines.set_threads(NT)
import torch, onnxruntime as ort
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
def cpu(f, n=30):
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0=time.perf_counter()
    for _ in range(n): f()
    r1 = resource.getrusage(resource.RUSAGE_SELF); w=time.perf_counter()-t0
    c=(r1.ru_utime-r0.ru_utime)+(r1.ru_stime-r0.ru_stime)
    return round(w/n*1e3,1), round(c/w,2), r1.ru_nvcsw-r0.ru_nvcsw, r1.ru_nivcsw-r0.ru_nivcsw
for k in range(2):
    print("ours wall ms, cpu/wall, vol cs, invol cs", cpu(lambda: main(*tin)))
    print("ort  wall ms, cpu/wall, vol cs, invol cs", cpu(lambda: sess.run(None, feed)))
print("threads", len(os.listdir("/proc/self/task")))
